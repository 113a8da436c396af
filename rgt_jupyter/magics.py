"""The IPython magics: ``%%remote_run``, ``%watch``, ``%pull``, ``%teardown``. Thin: parse, call the API, show.

Settings are traitlets: ``%config RgtMagics.default_profile = "local"`` or ``ipython_config.py``.
"""

from __future__ import annotations

import time
from typing import Any

from IPython.core.error import UsageError as IPyUsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, no_var_expand
from IPython.display import display
from traitlets import Unicode

from .api import Job, Run
from .args import INPUTS_ARG, JOB_ARG, PULL_ARGS, RUN_ARGS, WATCH_ARGS, MagicParser, magic_parser
from .args import parse_line as _parse_line
from .errors import RemoteTraceback, RgtError
from .group import JobGroup, RunGroup
from .launch import request_from_args
from .launch_group import launch_seeds
from .project import project_dir
from .render import snapshot_html, snapshot_text, transfer_text

_RUN = magic_parser(
    "%%remote_run",
    "Run the cell as a detached, checkpoint-durable job; returns a Job at once.",
    [*RUN_ARGS, INPUTS_ARG],
)
_WATCH = magic_parser(
    "%watch", "Show a job's live status (state, progress, log, heartbeat).", WATCH_ARGS
)
_TEARDOWN = magic_parser(
    "%teardown",
    "The teardown gate of the machine a job ran on: checklist, what the meter-stop verb "
    "destroys, explicit approval.",
    [JOB_ARG],
)
_PULL = magic_parser(
    "%pull", "Pull a job's outputs and checkpoints into a verified, immutable run.", PULL_ARGS
)


def _usage(exc: RgtError) -> Exception:
    """Our errors become IPython UsageErrors (a message, no traceback), except remote ones."""
    if isinstance(exc, RemoteTraceback):
        return exc
    return IPyUsageError(str(exc))


def parse_line(parser: MagicParser, line: str) -> Any:
    """Parse a magic's line; mistakes raise IPython's UsageError (a message, no traceback)."""
    try:
        return _parse_line(parser, line)
    except RgtError as exc:
        raise _usage(exc) from None


@magics_class
class RgtMagics(Magics):
    """rgt-jupyter's magics."""

    default_profile = Unicode("local", help="Profile used when --profile is not given.").tag(
        config=True
    )

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.last_job: str | None = None

    def _job(self, ref: str | None) -> Job:
        if ref is None and self.last_job is not None:
            ref = self.last_job
        job = Job.latest() if ref is None else Job.from_registry(ref)
        self.last_job = job.id
        return job

    def _group(self, ref: str | None) -> JobGroup | None:
        """The seed group ``ref`` names (or the last one launched here), if it names one."""
        ref = ref if ref is not None else self.last_job
        if ref is None:
            return None
        try:
            Job.from_registry(ref)
            return None  # a job's own name or id wins
        except RgtError:
            return JobGroup.find(ref)

    @no_var_expand
    @cell_magic
    def remote_run(self, line: str, cell: str) -> Job | JobGroup | None:
        """Run this cell as a detached job: ``%%remote_run --name N [--push PATH] ...``.

        See ``%%remote_run --help`` for every flag.
        """
        args = parse_line(_RUN, line)
        if args is None:
            return None
        if not cell.strip():
            raise IPyUsageError(
                "%%remote_run: the cell is empty; write the job's program below the magic line"
            )
        try:
            inputs: dict[str, Any] = {}
            user_ns: dict[str, Any] = self.shell.user_ns if self.shell is not None else {}
            for var in (v.strip() for v in args.inputs.split(",")):
                if not var:
                    continue
                if var not in user_ns:
                    raise IPyUsageError(f"--inputs {var}: no variable {var!r} in the notebook")
                inputs[var] = user_ns[var]
            req = request_from_args(
                args,
                program=cell,
                name=args.name,
                profile=args.profile or self.default_profile,
                label="[remote_run]",
                line_offset=1,
                inputs=inputs,
            )
            project = project_dir()
            rows = launch_seeds(req, project)
            for line in rows[0].pop("notices", []):
                print(line)
            if req.seeds:
                group = JobGroup.from_rows(rows, project)
                self.last_job = group.name
                return group
            job = Job.just_launched(rows[0], project)
        except RgtError as exc:
            raise _usage(exc) from None
        self.last_job = job.id
        return job

    @line_magic
    def watch(self, line: str) -> Job | JobGroup | None:
        """Live status of a job: ``%watch [JOB] [--wait] [--timeout S]``."""
        args = parse_line(_WATCH, line)
        if args is None:
            return None
        try:
            group = self._group(args.job)
            if group is not None:
                if args.wait:
                    group.wait(args.timeout)
                return group
            job = self._job(args.job)
            if not args.wait:
                return job
            return self._wait(job, args.timeout)
        except RgtError as exc:
            raise _usage(exc) from None

    def _wait(self, job: Job, timeout: float | None) -> Job:
        """Block until the job ends, updating one display at most 4 times a second."""
        snap = job.snapshot()
        handle = display(self._bundle(job, snap), raw=True, display_id=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        shown = snap
        delay = 0.25
        try:
            while not snap.terminal:
                if deadline is not None and time.monotonic() >= deadline:
                    print(
                        f"%watch: stopped waiting after {timeout:g} s; job {job.id} is still "
                        f"{snap.state}. `%watch {job.name} --wait` to keep waiting."
                    )
                    return job
                time.sleep(delay)
                delay = min(delay * 1.25, 2.0)
                snap = job.snapshot()
                if (snap.state, snap.progress, snap.log_tail) != (
                    shown.state,
                    shown.progress,
                    shown.log_tail,
                ):
                    if handle is not None:
                        handle.update(self._bundle(job, snap), raw=True)
                    shown = snap
                    delay = 0.25
        except KeyboardInterrupt:
            print(f"%watch: interrupted; the job goes on ({job.id}).")
            return job
        if snap.state == "failed":
            if handle is not None:
                handle.update(self._bundle(job, snap), raw=True)
            exc = job.exception()
            if exc is not None:
                raise exc
        elif handle is not None:
            # The returned Job shows the final state; drop the transient view so it is not doubled.
            handle.update({"text/plain": ""}, raw=True)
        return job

    @staticmethod
    def _bundle(job: Job, snap: Any) -> dict[str, str]:
        tb = job.traceback() if snap.state == "failed" else None
        return {"text/plain": snapshot_text(snap, tb), "text/html": snapshot_html(snap, tb)}

    @line_magic
    def pull(self, line: str) -> Run | RunGroup | None:
        """Pull a finished job into ``runs/<run-id>/``, verified: ``%pull [JOB] [--to DIR]``."""
        args = parse_line(_PULL, line)
        if args is None:
            return None
        try:
            group = self._group(args.job)
            if group is not None:
                return group.pull(to=args.to)
            job = self._job(args.job)
            return job.pull(to=args.to, on_progress=_ProgressLine())
        except RgtError as exc:
            raise _usage(exc) from None

    @line_magic
    def teardown(self, line: str) -> Any:
        """The teardown approval widget: ``%teardown [JOB]``. Approve is enabled only when the
        gate passes; overriding needs the instance id typed."""
        args = parse_line(_TEARDOWN, line)
        if args is None:
            return None
        try:
            job = self._job(args.job)
            if job.profile == "local" and job.spec["transport"] == "local":
                raise RgtError("the local profile has no meter to stop: this machine is yours")
            try:
                from .teardown_view import TeardownView

                return TeardownView(job._row, job.project)
            except ImportError:
                from .teardown import compute_gate
                from .teardown_view import TeardownText

                return TeardownText(compute_gate(job._row, job.project), job.name)
        except RgtError as exc:
            raise _usage(exc) from None


class _ProgressLine:
    """Shows a pull's progress in one display, updated at most 4 times a second."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.shown = 0.0
        self.handle: Any = None

    def __call__(self, done: int, total: int, path: str) -> None:
        now = time.monotonic()
        if now - self.shown < 0.25 and done < total:
            return
        self.shown = now
        text = transfer_text(done, total, path, now - self.start)
        if self.handle is None:
            self.handle = display({"text/plain": text}, raw=True, display_id=True)
        else:
            self.handle.update({"text/plain": text}, raw=True)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext rgt_jupyter``: register the magics and the live display of jobs."""
    from .widgets import job_bundle

    ipython.register_magics(RgtMagics)
    ipython.display_formatter.mimebundle_formatter.for_type(Job, job_bundle)
