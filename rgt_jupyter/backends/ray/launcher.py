"""The ``ray`` backend: jobs on a Ray cluster, submitted through the Ray Jobs REST API.

A launch is two steps. The bundle goes to the job's control dir on a path every node of the
cluster shares, in one command over the profile's transport (the head node over SSH, or this
machine when it mounts that path): it is unpacked there as for any other backend. Then the job
is submitted over HTTP (:mod:`.client`) with the job's id as its submission id and the agent as
its entrypoint, ``--gpus N`` and the profile's ``[ray] resources`` as the entrypoint's
resources, so Ray places the agent on a node that has them and the agent supervises the job
there as everywhere else (its records, checkpoints and outputs land on the shared path, where
watch and pull read them through the transport).

The job's state comes from Ray first, then from the agent's records: Ray says whether it waits,
runs or has ended; once it has ended, the agent's ``exit.json`` decides, except where Ray knows
more (the node running it died; it was stopped and killed before the agent could record it).
A stop is the Jobs API's: Ray sends SIGTERM to the entrypoint's processes, the job saves at its
next step boundary and ends ``preempted``; Ray kills it ``RAY_JOB_STOP_WAIT_TIME_S`` (a setting
of the cluster, 3 s unless set) after the SIGTERM. After a node loss, ``rgt resume`` submits
the next attempt from the newest checkpoint on the shared path.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import zipfile
from collections.abc import Sequence
from typing import Any

from ...errors import LaunchError, ProfileError, TransportError, UsageError
from ...jobs.observe import agent_never_reported, check_stall, explain, fill_from_records
from ...jobs.records import ExitRecord, StatusRecord, clean_log, read_exit, read_record
from ...jobs.request import LaunchRequest
from ...jobs.snapshot import Snapshot, new_snapshot
from ...jobs.spec import JobSpec
from ...machines.profiles import Profile
from ...machines.providers.errors import ProviderError
from ...transport import Transport
from ..base import Backend, Stopped, interpreter_check
from .client import ENDED, RayJobInfo, ray_jobs

#: ``sh -c SCRIPT rgt-unpack CONTROL PYTHON``: store and unpack the bundle (stdin) on the
#: shared path; the job itself is submitted over HTTP afterwards.
UNPACK_SCRIPT = (
    "set -e\ncontrol=$1 python=$2 found=yes\n"
    + "@CHECK@"
    + 'mkdir -p -- "$control"\n(umask 077; cat >"$control/bundle.zip")\n'
    + '"$python" -u "$control/bundle.zip" unpack "$control" >&2\n'
)

#: The entrypoint Ray runs (with ``sh -c``) on the node it picks: a control dir that node does
#: not see is said in Ray's job log; otherwise the agent supervises the job.
ENTRYPOINT = (
    "test -f {agent} || {{ printf 'rgt: %s is not on this node (%s): the workdir of the "
    "profile must be on a filesystem every node of the cluster mounts\\n' {control} "
    '"$(hostname)" >&2; exit 3; }}; exec {python} -u {agent} run {control} </dev/null '
    ">>{log} 2>&1"
)


def entrypoint(python: str, control: str) -> str:
    """The shell line Ray runs for the job, every path quoted."""
    q = shlex.quote
    return ENTRYPOINT.format(
        python=q(python),
        agent=q(f"{control}/agent.py"),
        control=q(control),
        log=q(f"{control}/agent.log"),
    )


def _resources(profile_name: str, conf: dict[str, Any]) -> dict[str, float]:
    raw = conf.get("resources") or {}
    out: dict[str, float] = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ProfileError(
                f"profile {profile_name!r}: [ray] resources.{key} = {value!r}: give a positive "
                "number (the amount of that custom resource the job needs, e.g. { worker = 1 })"
            )
        out[str(key)] = float(value)
    return out


def gpus_of(gpus: str | None) -> float:
    """``--gpus`` as the number of GPUs Ray reserves for the job."""
    if gpus in (None, "", "none", "0"):
        return 0.0
    try:
        value = float(str(gpus))
    except ValueError:
        value = -1.0
    if value <= 0:
        raise UsageError(
            f"--gpus {gpus!r}: on Ray give the number of GPUs the job needs (e.g. --gpus 2, or "
            "--gpus 0.5 to share one); Ray picks the node and the devices"
        )
    return value


class RayBackend(Backend):
    """``ray``: the agent as a Ray job's entrypoint, on the node Ray places it."""

    name = "ray"
    schedules_gpus = True

    def check_profile(self, profile: Profile) -> None:
        super().check_profile(profile)
        _resources(profile.name, profile.ray)
        ray_jobs(profile.ray)  # an address, and a token that can be read

    def check_request(self, profile: Profile, req: LaunchRequest) -> None:
        """The Jobs API answers before anything is registered or sent."""
        super().check_request(profile, req)
        gpus_of(req.gpus)
        api = ray_jobs(profile.ray)
        try:
            api.version()
        except ProviderError as exc:
            raise LaunchError(
                f"the Ray Jobs API at {api.address} did not answer ({exc}); nothing was "
                "registered or sent. Is the cluster up (`ray status` on the head), and its "
                "dashboard reachable from here?"
            ) from exc

    def spec_extra(self, profile: Profile, req: LaunchRequest) -> dict[str, Any]:
        return {"gpus_request": req.gpus or "0", "ray": dict(profile.ray)}

    def render(self, python: str, control_dir: str) -> list[str]:
        script = UNPACK_SCRIPT.replace("@CHECK@", interpreter_check())
        return ["sh", "-c", script, "rgt-unpack", control_dir, python]

    def parse_submit(self, stdout: bytes) -> dict[str, Any]:
        return {}

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
        super().submit(transport, python, control_dir, bundle, unset)  # the bundle, unpacked
        conf = spec.ray
        body: dict[str, Any] = {
            "entrypoint": entrypoint(python, control_dir),
            "submission_id": spec.job_id,
            "runtime_env": {},
            "metadata": {"rgt_job": spec.job_id, "rgt_name": spec.name},
        }
        gpus = gpus_of(spec.gpus_request)
        if gpus:
            body["entrypoint_num_gpus"] = gpus
        if conf.get("num_cpus"):
            body["entrypoint_num_cpus"] = float(conf["num_cpus"])
        resources = _resources(spec.profile, conf)
        if resources:
            body["entrypoint_resources"] = resources
        api = ray_jobs(conf)
        try:
            api.submit(body)
        except ProviderError as exc:
            if exc.status_code is not None:  # Ray answered: refused
                raise LaunchError(
                    f"Ray refused the job: {exc}\nCheck [ray] resources and --gpus against "
                    "`ray status` on the head; nothing runs (the bundle stays in "
                    f"{control_dir})."
                ) from exc
            # No answer: the submission may have been taken. Its id is ours: ask.
            if api.info(spec.job_id) is None:
                raise LaunchError(
                    f"the submission to Ray did not complete ({exc}) and Ray does not know the "
                    "job: nothing runs. Launch again once the cluster answers."
                ) from exc
        return {"ray_job": spec.job_id}

    def observe(self, transport: Transport, spec: JobSpec, log_lines: int = 12) -> Snapshot:
        return observe_ray(transport, spec, log_lines)

    def stop(self, transport: Transport, spec: JobSpec, sig: str = "SIGTERM") -> Stopped:
        """The Jobs API's stop: SIGTERM to the entrypoint's processes (the agent forwards it and
        the job saves), SIGKILL after the cluster's ``RAY_JOB_STOP_WAIT_TIME_S``."""
        if sig != "SIGTERM":
            raise UsageError(
                f"--signal {sig}: a Ray job is stopped by the Jobs API, which sends SIGTERM (the "
                "cluster's RAY_JOB_STOP_SIGNAL) and SIGKILL after RAY_JOB_STOP_WAIT_TIME_S"
            )
        if self.observe(transport, spec, log_lines=0).terminal:
            raise UsageError(f"job {spec.job_id} has already ended")
        if not spec.ray_job:
            raise UsageError(f"job {spec.job_id} has no Ray submission: it was never submitted")
        ray_jobs(spec.ray).stop(spec.ray_job)
        return Stopped({"signal": sig, "via": "Ray Jobs API stop"})


def _ray_said(info: RayJobInfo) -> str:
    first = info.message.strip().splitlines()[0] if info.message.strip() else ""
    return f"Ray {info.status}" + (f" ({first})" if first else "")


def _api_log(spec: JobSpec, lines: int = 4) -> str:
    tail = [line for line in clean_log(ray_jobs(spec.ray).logs(str(spec.ray_job)).encode(), 40)]
    tail = [line for line in tail if line.strip() and not line.startswith("Running entrypoint")]
    return " | ".join(tail[-lines:])


def _ended_without_record(
    transport: Transport, spec: JobSpec, snap: Snapshot, info: RayJobInfo
) -> None:
    """Ray ended the job and the agent wrote no exit record: what Ray knows decides."""
    snap.state = "failed"
    if info.node_died:
        snap.failure = "node_lost"
        found = re.search(r"Node Id: ([0-9a-f]+)", info.message)
        node = found.group(1) if found else info.driver_node_id
        snap.diagnosis = (
            f"node lost: the Ray node {node or '(unnamed)'} running the job died under it ("
            + info.message.strip().splitlines()[-1].strip()
            + f"). Its checkpoints are on the shared path ({spec.ckpt_dir}): `rgt resume "
            f"{spec.name}` submits the next attempt, which goes on from the newest on a node "
            "that is up"
        )
        return
    if info.status == "STOPPED":
        wait = spec.ray.get("stop_wait_s")
        snap.diagnosis = (
            "stopped through the Ray Jobs API and killed before the agent recorded its end: Ray "
            f"sends SIGKILL RAY_JOB_STOP_WAIT_TIME_S ({wait if wait else 'default 3'} s) after "
            f"the SIGTERM. Start the cluster with RAY_JOB_STOP_WAIT_TIME_S of at least the "
            f"job's grace ({spec.grace_s:g} s) so it can save"
        )
        return
    said = _api_log(spec)
    snap.diagnosis = (
        f"{_ray_said(info)} before the agent wrote its exit record; "
        + agent_never_reported(transport, spec.control_dir)
        + (f"; Ray's job log ends with: {said}" if said else "")
    )


def observe_ray(transport: Transport, spec: JobSpec, log_lines: int = 12) -> Snapshot:
    """Observe a Ray job; see the module docstring for the rules."""
    control = spec.control_dir
    snap = new_snapshot(spec, transport.host)
    exit_rec: ExitRecord | None
    exit_rec, _ = read_exit(transport, control)
    reported, _ = read_record(transport, f"{control}/status.json")
    status = StatusRecord.parse(reported) if reported is not None else None
    info: RayJobInfo | None = None
    if spec.ray_job:
        try:
            info = ray_jobs(spec.ray).info(spec.ray_job)
        except ProviderError as exc:
            if exit_rec is None:  # unobservable, which says nothing about the job
                raise TransportError(f"the Ray Jobs API did not answer: {exc}") from exc
            fill_from_records(transport, snap, control, status, exit_rec, log_lines)
            return explain(snap)
    else:
        fill_from_records(transport, snap, control, status, None, log_lines)
        return snap
    if info is not None:
        snap.scheduler = f"Ray job {spec.ray_job}: {info.status}"
    if info is None:
        fill_from_records(transport, snap, control, status, exit_rec, log_lines)
        if exit_rec is None:
            snap.state = "lost"
            snap.diagnosis = (
                f"the Ray cluster no longer knows submission {spec.ray_job} (a restarted head "
                "forgets its jobs) and the agent left no exit record"
            )
        return explain(snap)
    if info.status not in ENDED:
        fill_from_records(transport, snap, control, status, None, log_lines)
        if info.status == "RUNNING" and status is not None:
            snap.state = "running"
            check_stall(transport, spec, snap)
        else:
            snap.state = "queued"
            snap.diagnosis = (
                "Ray started the entrypoint; the agent has not reported yet"
                if info.status == "RUNNING"
                else f"waiting for Ray to place it ({info.message.strip() or info.status}): it "
                "needs a node with "
                + (", ".join(f"{k}={v:g}" for k, v in _needs(spec).items()) or "a free CPU")
            )
        return snap
    fill_from_records(transport, snap, control, status, exit_rec, log_lines)
    if exit_rec is None:
        _ended_without_record(transport, spec, snap, info)
    elif info.status == "STOPPED" and snap.state == "preempted":
        snap.diagnosis = (
            "stopped through the Ray Jobs API: the job saved at a step boundary. Re-run the "
            f"cell (or `rgt resume {snap.name}`) to continue from its latest checkpoint."
        )
    return explain(snap)


def _needs(spec: JobSpec) -> dict[str, float]:
    needs = dict(_resources(spec.profile, spec.ray))
    gpus = gpus_of(spec.gpus_request)
    if gpus:
        needs["GPU"] = gpus
    return needs
