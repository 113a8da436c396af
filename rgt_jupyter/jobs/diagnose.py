"""Failure triage: a job's records -> one failure class with its fixed remedy.

Pure and fast: it reads only what it is given (the exit record, the error record, the log tail,
progress records and the cgroup ``oom_kill`` counts), so it can run on every poll and in tests.
Each class maps to one remedy, and only classes whose cause is outside the code (preemption, the
wall-clock limit) say an identical retry makes sense: retrying a bug or an OOM fails the same way.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal[
    "cuda_oom",
    "cgroup_oom",
    "nan_metrics",
    "disk_full",
    "inodes_full",
    "preempted",
    "budget",
    "nccl_timeout",
    "walltime",
    "python_exception",
    "killed",
    "unknown",
]
Retry = Literal["identical", "after_fix"]

#: Log/error patterns, one row per class. Inodes come before disk_full because an inode
#: exhaustion message usually also says "No space left on device"; only words that say the
#: inodes ran out count (a message that merely counts free inodes does not), and where the
#: disks' numbers are known they decide between the two (:func:`_full_kind`).
PATTERNS: tuple[tuple[Kind, re.Pattern[str]], ...] = (
    (
        "cuda_oom",
        re.compile(
            r"CUDA out of memory|CUDA error: out of memory|torch\.(?:cuda\.)?OutOfMemoryError"
            r"|CUBLAS_STATUS_ALLOC_FAILED"
        ),
    ),
    (
        "inodes_full",
        re.compile(
            r"(?i)\b(?:out of|no free|no more|ran out of)\s+inodes?\b"
            r"|\binodes?\s+(?:are\s+|were\s+)?(?:exhausted|used up|full|at 100%|100% used)"
            r"|\binode\s+(?:quota|limit)\b"
        ),
    ),
    (
        "disk_full",
        re.compile(
            r"No space left on device|\bENOSPC\b|\[Errno 28\]|basic_ios::clear: iostream error"
            r"|unexpected pos \d+ vs \d+|Disk quota exceeded|\bEDQUOT\b"
        ),
    ),
    (
        "nccl_timeout",
        re.compile(
            r"Watchdog caught collective operation timeout"
            r"|NCCL.*(?:[Tt]imeout|timed out)|(?:[Tt]imeout|timed out).*NCCL"
        ),
    ),
    ("walltime", re.compile(r"DUE TO TIME LIMIT|DeadlineExceeded")),
    ("preempted", re.compile(r"DUE TO PREEMPTION")),
)

#: The fixed remedy of each class, and whether an identical retry can succeed.
REMEDIES: dict[Kind, tuple[str, Retry]] = {
    "cuda_oom": (
        "lower the batch size or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; "
        "check for other processes holding GPU memory (fuser -v /dev/nvidia*)",
        "after_fix",
    ),
    "cgroup_oom": (
        "the container ran out of RAM: size num_workers x per-worker RSS to the cgroup "
        "memory.max; do not shrink the batch, the GPU was not the limit",
        "after_fix",
    ),
    "nan_metrics": (
        "training diverged: lower the learning rate, add warmup or gradient clipping, check "
        "the data and mixed-precision loss scaling, then resume from a checkpoint before the NaN",
        "after_fix",
    ),
    "disk_full": (
        "free space (prune latest/periodic checkpoints and stray *.tmp files) or expand the "
        "disk, with approval; check df -h before re-running",
        "after_fix",
    ),
    "inodes_full": (
        "the filesystem ran out of inodes: check df -i, clear small-file caches, and shard "
        "small files into tar archives",
        "after_fix",
    ),
    "preempted": (
        "the machine was reclaimed: re-run to resume from the last checkpoint",
        "identical",
    ),
    "budget": (
        "it saved and stopped at its budget: `rgt resume JOB --budget USD` with a larger one "
        "goes on from that checkpoint; `rgt down JOB` stops the machine's meter behind the gate",
        "after_fix",
    ),
    "nccl_timeout": (
        "the process-group timeout fired: find the dead or stuck rank, and check "
        "NCCL_SOCKET_IFNAME and the InfiniBand settings (NCCL_IB_*) before re-running",
        "after_fix",
    ),
    "walltime": (
        "the job hit its time limit: resume from the checkpoint with a longer --time",
        "identical",
    ),
    "python_exception": (
        "a bug in the code: fix it first, a retry will fail the same way",
        "after_fix",
    ),
    "killed": (
        "killed by SIGKILL with no OOM evidence: it may be the OOM killer or a kill -9; "
        "check dmesg (killed process / out of memory) and the cgroup memory.events",
        "after_fix",
    ),
    "unknown": (
        "read the log tail and dmesg to find the cause before re-running",
        "after_fix",
    ),
}

_SUMMARIES: dict[Kind, str] = {
    "cuda_oom": "the GPU ran out of memory",
    "disk_full": "the disk filled up",
    "inodes_full": "the filesystem ran out of inodes",
    "nccl_timeout": "a collective operation timed out (NCCL)",
    "walltime": "the job hit its wall-clock limit",
    "preempted": "the machine was preempted",
    "budget": "the job reached its budget and was told to save and stop",
}

#: Keys of a progress record that are bookkeeping, not metrics.
_NOT_METRICS = frozenset({"t", "step", "total"})
_BAD_STRINGS = frozenset({"nan", "-nan", "inf", "-inf", "+inf", "infinity", "-infinity"})
_MAX_EVIDENCE = 3
_MAX_EVIDENCE_CHARS = 300
_SUMMARY_QUOTE_CHARS = 120


@dataclass(frozen=True)
class Diagnosis:
    """One failure class, in plain words, with its fixed remedy."""

    kind: Kind
    summary: str
    remedy: str
    retry: Retry
    evidence: tuple[str, ...] = ()


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _make(kind: Kind, summary: str, evidence: tuple[str, ...]) -> Diagnosis:
    remedy, retry = REMEDIES[kind]
    kept = tuple(_clip(line, _MAX_EVIDENCE_CHARS) for line in evidence[:_MAX_EVIDENCE])
    return Diagnosis(kind, summary, remedy, retry, kept)


def _from_log(kind: Kind, lines: list[str]) -> Diagnosis:
    summary = f"{_SUMMARIES[kind]} (log: {_clip(lines[0], _SUMMARY_QUOTE_CHARS)})"
    return _make(kind, summary, tuple(lines))


def _error_lines(error: dict[str, Any] | None) -> list[str]:
    if not error:
        return []
    lines = [f"{error.get('type', '')}: {error.get('message', '')}"]
    formatted = error.get("formatted")
    if isinstance(formatted, str):
        lines.extend(formatted.splitlines())
    return lines


def _matches(lines: list[str]) -> dict[Kind, list[str]]:
    found: dict[Kind, list[str]] = {}
    for line in lines:
        for kind, pattern in PATTERNS:
            if pattern.search(line):
                found.setdefault(kind, []).append(line.strip())
                # One class per line: the table is ordered so the first row is the specific one.
                break
    return found


def _bad_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return not math.isfinite(value)
    if isinstance(value, str):
        return value.strip().lower() in _BAD_STRINGS
    return False


def _first_nan(progress: list[dict[str, Any]] | None) -> tuple[str, Any, Any] | None:
    for index, record in enumerate(progress or []):
        for key, value in record.items():
            if key not in _NOT_METRICS and _bad_number(value):
                return key, record.get("step", index), value
    return None


def _full_kind(regex_kind: Kind, disks: list[dict[str, int]] | None) -> Kind:
    """Disk full or out of inodes, from the disks' numbers at the end when they are known
    (an ENOSPC says "No space left on device" for both), else from the words."""
    if not disks:
        return regex_kind

    def short(free: int | None, total: int | None, floor: int) -> bool:
        if not total or free is None:
            return False
        return free <= max(floor, total // 100)

    inodes = any(short(d.get("inodes_free"), d.get("inodes_total"), 64) for d in disks)
    space = any(short(d.get("bytes_free"), d.get("bytes_total"), 1 << 20) for d in disks)
    if inodes and not space:
        return "inodes_full"
    if space:
        return "disk_full"
    return regex_kind


def _disk_evidence(disks: list[dict[str, int]] | None) -> tuple[str, ...]:
    out = []
    for d in disks or []:
        if d.get("bytes_total") and d.get("inodes_total"):
            used_b = 100 - 100 * d.get("bytes_free", 0) // d["bytes_total"]
            used_i = 100 - 100 * d.get("inodes_free", 0) // d["inodes_total"]
            out.append(f"disk {used_b}% used, inodes {used_i}% used")
    return tuple(out)


def classify(
    *,
    exit_code: int | None,
    signal: str | None,
    log_lines: list[str],
    error: dict[str, Any] | None = None,
    progress: list[dict[str, Any]] | None = None,
    oom_kills_before: int | None = None,
    oom_kills_after: int | None = None,
    reason: str | None = None,
    pg_timeout_s: float | None = None,
    stalled_s: float | None = None,
    state: str | None = None,
    disks: list[dict[str, int]] | None = None,
) -> Diagnosis | None:
    """Classify a job's failure from its records; None when nothing is wrong.

    Rules run most specific first. NaN/Inf metrics count as a failure even after exit 0,
    because a diverged run that exits cleanly has still wasted its compute.
    """
    found = _matches(list(log_lines) + _error_lines(error))
    sigkill = signal == "SIGKILL" or exit_code == 137
    oom_grew = (
        oom_kills_before is not None
        and oom_kills_after is not None
        and oom_kills_after > oom_kills_before
    )
    nan = _first_nan(progress)
    # A clean exit outranks the log: a handled, printed error is not a failure.
    if exit_code == 0 and not signal and nan is None:
        return None

    if "cuda_oom" in found:
        return _from_log("cuda_oom", found["cuda_oom"])
    if sigkill and oom_grew:
        fact = f"cgroup oom_kill {oom_kills_before} -> {oom_kills_after}"
        return _make(
            "cgroup_oom",
            f"killed by the kernel OOM killer: the container hit its memory limit ({fact})",
            (f"exit {exit_code} / {signal}", fact),
        )
    for kind in ("inodes_full", "disk_full"):
        if kind in found:
            full = _full_kind(kind, disks)
            diagnosis = _from_log(full, found[kind])
            facts = _disk_evidence(disks)
            return _make(full, diagnosis.summary, (*diagnosis.evidence, *facts))
    if "nccl_timeout" in found:
        return _from_log("nccl_timeout", found["nccl_timeout"])
    if stalled_s is not None and pg_timeout_s is not None and stalled_s >= pg_timeout_s:
        fact = f"stalled {stalled_s:.0f} s >= process-group timeout {pg_timeout_s:.0f} s"
        return _make("nccl_timeout", f"{_SUMMARIES['nccl_timeout']}: {fact}", (fact,))
    if "walltime" in found:
        return _from_log("walltime", found["walltime"])
    if reason == "walltime":
        return _make(
            "walltime", f"{_SUMMARIES['walltime']} (reason: walltime)", ("reason: walltime",)
        )
    if reason == "budget":
        return _make("budget", _SUMMARIES["budget"], ("reason: budget",))
    if "preempted" in found:
        return _from_log("preempted", found["preempted"])
    if reason == "preempted" or state == "preempted":
        fact = f"state/reason preempted, signal {signal}"
        return _make("preempted", f"{_SUMMARIES['preempted']} ({fact})", (fact,))
    if sigkill:
        return _make(
            "killed",
            f"killed by SIGKILL (exit {exit_code}) with no cgroup OOM kill recorded",
            (f"exit {exit_code} / {signal}",),
        )
    if nan is not None:
        key, step, value = nan
        fact = f"{key}={value} at step {step}"
        return _make("nan_metrics", f"metric '{key}' became {value} first at step {step}", (fact,))
    if error:
        head = f"{error.get('type')}: {error.get('message')}"
        return _make("python_exception", f"the code raised {head}", (head,))
    if exit_code is None and not signal:
        # Still running (or never reported) with nothing matched: no failure to name yet.
        return None
    last = next((line.strip() for line in reversed(log_lines) if line.strip()), "")
    how = f"signal {signal}" if signal else f"exit code {exit_code}"
    evidence = (how, last) if last else (how,)
    return _make("unknown", f"the job ended with {how} and no recognised cause", evidence)
