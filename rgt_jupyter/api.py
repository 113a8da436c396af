"""The one Python API every front end shares: :class:`Job` and :class:`Run`."""

from __future__ import annotations

import json
import os
import signal as _signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import RemoteTraceback, TransportError, UsageError
from .project import project_dir
from .registry import Registry
from .render import snapshot_html, snapshot_text, traceback_lines
from .status import TERMINAL, Snapshot, as_launched, observe
from .transport import Transport, get_transport

#: Transport failures that say the host is out of reach for now, not that something is wrong.
TRANSIENT_KINDS = ("timeout", "transport_unavailable", "connection_refused")


class Job:
    """A handle on one job (one attempt). State lives in the registry and the job's artifacts,
    so a new kernel or the CLI get an equal handle from :meth:`from_registry`."""

    def __init__(self, row: dict[str, Any], project: Path) -> None:
        self.project = project
        self._row = row
        self.spec: dict[str, Any] = row["spec"]
        self.id: str = row["id"]
        self.name: str = row["name"]
        self.profile: str = row["profile"]
        self._transport: Transport | None = None
        self._last: Snapshot | None = None
        if self.spec.get("slurm_job_id") and row.get("state") not in TERMINAL:
            from .slurm_queue import slurm_queue

            slurm_queue().follow(self.spec.get("host", ""), self.spec["slurm_job_id"])

    # -- construction

    @classmethod
    def from_registry(cls, id_or_name: str, project: str | os.PathLike[str] | None = None) -> Job:
        """The job with this id, or the newest job with this name, in ``project``'s registry."""
        proj = project_dir(project)
        return cls(Registry(proj).get(id_or_name), proj)

    @classmethod
    def latest(cls, project: str | os.PathLike[str] | None = None) -> Job:
        """The most recently launched job of the project."""
        proj = project_dir(project)
        row = Registry(proj).latest()
        if row is None:
            raise UsageError(f"no jobs yet in {proj}: launch one with %%remote_run or `rgt run`")
        return cls(row, proj)

    # -- observation

    @property
    def transport(self) -> Transport:
        """The transport of the job's profile (created on first use)."""
        if self._transport is None:
            self._transport = get_transport(
                self.spec["transport"], self.spec.get("host_alias"), self.project
            )
        return self._transport

    @classmethod
    def just_launched(cls, row: dict[str, Any], project: Path) -> Job:
        """The Job a launch returned: its first view needs no round trip to the host."""
        job = cls(row, project)
        job._last = as_launched(job.spec)
        return job

    def recent_snapshot(self, max_age: float = 2.0) -> Snapshot:
        """The last observation if it is at most ``max_age`` seconds old, else a new one."""
        if self._last is not None and time.time() - self._last.observed_at <= max_age:
            return self._last
        return self.snapshot()

    def snapshot(self, log_lines: int = 12, via: Transport | None = None) -> Snapshot:
        """Observe the job now (from its process and artifacts) and record the state.

        ``via``: the transport to read through (the watcher passes one that answers from its
        batched look at the machine)."""
        snap = observe(via or self.transport, self.spec, log_lines=log_lines)
        if self.spec.get("instance_id"):
            from .billing import cost_text

            inst = Registry(self.project).instance(self.spec["instance_id"])
            snap.cost = cost_text(inst) if inst else None
        if self._last is None or self._last.state != snap.state:
            Registry(self.project).set_state(self.id, snap.state, exit_code=snap.exit_code)
        self._last = snap
        return snap

    @property
    def state(self) -> str:
        """One of queued, running, finished, failed, preempted, lost."""
        return self.snapshot(log_lines=0).state

    def done(self) -> bool:
        """True once the job reached a terminal state."""
        return self.snapshot(log_lines=0).terminal

    def wait(self, timeout: float | None = None, poll: float = 0.5) -> str:
        """Block until the job ends (or ``timeout`` seconds pass); return its state.

        While the job's host is out of reach for a moment (a dropped, refused or silent
        connection) the job is not judged: the wait goes on and looks again; any other
        transport error (a changed host key, refused keys) is raised at once."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.2
        while True:
            try:
                snap = self.snapshot(log_lines=0)
            except TransportError as exc:
                late = deadline is not None and time.monotonic() >= deadline
                if late or getattr(exc, "kind", None) not in TRANSIENT_KINDS:
                    raise
                time.sleep(poll)
                continue
            if snap.terminal or (deadline is not None and time.monotonic() >= deadline):
                return snap.state
            time.sleep(min(delay, poll))
            delay = min(delay * 1.5, poll)

    def log(self, max_bytes: int = 1 << 20) -> str:
        """The end of the job's log (stdout and stderr)."""
        data = self.transport.tail(f"{self.spec['control_dir']}/log", max_bytes)
        return data.decode("utf-8", errors="replace")

    def progress_records(self) -> list[dict[str, Any]]:
        """Every ``job.progress(...)`` record so far (for curves)."""
        from .fsutil import jsonl_records

        text = self.transport.read_text(f"{self.spec['control_dir']}/progress.jsonl") or ""
        return jsonl_records(text)

    def traceback(self) -> list[str] | None:
        """The job's Python traceback (in the cell's line numbers), if it raised."""
        text = self.transport.read_text(f"{self.spec['control_dir']}/error.json")
        if not text:
            return None
        return traceback_lines(
            json.loads(text),
            self.spec["program"],
            int(self.spec.get("line_offset", 0)),
            self.spec.get("label", ""),
            self.id,
            self.spec.get("host", ""),
        )

    def exception(self) -> RemoteTraceback | None:
        """A :class:`RemoteTraceback` when the job failed, else None."""
        snap = self.snapshot(log_lines=0)
        if snap.state != "failed":
            return None
        lines = self.traceback() or [snap.diagnosis or "failed"]
        return RemoteTraceback(f"job {self.id} failed: {snap.diagnosis}", lines)

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait for the job and return its ``results.json`` (raises if it failed)."""
        state = self.wait(timeout)
        exc = self.exception()
        if exc is not None:
            raise exc
        text = self.transport.read_text(f"{self.spec['out_dir']}/results.json")
        if text is None:
            raise UsageError(f"job {self.id} is {state} and wrote no results.json")
        value: dict[str, Any] = json.loads(text)
        return value

    # -- actions

    def stop(self, sig: str = "SIGTERM") -> None:
        """Ask the job to stop: the agent forwards the signal, the job saves and ends
        ``preempted``; after the grace period the agent kills what is left."""
        if self.spec.get("launcher") == "k8s-job":
            from .k8s_launch import delete_k8s_job

            delete_k8s_job(self.spec)
            Registry(self.project).update_spec(self.id, k8s_deleted_at=time.time())
            self.spec["k8s_deleted_at"] = time.time()
            Registry(self.project).event(self.id, "stop_requested", via="delete Job")
            return
        if self.spec.get("launcher") == "sbatch":
            if self.snapshot(log_lines=0).terminal:
                raise UsageError(f"job {self.id} has already ended")
            # scancel signals the batch shell (the agent) and the steps, then SIGKILL after
            # Slurm's KillWait: the agent forwards the signal and the job saves first.
            self.transport.exec(
                [
                    "scancel",
                    f"--signal={sig.removeprefix('SIG')}",
                    "--full",
                    self.spec["slurm_job_id"],
                ]
            ).check()
            Registry(self.project).event(self.id, "stop_requested", signal=sig, via="scancel")
            return
        from .status import agent_pid

        # Only the job's own agent is ever signalled, whatever status.json names.
        pid = agent_pid(self.transport, self.spec)
        if pid is None or self.snapshot(log_lines=0).terminal:
            raise UsageError(f"job {self.id} is not running")
        if self.spec["transport"] != "local":
            raise UsageError("stop is only available for local jobs")
        os.kill(pid, getattr(_signal, sig))
        Registry(self.project).event(self.id, "stop_requested", signal=sig)

    def resume(self, fresh: bool = False) -> Job:
        """Relaunch this job's program: into the same checkpoint dir (``RGT_RESUME=1``) when it
        ended preempted, failed or lost; ``fresh=True`` starts over in a new dir."""
        from .launch import LaunchRequest, launch

        spec = self.spec
        state = self.snapshot(log_lines=0).state
        if state == "finished" and not fresh:
            raise UsageError(
                f"job {self.id} finished: there is nothing to resume. Re-run it from the start "
                f"with `rgt resume {self.name} --fresh` (or Job.resume(fresh=True))"
            )
        # The stored program, pushed files and inputs are reused as they are: byte-identical.
        req = LaunchRequest(
            program="",
            name=self.name,
            profile=self.profile,
            label=spec.get("label", ""),
            line_offset=int(spec.get("line_offset", 0)),
            env=dict(spec.get("env", {})),
            smoke=False,
            host=spec.get("host_alias"),
            secrets=list(spec.get("secret_names", [])),
            python=spec["python"],
            fresh=fresh,
            grace_s=spec.get("grace_s"),
            ckpt_dir=spec.get("ckpt_root"),
            allow_ephemeral_ckpt=bool((spec.get("durability") or {}).get("overridden")),
            reuse_code_of=spec,
        )
        return Job(launch(req, self.project), self.project)

    def pull(
        self,
        to: str | os.PathLike[str] | None = None,
        on_progress: Callable[[int, int, str], None] | None = None,
    ) -> Run:
        """Pull outputs and checkpoints into a new immutable run (see :mod:`.pull`).

        ``on_progress(bytes_done, bytes_total, path)`` is called after each file. A pull of this
        job that was killed is settled first: when its run had landed whole, that run is
        registered and returned; otherwise this pull resumes from what it had fetched.
        """
        from .pull import pull

        target = Path(to) if to is not None else None
        return Run(pull(self._row, self.project, target, on_progress=on_progress))

    def runs(self) -> list[Run]:
        """Runs already pulled from this job."""
        return [Run(Path(r["path"])) for r in Registry(self.project).runs(self.id)]

    # -- display

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        snap = self.recent_snapshot()
        tb = self.traceback() if snap.state == "failed" else None
        return {"text/plain": snapshot_text(snap, tb), "text/html": snapshot_html(snap, tb)}

    def __repr__(self) -> str:
        state = self._last.state if self._last else self._row.get("state")
        return f"<Job {self.id} {state}>"


class Run:
    """A pulled, immutable run: ``runs/<run-id>/`` with run.json, results.json, manifest.json."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not (self.path / "run.json").exists():
            raise UsageError(f"{self.path} is not a run folder (no run.json)")
        self.run_id = self.path.name

    def _json(self, name: str) -> Any:
        p = self.path / name
        return json.loads(p.read_text()) if p.exists() else None

    @property
    def results(self) -> dict[str, Any]:
        """The job's ``results.json`` ({} when it wrote none)."""
        return self._json("results.json") or {}

    @property
    def provenance(self) -> dict[str, Any]:
        """``run.json``."""
        value: dict[str, Any] = self._json("run.json")
        return value

    @property
    def manifest(self) -> dict[str, Any]:
        """``manifest.json``: every pulled file with size and sha256."""
        value: dict[str, Any] = self._json("manifest.json")
        return value

    @property
    def verification(self) -> dict[str, Any]:
        """What was checked: hashes, checkpoint loads, mismatches."""
        value: dict[str, Any] = self._json("verification.json")
        return value

    @property
    def verified(self) -> bool:
        """True only when every hash matched and every checkpoint loaded."""
        return bool(self.verification.get("verified"))

    @property
    def outputs(self) -> Path:
        """The pulled ``$RGT_OUT``."""
        return self.path / "outputs"

    @property
    def checkpoints(self) -> Path:
        """The pulled checkpoints."""
        return self.path / "checkpoints"

    def text(self) -> str:
        """A plain-text summary."""
        v = self.verification
        lines = [
            f"Run {self.run_id} at {self.path}",
            f"  verified: {'yes' if self.verified else 'NO'} ({v.get('summary')})",
        ]
        for m in v.get("mismatches", []):
            lines.append(f"  MISMATCH {m['path']}: {m['reason']}")
        for r in v.get("checkpoint_loads", []):
            if not r["ok"]:
                lines.append(f"  DOES NOT LOAD {r['path']}: {r['detail']}")
        if self.results:
            lines.append("  results: " + json.dumps(self.results, sort_keys=True)[:500])
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        import html

        return {
            "text/plain": self.text(),
            "text/html": "<pre>" + html.escape(self.text()) + "</pre>",
        }

    def __repr__(self) -> str:
        return f"<Run {self.run_id} verified={self.verified}>"
