"""Benchmark: how much the notebook process's memory grows while ``%pull`` brings a large run.

In a temporary dir: starts a throwaway OpenSSH server on 127.0.0.1 (``tests/sshd.py``) with the
tests' ssh_config, known_hosts and project profile ``box``, launches a job over SSH that writes
``--size-gib`` GiB of random bytes (one file), then, for each transfer setting, starts a fresh
Python process that plays the notebook: an IPython shell with ``%load_ext rgt_jupyter`` that
first looks at the job (connection up, modules loaded), then runs ``%pull NAME``. A thread samples
that process's resident set size (``VmRSS``) every 20 ms; the figure is the peak during the pull
minus the size just before it. Writes ``bench/results/pull_rss.json`` (or ``--out``).

    python bench/pull_rss.py [--size-gib 10] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rgt_jupyter import submit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _ssh_env import machine_info, ssh_box  # noqa: E402

GOAL_BYTES = 64 << 20
JOB = """\
import os, rgt_jupyter.job as job
left = {size}
with open(os.path.join(os.environ["RGT_OUT"], "random.bin"), "wb") as fh:
    while left:
        n = min(left, 16 << 20)
        fh.write(os.urandom(n))
        left -= n
job.save_results({{"bytes": {size}}})
"""


def rss_bytes() -> int:
    """This process's resident set size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(name: str, to: str) -> dict[str, Any]:
    """In the notebook-like process: look at the job, then pull it while sampling RSS."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "rgt_jupyter")
    with capture_output():
        shell.run_line_magic("watch", name)  # the connection and the modules are in place
    import rgt_jupyter.run.pull  # noqa: F401 - loaded before the baseline, as a notebook would have

    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(rss_bytes())
            time.sleep(0.02)

    before = rss_bytes()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    with capture_output():
        run = shell.run_line_magic("pull", f"{name} --to {to}")
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    from rgt_jupyter.api import Job
    from rgt_jupyter.transport.ssh import connect

    project = Path(os.environ["RGT_PROJECT"])
    transport = connect(Job.from_registry(name, project).spec.host_alias, project)
    return {
        "verified": bool(run.verified),
        "stream": transport.last_stream,
        "seconds": seconds,
        "rss_before_bytes": before,
        "rss_peak_bytes": max(samples + [rss_bytes()]),
        "rss_growth_bytes": max(samples + [rss_bytes()]) - before,
        "samples": len(samples),
    }


def run(size_gib: float, out: Path) -> dict[str, Any]:
    """Set up the box, write the job's file, measure each transfer setting, write ``out``."""
    from rgt_jupyter.jobs.request import LaunchRequest

    size = int(size_gib * (1 << 30))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="rgt-bench-rss-") as tmp_str:
        tmp = Path(tmp_str).resolve()
        with ssh_box(tmp) as box:
            request = LaunchRequest(
                program=JOB.format(size=size),
                name="rss",
                profile=box.profile,
                host=box.alias,
                smoke=False,
            )
            job = submit(request, box.project)
            if job.wait(timeout=3600) != "finished":
                raise RuntimeError(job.log())
            for method in ("auto", "paramiko"):
                dest = tmp / f"runs-{method}"
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", job.name, str(dest)],
                    env={**os.environ, "RGT_SSH_TRANSFER": method},
                    capture_output=True,
                    text=True,
                    timeout=7200,
                    check=False,
                )
                if proc.returncode != 0:
                    raise RuntimeError(f"the notebook process failed:\n{proc.stderr[-3000:]}")
                result = json.loads(proc.stdout.strip().splitlines()[-1])
                if not result["verified"]:
                    raise RuntimeError(f"the pull with {method} was not verified")
                result["mb_per_s"] = size / result["seconds"] / 1e6
                result["goal_met"] = result["rss_growth_bytes"] <= GOAL_BYTES
                results[f"RGT_SSH_TRANSFER={method}"] = result
                for path in dest.rglob("random.bin"):
                    path.unlink()  # room for the next one
    report = {
        "benchmark": "pull_rss",
        "description": "growth of the notebook process's resident memory while %pull brings one "
        "large file over SSH (loopback OpenSSH server), peak during the pull minus just before",
        "size_bytes": size,
        "goal": f"growth <= {GOAL_BYTES >> 20} MiB",
        "goal_met": all(r["goal_met"] for r in results.values()),
        "results": results,
        **machine_info(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the benchmark (or the notebook-like child), print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gib", type=float, default=10.0, help="file size (default 10)")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "pull_rss.json",
        help="where to write the JSON (default: bench/results/pull_rss.json)",
    )
    parser.add_argument("--child", nargs=2, metavar=("NAME", "TO"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    if args.size_gib <= 0:
        parser.error("--size-gib must be positive")
    report = run(args.size_gib, args.out)
    for setting, r in report["results"].items():
        print(
            f"pull_rss {report['size_bytes'] / (1 << 30):.1f} GiB {setting} ({r['stream']}): "
            f"RSS +{r['rss_growth_bytes'] / (1 << 20):.1f} MiB, {r['mb_per_s']:.0f} MB/s"
        )
    print(f"goal met: {report['goal_met']} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
