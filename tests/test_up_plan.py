"""`rgt up` shows its plan before money is spent: what would be created (through the adapter's
own create request), the price per hour and whose it is, each disk's fate, the durable dir's
verdict; without --yes nothing is created (the fake platform records no create), and a plan
whose durable dir the profile's own rule refuses is refused with the option that would pass.
The platforms are the local servers of :mod:`tests.fakeclouds`, which speak their documented
REST APIs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.machines.profiles import load_profile
from rgt_jupyter.machines.providers import provider_class
from rgt_jupyter.store.registry import Registry

from .fakeclouds import LambdaFake, RunPodFake
from .machines import POD

LAMBDA = """\
extends = "lambda"
name = "lam"

[up]
instance_type_name = "gpu_1x_a10"
ssh_key_names = ["laptop"]
"""


@pytest.fixture
def profiles(project: Path) -> Path:
    folder = project / ".rgt" / "profiles"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def runpod(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunPodFake]:
    with RunPodFake() as fake:
        monkeypatch.setenv("RUNPOD_API_KEY", fake.api_key)
        monkeypatch.setenv("RGT_RUNPOD_API_URL", fake.url)
        yield fake


def test_the_plan_creates_nothing_and_yes_creates_exactly_it(
    project: Path,
    profiles: Path,
    runpod: RunPodFake,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (profiles / "pod.toml").write_text("cost_per_hour = 2.5\n" + POD)
    assert rgt_main(["up", "pod", "--ack-clocks", "--set", "disk=30"]) == 0
    out = capsys.readouterr().out
    assert "Plan for pod" in out and "Nothing created" in out
    assert "NVIDIA GeForce RTX 4090 x 1" in out and "runpod/pytorch" in out
    assert "30 GB at / (lost on stop and on terminate)" in out  # --set is in the plan
    assert "$2.50/h (the profile's cost_per_hour" in out
    assert "terminate (irreversible)" in out and "durable dir" in out
    assert runpod.calls("POST", "/pods") == [] and not Registry(project).instances()

    assert rgt_main(["up", "pod", "--set", "disk=30", "--yes"]) == 0
    created = runpod.calls("POST", "/pods")
    assert len(created) == 1
    prof = load_profile("pod", project)
    planned = provider_class("runpod").planner().request({**prof.up, "disk": 30})
    assert created[0].body == planned  # the plan shown is the request sent
    inst = Registry(project).instances()[0]
    # once created, the pod's own cost as the platform reports it is what the meter counts
    assert inst["cost_per_hour"] == runpod.rates[inst["platform_id"]]


def test_a_plan_whose_checkpoints_would_not_survive_is_refused_with_the_way_out(
    project: Path, runpod: RunPodFake, capsys: pytest.CaptureFixture[str]
) -> None:
    # The built-in RunPod profile: checkpoints on the pod's own volume, lost on terminate.
    assert rgt_main(["up", "runpod", "--ack-clocks", "--yes"]) == 2
    err = capsys.readouterr().err
    assert "do not survive terminate" in err and "Network Volume" in err
    assert 'features = ["network_volume"]' in err and "nothing was created" in err
    assert runpod.calls("POST", "/pods") == []

    # a bucket the checkpoints also go to outlives the pod: the plan passes and says so
    (project / ".rgt" / "profiles").mkdir(parents=True)
    (project / ".rgt" / "profiles" / "bkt.toml").write_text(
        'extends = "runpod"\nname = "bkt"\n\n[bucket]\nurl = "s3://lab-ckpts/runs"\n'
        'endpoint = "https://s3.eu-central-003.backblazeb2.com"\ncredentials = "b2"\n'
    )
    assert rgt_main(["up", "bkt", "--ack-clocks"]) == 0
    out = capsys.readouterr().out
    assert "also uploaded to s3://lab-ckpts/runs, which outlives the machine" in out
    assert "s3://lab-ckpts/runs at https://s3.eu-central-003.backblazeb2.com" in out
    assert "Nothing created" in out and runpod.calls("POST", "/pods") == []


def test_the_price_is_the_platforms_where_its_api_gives_one(
    project: Path,
    profiles: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (profiles / "lam.toml").write_text(LAMBDA)
    with LambdaFake() as fake:
        monkeypatch.setenv("LAMBDA_API_KEY", fake.api_key)
        monkeypatch.setenv("RGT_LAMBDA_API_URL", fake.url)
        assert rgt_main(["up", "lam", "--ack-clocks"]) == 0
        out = capsys.readouterr().out
        assert "$0.75/h (the platform's price)" in out
        assert "gpu_1x_a10" in out and "us-south-1" in out  # the built-in profile's region
        assert fake.calls("GET", "/instance-types") and not fake.calls("POST")
        monkeypatch.delenv("LAMBDA_API_KEY")
        assert rgt_main(["up", "lam"]) == 0  # no key: the plan still shows, the price is unknown
        out = capsys.readouterr().out
        assert "price           unknown (no API key for" in out and "LAMBDA_API_KEY" in out
        assert not fake.calls("POST")
        assert rgt_main(["up", "lam", "--yes"]) == 2
        assert "no API key" in capsys.readouterr().err and not fake.calls("POST")
