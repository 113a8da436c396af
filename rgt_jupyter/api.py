"""The one Python API every front end shares.

The verbs: :func:`submit` launches a program as a detached job (or a seed group) and
:func:`find` finds a job or a seed group by what a user types. The handles: :class:`Job` (one
attempt of a job), :class:`Run` (a pulled, verified run), and :class:`JobGroup` /
:class:`RunGroup` (the jobs and runs of one ``--seeds`` launch, seen as one experiment). The
magics, the CLI and the server extension are thin front doors over these.
"""

from __future__ import annotations

import html
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, overload

from .backends import Backend, get_backend
from .errors import JobNotFound, RemoteTraceback, TransportError, UsageError
from .jobs.curves import curve_findings, processes
from .jobs.lookup import group_rows
from .jobs.observe import progress_records
from .jobs.records import read_json
from .jobs.request import LaunchRequest, make_request
from .jobs.snapshot import TERMINAL, Snapshot, as_launched
from .jobs.spec import JobSpec
from .jobs.tracebacks import traceback_lines
from .run.billing import job_cost
from .run.cadence import advice as cadence_advice
from .run.launch import launch, update_spec
from .run.pull import pull
from .run.pull.formats import report_lines
from .run.pull.from_bucket import pull_from_bucket
from .run.relaunch import relaunch_request
from .run.secrets import drop_leftover_secrets
from .run.seeds import launch_seeds
from .store.fsutil import jsonl_records
from .store.project import project_dir
from .store.registry import Registry
from .transport import Transport, get_transport
from .views.render import snapshot_html, snapshot_text

#: Transport failures that say the host is out of reach for now, not that something is wrong.
TRANSIENT_KINDS = ("timeout", "transport_unavailable", "connection_refused")


class Job:
    """A handle on one job (one attempt). State lives in the registry and the job's artifacts,
    so a new kernel or the CLI get an equal handle from :meth:`from_registry`."""

    def __init__(self, row: dict[str, Any], project: Path) -> None:
        self.project = project
        self._row = row
        self.spec = JobSpec.from_row(row)
        self.id: str = row["id"]
        self.name: str = row["name"]
        self.profile: str = row["profile"]
        #: What the launch said besides the job (first-launch warnings of the profile).
        self.notices: list[str] = []
        self._transport: Transport | None = None
        self._last: Snapshot | None = None
        self._secrets_checked = False
        self._secrets_note: str | None = None
        if row.get("state") not in TERMINAL:
            self.backend.follow(self.spec)

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
    def backend(self) -> Backend:
        """The backend that launched the job (its profile's ``launcher``)."""
        return get_backend(self.spec.launcher)

    @property
    def transport(self) -> Transport:
        """The transport of the job's profile (created on first use)."""
        if self._transport is None:
            self._transport = get_transport(self.spec.transport, self.spec.host_alias, self.project)
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
        batched look at the machine). A look for a view (``log_lines`` or ``via``) also reads
        the training findings: the probes' ``findings.json`` and the progress curve's."""
        snap = self.backend.observe(via or self.transport, self.spec, log_lines=log_lines)
        if snap.terminal and not self._secrets_checked:
            self._secrets_checked = True
            self._secrets_note = drop_leftover_secrets(
                self.transport, self.spec, snap, Registry(self.project)
            )
        if self._secrets_note:
            snap.diagnosis = "; ".join(x for x in (snap.diagnosis, self._secrets_note) if x)
        inst = (
            Registry(self.project).instance(self.spec.instance_id)
            if self.spec.instance_id
            else None
        )
        snap.cost = job_cost(self.spec.cost_per_hour, snap.elapsed, inst)[1]
        if self.spec.bucket:
            url = self.spec.bucket.get("lineage_url", "")
            found = read_json(via or self.transport, f"{self.spec.control_dir}/bucket.json")
            snap.bucket = found or {"url": url, "durable_step": None}
        if log_lines or via is not None:  # a view's look, not a state check
            snap.findings = self._findings(via or self.transport, snap.resources)
            if self.spec.spot.get("reclaims_per_day") and not snap.terminal:
                cadence = read_json(via or self.transport, f"{self.spec.control_dir}/cadence.json")
                snap.cadence = cadence_advice(cadence, self.spec.spot)
        if self._last is None or self._last.state != snap.state:
            Registry(self.project).set_state(
                self.id, snap.state, exit_code=snap.exit_code, elapsed=snap.elapsed
            )
        self._last = snap
        return snap

    def _findings(self, via: Transport, resources: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The probes' findings (``findings.json``), the loss curve's (its newest records) and
        what bounds the step (with the agent's GPU samples)."""
        control = self.spec.control_dir
        found = (read_json(via, f"{control}/findings.json") or {}).get("findings")
        out = [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []
        held = getattr(via, "records", {}).get(control)
        records = held if held is not None else progress_records(via, control, 1 << 16)
        return out + curve_findings(records, resources, processes(self.spec, resources))

    @property
    def recorded_state(self) -> str:
        """The state the registry last recorded, without looking at the job."""
        return str((self._last.state if self._last else None) or self._row.get("state"))

    @property
    def recorded_at(self) -> float:
        """When the registry last recorded anything of the job (its state, its spec)."""
        return float(self._row.get("updated_at") or self._row.get("created_at") or 0.0)

    @property
    def state(self) -> str:
        """One of queued, running, finished, failed, preempted, lost."""
        return self.snapshot(log_lines=0).state

    def done(self) -> bool:
        """True once the job reached a terminal state."""
        return self.snapshot(log_lines=0).terminal

    def wait(
        self,
        timeout: float | None = None,
        poll: float = 0.5,
        on_outage: Callable[[TransportError], None] | None = None,
    ) -> str:
        """Block until the job ends (or ``timeout`` seconds pass); return its state.

        While the job's host is out of reach (a dropped, refused or silent connection) the job
        is not judged: the wait goes on and looks again, up to ``timeout``, and
        ``on_outage(error)`` is told once per outage; any other transport error (a changed host
        key, refused keys) is raised at once, and so is the outage once the timeout passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.2
        away = False
        while True:
            try:
                snap = self.snapshot(log_lines=0)
            except TransportError as exc:
                late = deadline is not None and time.monotonic() >= deadline
                if late or exc.kind not in TRANSIENT_KINDS:
                    raise
                if not away and on_outage is not None:
                    on_outage(exc)
                away = True
                time.sleep(poll)
                continue
            away = False
            if snap.terminal or (deadline is not None and time.monotonic() >= deadline):
                return snap.state
            time.sleep(min(delay, poll))
            delay = min(delay * 1.5, poll)

    def log(self, max_bytes: int = 1 << 20) -> str:
        """The end of the job's log (stdout and stderr)."""
        data = self.transport.tail(f"{self.spec.control_dir}/log", max_bytes)
        return data.decode("utf-8", errors="replace")

    def progress_records(self) -> list[dict[str, Any]]:
        """Every ``job.progress(...)`` record so far (for curves)."""
        text = self.transport.read_text(f"{self.spec.control_dir}/progress.jsonl") or ""
        return jsonl_records(text)

    def traceback(self) -> list[str] | None:
        """The job's Python traceback (in the cell's line numbers), if it raised."""
        text = self.transport.read_text(f"{self.spec.control_dir}/error.json")
        if not text:
            return None
        return traceback_lines(
            json.loads(text),
            self.spec.program,
            int(self.spec.line_offset),
            self.spec.label,
            self.id,
            self.spec.host,
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
        text = self.transport.read_text(f"{self.spec.out_dir}/results.json")
        if text is None:
            raise UsageError(f"job {self.id} is {state} and wrote no results.json")
        value: dict[str, Any] = json.loads(text)
        return value

    # -- actions

    def stop(self, sig: str = "SIGTERM") -> None:
        """Ask the job to stop, through its backend: the agent forwards the signal, the job
        saves and ends ``preempted``; after the grace period the agent kills what is left."""
        stopped = self.backend.stop(self.transport, self.spec, sig)
        registry = Registry(self.project)
        if stopped.spec:
            update_spec(registry, self.id, **stopped.spec)
            self.spec = self.spec.replace(**stopped.spec)
        registry.event(self.id, "stop_requested", **stopped.event)

    def resume(self, fresh: bool = False, force: bool = False, budget: float | None = None) -> Job:
        """Relaunch this job's program: into the same checkpoint dir (``RGT_RESUME=1``) when it
        ended preempted, failed or lost; ``fresh=True`` starts over in a new dir. A job that
        failed with a bug in its code is relaunched only with ``force=True``: the same code
        fails the same way (fix it and re-run the cell instead). ``budget``: the job's budget
        in USD from here on (default: the one it had; every attempt counts)."""
        spec = self.spec
        snap = self.snapshot(log_lines=0)
        state = snap.state
        if snap.failure == "python_exception" and not force:
            raise UsageError(
                f"job {self.id} failed with a bug in its code ({snap.diagnosis}); a resume runs "
                "the very same code, which fails the same way. Fix the code and re-run the cell "
                f"(or `rgt run`), or `rgt resume {self.name} --force` to run it again anyway"
            )
        if state == "finished" and not fresh:
            raise UsageError(
                f"job {self.id} finished: there is nothing to resume. Re-run it from the start "
                f"with `rgt resume {self.name} --fresh` (or Job.resume(fresh=True))"
            )
        # The stored program, pushed files and inputs are reused as they are: byte-identical.
        req = relaunch_request(spec, fresh=fresh, budget=budget)
        return Job(launch(req, self.project), self.project)

    def resume_on_new_machine(
        self,
        confirm: Callable[[str], bool],
        alias: str | None = None,
        boot_timeout_s: float = 600.0,
        interval_s: float = 5.0,
    ) -> Job:
        """Continue this job on a new machine when the platform reports its rented one gone
        (never when it merely does not answer): a replacement from the same plan, its Host
        block written (``alias``, default ``OLD-2``), its host key trusted if ``confirm(text)``
        says so, the code sent again as it ran, and the job relaunched from the newest complete
        checkpoint in its bucket. See :mod:`rgt_jupyter.run.replace`."""
        from .run.replace import resume_on_new_machine  # deferred: paramiko, for this call

        row = resume_on_new_machine(
            self.spec, self.project, confirm, alias, boot_timeout_s, interval_s
        )
        return Job(row, self.project)

    def pull(
        self,
        to: str | os.PathLike[str] | None = None,
        on_progress: Callable[[int, int, str], None] | None = None,
        on_wait: Callable[[str], None] | None = None,
        from_bucket: bool = False,
    ) -> Run:
        """Pull outputs and checkpoints into a new immutable run (see :mod:`.run.pull`).

        ``on_progress(bytes_done, bytes_total, path)`` is called after each file. A pull of this
        job that was killed is settled first: when its run had landed whole, that run is
        registered and returned; otherwise this pull resumes from what it had fetched.
        ``from_bucket``: the machine is gone; the run holds the newest complete checkpoint of
        the job's bucket (:mod:`.run.pull.from_bucket`).
        """
        target = Path(to) if to is not None else None
        if from_bucket:
            return Run(pull_from_bucket(self.spec, self.project, target))
        try:
            path = pull(self.spec, self.project, target, on_progress=on_progress, on_wait=on_wait)
        except TransportError as exc:
            if not self.spec.bucket:
                raise
            raise TransportError(
                f"{exc}. Its checkpoints are also in {self.spec.bucket.get('lineage_url')}: if "
                f"the machine is gone, `%pull {self.name} --from-bucket` brings the newest "
                "complete one home",
                exc.kind,
                exc.maybe_ran,
            ) from exc
        return Run(path)

    def log_offset(self, consumer: str) -> int | None:
        """How many bytes of the job's log ``consumer`` (a notebook) has been shown, if known."""
        return Registry(self.project).log_offset(self.id, consumer)

    def set_log_offset(self, consumer: str, offset: int) -> None:
        """Record that ``consumer`` has been shown the job's log up to byte ``offset``."""
        Registry(self.project).set_log_offset(self.id, consumer, offset)

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
        """True only when every hash matched and every checkpoint loaded (or, pickled with a
        class outside the allowlist, stands verified by sha256 only: said in :meth:`text`)."""
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
        lines += report_lines(v)
        if self.results:
            lines.append("  results: " + json.dumps(self.results, sort_keys=True)[:500])
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:

        return {
            "text/plain": self.text(),
            "text/html": "<pre>" + html.escape(self.text()) + "</pre>",
        }

    def __repr__(self) -> str:
        return f"<Run {self.run_id} verified={self.verified}>"


class JobGroup:
    """The members of one seed group (``spec.group``), in seed order."""

    def __init__(self, jobs: list[Job]) -> None:
        if not jobs or any(not j.spec.group for j in jobs):
            raise UsageError("a seed group needs at least one job, each of the group")
        self.jobs = sorted(jobs, key=lambda j: int((j.spec.group or {}).get("seed", 0)))
        group = self.jobs[0].spec.group or {}
        self.id: str = group["id"]
        self.name: str = group["name"]
        self.seeds: list[int] = [int((j.spec.group or {}).get("seed", 0)) for j in self.jobs]
        #: What the launch said besides the jobs (first-launch warnings of the profile).
        self.notices: list[str] = []

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]], project: Path) -> JobGroup:
        """The group of the rows a launch returned."""
        return cls([Job.just_launched(r, project) for r in rows])

    @classmethod
    def find(cls, ref: str, project: str | os.PathLike[str] | None = None) -> JobGroup | None:
        """The newest group with this name (or id) in the project, or None."""
        proj = project_dir(project)
        rows = group_rows(Registry(proj), ref)
        return cls([Job(r, proj) for r in rows]) if rows else None

    @classmethod
    def from_registry(cls, ref: str, project: str | os.PathLike[str] | None = None) -> JobGroup:
        """Like :meth:`find`, but raises when there is no such group."""
        group = cls.find(ref, project)
        if group is None:
            raise JobNotFound(f"no seed group {ref!r} in this project (launch one with --seeds)")
        return group

    def states(self) -> dict[str, str]:
        """Each member's state, by job name."""
        return {j.name: j.snapshot(log_lines=0).state for j in self.jobs}

    def wait(self, timeout: float | None = None, poll: float = 0.5) -> dict[str, str]:
        """Block until every member ended (or ``timeout`` seconds pass); return the states."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            states = self.states()
            done = all(s in TERMINAL for s in states.values())
            if done or (deadline is not None and time.monotonic() >= deadline):
                return states
            time.sleep(poll)

    def pull(self, to: str | os.PathLike[str] | None = None) -> RunGroup:
        """Pull every member into its own verified run (each run.json names the group)."""
        return RunGroup(self.name, [job.pull(to=to) for job in self.jobs])

    def text(self) -> str:
        """One line per member."""
        lines = [f"seed group {self.name} ({self.id}): {len(self.jobs)} job(s)"]
        for job in self.jobs:
            snap = job.recent_snapshot()
            extra = f"  {snap.diagnosis}" if snap.diagnosis and snap.terminal else ""
            seed = (job.spec.group or {}).get("seed")
            lines.append(f"  seed {seed}: {job.id} [{snap.state}]{extra}")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        text = self.text()
        return {"text/plain": text, "text/html": "<pre>" + html.escape(text) + "</pre>"}

    def __repr__(self) -> str:
        return f"<JobGroup {self.id} seeds={self.seeds}>"


class RunGroup(Sequence[Run]):
    """The pulled runs of a seed group, with what their saved configs (``job.save_config``)
    differ in besides the seed: a difference is disclosed, not hidden."""

    def __init__(self, name: str, runs: list[Run]) -> None:
        self.runs = runs
        self.name = name
        self.differences = config_differences([r.provenance.get("config") or {} for r in runs])

    @overload
    def __getitem__(self, index: int) -> Run: ...

    @overload
    def __getitem__(self, index: slice) -> list[Run]: ...

    def __getitem__(self, index: int | slice) -> Run | list[Run]:
        return self.runs[index]

    def __len__(self) -> int:
        return len(self.runs)

    def __repr__(self) -> str:
        return f"<RunGroup {self.name} runs={len(self.runs)}>"

    def text(self) -> str:
        """One line per run, and the config check."""
        lines = [f"seed group {self.name}: {len(self)} run(s)"]
        lines += [
            f"  seed {r.provenance.get('seed')}: {r.run_id} verified: "
            + ("yes" if r.verified else "NO")
            + f" ({r.path})"
            for r in self
        ]
        lines.append(
            "  configs differ only in the seed"
            if not self.differences
            else "  DISCLOSE: the configs also differ in " + ", ".join(self.differences)
        )
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        text = self.text()
        return {"text/plain": text, "text/html": "<pre>" + html.escape(text) + "</pre>"}


def config_differences(configs: list[dict[str, Any]]) -> list[str]:
    """Keys (other than ``seed``) whose values are not the same in every config."""
    keys = sorted({k for c in configs for k in c} - {"seed"})
    return [k for k in keys if any(c.get(k) != configs[0].get(k) for c in configs[1:])]


# -- the verbs ------------------------------------------------------------------------------


def submit(
    program: str | LaunchRequest, project: str | os.PathLike[str] | None = None, **options: Any
) -> Job | JobGroup:
    """Launch ``program`` (Python source) as a detached, checkpoint-durable job; return its
    :class:`Job` at once, or the :class:`JobGroup` of a ``seeds=`` launch.

    ``options`` are those of ``%%remote_run`` / ``rgt run`` by their long names (``name``,
    ``profile``, ``push``, ``inputs``, ``env``, ``smoke``, ``gpus``, ``host``, ``python``,
    ``fresh``, ``grace_s``, ``secrets``, ``ckpt_dir``, ``seeds``, ...; see
    :class:`~rgt_jupyter.jobs.request.LaunchRequest`). ``env`` may be a dict or ``K=V`` items,
    ``seeds`` a list or ``"0-4"``. Every check runs before anything is created; a job of that
    name that is still running is refused, one that ended ``preempted``, ``failed`` or ``lost``
    is resumed into its checkpoint dir (``fresh=True`` starts over)."""
    proj = project_dir(project)
    req = make_request(program, **options)
    rows = launch_seeds(req, proj)
    notices = list(rows[0].pop("notices", []))
    handle: Job | JobGroup
    if req.seeds:
        handle = JobGroup.from_rows(rows, proj)
    else:
        handle = Job.just_launched(rows[0], proj)
    handle.notices = notices
    return handle


def find(ref: str | None = None, project: str | os.PathLike[str] | None = None) -> Job | JobGroup:
    """The job or seed group ``ref`` names: a job's id or name (its newest attempt) first, else a
    seed group's name or id; with no ``ref``, the project's newest job. Raises
    :class:`~rgt_jupyter.errors.JobNotFound` when nothing has that name."""
    proj = project_dir(project)
    if ref is None:
        return Job.latest(proj)
    try:
        return Job.from_registry(ref, proj)
    except JobNotFound:
        group = JobGroup.find(ref, proj)
        if group is None:
            raise JobNotFound(
                f"no job or seed group {ref!r} in {proj}: `rgt jobs` lists this project's jobs"
            ) from None
        return group


def jobs(project: str | os.PathLike[str] | None = None, **origin: str | None) -> list[Job]:
    """The project's jobs, oldest first; with ``origin`` (``notebook``, ``cell_id``,
    ``cell_digest``: where a job was launched from), only those launched from exactly there."""
    unknown = sorted(set(origin) - {"notebook", "cell_id", "cell_digest"})
    if unknown:
        raise UsageError(f"jobs() selects by notebook, cell_id and cell_digest, not {unknown}")
    proj = project_dir(project)
    out = []
    for row in Registry(proj).jobs():
        spec = JobSpec.from_row(row)
        found = {"notebook": spec.notebook, "cell_id": spec.cell_id}
        found["cell_digest"] = spec.cell_digest
        if all(found[k] == v for k, v in origin.items()):
            out.append(Job(row, proj))
    return out
