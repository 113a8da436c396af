"""Profiles as data: every platform's facts load and validate, are explained in plain words,
drive the durability check at launch, and show their danger clocks once."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.errors import ProfileError, UsageError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.machines.durability import check
from rgt_jupyter.machines.profile_dirs import builtin_dirs
from rgt_jupyter.machines.profiles import available, load_profile, parse_profile, stale_facts
from rgt_jupyter.store.registry import Registry

from .machines import POD_ON_THIS_MACHINE

BUILTINS = (
    "local ssh slurm k8s ray autodl runpod vastai lambda paperspace colab "
    "matpool gpushare featurize lanrui"
).split()


def test_every_builtin_loads_and_carries_its_platform_facts(project: Path) -> None:
    found = {p.stem for d in builtin_dirs() for p in d.glob("*.toml")}
    assert set(BUILTINS) <= found
    for name in BUILTINS:
        prof = load_profile(name, project)
        assert prof.meter_stop.verb and prof.meter_stop.effect in ("none", "stop", "destroy")
        assert any(t.path == "/" for t in prof.tiers), name
        assert prof.verified and not stale_facts(prof, dt.date(2026, 11, 30)), name
        if name != "local":
            assert {"shared_fs", "inode_cap", "host_driver_cuda_max", "local_nvme"} <= set(
                prof.facts
            )
        if prof.kind in ("ssh-rental", "cloud-api"):
            assert prof.danger_clocks or prof.billing_traps, name
            assert prof.provider or prof.guided, name
    assert load_profile("runpod", project).provider == "runpod"
    assert load_profile("autodl", project).is_guided
    assert load_profile("vastai", project).meter_stop.irreversible
    assert not load_profile("autodl", project).meter_stop.irreversible


@pytest.mark.parametrize("name", BUILTINS)
def test_profiles_show_explains_stop_destroy_and_billing(
    project: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    prof = load_profile(name, project)
    assert rgt_main(["profiles", "show", name]) == 0
    out = capsys.readouterr().out
    assert prof.meter_stop.verb in out
    if prof.metered:
        assert ("IRREVERSIBLE" in out) == prof.meter_stop.irreversible
        assert "IRREVERSIBLE" in out or "reversible: the machine can be started again" in out
    # Paths as on the machine: this project's name filled in, ``~`` for its home dir.
    assert f"Durable dir: {prof.expand(prof.durable_dir, project, '~')}" in out
    assert "What survives (stop / destroy)" in out
    for tier in prof.tiers:
        assert prof.expand(tier.path, project, "~") in out
    for clock in prof.danger_clocks:
        assert clock.text in out


def test_profiles_list_names_every_profile(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rgt_main(["profiles"]) == 0
    out = capsys.readouterr().out
    for name in BUILTINS:
        assert any(line.startswith(name + " ") for line in out.splitlines()), name


def test_staleness_warns_after_six_months(project: Path) -> None:
    prof = load_profile("vastai", project)
    assert not stale_facts(prof, dt.date(2026, 12, 31))
    warnings = stale_facts(prof, dt.date(2027, 1, 1))
    assert warnings and all("last verified 2026-06 (7 months ago)" in w for w in warnings)


def _user(project: Path, name: str, text: str) -> Path:
    folder = project / ".rgt" / "profiles"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        ('extends = "runpod"\ngrace_s = "soon"\n', 2, "grace_s", "must be a number"),
        (
            'extends = "runpod"\n\n[meter_stop]\neffect = "wipe"\n',
            4,
            "meter_stop.effect",
            "not one",
        ),
        (
            'extends = "runpod"\ndurabel_dir = "/x"\n',
            2,
            "durabel_dir",
            "did you mean 'durable_dir'",
        ),
        (
            'extends = "runpod"\n[[tiers]]\npath = "/"\nlabel = "x"\nsurvives_stop = "yes"\n'
            "survives_destroy = false\n",
            5,
            "tiers[0].survives_stop",
            "true or false",
        ),
        ('extends = "runpod"\napi_key = "rpa_123"\n', 2, "api_key", "never hold secrets"),
        ('extends = "runpod"\n[up]\ntoken = "abc"\n', 3, "up.token", "never hold secrets"),
        ('extends = "runpod"\nverified = "June"\n', 2, "verified", "YYYY-MM"),
    ],
)
def test_malformed_profile_names_file_line_and_field(
    project: Path, text: str, line: int, field: str, words: str
) -> None:
    path = _user(project, "bad", text)
    with pytest.raises(ProfileError) as err:
        load_profile("bad", project)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: field {field!r}"), message
    assert words in message


def test_missing_fields_and_bad_toml(project: Path, tmp_path: Path) -> None:
    bad = tmp_path / "broken.toml"
    bad.write_text('name = "broken"\nkind = 3\n')
    with pytest.raises(ProfileError, match=r"broken.toml:2: field 'kind': must be a string"):
        parse_profile(bad)
    bad.write_text('name = "broken"\nkind = "ssh"\n')
    with pytest.raises(ProfileError, match="missing required field 'description'"):
        parse_profile(bad)
    bad.write_text("name = [\n")
    with pytest.raises(ProfileError, match="broken.toml: invalid TOML"):
        parse_profile(bad)


def test_user_profile_extends_a_builtin(project: Path) -> None:
    _user(
        project, "mypod", 'extends = "runpod"\nfeatures = ["network_volume"]\n[spot]\ngrace_s = 9\n'
    )
    prof = load_profile("mypod", project)
    base = load_profile("runpod", project)
    assert prof.name == "mypod" and prof.extends == "runpod"
    assert prof.spot["grace_s"] == 9 and prof.spot["available"] == base.spot["available"]
    assert prof.meter_stop == base.meter_stop and prof.tiers == base.tiers
    home = "/root"
    ws = "/workspace/rgt/p/durable/x"
    assert not check(base, ws, project, home).ok  # volume disk: lost on terminate
    assert check(prof, ws, project, home).ok  # a Network Volume there: kept
    # the same name in the project extends the built-in it shadows
    _user(project, "runpod", 'extends = "runpod"\ndescription = "mine"\n')
    assert load_profile("runpod", project).description == "mine"
    assert available(project)["runpod"].parent == project / ".rgt" / "profiles"


def test_builtin_durable_dirs_pass_their_own_check(project: Path) -> None:
    for name in BUILTINS:
        prof = load_profile(name, project)
        ckpt = prof.expand(prof.durable_dir, project, "/home/u") + "/job/lineage/ckpt"
        verdict = check(prof, ckpt, project, "/home/u")
        # RunPod keeps checkpoints only on a Network Volume, which must be declared.
        assert verdict.ok == (name != "runpod"), (name, verdict.reason)


TRAIN = "import rgt_jupyter.job as job\njob.save_checkpoint({'step': 1}, step=1)\n"


def test_launch_refuses_a_checkpoint_dir_that_does_not_survive(project: Path) -> None:
    _user(project, "pod", POD_ON_THIS_MACHINE)
    with pytest.raises(UsageError) as err:
        submit(LaunchRequest(program=TRAIN, name="r", profile="pod", ckpt_dir="/root/x"), project)
    message = str(err.value)
    assert "/root/x/r/" in message and "container disk" in message and "lost on" in message
    assert "--allow-ephemeral-ckpt" in message and "network_volume" in message
    assert not Registry(project).jobs()  # nothing was created
    # the profile's own durable dir (here on "/", the container disk) is refused too
    with pytest.raises(UsageError, match="container disk"):
        submit(LaunchRequest(program=TRAIN, name="r", profile="pod"), project)

    job = submit(
        LaunchRequest(program=TRAIN, name="r", profile="pod", allow_ephemeral_ckpt=True), project
    )
    assert job.spec.durability["overridden"] is True
    assert job.wait(60) == "finished"
    run = job.pull()
    durability = json.loads((run.path / "run.json").read_text())["durability"]
    assert durability["overridden"] is True and durability["tier"].startswith("container disk")
    kinds = [h["kind"] for h in Registry(project).history(job.id)]
    assert "durability_overridden" in kinds


def test_danger_clocks_are_shown_once_per_profile(project: Path) -> None:
    _user(project, "pod", POD_ON_THIS_MACHINE)
    first = submit(
        LaunchRequest(program=TRAIN, name="a", profile="pod", allow_ephemeral_ckpt=True), project
    )
    clocks = load_profile("pod", project).danger_clocks
    assert clocks and all(any(c.text in n for n in first.notices) for c in clocks)
    assert Registry(project).acked("pod", "danger_clocks") is not None
    second = submit(
        LaunchRequest(program=TRAIN, name="b", profile="pod", allow_ephemeral_ckpt=True), project
    )
    assert second.notices == []
    local = submit(LaunchRequest(program=TRAIN, name="c"), project)
    assert local.notices == []  # no clocks on this machine
    for row in (first, second, local):
        row.wait(60)


def test_up_needs_clocks_acknowledged_and_spend_approved(project: Path) -> None:
    with pytest.raises(SystemExit):
        rgt_main(["up"])
    assert rgt_main(["up", "runpod"]) == 2  # clocks not acknowledged: refused, nothing created
    assert Registry(project).acked("runpod", "danger_clocks") is None
    assert rgt_main(["profiles", "ack", "runpod"]) == 0
    assert Registry(project).acked("runpod", "danger_clocks")["how"] == "rgt profiles ack"
    assert rgt_main(["up", "runpod"]) == 2  # its checkpoints would not survive: refused
    assert not Registry(project).instances()
