"""The IPython magics: ``%%remote_run``, ``%watch``, ``%pull``, ``%teardown``. Thin: parse, call the API, show.

Settings are traitlets: ``%config RgtMagics.default_profile = "local"`` or ``ipython_config.py``.
"""

from __future__ import annotations

import os
import queue
import sys
import time
from dataclasses import replace
from typing import Any

from IPython.core.completer import (
    CompletionContext,
    SimpleCompletion,
    SimpleMatcherResult,
    context_matcher,
)
from IPython.core.error import UsageError as IPyUsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.display import display
from traitlets import Bool, Enum, Int, Unicode, observe

from .api import Job, JobGroup, Run, RunGroup, find, jobs, submit
from .args import (
    JOB_ARG,
    PULL_ARGS,
    VERIFY_ARGS,
    WATCH_ARGS,
    MagicParser,
    Spec,
    cell_digest,
    completions,
    magic_parser,
    run_options,
)
from .args import RUN_MAGIC as _RUN
from .args import parse_line as _parse_line
from .errors import RemoteTraceback, RgtError, TransportError, UsageError
from .jobs.snapshot import TERMINAL, Snapshot, new_snapshot
from .machines.profiles import available
from .run.phases import phases_to
from .run.teardown import compute_gate
from .run.watch.watcher import watcher
from .store.project import project_dir
from .views.progress import TransferBar
from .views.render import LOOKS, log_before_traceback, snapshot_html, snapshot_text
from .views.restore import restore_bundles
from .views.teardown_view import TeardownText, TeardownView

_RESTORE_ARG: Spec = (
    ("--restore",),
    {
        "action": "store_true",
        "help": "show the job's saved output again (log tail, results.json, figures in $RGT_OUT)",
    },
)
_WATCH = magic_parser(
    "%watch",
    "Show a job's live status (state, progress, log, heartbeat). With no JOB after the kernel "
    "restarted or the notebook was reopened: this notebook's jobs. With --wait the log streams "
    "into the cell, resuming where this notebook last showed it.",
    [*WATCH_ARGS, _RESTORE_ARG],
)
_TEARDOWN = magic_parser(
    "%teardown",
    "The teardown gate of the machine a job ran on: checklist, what the meter-stop verb "
    "destroys, explicit approval.",
    [JOB_ARG],
)
_VERIFY = magic_parser(
    "%verify",
    "Tell a bug from an effect from noise: every VERIFY check on pulled runs, findings "
    "appended to verify/findings.jsonl and shown beside the number.",
    VERIFY_ARGS,
)
_DELIVER = magic_parser(
    "%deliver",
    "Audit what this notebook delivers: typed numbers, figure provenance and pixel gate, "
    "EVIDENCE.json in step, documents reconciled, and the disclosure of every shipped number.",
    [
        (("--notebook",), {"default": None, "help": "the notebook (default: this one, saved)"}),
        (("--docs",), {"nargs": "*", "default": None, "help": "documents to reconcile"}),
    ],
)
_PULL = magic_parser(
    "%pull", "Pull a job's outputs and checkpoints into a verified, immutable run.", PULL_ARGS
)


def notebook_path(shell: Any) -> str | None:
    """The notebook this kernel serves, when the frontend says (jupyter-server's
    ``JPY_SESSION_NAME``, ipykernel's ``__session__``, VS Code's ``__vsc_ipynb_file__``)."""
    ns: dict[str, Any] = getattr(shell, "user_ns", None) or {}
    found = (
        os.environ.get("JPY_SESSION_NAME") or ns.get("__session__") or ns.get("__vsc_ipynb_file__")
    )
    return str(found) if found else None


def cell_id(shell: Any) -> str | None:
    """The id of the cell being run, from the execute request's metadata (JupyterLab, Notebook 7,
    VS Code and nbclient send ``cellId``)."""
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return None
    try:
        parent = kernel.get_parent()
    except Exception:  # noqa: BLE001 - an older kernel without the call: no cell identity
        return None
    found = ((parent or {}).get("metadata") or {}).get("cellId")
    return str(found) if found else None


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
    smoke = Bool(
        None,
        allow_none=True,
        help="Run the smoke run before each launch when --smoke/--no-smoke is not given "
        "(None: the profile's default).",
    ).tag(config=True)
    log_lines = Int(
        40, help="Lines of a finished job's log shown again when its cell is re-run."
    ).tag(config=True)
    job_view = Enum(
        LOOKS,
        default_value="compact",
        help="How much a job's live view shows: 'minimal' (state, bar, rate; failures still "
        "in full), 'compact' (also the loss curve and the newest log lines, details folded) or "
        "'full' (a taller log, details unfolded).",
    ).tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.last_job: str | None = None
        self._job_view_changed({"new": self.job_view})

    @observe("job_view")
    def _job_view_changed(self, change: dict[str, Any]) -> None:
        from .widgets import set_look  # deferred: the views' module, where the magics load

        set_look(str(change["new"]))

    def _find(self, ref: str | None, magic: str = "%watch", why: str = "") -> Job | JobGroup:
        """The job or seed group ``ref`` names; with none, the last one used here, else the
        project's newest job, saying which it chose and why."""
        if ref is None and not why:
            why = (
                "the last job used in this kernel"
                if self.last_job is not None
                else "the project's newest job"
            )
        found = find(ref if ref is not None else self.last_job)
        if ref is None:
            label = found.id if isinstance(found, Job) else f"seed group {found.name}"
            print(f"{magic}: {label} ({why}; name another: {magic} NAME)")
        self.last_job = found.id if isinstance(found, Job) else found.name
        return found

    @no_var_expand
    @line_cell_magic
    def remote_run(self, line: str, cell: str | None = None) -> Job | JobGroup | None:
        """Run this cell as a detached job: ``%%remote_run --name N [--push PATH] ...``.

        See ``%%remote_run --help`` (or ``%remote_run --help``) for every flag.
        """
        args = parse_line(_RUN, line)
        if args is None:
            return None
        if cell is None:
            raise IPyUsageError(
                "%remote_run runs a cell: write `%%remote_run FLAGS` as the cell's first line "
                "and the job's program below it (`%remote_run --help` lists the flags)"
            )
        if not cell.strip():
            raise IPyUsageError(
                "%%remote_run: the cell is empty; write the job's program below the magic line"
            )
        if os.environ.get("RGT_REPRO"):
            raise IPyUsageError(
                "%%remote_run: `rgt repro` rebuilds from the pulled runs and launches nothing; "
                "keep launching cells out of the notebook that is delivered"
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
            where = {
                "notebook": notebook_path(self.shell),
                "cell_id": cell_id(self.shell),
                "cell_digest": cell_digest(args, cell),
            }
            if not args.new and not args.seeds:
                prior = self._rebind(where)
                if prior is not None:
                    return prior
            options = {**run_options(args), "profile": args.profile or self.default_profile}
            if options.get("smoke") is None:
                options["smoke"] = self.smoke
            with phases_to(lambda line: print(f"%%remote_run: {line}", flush=True)):
                launched = submit(
                    cell, label="[remote_run]", line_offset=1, inputs=inputs, **options, **where
                )
            for notice in launched.notices:
                print(notice)
        except RgtError as exc:
            raise _usage(exc) from None
        self.last_job = launched.id if isinstance(launched, Job) else launched.name
        return launched

    def _rebind(self, where: dict[str, str | None]) -> Job | None:
        """This cell's earlier job (same notebook, cell id and text), when it is still queued or
        running (shown instead of a second launch) or finished (its output shown again)."""
        mine = jobs(**where)
        if not mine:
            return None
        job = mine[-1]
        snap = job.snapshot(log_lines=0)
        how = "this cell's job" if where["cell_id"] else "the job of a cell with this same text"
        if not snap.terminal:
            others = [j.id for j in mine[:-1] if j.recorded_state not in TERMINAL]
            if others and not where["cell_id"]:
                print(
                    f"%%remote_run: {len(others) + 1} cells with this same text have jobs still "
                    f"running ({', '.join([*others, job.id])}); the frontend sends no cell id "
                    "to tell them apart: showing the newest."
                )
            print(
                f"%%remote_run: {how} {job.id} is still {snap.state}; showing it "
                "instead of launching a second one (`--new` launches another)."
            )
        elif snap.state == "finished":
            ended = time.strftime("%Y-%m-%d %H:%M", time.localtime(snap.ended_at or time.time()))
            print(
                f"%%remote_run: {how} {job.id} finished at {ended}; its output is "
                "shown again below (`--new` runs the cell again)."
            )
            self._restore(job)
        else:
            return None
        self.last_job = job.id
        return job

    def _restore(self, job: Job) -> None:
        for data, meta in restore_bundles(job, log_lines=self.log_lines):
            display(data, metadata=meta, raw=True)

    def _notebook_jobs(self) -> list[Job]:
        """This notebook's jobs still queued or running, else its newest job (for ``%watch``
        with no argument in a new kernel)."""
        notebook = notebook_path(self.shell)
        if notebook is None:
            return []
        mine = jobs(notebook=notebook)
        live = [j for j in mine if j.recorded_state not in TERMINAL]
        return live or mine[-1:]

    @line_magic
    def watch(self, line: str) -> Job | JobGroup | None:
        """Live status of a job: ``%watch [JOB] [--wait] [--timeout S] [--restore]``."""
        args = parse_line(_WATCH, line)
        if args is None:
            return None
        try:
            if args.job is None and self.last_job is None:
                mine = self._notebook_jobs()
                if len(mine) > 1 and not args.wait:
                    print(f"%watch: {len(mine)} jobs of this notebook are still running:")
                    for job in mine:
                        display(job)
                    return None
                if mine:
                    self.last_job = mine[-1].id
                    found = self._find(None, why="this notebook's job")
                else:
                    found = self._find(None)
            else:
                found = self._find(args.job)
            if isinstance(found, JobGroup):
                if args.wait:
                    found.wait(args.timeout)
                return found
            job = found
            if args.restore:
                self._restore(job)
            if not args.wait:
                return job
            return self._wait(job, args.timeout)
        except RgtError as exc:
            raise _usage(exc) from None

    def _wait(self, job: Job, timeout: float | None) -> Job:
        """Block until the job ends: one status display (updated by the watcher's snapshots)
        and the log streamed into the cell from where this notebook last showed it (the offset
        is stored in the registry after each printed batch, so a new kernel resumes there with
        nothing lost or repeated)."""
        consumer = notebook_path(self.shell) or "kernel"
        start = job.log_offset(consumer)
        if start is None:
            try:
                st = job.transport.stat(f"{job.spec.control_dir}/log")
            except TransportError:  # the host is away: the whole log, once it is back
                st = None
            start = 0 if st is None or st.size <= 1 << 20 else st.size - 65536
        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        watch = watcher()
        key = watch.subscribe(
            job,
            lambda snap: events.put(("snap", snap)),
            on_lines=lambda lines, offset: events.put(("lines", (lines, offset))),
            from_offset=start,
        )
        snap: Snapshot | None = watch.cached(job.id)
        if snap is None:
            try:
                snap = job.snapshot(log_lines=0)
            except TransportError as away:
                # The host is away: wait through it, up to the timeout (the watcher looks again).
                print(f"%watch: cannot reach {job.spec.host} now ({away}); waiting for it")
                snap = as_recorded(job, away)
        handle = display(self._bundle(job, snap), raw=True, display_id=True)
        held: list[str] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                if deadline is not None and time.monotonic() >= deadline:
                    if held:
                        print("\n".join(held))
                    print(
                        f"%watch: stopped waiting after {timeout:g} s; job {job.id} is still "
                        f"{snap.state}. `%watch {job.name} --wait` to keep waiting."
                    )
                    return job
                try:
                    kind, value = events.get(timeout=0.25)
                except queue.Empty:
                    # Ended, and the watcher handed over the whole log (it ends the
                    # subscription then), or it stopped and will hand over nothing more.
                    drained = not watch.subscribed(key) or watch.stopped
                    if snap.terminal and drained and events.empty():
                        break
                    continue
                if kind == "lines":
                    lines, offset = value
                    # A traceback at the end of the log so far is held back: if the job fails
                    # with it, the error raised below shows it once, in the cell's lines; if
                    # more lines come, the job went on and it is printed with them.
                    lines, held = held + lines, []
                    cut = len(log_before_traceback(lines))
                    lines, held = lines[:cut], lines[cut:]
                    if lines:
                        print("\n".join(lines))
                        sys.stdout.flush()
                    job.set_log_offset(consumer, offset)
                    continue
                snap = value
                if handle is not None:
                    handle.update(self._bundle(job, snap), raw=True)
        except KeyboardInterrupt:
            if held:
                print("\n".join(held))
            print(f"%watch: interrupted; the job goes on ({job.id}).")
            return job
        finally:
            watch.unsubscribe(key)
        exc = job.exception() if snap.state == "failed" else None
        if held and exc is None:
            print("\n".join(held))
        if snap.state == "failed":
            if handle is not None:
                # The traceback is shown once: by the error raised below (in the cell's lines).
                handle.update(self._bundle(job, snap, with_traceback=exc is None), raw=True)
            if exc is not None:
                raise exc
        elif handle is not None:
            # The returned Job shows the final state; drop the transient view so it is not doubled.
            handle.update({"text/plain": ""}, raw=True)
        return job

    @staticmethod
    def _bundle(job: Job, snap: Any, with_traceback: bool = True) -> dict[str, str]:
        tb = job.traceback() if snap.state == "failed" and with_traceback else None
        if snap.state == "failed" and not with_traceback:
            snap = replace(snap, log_tail=log_before_traceback(snap.log_tail))
        return {"text/plain": snapshot_text(snap, tb), "text/html": snapshot_html(snap, tb)}

    @line_magic
    def pull(self, line: str) -> Run | RunGroup | None:
        """Pull a finished job into ``runs/<run-id>/``, verified: ``%pull [JOB] [--to DIR]``."""
        args = parse_line(_PULL, line)
        if args is None:
            return None
        try:
            found = self._find(args.job, "%pull")
            with phases_to(lambda line: print(f"%pull: {line}", flush=True)):
                if args.from_bucket:
                    if isinstance(found, JobGroup):
                        raise UsageError("--from-bucket pulls one job: name a member of the group")
                    return found.pull(to=args.to, from_bucket=True)
                if isinstance(found, JobGroup):
                    return found.pull(to=args.to)
                bar = TransferBar(f"pulling {found.name}", notebook=True)
                try:
                    return found.pull(
                        to=args.to,
                        on_progress=bar,
                        on_wait=lambda who: print(
                            f"%pull: another pull of {found.name} runs ({who}); waiting"
                        ),
                    )
                finally:
                    bar.close()
        except RgtError as exc:
            raise _usage(exc) from None

    @line_magic
    def verify(self, line: str) -> Any:
        """Check runs for bugs, effects and noise: ``%verify RUN... [--baseline RUN...]
        [--metric M] [--direction max|min]``; returns a VerifyReport."""
        args = parse_line(_VERIFY, line)
        if args is None:
            return None
        from .verify.report import verify_args  # deferred: scipy and the checks, only for %verify

        try:
            return verify_args(args)
        except RgtError as exc:
            raise _usage(exc) from None

    @line_magic
    def deliver(self, line: str) -> Any:
        """Audit this notebook's delivery (typed numbers, figures, evidence, disclosures):
        ``%deliver [--notebook PATH] [--docs FILE...]``; returns a DeliveryReport."""
        args = parse_line(_DELIVER, line)
        if args is None:
            return None
        from .deliver.report import deliver  # deferred: nbformat and the audit, only for %deliver

        notebook = args.notebook or notebook_path(self.shell)
        if notebook is None:
            raise IPyUsageError(
                "%deliver: this kernel does not know its notebook; name it: %deliver --notebook "
                "PATH (save the notebook first: the saved file is what is audited)"
            )
        try:
            return deliver(notebook, docs=args.docs)
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
            found = self._find(args.job, "%teardown")
            # A seed group runs on one machine: the gate of its first member's is the group's.
            job = found.jobs[0] if isinstance(found, JobGroup) else found
            with phases_to(lambda line: print(f"%teardown: {line}", flush=True)):
                try:
                    return TeardownView(job._row, job.project)
                except ImportError:
                    name = found.name if isinstance(found, JobGroup) else job.name
                    return TeardownText(compute_gate(job._row, job.project), name)
        except RgtError as exc:
            raise _usage(exc) from None


def as_recorded(job: Job, exc: BaseException) -> Snapshot:
    """What is known of a job whose host cannot be reached now: its recorded state."""
    snap = new_snapshot(job.spec)
    snap.state = job.recorded_state
    snap.diagnosis = f"cannot observe the job now ({exc}); last recorded {job.recorded_state}"
    return snap


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext rgt_jupyter``: register the magics and the live display of jobs."""
    from .widgets import job_bundle, show_job  # deferred: ipywidgets, where the magics load

    ipython.register_magics(RgtMagics)
    _register_completers(ipython)
    formatter = ipython.display_formatter
    # A job shows itself (with a display id, kept true as it runs); the bundle is the fallback.
    formatter.ipython_display_formatter.for_type(Job, show_job)
    formatter.mimebundle_formatter.for_type(Job, job_bundle)


def _job_names() -> list[str]:
    names: set[str] = set()
    try:
        for job in jobs():
            names.add(job.name)
            group = job.spec.group or {}
            if group.get("name"):
                names.add(group["name"])
    except (RgtError, OSError):  # no project yet, or a damaged registry: nothing to offer
        return []
    return sorted(names)


def _profile_names() -> list[str]:
    try:
        return sorted(available(project_dir()))
    except (RgtError, OSError):
        return []


_COMPLETED = {
    "%%remote_run": _RUN,
    "%remote_run": _RUN,
    "%watch": _WATCH,
    "%pull": _PULL,
    "%teardown": _TEARDOWN,
    "%verify": _VERIFY,
    "%deliver": _DELIVER,
}


@context_matcher()
def complete_magic_line(context: CompletionContext) -> SimpleMatcherResult:
    """Tab completion on a magic's line: its flags, job and group names, profile names. What it
    offers stands alone (nothing of Python's is mixed in); elsewhere it offers nothing."""
    line = context.text_until_cursor.split("\n")[-1]
    magic = line.split(None, 1)[0] if line.strip() else ""
    parser = _COMPLETED.get(magic)
    token = context.token
    found: list[str] = []
    if parser is not None:
        before = line[len(magic) : len(line) - len(token)]
        values = {"job": _job_names, "profile": _profile_names}
        found = completions(parser, before, token, values)
    return {
        "completions": [SimpleCompletion(text, type="magic argument") for text in found],
        "suppress": bool(found),
        "ordered": True,
        "matched_fragment": token,
        "do_not_suppress": set(),
    }


def _register_completers(ipython: Any) -> None:
    """Tab completion of the magics' flags, job and group names and profile names."""
    matchers = ipython.Completer.custom_matchers
    if complete_magic_line not in matchers:
        matchers.append(complete_magic_line)
