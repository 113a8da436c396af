"""Plain-text and HTML views of jobs and runs, and remote tracebacks (no ipywidgets here)."""

from __future__ import annotations

import html
import os
from typing import Any

from .status import ANSI_RE, Snapshot

_COLORS = {
    "queued": "#888",
    "running": "#1f6feb",
    "finished": "#1a7f37",
    "failed": "#cf222e",
    "preempted": "#9a6700",
    "lost": "#cf222e",
}
RED, CYAN, RESET = "\x1b[31m", "\x1b[36m", "\x1b[0m"


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def progress_text(progress: dict[str, Any] | None) -> str:
    """``step 40/100 (40%)  loss=0.1234`` from the newest progress record."""
    if not progress:
        return "no progress reported yet"
    step, total = progress.get("step", 0), progress.get("total")
    text = f"step {step}/{total} ({100 * step / total:.0f}%)" if total else f"step {step}"
    metrics = [
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in progress.items()
        if k not in ("t", "step", "total")
    ]
    return "  ".join([text, *metrics])


def scheduler_text(snap: Snapshot) -> str:
    """The scheduler's word for the job and how often it restarted it (SLURM_RESTART_COUNT)."""
    parts = [snap.scheduler] if snap.scheduler else []
    if snap.restarts:
        parts.append(f"restarted {snap.restarts} time(s), resumed from its checkpoint")
    return "; ".join(parts)


def snapshot_text(snap: Snapshot, traceback_lines: list[str] | None = None) -> str:
    """A compact plain-text status block."""
    head = f"{snap.job_id} [{snap.state}] on {snap.host}"
    if snap.resume_attempt > 1:
        head += f" (attempt {snap.resume_attempt})"
    lines = [
        head,
        f"  progress: {progress_text(snap.progress)}",
        f"  elapsed: {_dur(snap.elapsed)}   heartbeat: "
        + ("-" if snap.heartbeat_age is None else f"{snap.heartbeat_age:.1f}s ago")
        + ("" if snap.exit_code is None else f"   exit: {snap.exit_code}"),
    ]
    if snap.scheduler or snap.restarts:
        lines.append(f"  scheduler: {scheduler_text(snap)}")
    if snap.diagnosis:
        lines.append(f"  diagnosis: {snap.diagnosis}")
    if snap.audit:
        lines.append("  machine: " + "; ".join(snap.audit))
    if snap.cost:
        lines.append(f"  cost: {snap.cost}")
    if snap.log_tail:
        lines.append("  log:")
        lines.extend("    " + line for line in snap.log_tail)
    if traceback_lines:
        lines.append("  traceback:")
        lines.extend("    " + strip_ansi(line) for line in traceback_lines)
    return "\n".join(lines)


def snapshot_html(snap: Snapshot, traceback_lines: list[str] | None = None) -> str:
    """The same status block as HTML (all job text escaped)."""
    color = _COLORS.get(snap.state, "#888")
    e = html.escape
    rows = [
        f"<b>{e(snap.job_id)}</b> <span style='color:{color};font-weight:bold'>{e(snap.state)}"
        f"</span> on {e(snap.host)}",
        f"<div>{e(progress_text(snap.progress))}</div>",
        f"<div>elapsed {_dur(snap.elapsed)} · heartbeat "
        + ("-" if snap.heartbeat_age is None else f"{snap.heartbeat_age:.1f}s ago")
        + ("" if snap.exit_code is None else f" · exit {snap.exit_code}")
        + "</div>",
    ]
    total = (snap.progress or {}).get("total")
    if total:
        rows.append(
            f"<progress value='{snap.progress['step']}' max='{total}' "  # type: ignore[index]
            "style='width:100%'></progress>"
        )
    if snap.scheduler or snap.restarts:
        rows.append(f"<div style='color:#666'>scheduler: {e(scheduler_text(snap))}</div>")
    if snap.diagnosis:
        rows.append(f"<div><i>{e(snap.diagnosis)}</i></div>")
    if snap.audit:
        rows.append(f"<div style='color:#666'>machine: {e('; '.join(snap.audit))}</div>")
    if snap.cost:
        rows.append(f"<div style='color:#666'>cost: {e(snap.cost)}</div>")
    if snap.log_tail:
        rows.append(
            "<pre style='max-height:14em;overflow:auto'>" + e("\n".join(snap.log_tail)) + "</pre>"
        )
    if traceback_lines:
        rows.append(
            "<pre style='color:#cf222e'>"
            + e("\n".join(strip_ansi(t) for t in traceback_lines))
            + "</pre>"
        )
    return "<div class='rgt-job'>" + "".join(rows) + "</div>"


def strip_ansi(text: str) -> str:
    """Remove ANSI escape codes (colours in traceback lines)."""
    return ANSI_RE.sub("", text)


def traceback_lines(
    error: dict[str, Any], program: str, line_offset: int, label: str, job_id: str, host: str
) -> list[str]:
    """Render a job's ``error.json`` like IPython does, with the cell's own line numbers.

    Frames in the job's program are shown as ``Cell <label>, line N`` where N counts lines of the
    notebook cell (the ``%%remote_run`` line included); other frames keep their file names.
    """
    program = os.path.abspath(program)
    out = [
        f"{RED}{'-' * 75}{RESET}",
        f"{RED}{error.get('type')}{RESET}  (raised in job {job_id} on {host})",
    ]
    syntax = error.get("syntax")
    frames = error.get("frames") or []
    for frame in frames:
        if os.path.abspath(str(frame.get("file"))) == program:
            out.append(
                f"{CYAN}Cell {label}, line {int(frame['line']) + line_offset}{RESET}, "
                f"in {frame.get('name')}"
            )
        else:
            out.append(
                f"  File {frame.get('file')!r}, line {frame.get('line')}, in {frame.get('name')}"
            )
        if frame.get("text"):
            out.append(f"    {frame['text']}")
    if syntax:
        where = (
            f"Cell {label}, line {int(syntax['line']) + line_offset}"
            if syntax.get("line") is not None
            and os.path.abspath(str(syntax.get("file"))) == program
            else f"File {syntax.get('file')!r}, line {syntax.get('line')}"
        )
        out.append(f"{CYAN}{where}{RESET}")
        text = (syntax.get("text") or "").rstrip("\n")
        if text:
            out.append(f"    {text}")
            if syntax.get("offset"):
                out.append("    " + " " * (int(syntax["offset"]) - 1) + "^")
    out.append(f"{RED}{error.get('type')}{RESET}: {error.get('message')}")
    return out


def transfer_text(done: int, total: int, path: str, elapsed: float) -> str:
    """``pulling 12.0 MB / 30.0 MB (40%) at 55.1 MB/s: outputs/x.pt``."""
    pct = 100 * done / total if total else 100
    rate = done / elapsed / 1e6 if elapsed > 0 else 0.0
    return f"pulling {done / 1e6:.1f} MB / {total / 1e6:.1f} MB ({pct:.0f}%) at {rate:.1f} MB/s: {path}"
