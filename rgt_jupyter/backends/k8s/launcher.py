"""The ``k8s-job`` backend: Kubernetes Jobs through the same launch, watch and stop paths as
every other profile.

The launch bundle (agent, cell, ``launch.json``, secrets) becomes a Secret mounted read-only in
the pod; the Job's container runs ``python bundle.zip run CONTROL_DIR`` with the control dir on
the profile's PersistentVolumeClaim, so a new pod (backoffLimit) resumes from the checkpoints
there. The notebook sees the job through the API server: one Job list and one Pod list per poll
for every followed job of a namespace (:class:`Poller`), and the newest pod's log. A stop deletes
the Job: its pods get SIGTERM and their grace period to save; the claim stays.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
import zipfile
from collections.abc import Sequence
from typing import Any

from ...errors import UsageError
from ...jobs.records import clean_log
from ...jobs.request import LaunchRequest
from ...jobs.snapshot import Snapshot, new_snapshot
from ...jobs.spec import JobSpec
from ...machines.profiles import Profile
from ...transport import Transport
from ..base import Backend, Stopped
from .client import K8sJobs
from .manifests import K8sJobSpec


def check_k8s_profile(profile: Profile) -> None:
    """A Kubernetes profile needs an image pinned by digest and a claim for the checkpoints."""
    if profile.transport != "kubernetes":
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


_CLIENTS: dict[tuple[str, str | None, str], Any] = {}


def _jobs(namespace: str, context: str | None) -> Any:
    """One client per namespace, context and kubeconfig: polls reuse its connections instead of
    reading the kubeconfig and opening new ones every time."""
    key = (namespace, context, os.environ.get("KUBECONFIG", ""))
    if key not in _CLIENTS:
        _CLIENTS[key] = K8sJobs(namespace, context=context)
    return _CLIENTS[key]


class K8sBackend(Backend):
    """``k8s-job``: a Secret with the bundle, then the Job that runs it."""

    name = "k8s-job"
    transports = ("kubernetes",)
    probed = False
    schedules_gpus = True
    audits_host = False
    unsupported = {
        "push": "a Kubernetes job runs the code baked into its image; add the files to the "
        "image and pin its new digest"
    }

    def check_profile(self, profile: Profile) -> None:
        check_k8s_profile(profile)

    def host_alias(self, profile: Profile, requested: str | None) -> str | None:
        """The namespace: where a Kubernetes job goes, in the transport's words."""
        return str(profile.kubernetes.get("namespace") or "default")

    def spec_extra(self, profile: Profile, req: LaunchRequest) -> dict[str, Any]:
        return {"gpus_request": req.gpus or "0", "kubernetes": dict(profile.kubernetes)}

    def render(self, python: str, control_dir: str) -> list[str]:
        return [python, "-u", "/rgt/bundle/bundle.zip", "run", control_dir]

    def parse_submit(self, stdout: bytes) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(stdout)
        return value

    def submit(
        self,
        transport: Transport,
        python: str,
        control_dir: str,
        bundle: bytes,
        unset: Sequence[str] = (),
    ) -> dict[str, Any]:
        with zipfile.ZipFile(io.BytesIO(bundle)) as zf:
            spec = JobSpec.from_dict(json.loads(zf.read("launch.json")))
        conf = spec.kubernetes
        gpus = spec.gpus_request or "0"
        job = K8sJobSpec(
            job_id=spec.job_id,
            name=spec.name,
            image=str(conf["image"]),
            namespace=str(spec.host_alias),
            python=python,
            control_dir=control_dir,
            pvc=str(conf["pvc"]),
            pvc_mount=str(conf.get("pvc_mount", "/checkpoints")),
            gpus=int(gpus.rsplit(":", 1)[-1]) if gpus not in ("none", "all") else 0,
            cpu=conf.get("cpu") or None,
            memory=conf.get("memory") or None,
            backoff_limit=int(conf.get("backoff_limit", 4)),
            grace_s=int(spec.grace_s),
            scratch_size=str(conf.get("scratch_size", "20Gi")),
            service_account=conf.get("service_account") or None,
        )
        context = conf.get("context") or None
        record = _jobs(job.namespace, context).submit(job, bundle)
        poller(job.namespace, context).refresh_soon()
        return dict(record)

    def observe(self, transport: Transport, spec: JobSpec, log_lines: int = 12) -> Snapshot:
        return observe_k8s(spec, log_lines)

    def stop(self, transport: Transport, spec: JobSpec, sig: str = "SIGTERM") -> Stopped:
        """Delete the Job (its pods get SIGTERM and their grace period; the claim stays)."""
        _jobs(str(spec.namespace), spec.kubernetes.get("context") or None).delete(str(spec.k8s_job))
        return Stopped({"via": "delete Job"}, {"k8s_deleted_at": time.time()})


class Poller:
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


_POLLERS: dict[tuple[str, str | None], Poller] = {}


def poller(namespace: str, context: str | None) -> Poller:
    key = (namespace, context)
    if key not in _POLLERS:
        _POLLERS[key] = Poller(namespace, context)
    return _POLLERS[key]


def observe_k8s(spec: JobSpec, log_lines: int = 12) -> Snapshot:
    """A Kubernetes job as its Job and pods show it (see :mod:`.manifests` for the mapping)."""
    snap = new_snapshot(spec)
    name = spec.k8s_job
    if not name:
        return snap
    namespace, context = str(spec.namespace), spec.kubernetes.get("context") or None
    if spec.k8s_deleted_at:
        snap.state = "preempted"
        snap.diagnosis = (
            "deleted with Job.stop(): its pod got SIGTERM and terminationGracePeriodSeconds "
            "to save. Re-run the cell to resume from the checkpoints on the claim."
        )
        return snap
    state = poller(namespace, context).state(name)
    snap.state, snap.restarts = state.state, state.restarts
    snap.scheduler = f"Kubernetes Job {name}: {state.phase}" + (
        f" ({state.reason})" if state.reason else ""
    )
    snap.diagnosis = state.diagnosis or None
    if log_lines > 0 and state.pod:
        text = _jobs(namespace, context).logs(name, tail_lines=log_lines)
        snap.log_tail = clean_log(text.encode(), log_lines)
    return snap
