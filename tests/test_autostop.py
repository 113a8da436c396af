"""Autostop: a machine's meter stopped by itself, only after every job on it was pulled and
verified and the teardown gate passed, with the user's standing approval; a gate that fails
keeps the machine and says why. Against RunPod's REST API as served by
:class:`tests.fakeclouds.RunPodFake` (its pods are the real loopback sshd), jobs run over SSH.

Billed idle time is measured on a fake clock: each of the watcher's waits of a minute passes
at once, the rest (observing, pulling, verifying, the meter-stop call) in real time."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run import autostop
from rgt_jupyter.store.registry import Registry

from .conftest import pid_alive, wait_for
from .fakeclouds import Reply, RunPodFake
from .s3server import Bucket
from .sshbox import close_connections
from .sshd import Sshd
from .test_new_machine import PROFILE

#: Saves a checkpoint and results once told to go (``../go`` beside its out dir).
WORK = """\
import os, time
import torch
import rgt_jupyter.job as job
go = os.path.join(os.environ["RGT_OUT"], "..", "go")
while not os.path.exists(go):
    time.sleep(0.05)
path = job.save_checkpoint({"w": torch.arange(4.0)}, 1)
job.save_results({"done": True})
"""


class FakeClock(autostop.Clock):
    """The system's clock, plus every wait of the watcher passed at once."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.history: list[tuple[float, float]] = [(0.0, 0.0)]
        self.lock = threading.Lock()

    def now(self) -> float:
        return time.time() + self.offset

    def sleep(self, seconds: float) -> None:
        time.sleep(0.05)
        with self.lock:
            self.offset += seconds
            self.history.append((time.time(), self.offset))

    def at(self, stamp: float) -> float:
        with self.lock:
            offset = [off for real, off in self.history if real <= stamp][-1]
        return stamp + offset


class GateWatchingFake(RunPodFake):
    """RunPod, noting at each terminate how many of the project's jobs had a verified run."""

    project: Path | None = None
    at_delete: list[tuple[str, int, int]] = []

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Reply:
        if method == "DELETE" and path.startswith("/pods/") and self.project is not None:
            registry = Registry(self.project)
            jobs = registry.jobs()
            verified = sum(any(r["verified"] for r in registry.runs(j["id"])) for j in jobs)
            self.at_delete.append((path.rsplit("/", 1)[1], len(jobs), verified))
        return super().route(method, path, query, body)


@pytest.fixture
def pods(
    sshd: Sshd, project: Path, bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[GateWatchingFake]:
    """Three pods (pod1..pod3) on a profile that opts in to autostop."""
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {sshd.host_pub}\n")
    config = tmp_path / "ssh_config"
    config.write_text(
        "".join(
            f"Host pod{n}\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
            f"  IdentityFile {sshd.user_key}\n  UserKnownHostsFile {known}\n\n"
            for n in (1, 2, 3)
        )
    )
    monkeypatch.setenv("RGT_SSH_CONFIG", str(config))
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    remote = tmp_path / "machine"
    text = f'autostop = "{autostop.MODE}"\n' + PROFILE.format(python=sys.executable, remote=remote)
    (profiles / "gpu.toml").write_text(text + bucket.table())
    with GateWatchingFake() as fake:
        fake.project, fake.at_delete = project, []
        fake.boxes = [("127.0.0.1", sshd.port)] * 3
        monkeypatch.setenv("RUNPOD_API_KEY", fake.api_key)
        monkeypatch.setenv("RGT_RUNPOD_API_URL", fake.url)
        for n in (1, 2, 3):
            assert rgt_main(["up", "gpu", "--ack-clocks", "--yes", "--host", f"pod{n}"]) == 0
        yield fake
    close_connections(project)


def _action(project: Path, instance_id: str) -> str | None:
    return (autostop.read_status(project).get(instance_id) or {}).get("action")


def _go(job: Job) -> None:
    (Path(job.spec.out_dir).parent / "go").write_text("")


def test_each_meter_stops_only_after_a_verified_pull_and_soon_after_the_end(
    project: Path, pods: GateWatchingFake
) -> None:
    jobs = [
        submit(LaunchRequest(program=WORK, name=f"job{n}", profile="gpu", host=f"pod{n}"), project)
        for n in (1, 2, 3)
    ]
    with pytest.raises(Exception, match="does not opt in"):
        autostop.enable(project, "runpod")
    approval = autostop.enable(project, "gpu")
    assert "stop the meter (terminate)" in approval["text"]
    clock = FakeClock()
    watcher = threading.Thread(target=autostop.watch, args=(project, 60.0, clock), daemon=True)
    watcher.start()
    wait_for(lambda: clock.offset > 3600, 120, "an hour of the watcher's time")
    assert not pods.calls("DELETE")  # running jobs: no meter is stopped, however long
    for n, job in enumerate(jobs, 1):
        _go(job)
        wait_for(
            lambda n=n: _action(project, f"runpod:pod000{n}xyz") == "stopped",  # type: ignore[misc]
            240,
            f"pod{n} stopped",
        )
    watcher.join(60)
    assert not watcher.is_alive()  # nothing left to watch: the watcher ends

    # each terminate came only once that machine's job had its verified run, and was confirmed
    assert [p for p, _, _ in pods.at_delete] == ["pod0001xyz", "pod0002xyz", "pod0003xyz"]
    assert [v for _, _, v in pods.at_delete] == [1, 2, 3]
    assert not pods.pods and all(i["ended_at"] for i in Registry(project).instances())
    for job in jobs:
        runs = Registry(project).runs(job.id)
        assert len(runs) == 1 and runs[0]["verified"]
        assert json.loads((Path(runs[0]["path"]) / "outputs" / "results.json").read_text()) == {
            "done": True
        }
    said = autostop.read_status(project)
    idle = [said[f"runpod:pod000{n}xyz"]["billed_idle_s"] for n in (1, 2, 3)]
    assert median(idle) <= 300, idle
    approved = [d for d in Registry(project).decisions() if d["decision"] == "approve"]
    assert len(approved) == 3 and all("standing approval" in d["by"] for d in approved)
    # what bills on after the pods (RunPod's network volume) is said, and left alone
    assert "Network Volume 'ckpts'" in " ".join(said["runpod:pod0003xyz"]["still_billing"])
    assert pods.volumes


#: Its checkpoint is damaged after it was recorded: no pull of it can verify.
DAMAGED = """\
import torch
import rgt_jupyter.job as job
path = job.save_checkpoint({"w": torch.arange(4.0)}, 1)
with open(path, "r+b") as fh:
    fh.seek(40)
    fh.write(b"XX")
job.save_results({"done": True})
"""


def test_a_failing_gate_keeps_the_machine_and_says_why(
    project: Path, pods: GateWatchingFake, capsys: pytest.CaptureFixture[str]
) -> None:
    job = submit(LaunchRequest(program=DAMAGED, name="bad", profile="gpu", host="pod1"), project)
    assert job.wait(120) == "finished", job.log()
    assert rgt_main(["autostop", "status"]) == 0
    assert "has not looked at any machine yet" in capsys.readouterr().out
    assert rgt_main(["profiles", "show", "gpu"]) == 0
    shown = capsys.readouterr().out
    assert "Bucket: each checkpoint is also uploaded to s3://" in shown
    assert "Autostop: after-verified-pull: with `rgt autostop on gpu`" in shown
    # the detached watcher, as `rgt autostop on` starts it
    assert rgt_main(["autostop", "on", "gpu", "--interval", "0.5"]) == 0
    out = capsys.readouterr().out
    pid = int(out.split("runs as process ")[1].split()[0])
    wait_for(
        lambda: (
            (autostop.read_status(project).get("runpod:pod0001xyz") or {}).get("action") == "kept"
        ),
        240,
        "the machine kept",
    )
    said = autostop.read_status(project)["runpod:pod0001xyz"]["reason"]
    assert "did not verify" in said or "gate fails" in said, said
    assert not pods.calls("DELETE") and "pod0001xyz" in pods.pods
    assert Registry(project).instance("runpod:pod0001xyz")["ended_at"] is None
    assert rgt_main(["instances"]) == 0
    assert "autostop: kept: the machine is kept:" in capsys.readouterr().out
    events = [e["kind"] for e in Registry(project).history(job.id)]
    assert "autostop_kept" in events and "teardown_approve" not in events
    assert rgt_main(["autostop", "off", "gpu"]) == 0
    assert Registry(project).acked("gpu", "autostop") is None
    # pods 2 and 3 never ran a job: the watcher goes on looking until told off, then ends
    wait_for(lambda: not pid_alive(pid), 120, "the watcher's end")
