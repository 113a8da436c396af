"""A real two-node Ray cluster on this machine: a head (``ray start --head`` on loopback) and a
worker node (a second ``ray start --address``), both from ``.venv-ray`` (scripts/setup.sh).

The worker has the custom resource ``rgt_worker``; a job that asks for it runs there, so killing
that node (its raylet and every process under it at once, as a machine that dies) is a node loss
Ray itself detects. Ray is started with a short health check so it notices within seconds, and
with ``RAY_JOB_STOP_WAIT_TIME_S`` long enough for a stopped job to save.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .conftest import wait_for

RAY = Path(__file__).resolve().parent.parent / ".venv-ray" / "bin" / "ray"
#: The cluster's stop wait: a stopped job's time to save before Ray's SIGKILL.
STOP_WAIT_S = 60
WORKER_RESOURCE = "rgt_worker"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "VIRTUAL_ENV"))}
    env.update(
        RAY_USAGE_STATS_ENABLED="0",
        RAY_JOB_STOP_WAIT_TIME_S=str(STOP_WAIT_S),
        # A lost node is declared dead after 3 missed checks a second apart.
        RAY_health_check_period_ms="1000",
        RAY_health_check_timeout_ms="1000",
        RAY_health_check_failure_threshold="3",
        PATH=f"{RAY.parent}:{env.get('PATH', '')}",
    )
    return env


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _tree(root: int) -> list[int]:
    kids, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


@dataclass
class RayCluster:
    """The running cluster: its Jobs API address and how to lose and regain its worker."""

    root: Path
    gcs_port: int
    dashboard_port: int
    log: Path
    workers: list[int] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def api(self, path: str) -> object:
        with urllib.request.urlopen(self.address + path, timeout=30) as resp:
            return json.loads(resp.read())

    def _ray(self, *args: str, timeout: float = 180) -> None:
        with self.log.open("ab") as out:
            proc = subprocess.run(
                [str(RAY), *args], env=_env(), stdout=out, stderr=out, timeout=timeout, check=False
            )
        if proc.returncode != 0:
            raise AssertionError(f"ray {args[0]} failed:\n{self.log.read_text()[-3000:]}")

    def nodes(self) -> list[dict[str, object]]:
        """The nodes alive, from the dashboard's node list."""
        data = self.api("/nodes?view=summary")
        summary = data["data"]["summary"] if isinstance(data, dict) else []
        return [n for n in summary if n.get("raylet", {}).get("state") == "ALIVE"]

    def worker_raylet(self) -> int | None:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                line = _cmdline(int(entry.name))
                if "/raylet/raylet " in line and f"{WORKER_RESOURCE},1" in line:
                    if str(self.root) in line:
                        return int(entry.name)
        return None

    def worker_node_id(self) -> str:
        pid = self.worker_raylet()
        assert pid is not None, "no worker node runs"
        for arg in _cmdline(pid).split():
            if arg.startswith("--node_id="):
                return arg.split("=", 1)[1]
        raise AssertionError("the worker raylet names no node id")

    def start_worker(self) -> None:
        """A worker node with the ``rgt_worker`` resource joins (again)."""
        self._ray(
            "start",
            f"--address=127.0.0.1:{self.gcs_port}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            "--num-gpus=0",
            f"--resources={json.dumps({WORKER_RESOURCE: 1})}",
            "--object-store-memory=80000000",
            f"--dashboard-agent-listen-port={_free_port()}",
            "--disable-usage-stats",
        )
        wait_for(lambda: self.worker_raylet() is not None, 60, "the worker raylet")
        wait_for(lambda: len(self.nodes()) >= 2, 120, "the worker node to join")

    def kill_worker(self) -> list[int]:
        """The worker node dies: its raylet and every process under it, at once, SIGKILL."""
        pid = self.worker_raylet()
        assert pid is not None, "no worker node runs"
        doomed = _tree(pid)
        for p in doomed:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return doomed

    def stop(self) -> None:
        """Every process of this cluster (found by its temp dir), then the dir."""
        mine = [
            int(e.name)
            for e in Path("/proc").iterdir()
            if e.name.isdigit() and str(self.root) in _cmdline(int(e.name))
        ]
        for pid in {p for m in mine for p in _tree(m)}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def start_ray() -> Iterator[RayCluster]:
    """Start the head and one worker node; stop them (only them) afterwards."""
    if not RAY.exists():
        raise AssertionError(f"{RAY} is missing: run `bash scripts/setup.sh` (it installs ray)")
    # A short path: Ray's unix sockets live under it.
    root = Path(tempfile.mkdtemp(prefix="rgt-ray-", dir="/tmp"))
    cluster = RayCluster(root, _free_port(), _free_port(), root / "start.log")
    try:
        cluster._ray(
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={cluster.gcs_port}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={cluster.dashboard_port}",
            f"--ray-client-server-port={_free_port()}",
            f"--dashboard-agent-listen-port={_free_port()}",
            "--num-cpus=1",
            "--num-gpus=0",
            "--object-store-memory=80000000",
            f"--temp-dir={root}/t",
            "--disable-usage-stats",
        )
        wait_for(lambda: _answers(cluster), 120, "the Ray Jobs API")
        cluster.start_worker()
        yield cluster
    finally:
        cluster.stop()


def _answers(cluster: RayCluster) -> bool:
    try:
        return bool(cluster.api("/api/version"))
    except OSError:
        return False


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """One real Ray cluster for the session's Ray tests."""
    yield from start_ray()


def wait_for_node_gone(cluster: RayCluster, node_id: str, timeout: float = 120) -> None:
    wait_for(
        lambda: node_id not in {str(n.get("raylet", {}).get("nodeId")) for n in cluster.nodes()},
        timeout,
        f"Ray to declare node {node_id[:8]} dead",
    )
