"""Output back in the cell: a kernel restart during ``%watch --wait`` loses and repeats nothing,
a new kernel re-binds to the notebook's job, a re-run cell does not launch twice, and a finished
job's output comes back into the cell that launched it. Real kernels, real detached jobs."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from rgt_jupyter.store.registry import Registry

from ..conftest import wait_for
from ..kernels import Outputs, _kernel_spec_manager, _shutdown, _start_kernel, collect, send
from .evidence import Evidence

NOTEBOOK = "analysis/train.ipynb"
N_LINES = 80

# Each line is written in two pieces with a pause between, so the watcher also meets lines
# that are not finished yet.
JOB_CELL = f"""%%remote_run --name restart
import os, sys, time
import rgt_jupyter.job as job

for i in range(1, {N_LINES} + 1):
    sys.stdout.write(f"line {{i:03d}}")
    sys.stdout.flush()
    time.sleep(0.04)
    sys.stdout.write(" \\x1b[32mok\\x1b[0m\\n")
    sys.stdout.flush()
    time.sleep(0.04)
    job.progress(i, {N_LINES}, loss=1.0 / i)
job.save_results({{"lines": {N_LINES}}})
with open(os.path.join(job.out_dir(), "curve.svg"), "w") as fh:
    fh.write('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>')
"""


def _lines(out: Outputs) -> list[str]:
    return re.findall(r"^line \d{3} ok$", out.stream, flags=re.M)


@pytest.mark.fault(
    "F10-kernel-watch",
    asserts="a kernel SIGKILLed during %watch --wait: a new kernel's bare %watch --wait shows "
    "exactly the lines not shown yet (nothing lost, nothing doubled); re-running the launch cell "
    "re-binds instead of launching twice",
    mutation=(
        "rgt_jupyter/magics.py",
        "job.set_log_offset(consumer, offset)",
        "None",
    ),
)
def test_kernel_restart_during_watch_resumes_the_log_exactly(
    tmp_path: Path, project: Path, evidence: Evidence
) -> None:
    """Real kernels, a real detached job writing 80 lines in pieces.

    Protection: rgt_jupyter/magics.py ``%watch --wait``: after each shown batch the byte offset
    reached is stored for this notebook (``registry.set_log_offset``); removed, the new kernel
    starts the log over, lines are shown twice and the case fails.
    """
    ksm = _kernel_spec_manager(tmp_path)
    env = {"JPY_SESSION_NAME": NOTEBOOK}
    km1 = kc1 = km2 = kc2 = None
    try:
        km1, kc1 = _start_kernel(project, ksm, env)
        collect(kc1, send(kc1, "%load_ext rgt_jupyter"))
        launched = collect(kc1, send(kc1, JOB_CELL, cell_id="cell-train"))
        assert not launched.errors, launched.text
        meta = [d.get("metadata", {}) for d in launched.displays]
        job_id = next(m["rgt_jupyter"]["job_id"] for m in meta if "rgt_jupyter" in m)

        # Kernel 1 streams the log, and is killed part way through.
        watch_id = send(kc1, "%watch --wait", cell_id="cell-watch")
        first = collect(kc1, watch_id, until=lambda out: len(_lines(out)) >= 20, timeout=120)
        # The restart comes at a moment of its own, not in the instant a batch was shown (a
        # kernel killed between showing a batch and storing its offset shows it once more).
        time.sleep(0.3)
        os.kill(km1.provisioner.process.pid, signal.SIGKILL)
        km1.provisioner.process.wait(timeout=10)
        # Everything the dead kernel sent before it died, and nothing else, counts as shown.
        collect(kc1, watch_id, first, lambda out: time.monotonic() - out.changed_at > 1, 30)
        _shutdown(km1, kc1)
        km1 = kc1 = None
        shown_before = _lines(first)
        assert 20 <= len(shown_before) < N_LINES, "the job ended before the kernel was killed"

        # Kernel 2 (same notebook): re-running the launch cell re-binds, no second job.
        km2, kc2 = _start_kernel(project, ksm, env)
        collect(kc2, send(kc2, "%load_ext rgt_jupyter"))
        rerun = collect(kc2, send(kc2, JOB_CELL, cell_id="cell-train"))
        assert not rerun.errors, rerun.text
        assert "instead of launching a second one" in rerun.stream or "finished at" in rerun.stream
        assert len(Registry(project).jobs()) == 1

        # A fresh kernel's bare %watch finds the notebook's job and resumes its log.
        km2_kc = kc2
        second = collect(km2_kc, send(km2_kc, "%watch --wait", cell_id="cell-watch"), timeout=120)
        assert not second.errors, second.text
        shown_after = _lines(second)
        expected = [f"line {i:03d} ok" for i in range(1, N_LINES + 1)]
        shown = shown_before + shown_after
        missing = [line for line in expected if line not in shown]
        evidence.lost(sum(len(line) + 1 for line in missing), f"{len(missing)} log lines unshown")
        assert shown == expected  # nothing lost, nothing repeated
        consumer_offset = Registry(project).log_offset(job_id, NOTEBOOK)
        log = Path(Registry(project).get(job_id)["spec"]["control_dir"]) / "log"
        assert consumer_offset == log.stat().st_size

        # The job finished: running the launch cell again shows its output, launches nothing.
        restored = collect(kc2, send(kc2, JOB_CELL, cell_id="cell-train"))
        assert "its output is shown again" in restored.stream, restored.text
        kinds = [set(d["data"]) for d in restored.displays]
        # results.json: as an HTML table, its data under a type no frontend ranks above HTML.
        assert any({"text/html", "application/vnd.rgt.results+json"} <= k for k in kinds)
        assert not any("application/json" in k for k in kinds)
        assert any("image/svg+xml" in k for k in kinds)  # the figure it saved
        assert any("line 080 ok" in d["data"].get("text/plain", "") for d in restored.displays)
        assert len(Registry(project).jobs()) == 1

        # --new launches a second job from the same cell.
        again = collect(kc2, send(kc2, JOB_CELL.replace("--name", "--new --name"), "cell-train"))
        assert not again.errors, again.text
        wait_for(lambda: len(Registry(project).jobs()) == 2, 30, "the second launch")
    finally:
        _shutdown(km1, kc1)
        _shutdown(km2, kc2)
