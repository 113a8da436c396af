"""Benchmark: how fast ``%%remote_run`` hands control back, and how fast the job is alive.

Drives the magic through an IPython ``InteractiveShell`` (as a notebook kernel would) in a
temporary project on the ``local`` profile, ``--n`` times, one job at a time, each with its own
``--name`` and a tiny cell. For every launch it measures, from the start of ``run_cell``:

* ``control_s``: until ``run_cell`` returns (launch plus the display of the returned Job);
* ``heartbeat_s``: until the job's first ``heartbeat.json`` exists (the agent is supervising).

The first heartbeat is caught by a thread polling the project's job folders every millisecond,
so it is timed the same whether it comes before or after control returns. Each job is waited
for before the next launch. Writes ``bench/results/launch_local.json`` (or ``--out``).

    python bench/launch_local.py [--n 20] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CELL = "import time\ntime.sleep(0.5)\n"
sys.path.insert(0, str(HERE))

from _ssh_env import summarize  # noqa: E402  (bench/ is not a package)


class HeartbeatSpy:
    """Polls ``<jobs_dir>/<name>-*/heartbeat.json`` on a thread; records when it first exists."""

    def __init__(self, jobs_dir: Path, name: str, t0: float) -> None:
        self.jobs_dir = jobs_dir
        self.prefix = f"{name}-"
        self.t0 = t0
        self.found_at: float | None = None
        self.control_dir: Path | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> HeartbeatSpy:
        """Start polling."""
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.is_set():
            control = self.control_dir
            if control is None and self.jobs_dir.is_dir():
                for entry in os.scandir(self.jobs_dir):
                    if entry.name.startswith(self.prefix) and entry.is_dir():
                        control = self.control_dir = Path(entry.path)
                        break
            if control is not None and (control / "heartbeat.json").exists():
                self.found_at = time.perf_counter() - self.t0
                return
            time.sleep(0.001)

    def wait(self, timeout: float) -> float | None:
        """Seconds from ``t0`` to the first heartbeat, or None after ``timeout``."""
        self._thread.join(timeout)
        self._stop.set()
        return self.found_at


def run(n: int, out: Path) -> dict[str, Any]:
    """Launch ``n`` jobs through the magic and write the summary JSON to ``out``."""
    from IPython.core.interactiveshell import InteractiveShell

    from rgt_jupyter.api import Job

    with tempfile.TemporaryDirectory(prefix="rgt-bench-") as tmp:
        project = Path(tmp).resolve()
        os.environ["RGT_PROJECT"] = str(project)
        jobs_dir = project / ".rgt" / "local" / "jobs"
        shell = InteractiveShell.instance()
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink):
            shell.run_cell("%load_ext rgt_jupyter", store_history=False).raise_error()
        control: list[float] = []
        heartbeat: list[float] = []
        for i in range(n):
            name = f"bench-{i:03d}"
            t0 = time.perf_counter()
            spy = HeartbeatSpy(jobs_dir, name, t0).start()
            with contextlib.redirect_stdout(sink):
                result = shell.run_cell(f"%%remote_run --name {name}\n{CELL}", store_history=False)
            control_s = time.perf_counter() - t0
            result.raise_error()
            job = Job.from_registry(name, project)
            beat_s = spy.wait(timeout=30.0)
            if beat_s is None:
                raise RuntimeError(f"{job.id}: no heartbeat.json within 30 s of the launch")
            if spy.control_dir != Path(job.spec.control_dir):
                raise RuntimeError(f"{job.id}: heartbeat seen in {spy.control_dir}, not its own")
            state = job.wait(timeout=60.0)
            if state != "finished":
                raise RuntimeError(f"{job.id} ended {state}:\n{job.log()}")
            control.append(control_s)
            heartbeat.append(beat_s)
        os.environ.pop("RGT_PROJECT", None)

    report: dict[str, Any] = {
        "benchmark": "launch_local",
        "description": "%%remote_run on the local profile, driven through IPython's "
        "InteractiveShell; seconds from run_cell start",
        "n": n,
        "cell": CELL,
        "control_returned_s": summarize(control),
        "first_heartbeat_s": summarize(heartbeat),
        "first_launch": {"control_returned_s": control[0], "first_heartbeat_s": heartbeat[0]},
        "samples": {"control_returned_s": control, "first_heartbeat_s": heartbeat},
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the benchmark, print a one-line summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="number of launches (default 20)")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "launch_local.json",
        help="where to write the JSON (default: bench/results/launch_local.json)",
    )
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    report = run(args.n, args.out)
    c, h = report["control_returned_s"], report["first_heartbeat_s"]
    print(
        f"launch_local n={report['n']}: control returned median {c['median'] * 1e3:.0f} ms "
        f"(p90 {c['p90'] * 1e3:.0f}, min {c['min'] * 1e3:.0f}, max {c['max'] * 1e3:.0f}); "
        f"first heartbeat median {h['median'] * 1e3:.0f} ms "
        f"(p90 {h['p90'] * 1e3:.0f}, min {h['min'] * 1e3:.0f}, max {h['max'] * 1e3:.0f}) "
        f"-> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
