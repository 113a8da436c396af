"""Benchmark: how fast ``%%remote_run`` hands control back on an SSH profile.

In a temporary dir: starts a throwaway OpenSSH server on 127.0.0.1 (``tests/sshd.py``) and sets up
an ssh_config, known_hosts and a project profile ``box`` as the tests do. Over one warm connection
(rgt's own, ``connect("testbox", project)``) it measures:

* ``exec_round_trip_s``: ``connect(alias, project).exec(["true"])``, ``--n`` times;
* ``sftp_stat_s``: one SFTP request (``stat`` of the remote home), ``--n`` times, for scale;
* ``remote_run_returned_s``: ``%%remote_run --profile box --host testbox --no-smoke --name N``
  through IPython's ``InteractiveShell`` (``%load_ext rgt_jupyter``, ``RGT_PROJECT`` set to the
  temporary project), from the start of ``run_cell`` until it returns (the launch plus the
  display of the returned Job), ``--n`` launches with distinct names after one untimed warm-up.
  Each job is waited for, and the process's watcher let go of it, before the next launch.

Every launch is also counted: the transport calls the kernel's thread made (by method, with the
time spent in them) and the SSH round trips under them (channel opens, exec and subsystem
requests, synchronous SFTP requests; the counting wrappers cost microseconds). Also recorded:
which ``python3`` the remote shell finds and what running it costs. The goal is "control returns within
one exec round trip + 100 ms"; it is met when the median launch is within the median round trip
+ 100 ms. Writes ``bench/results/launch_ssh.json`` (or ``--out``).

    python bench/launch_ssh.py [--n 20] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _ssh_env import machine_info, ssh_box, summarize  # noqa: E402

CELL = "import time\ntime.sleep(0.5)\n"
GOAL_MARGIN_S = 0.100
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
)


class CallLog:
    """Transport calls and SSH round trips made by one thread, and the time spent in them."""

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread
        self.calls: Counter[str] = Counter()
        self.seconds: dict[str, float] = defaultdict(float)
        self.round_trips: Counter[str] = Counter()
        self.round_trips_by_call: Counter[str] = Counter()
        self.current = "outside_transport"
        self.depth = 0

    def mine(self) -> bool:
        return threading.current_thread() is self.thread

    def reset(self) -> None:
        self.calls.clear()
        self.seconds.clear()
        self.round_trips.clear()
        self.round_trips_by_call.clear()

    def transport_method(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` counted and timed under ``name`` (only the outermost transport call)."""

        def counted(*args: Any, **kwargs: Any) -> Any:
            if not self.mine() or self.depth:
                return fn(*args, **kwargs)
            self.depth += 1
            self.current = name
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                self.current = "outside_transport"
                self.calls[name] += 1
                self.seconds[name] += time.perf_counter() - t0

        return counted

    def round_trip(self, name: str, fn: Callable[..., Any], when: Any = None) -> Callable[..., Any]:
        """``fn`` (a paramiko method that waits for the server) counted under ``name``."""

        def counted(*args: Any, **kwargs: Any) -> Any:
            if self.mine() and (when is None or when(*args, **kwargs)):
                self.round_trips[name] += 1
                self.round_trips_by_call[self.current] += 1
            return fn(*args, **kwargs)

        return counted


@contextlib.contextmanager
def counting(log: CallLog, transport: Any) -> Iterator[None]:
    """Count while the block runs (paramiko classes and rgt's transport instance)."""
    import paramiko

    def sync_sftp(self: Any, waitfor: Any = None) -> bool:
        return waitfor is not None

    patches = [
        (paramiko.Transport, "open_channel", "channel_open", None),
        (paramiko.Channel, "exec_command", "exec_request", None),
        (paramiko.Channel, "invoke_subsystem", "subsystem_request", None),
        (paramiko.SFTPClient, "_read_response", "sftp_request", sync_sftp),
        (paramiko.SFTPClient, "__init__", "sftp_version_exchange", None),
    ]
    with contextlib.ExitStack() as stack:
        for cls, attr, name, when in patches:
            wrapped = log.round_trip(name, getattr(cls, attr), when)
            stack.enter_context(mock.patch.object(cls, attr, wrapped))
        for name in TRANSPORT_METHODS:
            wrapped = log.transport_method(name, getattr(transport, name))
            stack.enter_context(mock.patch.object(transport, name, wrapped))
        yield


def wait_watcher_idle(timeout: float) -> None:
    """Wait until the process's watcher follows no job (so it polls nothing meanwhile)."""
    from rgt_jupyter.run.watch.watcher import watcher

    w = watcher()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with w._lock:
            if not w._subs:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the watcher still follows a job after {timeout} s")


def median_counter(counters: list[Counter[str]]) -> dict[str, float]:
    keys = sorted({k for c in counters for k in c})
    return {k: statistics.median(c.get(k, 0) for c in counters) for k in keys}


def time_execs(transport: Any, argv: list[str], n: int) -> list[float]:
    """Seconds of ``n`` calls of ``transport.exec(argv)``."""
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        transport.exec(argv).check()
        samples.append(time.perf_counter() - t0)
    return samples


def time_launches(
    shell: Any, box: Any, names: list[str], log: CallLog, launch_seconds: list[float]
) -> list[dict[str, Any]]:
    """Launch one job per name through the magic; each is waited for before the next."""
    from rgt_jupyter.api import Job

    sink = io.StringIO()
    samples = []
    line = f"%%remote_run --profile {box.profile} --host {box.alias} --no-smoke"
    for name in names:
        log.reset()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(sink):
            result = shell.run_cell(f"{line} --name {name}\n{CELL}", store_history=False)
        elapsed = time.perf_counter() - t0
        result.raise_error()
        job = Job.from_registry(name, box.project)
        if job.spec.transport != "ssh" or job.spec.host_alias != box.alias:
            raise RuntimeError(f"{job.id} did not run over SSH: {job.spec}")
        samples.append(
            {
                "returned_s": elapsed,
                "launch_api_s": launch_seconds[-1],
                "transport_calls": Counter(log.calls),
                "round_trips": Counter(log.round_trips),
                "round_trips_by_call": Counter(log.round_trips_by_call),
                "transport_seconds": dict(log.seconds),
            }
        )
        state = job.wait(timeout=60.0)
        if state != "finished":
            raise RuntimeError(f"{job.id} ended {state}:\n{job.log()}")
        wait_watcher_idle(30.0)
    return samples


def launch_summary(samples: list[dict[str, Any]], round_trip_s: float) -> dict[str, Any]:
    """Medians over launches, and the goal against a round trip of ``round_trip_s``."""
    returned = [s["returned_s"] for s in samples]
    in_launch = [s["launch_api_s"] for s in samples]
    ret = summarize(returned)
    goal_s = round_trip_s + GOAL_MARGIN_S
    seconds = [s["transport_seconds"] for s in samples]
    return {
        "remote_run_returned_s": ret,
        "launch_api_s": summarize(in_launch),
        "display_and_rest_s": summarize([a - b for a, b in zip(returned, in_launch, strict=True)]),
        "goal_s": goal_s,
        "goal_met": ret["median"] <= goal_s,
        "over_goal_s": ret["median"] - goal_s,
        "per_launch_median": {
            "ssh_round_trips_total": statistics.median(
                sum(s["round_trips"].values()) for s in samples
            ),
            "ssh_round_trips": median_counter([s["round_trips"] for s in samples]),
            "ssh_round_trips_by_transport_call": median_counter(
                [s["round_trips_by_call"] for s in samples]
            ),
            "transport_calls": median_counter([s["transport_calls"] for s in samples]),
            "transport_seconds": {
                k: statistics.median(s.get(k, 0.0) for s in seconds)
                for k in sorted({k for s in seconds for k in s})
            },
            "transport_seconds_total": statistics.median(sum(s.values()) for s in seconds),
        },
        "samples_returned_s": returned,
    }


def run(n: int, out: Path) -> dict[str, Any]:
    """Measure round trips and ``n`` launches; write the summary JSON to ``out``."""

    from IPython.core.interactiveshell import InteractiveShell

    from rgt_jupyter import api as api_mod
    from rgt_jupyter.transport.ssh import connect

    with tempfile.TemporaryDirectory(prefix="rgt-bench-ssh-") as tmp_str:
        tmp = Path(tmp_str).resolve()
        with ssh_box(tmp) as box:
            t0 = time.perf_counter()
            transport = connect(box.alias, box.project)
            transport.exec(["true"]).check()
            connect_s = time.perf_counter() - t0
            home = transport.home()
            exec_rt = time_execs(connect(box.alias, box.project), ["true"], n)
            stat_rt = []
            for _ in range(n):
                t0 = time.perf_counter()
                transport.stat(home)
                stat_rt.append(time.perf_counter() - t0)
            python3 = transport.exec(["sh", "-c", "command -v python3"]).stdout.decode().strip()
            python3_rt = time_execs(transport, ["python3", "-c", "pass"], max(3, n // 4))

            shell = InteractiveShell.instance()
            with contextlib.redirect_stdout(io.StringIO()):
                shell.run_cell("%load_ext rgt_jupyter", store_history=False).raise_error()
            log = CallLog(threading.current_thread())
            launch_seconds: list[float] = []
            real_launch = api_mod.launch_seeds

            def timed_launch(*args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return real_launch(*args, **kwargs)
                finally:
                    launch_seconds.append(time.perf_counter() - t0)

            with counting(log, transport), mock.patch.object(api_mod, "launch_seeds", timed_launch):
                first = time_launches(shell, box, ["ssh-warmup"], log, launch_seconds)[0]
                names = [f"ssh-{i:03d}" for i in range(n)]
                shipped = time_launches(shell, box, names, log, launch_seconds)

    rt = summarize(exec_rt)
    main_summary = launch_summary(shipped, rt["median"])
    ret = main_summary["remote_run_returned_s"]
    report: dict[str, Any] = {
        "benchmark": "launch_ssh",
        "description": "%%remote_run on an SSH profile (loopback OpenSSH server) through "
        "IPython's InteractiveShell, and a bare exec round trip, over one warm connection; "
        "seconds",
        "n": n,
        "cell": CELL,
        "goal": "remote_run returns within one exec round trip + 100 ms (medians)",
        "connect_and_first_exec_s": connect_s,
        "exec_round_trip_s": rt,
        "sftp_stat_s": summarize(stat_rt),
        "remote_python3": {"path": python3, "exec_python3_c_pass_s": summarize(python3_rt)},
        **main_summary,
        "goal_met_at_p90": ret["p90"] <= rt["p90"] + GOAL_MARGIN_S,
        "per_launch_note": "kernel thread only: channel_open, exec_request and subsystem_request "
        "wait for the server once each, sftp_request counts synchronous SFTP requests, "
        "sftp_version_exchange one per new SFTP session; an exec also waits for the command to "
        "end. transport_calls counts outermost calls of rgt's transport (makedirs inside "
        "write_bytes is booked under write_bytes); outside_transport: round trips made "
        "outside them.",
        "first_launch": {
            "returned_s": first["returned_s"],
            "launch_api_s": first["launch_api_s"],
            "ssh_round_trips_total": sum(first["round_trips"].values()),
            "transport_calls": dict(first["transport_calls"]),
            "round_trips_by_call": dict(first["round_trips_by_call"]),
        },
        "samples_exec_round_trip_s": exec_rt,
        **machine_info(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the benchmark, print a one-line summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="samples of each (default 20)")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "launch_ssh.json",
        help="where to write the JSON (default: bench/results/launch_ssh.json)",
    )
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    report = run(args.n, args.out)
    rt, ret = report["exec_round_trip_s"], report["remote_run_returned_s"]
    per = report["per_launch_median"]
    print(
        f"launch_ssh n={report['n']}: exec round trip median {rt['median'] * 1e3:.1f} ms "
        f"(p90 {rt['p90'] * 1e3:.1f}); %%remote_run returned median {ret['median'] * 1e3:.0f} ms "
        f"(p90 {ret['p90'] * 1e3:.0f}); {per['ssh_round_trips_total']:.0f} SSH round trips and "
        f"{sum(per['transport_calls'].values()):.0f} transport calls per launch; goal "
        f"<= {report['goal_s'] * 1e3:.0f} ms {'met' if report['goal_met'] else 'NOT met'} "
        f"-> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
