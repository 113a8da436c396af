"""Bad inputs: hostile logs, hostile job records and malformed notebooks, each fed for real to
every part that reads it. Each gets a clear error or is rendered harmless before any harm: no
crash, nothing unescaped reaching a view, bounded memory and time, no job believed verified or
finished on a record's word, no teardown gate opened, nothing written beside a bad notebook, and
a sentinel outside every destination untouched."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError as IPyUsageError
from IPython.utils.capture import capture_output

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.cli import main as rgt_main
from rgt_jupyter.errors import UsageError
from rgt_jupyter.jobs.records import MAX_LINE
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.teardown import compute_gate, decide
from rgt_jupyter.run.watch.watcher import Watcher
from rgt_jupyter.store.registry import Registry
from rgt_jupyter.views.render import snapshot_html, snapshot_text
from rgt_jupyter.widgets import StatusView

from ..conftest import pid_alive, rgt, wait_for
from ..machines import RENTED
from .evidence import Evidence

# -- what every view must hold to ----------------------------------------------------------

#: Control characters (tab and newline aside) and the escape that starts terminal sequences.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: The tags the views write themselves; any other tag in their HTML came from a job.
OWN_TAGS = {"div", "b", "span", "pre", "i", "progress", "img", "details", "summary"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)


def assert_safe_text(text: str, where: str) -> None:
    """No control character or escape reaches a text view."""
    found = CONTROL.findall(text)
    assert not found, f"{where}: control characters {sorted(set(found))!r} reached the view"


def assert_safe_html(html: str, where: str) -> None:
    """Only the views' own tags, no control character, nothing of a job's markup unescaped."""
    assert_safe_text(html, where)
    parser = _Tags()
    parser.feed(html)
    assert parser.tags <= OWN_TAGS, f"{where}: tags from a job's text: {parser.tags - OWN_TAGS}"
    assert "<script" not in html and "<img" not in html, where


def _run(ip: Any, source: str) -> tuple[Any, str, list[str]]:
    """Run a cell: its result, its text (printed and displayed) and its displayed HTML."""
    with capture_output() as out:
        result = ip.run_cell(source)
    texts = [str(o.data.get("text/plain", "")) for o in out.outputs]
    htmls = [str(o.data["text/html"]) for o in out.outputs if "text/html" in o.data]
    return result, "\n".join([out.stdout, out.stderr, *texts]), htmls


def _mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} in /proc/self/status")


def _sentinel(tmp_path: Path, evidence: Evidence) -> Path:
    """A file outside every destination, kept as evidence (it must survive byte for byte)."""
    folder = tmp_path / "outside"
    folder.mkdir(exist_ok=True)
    sentinel = folder / "sentinel.bin"
    sentinel.write_bytes(b"sentinel " + os.urandom(64))
    evidence.keep(sentinel)
    return sentinel


# -- B-logs ----------------------------------------------------------------------------------

_WAIT = "import sys, time\ntime.sleep(1.0)\nw = sys.stdout.buffer.write\n"
LOGS = {
    "non-utf8": _WAIT
    + (
        "w(b'\\xff\\xfe plain \\x80\\x81 after\\n')\n"
        "w(b'lone surrogate \\xed\\xa0\\x80 overlong \\xc0\\xaf cut \\xe2\\x82\\n')\n"
        "w(b'C1 csi \\xc2\\x9b31m red? \\xc2\\x9d0;title\\x07 osc\\n')\n"
        "w(b'split \\xf0\\x9f'); sys.stdout.flush(); time.sleep(0.3)\n"
        "w(b'\\x98\\x80 emoji\\n')\n"
        "w(b'end-of-log\\n')\n"
    ),
    "ansi": _WAIT
    + (
        "w(b'\\x1b[31mred\\x1b[0m \\x1b[2J\\x1b[H\\x1b[10;5Hcursor \\x1b[?25l\\x1b7\\x1b8\\n')\n"
        "w(b'\\x1b]8;;https://evil.example/\\x1b\\\\click\\x1b]8;;\\x1b\\\\ link\\n')\n"
        "w(b'\\x1b]52;c;cm0gLXJmIH4=\\x07clipboard\\n')\n"
        "w(b'\\x1b]0;pwned title\\x07\\x1b]2;t2\\x1b\\\\title\\n')\n"
        "w(b'\\x1bP1$tdcs\\x1b\\\\ dcs \\x1b]52;c;unterminated\\n')\n"
        "w(b'<script>alert(1)</script> <img src=x onerror=alert(1)> & \\x00nul \\x07bel\\n')\n"
        "w('\\u202eevil bidi\\u202c \\x08\\x7f\\n'.encode())\n"
        "w(b'end-of-log\\n')\n"
    ),
    "carriage-returns": _WAIT
    + (
        "for i in range(100000):\n"
        "    w(b'\\r%3d%%|%-20s|' % (i * 100 // 99999, b'#' * (i * 20 // 99999)))\n"
        "    if i % 10000 == 0: sys.stdout.flush()\n"
        "w(b'\\nend-of-log\\n')\n"
    ),
    # Written at once, and 4 MB of ordinary lines after it, once the agent has recorded its
    # environment: the agent ends with the job, before the watcher has read the log.
    "100MB-line": _WAIT
    + (
        "import os\n"
        "env = os.path.join(os.environ['RGT_CONTROL_DIR'], 'env.json')\n"
        "while not os.path.exists(env): time.sleep(0.05)\n"
        "w(b'y' * (100 << 20) + b'\\n')\n"
        "w(b''.join(b'line %06d after the long one .............\\n' % i for i in range(80000)))\n"
        "w(b'end-of-log\\n')\n"
    ),
}
# The same from a job on an SSH host: each look is a round trip there, so the job has ended
# long before its log is read.
LOGS["100MB-line-ssh"] = LOGS["100MB-line"]


@pytest.mark.fault(
    "B-logs",
    asserts="through %%remote_run's view, %watch --wait streaming, job.snapshot(), the text and "
    "HTML renders, the live widget, %watch --restore and `rgt watch`, a job's non-UTF-8, "
    "ANSI-laden (colours, cursor moves, OSC 8/52, titles), 100k-carriage-return and 100 MB "
    "single-line logs raise nothing, reach no view with a control byte or unescaped markup, "
    "are shown capped and to their last line, in bounded time and under 64 MiB of peak memory",
    mutation=[
        (
            "rgt_jupyter/jobs/records.py",
            'return CONTROL_RE.sub("", ANSI_RE.sub("", text))',
            "return text",
        ),
        (
            "rgt_jupyter/run/watch/reads.py",
            "                self._extend(data[pos:])\n                return out",
            "                self.partial += data[pos:]\n                return out",
        ),
        (
            "rgt_jupyter/magics.py",
            "drained = not watch.subscribed(key) or watch.stopped",
            "drained = True",
        ),
    ],
)
@pytest.mark.parametrize("kind", list(LOGS))
def test_hostile_logs_reach_every_view_escaped_capped_and_bounded(
    ip: Any,
    project: Path,
    tmp_path: Path,
    kind: str,
    evidence: Evidence,
    request: pytest.FixtureRequest,
) -> None:
    """A job writes a hostile log; every view of it is read while it is written and after.

    Protection: rgt_jupyter/jobs/records.py ``clean_text``: ``CONTROL_RE.sub("", ANSI_RE.sub("",
    text))`` drops every terminal sequence and control character (removed, the escapes reach
    the views); rgt_jupyter/run/watch/reads.py ``Lines.feed``/``_extend`` hold a line to
    ``LINE_CAP`` bytes of its last carriage-return segment (removed, the 100 MB line is held
    whole, and memory grows past the bound); rgt_jupyter/magics.py ``_wait``: ``drained``
    waits for the watcher to hand over the whole log (removed, ``--wait`` resuming from a
    stored offset returns at the end state before the log is streamed to its last line). Each
    removed, the case fails.
    """
    sentinel = _sentinel(tmp_path, evidence)
    name = f"log-{kind}"
    where = ""
    if kind.endswith("-ssh"):
        request.getfixturevalue("box")
        where = " --profile box --host testbox"
    result, shown, htmls = _run(ip, f"%%remote_run --name {name}{where}\n{LOGS[kind]}")
    assert result.error_in_exec is None, result.error_in_exec
    job = result.result
    assert isinstance(job, Job)

    Path("/proc/self/clear_refs").write_text("5")  # the peak is measured from here
    base = _mib("VmRSS")
    result, streamed, waited_html = _run(ip, f"%watch {name} --wait --timeout 300")
    growth = _mib("VmHWM") - base
    assert result.error_in_exec is None, result.error_in_exec
    assert job.state == "finished", job.log()[-2000:]
    assert growth < 64, f"peak memory grew {growth:.0f} MiB while watching a {kind} log"
    assert "end-of-log" in streamed, "the log was not streamed to its last line"
    # A notebook that last showed this log at its start (a new kernel, a reopened notebook)
    # streams all of it again, from the file, once the job has ended.
    Registry(project).set_log_offset(job.id, "kernel", 0)
    Path("/proc/self/clear_refs").write_text("5")
    base = _mib("VmRSS")
    result, again, _ = _run(ip, f"%watch {name} --wait --timeout 120")
    growth = max(growth, _mib("VmHWM") - base)
    assert result.error_in_exec is None, result.error_in_exec
    assert growth < 64, f"peak memory grew {growth:.0f} MiB while watching a {kind} log"
    streamed_lines = again.splitlines()  # the log's own lines (the status block indents its)
    assert streamed_lines.count("end-of-log") == 1, "the log was not streamed to its last line"
    streamed += again

    snap = job.snapshot(log_lines=40)
    view = StatusView(job)
    view.update(snap)
    restored, restored_text, restored_html = _run(ip, f"%watch {name} --restore")
    assert restored.error_in_exec is None, restored.error_in_exec
    cli = rgt("watch", name, cwd=project)
    texts = {
        "the launch's view": shown,
        "%watch --wait": streamed,
        "snapshot_text": snapshot_text(snap),
        "%watch --restore": restored_text,
        "rgt watch": cli.stdout + cli.stderr,
    }
    htmls = {
        "the launch's view": "".join(htmls),
        "%watch --wait": "".join(waited_html),
        "snapshot_html": snapshot_html(snap),
        "the widget": view.body.value + view.state.value,
        "%watch --restore": "".join(restored_html),
    }
    for where, text in texts.items():
        assert_safe_text(text, where)
        longest = max(map(len, text.splitlines()), default=0)
        assert longest <= 4 + MAX_LINE + 40, f"{where}: a line of {longest} characters"
    for where, html in htmls.items():
        assert_safe_html(html, where)
    assert snap.log_tail[-1] == "end-of-log" and "end-of-log" in texts["rgt watch"]

    if kind == "ansi":
        assert "red cursor" in streamed and "click link" in streamed
        assert "clipboard" in streamed and "title" in streamed
        assert "cm0gLXJmIH4" not in streamed + texts["rgt watch"]  # the clipboard payload
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in htmls["snapshot_html"]
    elif kind == "non-utf8":
        assert "\ufffd plain" in streamed and "\U0001f600 emoji" in streamed
    elif kind == "carriage-returns":
        shown_bars = [line for line in streamed.splitlines() if "%|" in line]
        assert shown_bars and all(line.count("%|") == 1 for line in shown_bars)
        assert "100%|####################|" in streamed
    else:  # the 100 MB line, capped where it is read
        assert "y" * MAX_LINE + " ... [" in streamed and "more bytes]" in streamed
        assert "y" * (MAX_LINE + 1) not in streamed
    assert evidence.account(sentinel.parent) == 0


# -- B-status --------------------------------------------------------------------------------


#: Reports progress until ``quiet`` exists, runs until ``go`` exists, then writes its results.
HOLD = """\
import os, time
import rgt_jupyter.job as job
base = os.path.dirname(os.environ["RGT_OUT"])
step = 0
while not os.path.exists(os.path.join(base, "go")):
    step += 1
    if not os.path.exists(os.path.join(base, "quiet")):
        job.progress(step, 1000, loss=1.0 / step)
    time.sleep(0.1)
job.save_results({"steps": step})
"""

#: Ends at once, leaving an output but no results.json.
NO_RESULTS = """\
import os
import rgt_jupyter.job as job
job.progress(1, 1)
with open(os.path.join(os.environ["RGT_OUT"], "preds.csv"), "w") as fh:
    fh.write("id,pred\\n1,0\\n")
"""


def _start_ticks(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rindex(")") + 2 :].split()[19])


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _put(path: Path, content: bytes | dict[str, Any] | list[Any]) -> None:
    """Replace a record the way a writer would (a temporary file renamed over it)."""
    data = content if isinstance(content, bytes) else json.dumps(content).encode()
    tmp = path.with_name(f".{path.name}.hostile")
    tmp.write_bytes(data)
    tmp.replace(path)


def _rented_job(project: Path, program: str, name: str) -> Job:
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / "rented.toml").write_text(RENTED)
    return submit(LaunchRequest(program=program, name=name, profile="rented"), project)


def _looks(job: Job, project: Path, watcher: Watcher) -> dict[str, Any]:
    """The job as every observer shows it now: a one-off look, the watcher's, the renders, the
    CLI (``rgt watch``, ``rgt jobs``)."""
    snap = job.snapshot()
    ticks = watcher.ticks
    watcher.subscribe(job, lambda snap: None)  # an ended job is followed anew, once
    wait_for(
        lambda: watcher.ticks >= ticks + 2 or (watcher.ticks > ticks and watcher.idle),
        30,
        "a new look of the watcher",
    )
    seen = watcher.cached(job.id)
    assert watcher.error is None, watcher.error
    assert seen is not None
    watch = rgt("watch", job.name, cwd=project, check=False)
    jobs = rgt("jobs", cwd=project, check=False)
    # `rgt watch` exits 1 for a job that ended other than finished, with or without --wait.
    shown = watch.stdout.split("[", 1)[-1].split("]", 1)[0]
    expected = 1 if shown in ("failed", "preempted", "lost") else 0
    for proc, code in ((watch, expected), (jobs, 0)):
        assert proc.returncode == code and "Traceback" not in proc.stdout + proc.stderr, (
            proc.stdout + proc.stderr
        )
    row = next(line for line in jobs.stdout.splitlines() if line.startswith(job.id))
    texts = {
        "snapshot_text": snapshot_text(snap),
        "the watcher's text": snapshot_text(seen),
        "rgt watch": watch.stdout + watch.stderr,
        "rgt jobs": jobs.stdout + jobs.stderr,
    }
    for where, text in texts.items():
        assert_safe_text(text, where)
    assert_safe_html(snapshot_html(snap), "snapshot_html")
    assert_safe_html(snapshot_html(seen), "the watcher's html")
    return {"snap": snap, "seen": seen, "watch": watch.stdout, "jobs_row": row.split()}


def _gate_refuses(job: Job, project: Path, evidence: Evidence) -> None:
    gate = compute_gate(job._row, project)
    evidence.teardown(reachable=gate.passed, gate_should_pass=False)
    assert not gate.passed, gate.text()
    with pytest.raises(UsageError, match="the gate refuses"):
        decide(gate, "approve", project)


def _status_variants(real: dict[str, Any], sleeper: int) -> dict[str, tuple[Any, str]]:
    """Hostile ``status.json`` contents, each with what the diagnosis must say of it."""
    unreadable = "cannot read status.json"
    me = os.getpid()
    return {
        "truncated": (b'{"agent_pid": 12', unreadable),
        "not an object": ([1, 2, 3], unreadable),
        "wrong types": (
            {"agent_pid": str(real["agent_pid"]), "started_at": "yesterday", "boot_id": 5},
            unreadable,
        ),
        "huge numbers": (
            {"agent_pid": 10**30, "agent_start_ticks": 1e308, "started_at": 1e308},
            unreadable,
        ),
        "negative pid": ({"agent_pid": -1, "agent_start_ticks": 0}, unreadable),
        "zero pid": ({**real, "agent_pid": 0}, unreadable),
        "the test runner's pid, claiming verified": (
            {**real, "agent_pid": me, "agent_start_ticks": _start_ticks(me), "state": "verified"}
            | {"verified": True, "boot_id": _boot_id()},
            "not this job's agent",
        ),
        "an unrelated process, claiming finished": (
            {**real, "agent_pid": sleeper, "agent_start_ticks": _start_ticks(sleeper)}
            | {"state": "finished", "exit_code": 0},
            "not this job's agent",
        ),
        "markup and escapes": (
            {**real, "state": "<script>alert(1)</script>", "verified": True}
            | {"host": "\x1b]52;c;cm0gLXJmIH4=\x07", "restart": "\x1b[2J"},
            "",
        ),
        "nested too deeply": (b"[" * 100_000, unreadable),
        "larger than 1 MiB": (b" " * (1 << 20) + b"{}", unreadable),
    }


EXIT_VARIANTS: dict[str, Any] = {
    "finished and verified": {"state": "finished", "exit_code": 0, "verified": True},
    "verified": {"state": "verified", "verified": True},
    "markup": {"state": "<script>alert(1)</script>", "exit_code": "<b>0</b>"},
    "truncated": b'{"state": "finis',
}

PROGRESS_VARIANTS: dict[str, bytes] = {
    "nested too deeply": b"[" * 100_000,
    "step as text": b'{"step": "abc", "total": 10}',
    "huge numbers": b'{"step": 1e308, "total": -5, "t": 1e308}\n{"step": 1' + b"0" * 400 + b"}",
    "not finite": b'{"step": NaN, "total": Infinity, "loss": -Infinity}',
    "a 1 MiB line": b'{"step": 1, "junk": "' + b"x" * (1 << 20) + b'"}',
    "not an object": b"[1, 2]",
    "markup and escapes": json.dumps(
        {
            "step": 7,
            "total": 10,
            "loss": "\x1b]52;c;cm0gLXJmIH4=\x07",
            "<img src=x onerror=alert(1)>": "<script>alert(1)</script>",
        }
    ).encode(),
}


@pytest.mark.fault(
    "B-status",
    asserts="with hostile status.json (truncated, wrong types, huge numbers, negative or zero "
    "pids, the test runner's or an unrelated process's pid, claims of verified or finished, "
    "markup), exit.json (finished or verified claimed while the job runs, markup, truncated) or "
    "progress.jsonl (deep nesting, text steps, huge and non-finite numbers, a 1 MiB line, "
    "markup) in a running job's control dir, job.snapshot(), the watcher, the renders, `rgt "
    "watch` and `rgt jobs` never crash, show the job running from its agent's process (saying "
    "which record cannot be read), never finished or verified, escape everything, signal no "
    "process, and the teardown gate stays shut until the real end and a verified pull",
    mutation=[
        (
            "rgt_jupyter/remote/probe.py",
            'return "agent" if name.encode() in args else "other"',
            'return "agent"',
        ),
        (
            "rgt_jupyter/jobs/observe.py",
            "    if alive:\n        # While the agent runs",
            '    if alive and _json(transport, f"{control}/exit.json") is None:\n'
            "        # While the agent runs",
        ),
        (
            "rgt_jupyter/jobs/records.py",
            'if whole(rec.get("agent_pid"), PID_MAX) in (None, 0):',
            "if False:",
        ),
        (
            "rgt_jupyter/jobs/records.py",
            "text = clean_text(value if isinstance(value, str) else repr(value))",
            "text = value if isinstance(value, str) else repr(value)",
        ),
    ],
)
@pytest.mark.parametrize("record", ["status.json", "exit.json", "progress.jsonl"])
def test_hostile_records_of_a_running_job_are_not_believed(
    project: Path, tmp_path: Path, record: str, evidence: Evidence
) -> None:
    """A running job's records are replaced by hostile ones, one after another; every observer
    looks at each.

    Protection: rgt_jupyter/remote/probe.py ``process_kind`` (every observer's ``process_of``): a pid is
    the agent only when its command line names the job's control dir (removed, a record naming
    the test runner is believed and no note says it is not the agent); rgt_jupyter/jobs/observe.py
    ``observe``: while the agent runs the job runs, whatever exit.json claims (removed, a forged
    exit record makes a running job finished and opens the gate's first check);
    ``status_problem``: a pid that is not a process id makes status.json unreadable, said so
    (removed, no diagnosis says so); rgt_jupyter/jobs/records.py ``short_text`` cleans every value of a
    progress record (removed, a metric's escape reaches the text). Each removed, the case fails.
    """
    sentinel = _sentinel(tmp_path, evidence)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    job = _rented_job(project, HOLD, f"hostile-{record.split('.')[0]}")
    control = Path(job.spec.control_dir)
    base = Path(job.spec.out_dir).parent
    watcher = Watcher(min_interval=0.1, max_interval=0.2)
    try:
        wait_for(lambda: job.snapshot().state == "running" and job.snapshot().progress, 30)
        real_status = (control / "status.json").read_bytes()
        real = json.loads(real_status)
        if record == "status.json":
            variants = _status_variants(real, sleeper.pid)
        elif record == "exit.json":
            variants = {k: (v, "") for k, v in EXIT_VARIANTS.items()}
        else:
            (base / "quiet").write_text("")
            time.sleep(0.5)
            variants = {k: (v, "") for k, v in PROGRESS_VARIANTS.items()}
        for label, (content, said) in variants.items():
            if record == "progress.jsonl":
                with (control / "progress.jsonl").open("ab") as fh:
                    fh.write(content + b"\n")
            else:
                _put(control / record, content)
            looks = _looks(job, project, watcher)
            for snap in (looks["snap"], looks["seen"]):
                assert snap.state == "running", (label, snap.state, snap.diagnosis)
                assert said in (snap.diagnosis or ""), (label, snap.diagnosis)
                assert snap.progress is None or isinstance(snap.progress.get("step"), int | float)
            assert "[running]" in looks["watch"] and "running" in looks["jobs_row"], label
            assert Registry(project).get(job.id)["state"] == "running", label
            if label == "markup and escapes" and record == "progress.jsonl":
                assert looks["snap"].progress and looks["snap"].progress["step"] == 7
            _gate_refuses(job, project, evidence)
        assert pid_alive(sleeper.pid) and pid_alive(os.getpid())
    finally:
        _put(control / "status.json", real_status)
        (control / "exit.json").unlink(missing_ok=True)
        (base / "go").write_text("")
        assert job.wait(60) == "finished", job.log()[-2000:]
        watcher.stop()
        sleeper.kill()
    # Only the real end and a verified pull open the gate.
    run = job.pull()
    assert run.verified
    gate = compute_gate(job._row, project)
    evidence.teardown(reachable=gate.passed, gate_should_pass=True)
    assert gate.passed, gate.text()
    assert sleeper.wait(10) == -signal.SIGKILL  # it lived until the test ended it
    assert evidence.account(sentinel.parent) == 0


@pytest.mark.fault(
    "B-status",
    asserts="an ended job that wrote no results, whose exit.json then claims 'verified', holds "
    "markup or is truncated, or whose status.json names the test runner with exit.json gone, is "
    "shown lost (its outcome unknown, which record cannot be read said), never running, "
    "finished or verified, by job.snapshot(), the watcher, the renders and the CLI; the gate "
    "stays shut (never pulled) and opens only after a verified pull of the real records",
    mutation=[
        (
            "rgt_jupyter/remote/probe.py",
            'return "agent" if name.encode() in args else "other"',
            'return "agent"',
        ),
        (
            "rgt_jupyter/jobs/records.py",
            "if not isinstance(state, str) or state not in EXIT_STATES:",
            "if False:",
        ),
    ],
)
def test_hostile_records_of_an_ended_job_are_not_believed(
    project: Path, tmp_path: Path, evidence: Evidence
) -> None:
    """The records of a job that ended (its agent gone) are replaced by hostile ones.

    Protection: rgt_jupyter/jobs/records.py ``exit_problem``: an exit record whose state the agent
    never writes is no exit record (removed, a job whose exit.json says 'verified' is shown
    queued, not lost); rgt_jupyter/remote/probe.py ``process_kind``: the test runner's pid in
    status.json is not the agent (removed, the ended job is shown running for as long as the
    runner lives). Each removed, the case fails.
    """
    sentinel = _sentinel(tmp_path, evidence)
    job = _rented_job(project, NO_RESULTS, "ended")
    assert job.wait(60) == "finished", job.log()
    control = Path(job.spec.control_dir)
    real_exit = (control / "exit.json").read_bytes()
    real_status = json.loads((control / "status.json").read_bytes())
    me = os.getpid()
    variants: dict[str, tuple[dict[str, Any], str, str]] = {
        "exit.json claims verified": (
            {"exit.json": {"state": "verified", "verified": True, "exit_code": 0}},
            "lost",
            "cannot read exit.json",
        ),
        "exit.json holds markup": (
            {"exit.json": {"state": "<script>alert(1)</script>"}},
            "lost",
            "cannot read exit.json",
        ),
        "exit.json truncated": ({"exit.json": b'{"state": "fin'}, "lost", "cannot read exit.json"),
        "status.json names the test runner, exit.json gone": (
            {
                "exit.json": None,
                "status.json": {**real_status, "agent_pid": me}
                | {"agent_start_ticks": _start_ticks(me), "verified": True},
            },
            "lost",
            "not this job's agent",
        ),
        "status.json truncated": (
            {"status.json": b'{"agent_pid": '},
            "finished",
            "cannot read status.json",
        ),
    }
    watcher = Watcher(min_interval=0.1, max_interval=0.2)
    for label, (records, state, said) in variants.items():
        for name, content in records.items():
            if content is None:
                (control / name).unlink()
            else:
                _put(control / name, content)
        looks = _looks(job, project, watcher)
        for snap in (looks["snap"], looks["seen"]):
            assert snap.state == state, (label, snap.state, snap.diagnosis)
            assert said in (snap.diagnosis or ""), (label, snap.diagnosis)
        assert f"[{state}]" in looks["watch"] and state in looks["jobs_row"], label
        _gate_refuses(job, project, evidence)
        _put(control / "exit.json", real_exit)
        _put(control / "status.json", real_status)
    watcher.stop()
    assert job.snapshot().state == "finished"
    evidence.keep(Path(job.spec.out_dir))
    run = job.pull()
    assert run.verified and not (run.outputs / "results.json").exists()
    gate = compute_gate(job._row, project)
    evidence.teardown(reachable=gate.passed, gate_should_pass=True)
    assert gate.passed, gate.text()
    assert evidence.account(sentinel.parent, run.path) == 0


# -- B-notebooks -----------------------------------------------------------------------------


def _cell(kind: str = "code", source: Any = "x = 1\n", **more: Any) -> dict[str, Any]:
    cell: dict[str, Any] = {
        "cell_type": kind,
        "id": hashlib.sha256(repr(source).encode()).hexdigest()[:8],
    }
    cell.update({"metadata": {}, "source": source})
    if kind == "code":
        cell.update({"execution_count": 1, "outputs": []})
    cell.update(more)
    return cell


def _nb(cells: Any = None, **top: Any) -> dict[str, Any]:
    nb: dict[str, Any] = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}}
    nb["cells"] = (
        [_cell("markdown", "# Results\n\nTop-1 accuracy is 91.0% on test.\n"), _cell()]
        if cells is None
        else cells
    )
    nb.update(top)
    return nb


def _out(output: dict[str, Any]) -> dict[str, Any]:
    return _nb([_cell(outputs=[output])])


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value, indent=1).encode()


GOOD = _bytes(_nb())
#: Notebooks that are not notebooks, each with what the error must say of it.
BAD_NOTEBOOKS: dict[str, tuple[bytes, str]] = {
    "truncated JSON": (GOOD[: len(GOOD) // 2], "it is not valid JSON at line"),
    "binary bytes": (b"\x89PNG\r\n\x1a\n\xff\xfe\x00junk", "it is not UTF-8 text"),
    "nested too deeply": (b'{"cells": ' + b"[" * 100_000, "nested too deeply"),
    "a list at the top": (b"[1, 2, 3]", "the top level is a list of numbers"),
    "nbformat 99": (_bytes(_nb(nbformat=99)), "nbformat 99 is not supported"),
    "nbformat as text": (_bytes(_nb(nbformat="4")), '"nbformat" must be a number'),
    "no cells": (_bytes({"nbformat": 4, "nbformat_minor": 5, "metadata": {}}), "no cells list"),
    "cells not a list": (_bytes(_nb(cells={"0": _cell()})), '"cells" is an object'),
    "a cell not an object": (_bytes(_nb(cells=[_cell(), 5])), "cell 1: a cell must be an object"),
    "an unknown cell type": (_bytes(_nb(cells=[_cell("evil")])), "unknown cell_type 'evil'"),
    "source of numbers": (_bytes(_nb(cells=[_cell(source=[1, 2])])), '"source" must be text'),
    "outputs not a list": (_bytes(_nb(cells=[_cell(outputs="abc")])), '"outputs" must be a list'),
    "a stream of ints": (
        _bytes(_out({"output_type": "stream", "name": "stdout", "text": [1, 2, 3]})),
        'cell 0, output 0: "text" must be text, not a list of numbers',
    ),
    "display_data of binary junk": (
        _bytes(
            _out(
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {"image/png": "\x00\x01\x7f\ufffd junk", "text/plain": "<Figure>"},
                }
            )
        ),
        "image/png: the image is not base64",
    ),
    "display_data not a bundle": (
        _bytes(_out({"output_type": "display_data", "metadata": {}, "data": [1, 2]})),
        '"data" must be an object, not a list of numbers',
    ),
    "an unpaired surrogate": (
        _bytes(_out({"output_type": "stream", "name": "stdout", "text": "a"})).replace(
            b'"text": "a"', b'"text": "91.0 \\ud800"'
        ),
        "unpaired surrogate",
    ),
    "an error without its traceback": (
        _bytes(_out({"output_type": "error", "ename": "E", "evalue": "v", "traceback": "x"})),
        '"traceback" must be a list of text',
    ),
}


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its sha256."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _deliverable_project(project: Path) -> None:
    """A run, and an EVIDENCE.json one of whose values a delivery would bring up to date (so a
    delivery that went ahead would write it)."""
    run = project / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}\n")
    (run / "results.json").write_text(json.dumps({"test": {"acc": 0.91}}) + "\n")
    row = {"run": "runs/r1", "key": "test.acc", "metric": "accuracy", "direction": "max"}
    row |= {"split": "test", "n": 100, "value": 0.5}
    claim = {"id": "C1", "statement": "accuracy", "evidence": [row]}
    claim |= {"paper_anchor": "Table 1", "repo_implementation": "train.py:1", "disclosure": None}
    evidence = {"project": "p", "authoritative_source": "results.json", "schema_version": "1.0"}
    (project / "EVIDENCE.json").write_text(json.dumps(evidence | {"claims": [claim]}) + "\n")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = rgt_main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.fault(
    "B-notebooks",
    asserts="a notebook with malformed JSON, binary bytes, deep nesting, a wrong nbformat, no "
    "or a wrong cells list, cells or outputs of the wrong shape (a stream of ints, an image "
    "that is not base64, a data bundle that is a list, an unpaired surrogate, an error without "
    "its traceback) makes `rgt check-numbers`, `rgt deliver`, `rgt repro`, `rgt reconcile` and "
    "%deliver say in one line which file and what is wrong, exit non-zero (a UsageError in the "
    "notebook), print no traceback, and write or change no file of the project, the notebook "
    "included",
    mutation=[
        (
            "rgt_jupyter/deliver/notebook.py",
            "        if not isinstance(value, str):\n            raise self.fail(",
            "        if False:\n            raise self.fail(",
        ),
        (
            "rgt_jupyter/deliver/notebook.py",
            "    if not isinstance(cells, list):",
            "    if False:",
        ),
        (
            "rgt_jupyter/deliver/notebook.py",
            "        except (binascii.Error, ValueError):\n"
            '                    raise self.fail(here, "the image is not base64") from None',
            "        except (binascii.Error, ValueError):\n                    pass",
        ),
        (
            "rgt_jupyter/deliver/report.py",
            "        read_notebook(path)  # a file that is not a notebook is refused",
            "        # a file that is not a notebook is refused",
        ),
    ],
)
@pytest.mark.parametrize("case", list(BAD_NOTEBOOKS))
def test_a_malformed_notebook_is_refused_in_one_line_before_anything_is_written(
    ip: Any,
    project: Path,
    case: str,
    capsys: pytest.CaptureFixture[str],
    evidence: Evidence,
) -> None:
    """Each tool that reads notebooks is handed the bad one.

    Protection: rgt_jupyter/deliver/notebook.py ``read_notebook``: a text that is not a string
    (``_Checker.text``), a missing cells list, an image that is not base64 are refused with one
    line naming the file and what is wrong (each removed, a tool reads on and reports a clean
    notebook, crashes or writes its delivery); rgt_jupyter/deliver/report.py ``deliver`` reads
    the notebook before it brings EVIDENCE.json up to date (removed, a refused delivery has
    already rewritten EVIDENCE.json). Each removed, the case fails.
    """
    content, said = BAD_NOTEBOOKS[case]
    _deliverable_project(project)
    folder = project / "notebooks"
    folder.mkdir()
    notebook = folder / "bad.ipynb"
    notebook.write_bytes(content)
    sentinel = folder / "sentinel.txt"
    sentinel.write_bytes(b"beside the notebook " + os.urandom(32))
    evidence.keep(sentinel, notebook)
    before = _tree(project)
    rel = "notebooks/bad.ipynb"

    outputs = {
        "check-numbers": _cli(capsys, "check-numbers", rel),
        "deliver": _cli(capsys, "deliver", rel),
        "repro": _cli(capsys, "repro", rel),
        "reconcile": _cli(capsys, "reconcile", rel),
    }
    result = ip.run_cell(f"%deliver --notebook {rel}")
    magic = result.error_in_exec
    assert isinstance(magic, IPyUsageError), magic
    outputs["%deliver"] = (2, str(magic))
    for tool, (code, text) in outputs.items():
        lines = text.strip().splitlines()
        assert code == 2, (tool, code, text)
        assert len(lines) == 1, (tool, text)
        assert "bad.ipynb: not a notebook rgt can read" in lines[0], (tool, text)
        assert said in lines[0], (tool, said, text)
        assert "Traceback" not in text and "Error:" not in text, (tool, text)
    assert _tree(project) == before  # nothing written or changed, the notebook included
    assert evidence.account(folder) == 0


@pytest.mark.fault(
    "B-notebooks",
    asserts="a well-formed notebook whose one output is a 50 MB line is read by `rgt "
    "check-numbers`, `rgt deliver`, `rgt reconcile` and %deliver in bounded time (under 60 s "
    "each) with exit 0 and no traceback, the line said and not scanned; check-numbers and "
    "reconcile write nothing, deliver writes only its delivery/ records, and the notebook and a "
    "file beside it stay as they were",
    mutation=(
        "rgt_jupyter/deliver/numtokens/text.py",
        "if len(line) > MAX_LINE:",
        "if False:",
    ),
)
def test_a_50mb_output_is_read_in_bounded_time_and_harms_nothing(
    ip: Any, project: Path, evidence: Evidence
) -> None:
    """A notebook with one 50 MB output (and a JSON output beside it) goes through every tool.

    Protection: rgt_jupyter/deliver/numtokens/text.py ``_LineScanner._line``: a line longer
    than ``MAX_LINE`` is said ("not scanned"), not run through the number masks, whose cost is
    more than linear (removed, check-numbers runs past its time bound and the case fails).
    """
    _deliverable_project(project)
    folder = project / "notebooks"
    folder.mkdir()
    big = {"output_type": "stream", "name": "stdout", "text": "loss 0.123 step 7 " * (50 << 16)}
    table = {"output_type": "execute_result", "execution_count": 1, "metadata": {}}
    table["data"] = {"application/json": {"acc": [0.91, 0.93]}, "text/plain": "{'acc': ...}"}
    notebook = folder / "big.ipynb"
    notebook.write_bytes(_bytes(_nb([_cell("markdown", "# Big"), _cell(outputs=[big, table])])))
    assert notebook.stat().st_size > 50 << 20
    sentinel = folder / "sentinel.txt"
    sentinel.write_bytes(b"beside the notebook " + os.urandom(32))
    evidence.keep(sentinel, notebook)
    before = _tree(folder)
    rel = "notebooks/big.ipynb"
    for args in (("check-numbers", rel, "--json"), ("reconcile", rel), ("deliver", rel)):
        try:
            proc = rgt(*args, cwd=project, check=False, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"rgt {' '.join(args)} ran past 60 s on a 50 MB output")
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0 and "Traceback" not in text, (args, text[-2000:])
        if args[0] == "check-numbers":
            found = json.loads(proc.stdout)["findings"]
            assert any("not scanned" in str(f.get("reason")) for f in found), found
        else:
            assert "not a notebook" not in text, (args, text[-2000:])
        if args[0] != "deliver":
            assert not (project / "delivery").exists(), args
    assert sorted(p.name for p in (project / "delivery").iterdir()) == [
        "big.manifest.json",
        "big.numbers.json",
    ]
    result = ip.run_cell(f"%deliver --notebook {rel}")
    assert result.error_in_exec is None, result.error_in_exec
    assert _tree(folder) == before
    assert evidence.account(folder) == 0
