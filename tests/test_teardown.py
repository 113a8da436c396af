"""The teardown gate: computed fresh from artifacts; the meter-stop call reaches the platform
(a local HTTP server speaking RunPod's documented API) only after an approval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.errors import UsageError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.teardown import compute_gate, confirm_guided, decide, settle_orphan, stop_meter
from rgt_jupyter.store.registry import Registry

from .conftest import wait_for
from .fakeclouds import RunPodFake
from .machines import ON_THIS_MACHINE, POD
from .pulljobs import TRAIN

WAITS = """\
import os, time
import rgt_jupyter.job as job
job.save_results({"ok": 1})
while not os.path.exists(os.environ["RGT_OUT"] + "/../go"):
    time.sleep(0.1)
"""

BROKEN_CKPT = """\
import os
import rgt_jupyter.job as job
with open(os.path.join(os.environ["RGT_CKPT_DIR"], "ckpt-bad.pt"), "wb") as fh:
    fh.write(b"not a checkpoint at all")
job.save_results({"ok": 1})
"""


@pytest.fixture
def pod(project: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunPodFake]:
    """A fake RunPod API, a `pod` profile on it, and one pod brought up with `rgt up`."""
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "pod.toml").write_text(POD)
    with RunPodFake() as fake:
        monkeypatch.setenv("RUNPOD_API_KEY", fake.api_key)
        monkeypatch.setenv("RGT_RUNPOD_API_URL", fake.url)
        assert rgt_main(["up", "pod", "--yes", "--ack-clocks"]) == 0
        assert len(fake.calls("POST", "/pods")) == 1
        yield fake


def _run(project: Path, program: str, name: str) -> Job:
    return submit(LaunchRequest(program=program, name=name, profile="pod"), project)


def _check(gate: Any, name: str) -> Any:
    failing = [c for c in gate.checks if c.name == name and not c.ok]
    return failing[0] if failing else None


def _deletes(fake: RunPodFake) -> int:
    return len(fake.calls("DELETE", r"/pods/.*"))


def test_gate_refuses_each_missing_precondition_then_destroys_only_after_approval(
    project: Path, pod: RunPodFake
) -> None:
    inst = Registry(project).instances()[0]
    assert inst["provider"] == "runpod" and inst["cost_per_hour"] == pytest.approx(0.69)
    waiting = _run(project, WAITS, "w")
    out_dir = Path(waiting.spec.out_dir)
    wait_for(lambda: (out_dir / "results.json").exists(), 60, "the job to start")
    assert waiting.spec.instance_id == inst["id"]
    cost = waiting.snapshot().cost
    assert cost is not None and "so far at $0.69/h" in cost

    # 1. a job of the machine still running
    gate = compute_gate(waiting._row, project)
    assert not gate.passed and _check(gate, "no job running")
    assert waiting.id in _check(gate, "no job running").detail
    with pytest.raises(UsageError, match="no job running"):
        decide(gate, "approve", project)
    (out_dir.parent / "go").write_text("")
    assert waiting.wait(60) == "finished"

    # 2. a file not pulled
    trained = _run(project, TRAIN, "t")
    assert trained.wait(120) == "finished", trained.log()
    gate = compute_gate(trained._row, project)
    assert (
        _check(gate, "every file pulled")
        and "never pulled" in _check(gate, "every file pulled").detail
    )

    # all pulled: the gate passes
    assert waiting.pull().verified and trained.pull().verified
    gate = compute_gate(trained._row, project)
    assert gate.passed, gate.text()
    assert set(gate.jobs) == {waiting.id, trained.id}
    assert any("container disk" in d for d in gate.destroys)
    assert any("Network Volume" in s for s in gate.survives)

    # 3. a hash mismatch: the pulled copy changed since the pull
    run = trained.runs()[-1]
    preds = run.outputs / "preds.csv"
    original = preds.read_bytes()
    preds.chmod(0o644)
    preds.write_bytes(original.replace(b"0", b"1", 1))
    gate = compute_gate(trained._row, project)
    assert "preds.csv" in _check(gate, "every hash matches").detail
    preds.write_bytes(original)

    # 4. deployed code differs from the code launched
    program = Path(trained.spec.program)
    code = program.read_bytes()
    program.write_bytes(code + b"\n# edited on the machine\n")
    gate = compute_gate(trained._row, project)
    assert "rgt_cell.py" in _check(gate, "deployed == intended").detail
    program.write_bytes(code)

    # 5. a newer checkpoint after the verification
    extra = Path(trained.spec.ckpt_dir) / "ckpt-99.pt"
    subprocess.run(
        [sys.executable, "-c", f"import torch; torch.save({{'w': torch.ones(2)}}, {str(extra)!r})"],
        check=True,
    )
    gate = compute_gate(trained._row, project)
    assert "ckpt-99.pt" in _check(gate, "no newer checkpoint").detail
    assert not _check(gate, "every file pulled")
    extra.unlink()

    # 6. a checkpoint that does not load
    broken = _run(project, BROKEN_CKPT, "b")
    assert broken.wait(60) == "finished"
    assert not broken.pull().verified
    gate = compute_gate(broken._row, project)
    assert "ckpt-bad.pt" in _check(gate, "every checkpoint loads").detail

    # nothing reached the platform while the gate failed; a wrong override is refused
    with pytest.raises(UsageError, match="type the instance id"):
        decide(gate, "override", project, typed="pod-wrong")
    assert _deletes(pod) == 0

    # the CLI without --yes does nothing
    assert rgt_main(["down", "t"]) == 1
    refused = decide(gate, "refuse", project)
    assert refused["decision"] == "refuse" and _deletes(pod) == 0

    # override, typed: the terminate reaches the API, then the platform confirms (GET -> 404)
    record = decide(gate, "override", project, typed=inst["platform_id"], by="test")
    assert _deletes(pod) == 0
    outcome = stop_meter(gate, record, project, timeout=30, interval=0.05)
    assert _deletes(pod) == 1 and outcome.confirmed_down and outcome.final_state == "gone"
    assert pod.calls("GET", rf"/pods/{inst['platform_id']}")
    assert [o.kind for o in outcome.orphans] == ["network_volume"]
    settle_orphan(gate, outcome.orphans[0], True, project, by="test")
    assert pod.calls("DELETE", r"/network-volumes/.*")

    decisions = [d["decision"] for d in Registry(project).decisions(inst["id"])]
    assert decisions == [
        "refuse",
        "override",
        "verb_called",
        "confirmed_down",
        "orphans_listed",
        "orphan_delete",
    ]
    # every decision on the gate is in the run.json of the runs it covers
    for run_dir in gate.runs.values():
        teardown = json.loads((Path(run_dir) / "run.json").read_text())["teardown"]
        assert [t["decision"] for t in teardown] == ["refuse", "override"]
        assert teardown[-1]["gate"]["passed"] is False
    assert Registry(project).instance(inst["id"])["ended_at"] is not None


def test_cli_down_with_yes_when_the_gate_passes(
    project: Path, pod: RunPodFake, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _run(project, TRAIN, "t")
    assert job.wait(120) == "finished"
    assert rgt_main(["down", "t", "--yes"]) == 2  # not pulled: refused, nothing called
    assert "never pulled" in capsys.readouterr().err and _deletes(pod) == 0
    job.pull()
    assert rgt_main(["down", "t", "--yes", "--timeout", "30"]) == 0
    out = capsys.readouterr().out
    assert "PASSES" in out and "terminate confirmed by the platform" in out
    assert "Still billing" in out and _deletes(pod) == 1
    assert not pod.calls("DELETE", r"/network-volumes/.*")  # not interactive: kept, and said so
    decisions = [d["decision"] for d in Registry(project).decisions()]
    assert decisions[0] == "approve" and decisions[-1] == "orphan_kept"


def test_widget_enables_approve_only_when_the_gate_passes(project: Path, pod: RunPodFake) -> None:
    from rgt_jupyter.views.teardown_view import TeardownView

    job = _run(project, TRAIN, "t")
    assert job.wait(120) == "finished"
    view = TeardownView(job._row, project, background=False)
    assert view.approve.disabled and not view.override.disabled
    assert (view.approve.description, view.approve.button_style) == ("Approve", "danger")
    assert "never pulled" in view.checklist.value
    view.typed.value = "not-the-id"
    view.override.click()
    assert view.decision is None and _deletes(pod) == 0 and "type the instance id" in view.log.value
    job.pull()
    view = TeardownView(job._row, project, background=False)
    assert not view.approve.disabled and view.override.disabled
    view.approve.click()
    assert view.decision is not None and view.decision["decision"] == "approve"
    assert _deletes(pod) == 1 and view.outcome.confirmed_down
    keep = view.extra.children[0].children[2]
    keep.click()
    assert Registry(project).decisions()[-1]["decision"] == "orphan_kept"


def test_on_this_machine_the_panel_stops_nothing_and_covers_its_job(project: Path) -> None:
    """``local`` has no meter: Approve is not red, and the gate is about the job asked for."""
    from rgt_jupyter.views.teardown_view import TeardownView

    mine = submit(LaunchRequest(program=TRAIN, name="mine"), project)
    other = submit(LaunchRequest(program=TRAIN, name="other"), project)
    assert mine.wait(120) == "finished" and other.wait(120) == "finished"
    view = TeardownView(mine._row, project, background=False)
    assert (view.approve.description, view.approve.button_style) == ("Record approval", "")
    assert {c.job_id for c in view.gate.checks} == {mine.id}
    assert other.id not in view.checklist.value
    header = view.gate.text().splitlines()[0]
    assert header.startswith("Teardown of this machine (") and header.count("(") == 1, header


GUIDED = (
    'extends = "autodl"\n'
    + ON_THIS_MACHINE
    + """
[[tiers]]
path = "/"
label = "data disk"
survives_stop = true
survives_destroy = false
"""
)


def test_teardown_magic_shows_the_gate(project: Path, pod: RunPodFake, ip: Any) -> None:
    job = _run(project, TRAIN, "t")
    assert job.wait(120) == "finished"
    view = ip.run_line_magic("teardown", "t")
    assert view.approve.disabled and "never pulled" in view.gate.text()
    bundle = view._repr_mimebundle_()
    assert "REFUSED" in bundle["text/plain"] and "terminate" in bundle["text/html"]
    assert _deletes(pod) == 0


def test_guided_up_gives_the_next_step_and_writes_the_host_block_only_when_asked(
    project: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rgt_jupyter.transport.ssh.hosts import resolve

    config = tmp_path / "ssh" / "config"
    monkeypatch.setenv("RGT_SSH_CONFIG", str(config))
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "box.toml").write_text(GUIDED)
    connection = "ssh -p 41022 -i ~/.ssh/autodl root@connect.westb.seetacloud.com"
    argv = ["up", "box", "--connection", connection, "--ack-clocks", "--yes"]
    assert rgt_main([*argv, "--id", "one"]) == 0
    out = capsys.readouterr().out
    assert "HostName connect.westb.seetacloud.com" in out and "Port 41022" in out
    assert "--profile box --host ALIAS" in out and not config.exists()  # shown, not written
    assert rgt_main([*argv, "--id", "two", "--host", "gpu1", "--ssh-config"]) == 0
    out = capsys.readouterr().out
    assert f"wrote Host gpu1 into {config}" in out and "--profile box --host gpu1" in out
    assert config.stat().st_mode & 0o777 == 0o600
    spec = resolve("gpu1")
    assert (spec.hostname, spec.port, spec.user) == ("connect.westb.seetacloud.com", 41022, "root")
    assert spec.identity_files == [os.path.expanduser("~/.ssh/autodl")]
    before = config.read_text()
    assert rgt_main([*argv, "--id", "three", "--host", "gpu1", "--ssh-config"]) == 2
    assert "already has a Host gpu1" in capsys.readouterr().err
    assert config.read_text() == before  # refused: nothing rewritten


def test_guided_teardown_records_the_users_word_and_claims_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "box.toml").write_text(GUIDED)
    assert rgt_main(["up", "box", "--ack-clocks"]) == 0
    assert "no usable API" in capsys.readouterr().out
    connection = "ssh -p 41022 root@connect.westb.seetacloud.com"
    assert rgt_main(["up", "box", "--connection", connection, "--yes"]) == 0
    inst = Registry(project).instances()[0]
    assert inst["platform_id"] == "root@connect.westb.seetacloud.com:41022"
    job = submit(LaunchRequest(program=TRAIN, name="g", profile="box"), project)
    assert job.wait(120) == "finished" and job.pull().verified
    gate = compute_gate(job._row, project)
    assert gate.passed, gate.text()
    with pytest.raises(UsageError, match="approve the teardown first"):
        confirm_guided(gate, project)
    assert rgt_main(["down", "g", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "关机" in out and "does not claim the meter stopped" in out
    assert Registry(project).instance(inst["id"])["ended_at"] is None  # not claimed stopped
    assert rgt_main(["down", "g", "--confirm-stopped"]) == 0
    last = Registry(project).decisions(inst["id"])[-1]
    assert last["decision"] == "user_confirmed_meter_stop"
    assert "did not observe" in last["note"]
    assert Registry(project).instance(inst["id"])["ended_at"] is not None


def test_no_watcher_or_view_can_reach_a_meter_stop() -> None:
    """Only teardown.py calls a platform's meter-stop verb or deletes a leftover; the watcher,
    the status view and the cost code import neither the adapters nor the gate."""
    pkg = Path(__file__).resolve().parent.parent / "rgt_jupyter"

    def rel(p: Path) -> str:
        return p.relative_to(pkg).as_posix()

    callers = {
        rel(p)
        for p in pkg.rglob("*.py")
        if "providers" not in p.parts
        and any(s in p.read_text() for s in (".down(", "delete_orphan(", "wait_down("))
    }
    assert callers == {"run/teardown.py"}
    for name in (
        "run/watch/watcher.py",
        "run/watch/reads.py",
        "jobs/observe.py",
        "jobs/snapshot.py",
        "jobs/records.py",
        "run/billing.py",
        "views/render.py",
        "api.py",
    ):
        text = (pkg / name).read_text()
        assert "providers" not in text and "teardown" not in text, name
    # The status view's button opens the approval widget, and nothing else: no adapter, no verb.
    view = (pkg / "widgets.py").read_text()
    assert "providers" not in view and "stop_meter" not in view and "run.teardown " not in view
    assert "from .views.teardown_view import TeardownView" in view
    stoppers = {rel(p) for p in pkg.rglob("*.py") if "stop_meter(" in p.read_text()}
    # autostop: only after decide(gate, "approve") on a gate that passes (test_autostop.py)
    assert stoppers == {
        "run/teardown.py",
        "views/teardown_view.py",
        "cli/machines.py",
        "run/autostop.py",
    }
    auto = (pkg / "run" / "autostop.py").read_text()
    assert auto.index('decide(gate, "approve"') < auto.index("stop_meter(gate")


def test_idle_warning_warns_and_never_acts(
    project: Path, pod: RunPodFake, capsys: pytest.CaptureFixture[str]
) -> None:
    from rgt_jupyter.run.billing import idle_warning, samples

    t0 = 1_000_000.0
    busy = [(t0, 80.0, 1), (t0 + 600, 2.0, 0)]
    idle = [(t0 + 600 + 60 * m, 1.0, 0) for m in range(1, 31)]
    assert idle_warning(busy + idle[:10], 30, "m") is None  # idle, but not for 30 min yet
    warning = idle_warning(busy + idle, 30, "m")
    assert warning and "idle" in warning and "nothing is stopped for you" in warning
    assert idle_warning([*busy, *idle, (t0 + 9999, 1.0, 1)], 30, "m") is None  # a job runs
    assert idle_warning([*busy, *idle[:-1], (t0 + 9999, None, 0)], 30, "m") is None  # no GPU read

    job = _run(project, TRAIN, "t")
    assert job.wait(120) == "finished"
    assert rgt_main(["instances"]) == 0
    out = capsys.readouterr().out
    assert "runpod:pod0001xyz" in out and "so far at $0.69/h" in out
    inst = Registry(project).instances()[0]
    assert samples(Registry(project), inst["id"])[-1][2] == 0  # observed: no job running
    assert _deletes(pod) == 0 and not pod.calls("POST", r"/pods/.*/action")
