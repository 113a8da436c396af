"""Benchmark: what watching many running jobs costs the remote, the connection and the notebook.

``--jobs`` jobs each print a log line and call ``job.progress(...)`` 4 times a second until the
benchmark is done with them. Two setups, one after the other, each measured over ``--window``
seconds once every job writes and the watcher has read their logs from the start:

* **SSH** (in this process): the jobs run on an SSH profile against a throwaway OpenSSH server on
  127.0.0.1 (``bench/_ssh_env.py``) and are followed by the process's watcher, one subscription
  per job with a snapshot callback and a log-lines callback, as live views subscribe. Every call
  of the host's transport (the process's one ``SSHTransport`` for the alias) is counted with the
  bytes it moved; TCP connections are counted on both ends (sshd's ``Connection from`` log lines,
  ``paramiko.SSHClient.connect`` calls in this process), and the log bytes the jobs wrote are
  read from their files (the "remote" is this machine).

  - ``remote_requests_per_s``: transport calls (exec, read_bytes, stat, ...) per second;
  - ``new_connections_per_poll``: TCP connections sshd accepted, per watcher tick;
  - ``bytes_per_poll``: bytes from the host (exec stdout and stderr, bytes read) per tick, next
    to ``new_log_bytes_per_poll`` (what the jobs appended to their logs) and their ratio (the
    probe's JSON answer carries new bytes base64-encoded, plus a fixed part per job).

* **Kernel**: a real IPython kernel (``jupyter_client``; ``RGT_PROJECT`` is a temporary project
  with the built-in ``local`` profile) runs ``%load_ext rgt_jupyter`` and one ``%%remote_run``
  cell per job; each returned Job displays as its live view. Over the window every message on
  the iopub channel is counted (by type; widget ``comm_msg`` also by method), and the kernel
  process's CPU time (utime + stime from ``/proc``) is read at both ends.

  - ``iopub_msgs_per_s``: iopub messages per second while no cell runs;
  - ``kernel_cpu_share``: the kernel's CPU seconds per wall second (a fraction of one core),
    next to its idle share before any job and its watcher thread's share.

Goals: at most 1 remote request a second, no new connection per poll, at most 10 iopub messages
a second, at most 1.5 % of a core. Each setup also records its watcher's tick count and final
interval. At the end the jobs are told to stop (a file they look for), waited for, and the
kernel is shut down. Writes ``bench/results/watch.json`` (or ``--out``).

    python bench/watch.py [--jobs 20] [--window 30] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import shlex
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _ssh_env import machine_info, ssh_box, summarize  # noqa: E402

#: Log lines (and progress records) each job writes per second.
RATE = 4.0
GOALS = {
    "remote_requests_per_s": 1.0,
    "new_connections_per_poll": 0.0,
    "iopub_msgs_per_s": 10.0,
    "kernel_cpu_share": 0.015,
}
#: Transport methods counted (only the outermost call: read_text over read_bytes counts once).
TRANSPORT_METHODS = (
    "exec",
    "read_bytes",
    "write_bytes",
    "put",
    "open_read",
    "stat",
    "makedirs",
    "listdir",
    "home",
    "read_text",
    "tail",
    "boot_id",
    "proc_alive",
)
#: The jobs' program: runs until the benchmark creates ``STOP`` (or ``MAX_S`` seconds pass).
PROGRAM = """\
import os
import time

import rgt_jupyter.job as job

stop, deadline = STOP, time.time() + MAX_S
step = 0
while not os.path.exists(stop) and time.time() < deadline:
    step += 1
    print("step %d of a long run, loss %.6f" % (step, 1.0 / step), flush=True)
    job.progress(step, None, loss=1.0 / step)
    time.sleep(1.0 / RATE)
"""


def program(stop: Path, max_s: float) -> str:
    return (
        PROGRAM.replace("STOP", repr(str(stop)))
        .replace("MAX_S", repr(float(max_s)))
        .replace("RATE", repr(RATE))
    )


# -- measuring helpers


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process (or one of its threads) from /proc."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    text = Path(path).read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def job_files(control_dirs: list[str], name: str) -> int:
    """Total size of ``name`` over the jobs' control dirs (local paths: the host is this one)."""
    return sum(file_size(Path(c) / name) for c in control_dirs)


def wait_until(what: str, ok: Callable[[], bool], timeout: float, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(poll)


def established_to(port: int) -> int:
    """Established TCP connections whose remote end is 127.0.0.1:``port`` (client side)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port:
                    count += 1
    return count


def sshd_connections(log: Path) -> int:
    """TCP connections sshd accepted so far (its VERBOSE log has one line per connection)."""
    return log.read_text(errors="replace").count("Connection from ")


class RequestCounter:
    """Calls of one transport instance (outermost only), by method and thread, and the bytes they
    moved; counted while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.calls: Counter[str] = Counter()
        self.by_thread: Counter[str] = Counter()
        self.bytes_in: Counter[str] = Counter()  # from the host
        self.bytes_out: Counter[str] = Counter()  # to the host
        self.seconds = 0.0
        self.connects = 0
        self.channels = 0
        self.answers: list[bytes] = []  # stdout of every exec, parsed after the window
        self._local = threading.local()

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._local, "depth", 0)
            self._local.depth = depth + 1
            t0 = time.perf_counter()
            result: Any = None
            try:
                result = fn(*args, **kwargs)
                return result
            finally:
                self._local.depth = depth
                if self.active and depth == 0:
                    self.calls[name] += 1
                    self.by_thread[threading.current_thread().name] += 1
                    self.seconds += time.perf_counter() - t0
                    self.bytes_in[name] += _received(result)
                    self.bytes_out[name] += _sent(name, args, kwargs)
                    if name == "exec" and result is not None:
                        self.answers.append(bytes(result.stdout))

        return counted

    def hook(self, kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if self.active:
                if kind == "connect":
                    self.connects += 1
                else:
                    self.channels += 1
            return fn(*args, **kwargs)

        return counted


def probe_fields(answers: list[bytes]) -> dict[str, int]:
    """Bytes of the watcher's probe answers by field of a job's record (JSON-encoded, as sent):
    ``log.data`` and ``progress.data`` are the new bytes (base64), the rest a fixed part."""
    fields: Counter[str] = Counter()
    for raw in answers:
        try:
            answer = json.loads(raw)
        except ValueError:
            fields["not_a_probe_answer"] += len(raw)
            continue
        if not isinstance(answer, dict) or not isinstance(answer.get("jobs"), list):
            fields["not_a_probe_answer"] += len(raw)
            continue
        per_job = 0
        for rec in answer["jobs"]:
            for key, value in rec.items():
                if key in ("log", "progress") and isinstance(value, dict):
                    data = len(json.dumps(value.get("data")))
                    fields[f"{key}.data"] += data
                    fields[f"{key}.rest"] += len(json.dumps(value)) - data
                else:
                    fields[key] += len(json.dumps(value))
            per_job += len(json.dumps(rec))
        fields["envelope"] += len(raw) - per_job
    return dict(fields)


def _received(result: Any) -> int:
    if result is None:
        return 0
    if isinstance(result, bytes | bytearray):
        return len(result)
    if isinstance(result, str):
        return len(result.encode())
    stdout, stderr = getattr(result, "stdout", None), getattr(result, "stderr", None)
    if isinstance(stdout, bytes) and isinstance(stderr, bytes):
        return len(stdout) + len(stderr)
    return 0


def _sent(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    if name == "exec" and args:
        return len(shlex.join(args[0]).encode()) + len(kwargs.get("stdin") or b"")
    if name == "write_bytes" and len(args) > 1:
        return len(args[1])
    return 0


@contextlib.contextmanager
def counting(counter: RequestCounter, transport: Any) -> Iterator[None]:
    """Count ``transport``'s calls, and paramiko's connects and channel opens in this process."""
    import paramiko

    with contextlib.ExitStack() as stack:
        for name in TRANSPORT_METHODS:
            if hasattr(transport, name):
                wrapped = counter.wrap(name, getattr(transport, name))
                stack.enter_context(mock.patch.object(transport, name, wrapped))
        for cls, attr, kind in (
            (paramiko.SSHClient, "connect", "connect"),
            (paramiko.Transport, "open_channel", "channel"),
        ):
            stack.enter_context(
                mock.patch.object(cls, attr, counter.hook(kind, getattr(cls, attr)))
            )
        yield


# -- the SSH setup


def watch_ssh(n: int, window: float, tmp: Path) -> dict[str, Any]:
    """Follow ``n`` jobs on the loopback SSH host with the process's watcher for ``window`` s."""
    from rgt_jupyter import submit
    from rgt_jupyter.api import Job
    from rgt_jupyter.jobs.request import LaunchRequest
    from rgt_jupyter.jobs.snapshot import Snapshot
    from rgt_jupyter.run.watch.watcher import watcher
    from rgt_jupyter.transport.ssh import connect

    stop = tmp / "stop-ssh-jobs"
    code = program(stop, 3 * window + 300)
    counter = RequestCounter()
    snapshots = lines = 0
    lock = threading.Lock()

    def on_snapshot(snap: Snapshot) -> None:
        nonlocal snapshots
        with lock:
            snapshots += 1

    def on_lines(new: list[str], offset: int) -> None:
        nonlocal lines
        with lock:
            lines += len(new)

    with ssh_box(tmp) as box:
        os.environ["RGT_AUDIT_TORCH"] = "0"  # the box hides every other RGT_* variable
        transport = connect(box.alias, box.project)
        jobs: list[Job] = []
        try:
            for i in range(n):
                req = LaunchRequest(
                    program=code,
                    name=f"ssh-{i:03d}",
                    profile=box.profile,
                    host=box.alias,
                    smoke=False,
                )
                jobs.append(submit(req, box.project))
            controls = [job.spec.control_dir for job in jobs]
            if any(job.transport is not transport for job in jobs):
                raise RuntimeError("the jobs do not share the process's transport for the host")
            w = watcher()
            durations: list[float] = []
            real_tick = w.tick

            def timed_tick() -> Any:
                t0 = time.perf_counter()
                try:
                    return real_tick()
                finally:
                    if counter.active:
                        durations.append(time.perf_counter() - t0)

            with counting(counter, transport), mock.patch.object(w, "tick", timed_tick):
                keys = [w.subscribe(job, on_snapshot, on_lines) for job in jobs]
                wait_until(
                    "every job's first log line",
                    lambda: all(file_size(Path(c) / "log") for c in controls),
                    120,
                )
                settled = w.ticks + 2
                wait_until("two watcher ticks", lambda: w.ticks >= settled, 120)
                tid = next(
                    (t.native_id for t in threading.enumerate() if t.name == "rgt-watcher"), None
                )
                log0, prog0 = job_files(controls, "log"), job_files(controls, "progress.jsonl")
                accepted0, est0 = sshd_connections(box.sshd.log), established_to(box.sshd.port)
                ticks0, seen0 = w.ticks, (snapshots, lines)
                cpu0 = time.process_time()
                thread_cpu0 = cpu_seconds(os.getpid(), tid) if tid else None
                counter.active = True
                t0 = time.monotonic()
                time.sleep(window)
                counter.active = False
                wall = time.monotonic() - t0
                cpu1 = time.process_time()
                thread_cpu1 = cpu_seconds(os.getpid(), tid) if tid else None
                ticks = w.ticks - ticks0
                interval = w.interval
                accepted = sshd_connections(box.sshd.log) - accepted0
                est1 = established_to(box.sshd.port)
                new_log = job_files(controls, "log") - log0
                new_progress = job_files(controls, "progress.jsonl") - prog0
                seen = (snapshots - seen0[0], lines - seen0[1])
                stop.touch()
                states = [job.wait(timeout=60) for job in jobs]
                for key in keys:
                    w.unsubscribe(key)
                w.stop()
        finally:
            stop.touch()
            for job in jobs:  # only if the wait above did not happen
                with contextlib.suppress(Exception):
                    job.wait(timeout=30)
    polls = max(ticks, 1)
    bytes_in = sum(counter.bytes_in.values())
    bytes_out = sum(counter.bytes_out.values())
    fields = probe_fields(counter.answers)
    new_data = fields.get("log.data", 0) + fields.get("progress.data", 0)
    fixed = sum(fields.values()) - new_data
    return {
        "remote_requests_per_s": sum(counter.calls.values()) / wall,
        "new_connections_per_poll": accepted / polls,
        "bytes_per_poll": bytes_in / polls,
        "new_log_bytes_per_poll": new_log / polls,
        "bytes_to_new_log_bytes": bytes_in / new_log if new_log else None,
        "detail": {
            "window_s": wall,
            "watcher_ticks": ticks,
            "watcher_ticks_per_s": ticks / wall,
            "watcher_final_interval_s": interval,
            "tick_s": summarize(durations) if durations else None,
            "remote_requests": dict(counter.calls),
            "remote_requests_by_thread": dict(counter.by_thread),
            "seconds_in_remote_requests": counter.seconds,
            "ssh_channels_opened": counter.channels,
            "ssh_channels_per_poll": counter.channels / polls,
            "tcp_connections_accepted_by_sshd": accepted,
            "paramiko_connects": counter.connects,
            "established_connections_to_sshd": {"start": est0, "end": est1},
            "bytes_from_host": bytes_in,
            "bytes_from_host_by_call": dict(counter.bytes_in),
            "bytes_to_host": bytes_out,
            "bytes_to_host_per_poll": bytes_out / polls,
            "new_log_bytes": new_log,
            "new_progress_bytes": new_progress,
            "new_progress_bytes_per_poll": new_progress / polls,
            "probe_answer_bytes_by_field": fields,
            "log_data_to_new_log_bytes": fields.get("log.data", 0) / new_log if new_log else None,
            "fixed_answer_bytes_per_job_per_poll": fixed / (polls * n),
            "bytes_to_new_log_and_progress_bytes": bytes_in / (new_log + new_progress)
            if new_log + new_progress
            else None,
            "snapshots_delivered": seen[0],
            "log_lines_delivered": seen[1],
            "process_cpu_share": (cpu1 - cpu0) / wall,
            "watcher_thread_cpu_share": (thread_cpu1 - thread_cpu0) / wall
            if thread_cpu0 is not None and thread_cpu1 is not None
            else None,
            "job_states_at_end": sorted(set(states)),
        },
    }


# -- the kernel setup


class Kernel:
    """A kernel started with ``jupyter_client``, its iopub channel read by this process."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env, cwd=str(cwd))
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        process = getattr(self.km.provisioner, "process", None)
        if process is None:
            raise RuntimeError("the kernel's process is not known to jupyter_client")
        self.pid = int(process.pid)

    def run(self, code: str, timeout: float = 300) -> str:
        """Execute ``code``; return its stream output; raise on an error."""
        out: list[str] = []
        errors: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            content = msg["content"]
            if msg["msg_type"] == "stream":
                out.append(content["text"])
            elif msg["msg_type"] == "error":
                errors.append("\n".join(content["traceback"]))

        reply = self.kc.execute_interactive(
            code, timeout=timeout, output_hook=hook, store_history=False
        )
        if reply["content"]["status"] != "ok" or errors:
            raise RuntimeError(f"the kernel failed on {code[:80]!r}:\n" + "\n".join(errors))
        return "".join(out)

    def drain(self) -> int:
        """Read the iopub messages already waiting; return how many."""
        n = 0
        while True:
            try:
                self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                return n
            n += 1

    def count(self, seconds: float) -> tuple[Counter[str], Counter[str], int, float]:
        """Every iopub message for ``seconds``: by type, widget comm messages by method, the
        JSON size of their content, and the wall time counted."""
        types: Counter[str] = Counter()
        methods: Counter[str] = Counter()
        size = 0
        t0 = time.monotonic()
        end = t0 + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                msg = self.kc.get_iopub_msg(timeout=left)
            except queue.Empty:
                break
            types[msg["msg_type"]] += 1
            if msg["msg_type"] == "comm_msg":
                methods[str(msg["content"].get("data", {}).get("method"))] += 1
            size += len(json.dumps(msg["content"], default=str))
        return types, methods, size, time.monotonic() - t0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


WATCHER_CELL = """\
import json as _json
import threading as _threading
from rgt_jupyter.run.watch.watcher import watcher as _watcher
print(_json.dumps({
    "ticks": _watcher().ticks,
    "interval": _watcher().interval,
    "tid": next((t.native_id for t in _threading.enumerate() if t.name == "rgt-watcher"), None),
}))
"""


def watch_kernel(n: int, window: float, tmp: Path) -> dict[str, Any]:
    """Launch ``n`` local jobs from a kernel with ``%%remote_run``; count iopub and CPU."""
    project = tmp / "kernel-project"
    (project / ".rgt").mkdir(parents=True)
    stop = tmp / "stop-kernel-jobs"
    code = program(stop, 3 * window + 300)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGT_")}
    env.update(RGT_PROJECT=str(project), RGT_AUDIT_TORCH="0")
    kernel = Kernel(env, project)
    names = [f"k-{i:03d}" for i in range(n)]
    try:
        kernel.run("%load_ext rgt_jupyter")
        idle = min(5.0, window / 4)
        kernel.drain()
        cpu0 = cpu_seconds(kernel.pid)
        time.sleep(idle)
        idle_share = (cpu_seconds(kernel.pid) - cpu0) / idle
        for name in names:
            kernel.run(f"%%remote_run --name {name} --no-smoke\n{code}")
        controls = json.loads(
            kernel.run(
                "import json as _json\nfrom rgt_jupyter.api import Job as _Job\n"
                f"print(_json.dumps([_Job.from_registry(n).spec.control_dir for n in {names!r}]))"
            )
        )
        wait_until(
            "every job's first log line",
            lambda: all(file_size(Path(c) / "log") for c in controls),
            120,
        )
        before = json.loads(kernel.run(WATCHER_CELL))
        settled = before["ticks"] + 2
        wait_until(
            "two watcher ticks",
            lambda: json.loads(kernel.run(WATCHER_CELL))["ticks"] >= settled,
            60,
            poll=0.5,
        )
        before = json.loads(kernel.run(WATCHER_CELL))
        kernel.drain()
        log0 = job_files(controls, "log")
        tid = before["tid"]
        cpu0 = cpu_seconds(kernel.pid)
        thread0 = cpu_seconds(kernel.pid, tid) if tid else None
        types, methods, size, wall = kernel.count(window)
        cpu1 = cpu_seconds(kernel.pid)
        thread1 = cpu_seconds(kernel.pid, tid) if tid else None
        new_log = job_files(controls, "log") - log0
        after = json.loads(kernel.run(WATCHER_CELL))
        stop.touch()
        states = json.loads(
            kernel.run(
                "import json as _json\nfrom rgt_jupyter.api import Job as _Job\n"
                f"_jobs = [_Job.from_registry(n) for n in {names!r}]\n"
                "_states = [j.wait(timeout=60) for j in _jobs]\n"
                "for _j in _jobs:\n"
                "    if not _j.done():\n"
                "        _j.stop()\n"
                "print(_json.dumps(_states))"
            )
        )
    finally:
        stop.touch()
        kernel.close()
    total = sum(types.values())
    ticks = after["ticks"] - before["ticks"]
    return {
        "iopub_msgs_per_s": total / wall,
        "kernel_cpu_share": (cpu1 - cpu0) / wall,
        "detail": {
            "window_s": wall,
            "iopub_msgs": total,
            "iopub_msgs_by_type": dict(types),
            "widget_comm_msgs_by_method": dict(methods),
            "iopub_content_bytes_per_s": size / wall,
            "kernel_idle_cpu_share_before_jobs": idle_share,
            "watcher_thread_cpu_share": (thread1 - thread0) / wall
            if thread0 is not None and thread1 is not None
            else None,
            "watcher_ticks": ticks,
            "watcher_ticks_per_s": ticks / wall,
            "watcher_final_interval_s": after["interval"],
            "new_log_bytes": new_log,
            "job_states_at_end": sorted(set(states)),
        },
    }


def run(n: int, window: float, out: Path) -> dict[str, Any]:
    """Both setups; write the summary to ``out``."""
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="rgt-bench-watch-") as tmp_str:
        tmp = Path(tmp_str).resolve()
        (tmp / "ssh").mkdir()
        (tmp / "kernel").mkdir()
        ssh = watch_ssh(n, window, tmp / "ssh")
        kernel = watch_kernel(n, window, tmp / "kernel")
    figures = {
        "remote_requests_per_s": ssh["remote_requests_per_s"],
        "new_connections_per_poll": ssh["new_connections_per_poll"],
        "bytes_per_poll": ssh["bytes_per_poll"],
        "new_log_bytes_per_poll": ssh["new_log_bytes_per_poll"],
        "bytes_to_new_log_bytes": ssh["bytes_to_new_log_bytes"],
        "iopub_msgs_per_s": kernel["iopub_msgs_per_s"],
        "kernel_cpu_share": kernel["kernel_cpu_share"],
    }
    report: dict[str, Any] = {
        "benchmark": "watch",
        "description": "watching N running jobs (a log line and a progress record each 4 times "
        "a second): over SSH (loopback OpenSSH server) from this process's watcher, and locally "
        "from a real IPython kernel whose Jobs display as live views",
        "parameters": {"jobs": n, "window_s": window, "job_lines_per_s": RATE},
        **figures,
        "goals": {
            "remote_requests_per_s": f"<= {GOALS['remote_requests_per_s']:g}",
            "new_connections_per_poll": f"== {GOALS['new_connections_per_poll']:g}",
            "iopub_msgs_per_s": f"<= {GOALS['iopub_msgs_per_s']:g}",
            "kernel_cpu_share": f"<= {GOALS['kernel_cpu_share']:g}",
        },
        "meets_goals": {
            "remote_requests_per_s": figures["remote_requests_per_s"]
            <= GOALS["remote_requests_per_s"],
            "new_connections_per_poll": figures["new_connections_per_poll"]
            == GOALS["new_connections_per_poll"],
            "iopub_msgs_per_s": figures["iopub_msgs_per_s"] <= GOALS["iopub_msgs_per_s"],
            "kernel_cpu_share": figures["kernel_cpu_share"] <= GOALS["kernel_cpu_share"],
        },
        "ssh": ssh["detail"],
        "kernel": kernel["detail"],
        "load_average_1_5_15_min": {"start": load_before, "end": os.getloadavg()},
        "machine": machine_info(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20, help="jobs watched (default 20)")
    parser.add_argument(
        "--window", type=float, default=30.0, help="seconds measured per setup (default 30)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "watch.json",
        help="where to write the JSON (default: bench/results/watch.json)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.window <= 0:
        parser.error("--jobs must be at least 1 and --window positive")
    os.environ["RGT_AUDIT_TORCH"] = "0"
    report = run(args.jobs, args.window, args.out)
    print(
        json.dumps(
            {k: report[k] for k in (*GOALS, "bytes_per_poll", "new_log_bytes_per_poll")}
            | {"meets_goals": report["meets_goals"]},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
