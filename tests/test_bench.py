"""The benchmarks run end to end (small sizes) and write the figures their docs promise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _bench(script: str, *args: str, timeout: float = 900) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGT_")}
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_transfer_bench_compares_like_with_like(tmp_path: Path) -> None:
    out = tmp_path / "transfer.json"
    _bench(
        "transfer.py", "--scale", "0.002", "--repeats", "1", "--push-rounds", "2", "--out", str(out)
    )
    report = json.loads(out.read_text())
    assert report["parameters"]["cipher"] == "aes128-gcm@openssh.com"
    assert set(report["links"]) == {"near_0ms", "far_40ms_1000mbit"}
    for link in report["links"].values():
        assert set(link) == {
            "pull_one_large_file",
            "pull_many_4k_files",
            "pull_many_1m_files",
            "push_first",
            "push_again",
        }
        assert set(link["pull_one_large_file"]["median_s"]) == {"rgt", "scp", "rsync", "ssh_cat"}
        assert set(link["pull_many_4k_files"]["median_s"]) == {"rgt", "rsync", "tar_ssh"}
        assert set(link["push_first"]["median_s"]) == {"rgt", "rsync"}
        pushes = 2 if link is report["links"]["near_0ms"] else 1  # --push-rounds: near only
        for shape in ("push_first", "push_again"):
            assert {len(v) for v in link[shape]["samples_s"].values()} == {pushes}
        for name, shape in link.items():
            if name.startswith("pull_"):
                assert len(shape["samples_s"]["rgt"]) == 2  # before and after the anchors
            assert all(v > 0 for v in shape["median_s"].values())
    # The far link is far: the same pull of many files takes longer through it.
    near, far = report["links"]["near_0ms"], report["links"]["far_40ms_1000mbit"]
    assert (
        far["pull_many_4k_files"]["median_s"]["rsync"]
        > near["pull_many_4k_files"]["median_s"]["rsync"]
    )
    for case in report["resume"].values():
        assert case["cut"] and case["verified"] and case["bytes_landed_before"] > 0
    fixed = report["fixed_costs"]
    assert fixed["rgt_jobs_1000_ended_s"]["median"] > 0
    assert fixed["rgt_down_recheck_s"]["quickstart_project"]["median"] > 0
    assert isinstance(report["goals"], dict) and report["goals"]


def test_pull_rss_bench_measures_the_notebook_process(tmp_path: Path) -> None:
    out = tmp_path / "rss.json"
    _bench("pull_rss.py", "--size-gib", "0.0625", "--out", str(out))
    report = json.loads(out.read_text())
    results = report["results"]
    assert set(results) == {"RGT_SSH_TRANSFER=auto", "RGT_SSH_TRANSFER=paramiko"}
    for result in results.values():
        assert result["verified"] and result["samples"] > 0
        assert 0 <= result["rss_growth_bytes"] <= 64 << 20


def test_slurm_watch_bench_makes_one_batched_call_per_poll(tmp_path: Path, slurm: Any) -> None:
    out = tmp_path / "slurm_watch.json"
    _bench("slurm_watch.py", "--jobs", "12", "--window", "12", "--sleep", "4", "--out", str(out))
    report = json.loads(out.read_text())
    assert report["cluster"] == "already running"
    assert report["jobs_never_visible"] == 0
    assert report["goal_one_batched_call_per_poll"] is True
    assert report["scheduler_calls_per_min"] < report["per_job_calls_per_min"]
    assert report["sbatch_to_visible_s"]["max"] < 10


def test_watch_bench_reports_each_figure(tmp_path: Path) -> None:
    out = tmp_path / "watch.json"
    _bench("watch.py", "--jobs", "4", "--window", "8", "--out", str(out))
    report = json.loads(out.read_text())
    figures = (
        "remote_requests_per_s",
        "new_connections_per_poll",
        "bytes_per_poll",
        "new_log_bytes_per_poll",
        "bytes_to_new_log_bytes",
        "iopub_msgs_per_s",
        "kernel_cpu_share",
    )
    for name in figures:
        assert isinstance(report[name], int | float), name
    assert set(report["meets_goals"]) == set(report["goals"])
    assert report["ssh"]["watcher_ticks"] > 0 and report["kernel"]["watcher_ticks"] > 0
    assert report["new_connections_per_poll"] == 0
    assert sum(report["ssh"]["remote_requests"].values()) > 0
    assert report["new_log_bytes_per_poll"] > 0 and report["bytes_per_poll"] > 0
    assert report["iopub_msgs_per_s"] > 0  # the views were updated while the jobs ran
    for setup in ("ssh", "kernel"):
        assert report[setup]["job_states_at_end"] == ["finished"], setup


def test_check_numbers_bench_times_a_generated_notebook(tmp_path: Path) -> None:
    out = tmp_path / "check_numbers.json"
    _bench("check_numbers.py", "--cells", "100", "--numbers", "1000", "--out", str(out))
    report = json.loads(out.read_text())
    assert report["cells"] == 100 and report["numbers"] >= 1000
    assert report["items_found"] == report["numbers"]
    summary = report["summary"]
    counted = sum(summary[s] for s in ("typed", "generated", "ignored", "ambiguous"))
    assert counted == summary["total"]
    assert summary["typed"] > 0 and summary["generated"] > 0 and summary["ignored"] > 0
    assert summary["matched"] > 0 and summary["stale"] == 0
    assert len(report["all_seconds"]) == 3 and report["seconds"] == min(report["all_seconds"])
    assert report["numbers_per_second"] > 0
    assert report["goal_seconds"] == 2.0
    assert report["meets_goal"] == (report["seconds"] <= 2.0)
    assert report["machine"]["python"]


def test_launch_local_bench_times_the_magic(tmp_path: Path) -> None:
    out = tmp_path / "launch_local.json"
    _bench("launch_local.py", "--n", "2", "--out", str(out))
    report = json.loads(out.read_text())
    assert report["n"] == 2 and len(report["samples"]["control_returned_s"]) == 2
    assert all(s > 0 for s in report["samples"]["first_heartbeat_s"])


def test_launch_ssh_bench_times_the_magic_over_ssh(tmp_path: Path) -> None:
    out = tmp_path / "launch_ssh.json"
    _bench("launch_ssh.py", "--n", "2", "--out", str(out))
    report = json.loads(out.read_text())
    assert report["benchmark"] == "launch_ssh" and report["n"] == 2


def test_probes_bench_times_both_sides_interleaved(tmp_path: Path) -> None:
    out = tmp_path / "probes.json"
    _bench("probes.py", "--rounds", "2", "--steps", "20", "--width", "64", "--out", str(out))
    report = json.loads(out.read_text())
    assert set(report["samples_step_s"]) == {"plain", "probed"}
    assert all(len(v) == 2 and min(v) > 0 for v in report["samples_step_s"].values())
    assert len(report["block_ratios"]) == 2 and isinstance(report["overhead_percent"], float)
    assert report["goals"] == {"overhead_percent_max": 2.0}
