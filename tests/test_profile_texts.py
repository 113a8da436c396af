"""Every built-in profile's texts, rendered as users read them, hold no unrendered
``{placeholder}`` and no stray path segment (``…/durable/x``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rgt_jupyter.backends.slurm.script import SlurmOptions, render_script
from rgt_jupyter.machines.durability import check, refusal_advice
from rgt_jupyter.machines.profile_text import explain
from rgt_jupyter.machines.profiles import available, load_profile
from rgt_jupyter.run.launch import first_contact_notices
from rgt_jupyter.run.teardown import Gate, Machine, decide, stop_meter
from rgt_jupyter.store.registry import Registry

PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z_0-9]*\}")
#: A path whose last segment is one letter: a probe name leaking into a message.
STRAY = re.compile(r"(?<![\w.])(?:/[\w.~-]+)+/[A-Za-z](?=[\s.,;:)'\"]|$)")
#: A command the user is told to type with a word left in capitals for them to fill in.
UNFILLED = re.compile(r"`rgt [a-z-]+ (?:JOB|NAME|ALIAS)\b")
NAMES = sorted(available(None))


def _bad(text: str) -> list[str]:
    return (
        PLACEHOLDER.findall(text)
        + STRAY.findall(text)
        + [m.group(0) for m in UNFILLED.finditer(text)]
    )


def test_the_patterns_catch_what_they_are_for() -> None:
    assert _bad("Durable dir: {home}/rgt") == ["{home}"]
    assert _bad("/workspace/rgt/main/durable/x is on volume disk")
    assert _bad("confirm with `rgt down JOB --confirm-stopped`")
    assert not _bad("RunPod: DELETE /v2/pods/<id>; ~/rgt/main/durable (home dir)")


@pytest.mark.parametrize("name", NAMES)
def test_profile_texts_are_rendered(name: str, tmp_path: Path) -> None:
    project = tmp_path / "paper"
    project.mkdir()
    profile = load_profile(name, project)
    texts = {"rgt profiles show": explain(profile, project)}
    home = "/home/someone"
    durable = profile.expand(profile.durable_dir, project, home)
    verdict = check(profile, f"{durable}/exp/20261201-ab12/ckpt", project, home)
    texts["durability"] = verdict.reason
    if not verdict.ok:
        texts["refusal"] = refusal_advice(profile, verdict, project, home)
    texts["first launch"] = "\n".join(first_contact_notices(Registry(project), profile))
    machine = Machine(
        id=f"{name}:box-1",
        profile=profile,
        platform_id="box-1",
        host="gpu.example",
        host_alias="gpu1",
        provider="",
    )
    gate = Gate(machine, ["exp-20261201T000000-ab12"], {}, [], 0.0)
    texts["gate"] = gate.text()
    if profile.metered and not profile.provider:
        approval = decide(gate, "override", project, typed=machine.platform_id)
        texts["guided down"] = stop_meter(gate, approval, project).message
    for where, text in texts.items():
        assert not _bad(text), (name, where, _bad(text), text)
    assert "home/someone" not in texts["rgt profiles show"], "no machine's home is known there"


def test_the_slurm_texts_name_the_signal_the_batch_script_asks_for(tmp_path: Path) -> None:
    profile = load_profile("slurm", tmp_path)
    script = render_script(
        SlurmOptions(job_name="exp", signal_lead_s=profile.sbatch["signal_lead_s"])
    )
    asked = re.search(r"--signal=B:([A-Z0-9]+)@(\d+)", script)
    assert asked, script
    signal, lead = asked.groups()
    said = "\n".join(
        [explain(profile, tmp_path), *first_contact_notices(Registry(tmp_path), profile)]
    )
    named = set(re.findall(r"--signal=B:([A-Z0-9]+)@", said)) | set(
        re.findall(r"\bSIG(USR[12]|TERM|INT)\b.{0,60}before the end", said)
    )
    assert named == {signal}, (signal, named, said)
    assert f"{lead} s" in said
