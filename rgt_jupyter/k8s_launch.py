"""Kubernetes jobs through the same launch, watch and stop paths as every other profile.

The launch bundle (agent, cell, ``launch.json``, secrets) becomes a Secret mounted read-only in
the pod; the Job's container runs ``python bundle.zip run CONTROL_DIR`` with the control dir on
the profile's PersistentVolumeClaim, so a new pod (backoffLimit) resumes from the checkpoints
there. The notebook sees the job through the API server: one Job list and one Pod list per poll
for every followed job of a namespace (:class:`_Poller`), and the newest pod's log.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

from .errors import TransportError, UsageError
from .launcher import Launcher
from .profiles import Profile
from .status import Snapshot, new_snapshot
from .transport import ExecResult, FileStat, Transport
from .transport.base import ReadStream


def check_k8s_profile(profile: Profile) -> None:
    """A Kubernetes profile needs an image pinned by digest and a claim for the checkpoints."""
    if profile.transport != "kubernetes" or profile.launcher != "k8s-job":
        raise UsageError(
            f'profile {profile.name!r}: Kubernetes needs transport = "kubernetes" and '
            'launcher = "k8s-job" together'
        )
    conf = profile.kubernetes
    missing = [k for k in ("image", "pvc") if not conf.get(k)]
    if missing:
        raise UsageError(
            f"profile {profile.name!r} does not name its {' and '.join(missing)}: set them in "
            'its [kubernetes] table (image = "repo@sha256:...", pvc = "claim-name") in a '
            f"profile of your own that extends {profile.name!r}"
        )


class KubeTransport(Transport):
    """Stands where a transport stands for a Kubernetes profile: the pod's files live on the
    cluster's volume, out of reach of this machine, so reads find nothing and commands refuse."""

    name = "kubernetes"

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.host = f"k8s/{namespace}"

    def _refuse(self) -> TransportError:
        return TransportError(
            f"this job runs in Kubernetes ({self.host}): there is no shell on its pods "
            "from here. Bake pushed files into the image (--push is not available) and read "
            "results from the claim"
        )

    def exec(
        self, argv: list[str], *, stdin: bytes | None = None, timeout: float | None = 60.0
    ) -> ExecResult:
        raise self._refuse()

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        raise FileNotFoundError(path)

    def write_bytes(self, path: str, data: bytes, mode: int = 0o644) -> None:
        raise self._refuse()

    def put(self, local: Path, remote: str) -> None:
        raise self._refuse()

    def open_read(self, path: str, offset: int = 0) -> ReadStream:
        raise FileNotFoundError(path)

    def stat(self, path: str) -> FileStat | None:
        return None

    def makedirs(self, path: str, mode: int = 0o755) -> None:
        raise self._refuse()

    def listdir(self, path: str) -> list[str]:
        raise FileNotFoundError(path)

    def home(self) -> str:
        return "/root"


_CLIENTS: dict[tuple[str, str | None, str], Any] = {}


def _jobs(namespace: str, context: str | None) -> Any:
    """One client per namespace, context and kubeconfig: polls reuse its connections instead of
    reading the kubeconfig and opening new ones every time."""
    from .k8s_client import K8sJobs

    key = (namespace, context, os.environ.get("KUBECONFIG", ""))
    if key not in _CLIENTS:
        _CLIENTS[key] = K8sJobs(namespace, context=context)
    return _CLIENTS[key]


class K8sLauncher(Launcher):
    """``k8s-job``: a Secret with the bundle, then the Job that runs it."""

    name = "k8s-job"

    def render(self, python: str, control_dir: str) -> list[str]:
        return [python, "-u", "/rgt/bundle/bundle.zip", "run", control_dir]

    def parse_submit(self, stdout: bytes) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(stdout)
        return value

    def submit(
        self, transport: Transport, python: str, control_dir: str, bundle: bytes
    ) -> dict[str, Any]:
        from .k8s import K8sJobSpec

        with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
            spec = json.loads(zf.read("launch.json"))
        conf = spec["kubernetes"]
        gpus = spec.get("gpus_request") or "0"
        job = K8sJobSpec(
            job_id=spec["job_id"],
            name=spec["name"],
            image=str(conf["image"]),
            namespace=spec["host_alias"],
            python=python,
            control_dir=control_dir,
            pvc=str(conf["pvc"]),
            pvc_mount=str(conf.get("pvc_mount", "/checkpoints")),
            gpus=int(gpus.rsplit(":", 1)[-1]) if gpus not in ("none", "all") else 0,
            cpu=conf.get("cpu") or None,
            memory=conf.get("memory") or None,
            backoff_limit=int(conf.get("backoff_limit", 4)),
            grace_s=int(spec.get("grace_s", 30)),
            scratch_size=str(conf.get("scratch_size", "20Gi")),
            service_account=conf.get("service_account") or None,
        )
        context = conf.get("context") or None
        record = _jobs(job.namespace, context).submit(job, bundle)
        _poller(job.namespace, context).refresh_soon()
        return dict(record)


class _Poller:
    """The newest states of every followed Job of a namespace, one list call pair per refresh."""

    def __init__(self, namespace: str, context: str | None, interval: float = 1.0) -> None:
        self.namespace, self.context, self.interval = namespace, context, interval
        self.followed: set[str] = set()
        self.states: dict[str, Any] = {}
        self.fetched_at = 0.0
        self.lock = threading.Lock()

    def refresh_soon(self) -> None:
        self.fetched_at = 0.0

    def state(self, name: str) -> Any:
        with self.lock:
            new = name not in self.followed
            self.followed.add(name)
            if new or time.monotonic() - self.fetched_at >= self.interval:
                self.states.update(
                    _jobs(self.namespace, self.context).states(sorted(self.followed))
                )
                self.fetched_at = time.monotonic()
            return self.states[name]


_POLLERS: dict[tuple[str, str | None], _Poller] = {}


def _poller(namespace: str, context: str | None) -> _Poller:
    key = (namespace, context)
    if key not in _POLLERS:
        _POLLERS[key] = _Poller(namespace, context)
    return _POLLERS[key]


def observe_k8s(spec: dict[str, Any], log_lines: int = 12) -> Snapshot:
    """A Kubernetes job as its Job and pods show it (see :mod:`.k8s` for the mapping)."""
    snap = new_snapshot(spec, spec.get("host", ""))
    name = spec.get("k8s_job")
    if not name:
        return snap
    namespace, context = spec["namespace"], spec["kubernetes"].get("context") or None
    if spec.get("k8s_deleted_at"):
        snap.state = "preempted"
        snap.diagnosis = (
            "deleted with Job.stop(): its pod got SIGTERM and terminationGracePeriodSeconds "
            "to save. Re-run the cell to resume from the checkpoints on the claim."
        )
        return snap
    state = _poller(namespace, context).state(name)
    snap.state, snap.restarts = state.state, state.restarts
    snap.scheduler = f"Kubernetes Job {name}: {state.phase}" + (
        f" ({state.reason})" if state.reason else ""
    )
    snap.diagnosis = state.diagnosis or None
    if log_lines > 0 and state.pod:
        from .status import clean_log

        text = _jobs(namespace, context).logs(name, tail_lines=log_lines)
        snap.log_tail = clean_log(text.encode(), log_lines)
    return snap


def delete_k8s_job(spec: dict[str, Any]) -> None:
    """Delete the Job (its pods get SIGTERM and their grace period; the claim stays)."""
    _jobs(spec["namespace"], spec["kubernetes"].get("context") or None).delete(spec["k8s_job"])
