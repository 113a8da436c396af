"""Benchmark: what watching many Slurm jobs costs the scheduler, and how soon a state shows.

On the one-node test cluster (``tests/slurm_cluster.py``: the running one when ``scontrol ping``
answers, else one started for the run), in a temporary project whose profile ``here`` extends
``slurm`` on this machine (the login node), it launches ``--jobs`` jobs that each sleep
``--sleep`` seconds (the node runs 8 at a time, the rest wait PENDING), and follows all of them
with the process's watcher (one subscription per job, as ``%watch`` views do) for ``--window``
seconds. Recorded:

* ``scheduler_calls_per_min``: squeue/sacct commands the notebook ran, per minute of watching,
  next to ``watcher_polls_per_min`` (rounds over all jobs) and what one call per job per round
  would have cost (``per_job_calls_per_min``);
* ``sbatch_to_visible_s``: per job, seconds from the launch returning (``sbatch`` done) to the
  watcher's first snapshot carrying Slurm's state;
* side by side on the same cluster: one batched ``squeue`` for every job vs one ``squeue -j`` per
  job (``batched_squeue_s`` / ``per_job_squeue_s``).

Writes ``bench/results/slurm_watch.json`` (or ``--out``). The goal is one batched scheduler call
per poll, not one per job.

    python bench/slurm_watch.py [--jobs 50] [--window 60] [--sleep 30] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rgt_jupyter import submit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _ssh_env import machine_info, summarize  # noqa: E402 - also puts the repo on sys.path

PROFILE = """\
name = "here"
extends = "slurm"
transport = "local"
smoke_default = false
workdir = "{root}/jobs"
durable_dir = "{root}/durable"
scratch_dir = "{root}/scratch"

[[tiers]]
path = "{root}"
label = "shared filesystem"
survives_stop = true
survives_destroy = true
"""


@contextlib.contextmanager
def cluster(root: Path) -> Iterator[str]:
    """The running cluster, or one started under ``root`` until the block ends."""
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, check=False)
    if ping.returncode == 0 and "UP" in ping.stdout:
        yield "already running"
        return
    from tests.slurm_cluster import start_slurm

    with start_slurm(root) as running:
        running.wait_idle()
        yield "started for this run"


def run(n: int, window: float, sleep: float, out: Path) -> dict[str, Any]:
    """Launch ``n`` jobs, watch them for ``window`` seconds, write the summary to ``out``."""
    from rgt_jupyter.api import Job
    from rgt_jupyter.backends.slurm.queue import slurm_queue
    from rgt_jupyter.jobs.request import LaunchRequest
    from rgt_jupyter.jobs.snapshot import Snapshot
    from rgt_jupyter.run.watch.watcher import Watcher

    program = f"import time\ntime.sleep({sleep})\n"
    with tempfile.TemporaryDirectory(prefix="rgt-bench-slurm-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp).resolve()
        project = root / "proj"
        (project / ".rgt" / "profiles").mkdir(parents=True)
        (project / ".rgt" / "profiles" / "here.toml").write_text(
            PROFILE.replace("{root}", str(root / "cluster"))
        )
        with cluster(root / "slurm") as where:
            jobs: list[Job] = []
            submitted: dict[str, float] = {}
            for i in range(n):
                req = LaunchRequest(program=program, name=f"w{i:03d}", profile="here")
                job = submit(req, project)
                submitted[job.id] = time.monotonic()
                jobs.append(job)
            queue = slurm_queue()
            host = jobs[0].transport.host
            calls_before = queue.calls.get(host, 0)
            visible: dict[str, float] = {}
            lock = threading.Lock()

            def seen(job_id: str) -> Any:
                def callback(snap: Snapshot) -> None:
                    with lock:
                        if snap.scheduler and job_id not in visible:
                            visible[job_id] = time.monotonic() - submitted[job_id]

                return callback

            watcher = Watcher()
            rounds = 0
            start = time.monotonic()
            keys = [watcher.subscribe(job, seen(job.id)) for job in jobs]
            last_tick = None
            while time.monotonic() - start < window:
                if watcher.last_tick != last_tick:
                    rounds += 1
                    last_tick = watcher.last_tick
                time.sleep(0.01)
            minutes = (time.monotonic() - start) / 60
            calls = queue.calls.get(host, 0) - calls_before
            for key in keys:
                watcher.unsubscribe(key)
            ids = [j.spec.slurm_job_id for j in jobs]
            batched = _timed(["squeue", "-h", "-t", "all", f"--jobs={','.join(ids)}"])
            per_job = sum(_timed(["squeue", "-h", "-t", "all", "-j", i]) for i in ids)
            subprocess.run(["scancel", *ids], check=False)
            states = _settled(jobs, ids)
        _remove(root)
    report: dict[str, Any] = {
        "benchmark": "slurm_watch",
        "description": "a notebook's watcher following N Slurm jobs on the one-node test "
        "cluster (login node = this machine)",
        "cluster": where,
        "jobs": n,
        "window_s": window,
        "job_sleep_s": sleep,
        "scheduler_calls": calls,
        "scheduler_calls_per_min": calls / minutes,
        "watcher_polls_per_min": rounds / minutes,
        "per_job_calls_per_min": rounds * n / minutes,
        "goal_one_batched_call_per_poll": calls <= rounds,
        "sbatch_to_visible_s": summarize(list(visible.values())) if visible else None,
        "jobs_never_visible": n - len(visible),
        "batched_squeue_s": batched,
        "per_job_squeue_s": per_job,
        "states_at_end": sorted(states),
        "machine": machine_info(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def _settled(jobs: list[Any], ids: list[str], bound: float = 300.0) -> set[str]:
    """The jobs' states once Slurm lists none of them and their agents stopped writing.

    A cancelled job's agent still records its ending after ``scancel`` returns; removing the
    project under it would race those writes.
    """
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        queued = subprocess.run(
            ["squeue", "-h", "-o", "%i", f"--jobs={','.join(ids)}"],
            capture_output=True,
            text=True,
            check=False,
        )
        states = {j.snapshot(log_lines=0).state for j in jobs}
        if not queued.stdout.strip() and not states & {"running", "queued", "starting"}:
            return states
        time.sleep(1.0)
    return {j.snapshot(log_lines=0).state for j in jobs}


def _remove(root: Path, bound: float = 60.0) -> None:
    """Remove the bench's project, retrying while a late writer still adds files to it."""
    deadline = time.monotonic() + bound
    while True:
        try:
            shutil.rmtree(root)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--sleep", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "slurm_watch.json")
    args = parser.parse_args()
    os.environ["RGT_AUDIT_TORCH"] = "0"
    report = run(args.jobs, args.window, args.sleep, args.out)
    print(
        json.dumps(
            {
                k: report[k]
                for k in ("scheduler_calls_per_min", "watcher_polls_per_min", "sbatch_to_visible_s")
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
