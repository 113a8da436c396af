"""Plain-text and HTML views of jobs and runs, and remote tracebacks (no ipywidgets here)."""

from __future__ import annotations

import html
import math
from typing import Any

from ..jobs.records import clean_text, finite, short_text
from ..jobs.snapshot import Snapshot

_COLORS = {
    "queued": "#888",
    "running": "#1f6feb",
    "finished": "#1a7f37",
    "failed": "#cf222e",
    "preempted": "#9a6700",
    "lost": "#cf222e",
    "stalled": "#9a6700",
}


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _count(number: float) -> str:
    """A step or a total as the job gave it: whole numbers without a decimal point."""
    return f"{number:.0f}" if number.is_integer() and abs(number) < 1e15 else f"{number:.6g}"


#: At most this many metrics of a progress record are shown.
MAX_METRICS = 12


def progress_text(progress: dict[str, Any] | None) -> str:
    """``step 40/100 (40%)  loss=0.1234`` from the newest progress record."""
    if not progress:
        return "no progress reported yet"
    step, total = finite(progress.get("step")), finite(progress.get("total"))
    if step is None:
        return "no progress reported yet"
    text = (
        f"step {_count(step)}/{_count(total)} ({100 * step / total:.0f}%)"
        if total and total > 0
        else f"step {_count(step)}"
    )
    metrics = []
    for k, v in list(progress.items())[: MAX_METRICS + 3]:
        if k in ("t", "step", "total"):
            continue
        number = finite(v)
        if isinstance(v, float) and number is not None:
            metrics.append(f"{short_text(k, 30)}={v:.4g}")
        else:
            metrics.append(f"{short_text(k, 30)}={short_text(v, 40)}")
    return "  ".join([text, *metrics[:MAX_METRICS]])


def resources_text(res: dict[str, Any] | None) -> str:
    """``GPU 0: 87% · 12.3/80.0 GiB; memory 3.1/16.0 GiB (19%)`` from the agent's last sample
    (empty when it sampled nothing); memory above 90 % of the cgroup's limit is flagged."""
    if not isinstance(res, dict):
        return ""
    parts = []
    gpus = res.get("gpus")
    for gpu in gpus[:16] if isinstance(gpus, list) else []:
        if not isinstance(gpu, dict):
            continue
        util = finite(gpu.get("util")) or 0.0
        used = finite(gpu.get("mem_used_mib")) or 0.0
        total = finite(gpu.get("mem_total_mib")) or 0.0
        parts.append(
            f"GPU {short_text(gpu.get('index'), 8)}: {util:.0f}% · "
            f"{used / 1024:.1f}/{total / 1024:.1f} GiB"
        )
    mem = res.get("memory")
    current = finite(mem.get("current")) if isinstance(mem, dict) else None
    limit = finite(mem.get("max")) if isinstance(mem, dict) else None
    if current and limit:
        share = current / limit
        parts.append(
            f"memory {current / 2**30:.1f}/{limit / 2**30:.1f} GiB ({share:.0%})"
            + (" - near the cgroup limit: OOM risk" if share > 0.9 else "")
        )
    return "; ".join(parts)


def curve_series(records: list[dict[str, Any]]) -> tuple[str, list[tuple[float, float]]] | None:
    """The metric to plot from progress records (``loss`` if present, else the first numeric
    one) and its (step, value) points, finite values only."""
    if len(records) > 400:  # an even sample keeps the curve's shape at a bounded cost
        stride = len(records) / 400
        records = [records[int(i * stride)] for i in range(400)] + [records[-1]]
    keys: list[str] = []
    for rec in records[:50] + records[-50:]:
        for k, v in rec.items():
            if k not in ("t", "step", "total") and isinstance(v, int | float) and k not in keys:
                keys.append(k)
    if not keys:
        return None
    key = "loss" if "loss" in keys else keys[0]
    points = []
    for rec in records:
        v, step = rec.get(key), rec.get("step")
        if isinstance(v, int | float) and isinstance(step, int | float) and math.isfinite(v):
            points.append((float(step), float(v)))
    return (key, points) if len(points) >= 2 else None


def curve_svg(records: list[dict[str, Any]], width: int = 320, height: int = 90) -> str:
    """A small inline SVG line chart of the job's loss (or first metric) against its step."""
    series = curve_series(records)
    if series is None:
        return ""
    key, points = series
    if len(points) > 200:
        stride = len(points) / 200
        points = [points[int(i * stride)] for i in range(200)] + [points[-1]]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    dx, dy = (x1 - x0) or 1.0, (y1 - y0) or 1.0
    pad = 4
    coords = " ".join(
        f"{pad + (x - x0) / dx * (width - 2 * pad):.1f},"
        f"{height - pad - (y - y0) / dy * (height - 2 * pad):.1f}"
        for x, y in points
    )
    e = html.escape
    return (
        f"<div class='rgt-curve'><div style='color:#666'>{e(key)}: {ys[-1]:.4g} "
        f"(min {y0:.4g}, max {y1:.4g})</div>"
        f"<svg width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
        "style='border:1px solid #ddd'>"
        f"<polyline fill='none' stroke='#1f6feb' stroke-width='1.5' points='{coords}'/></svg></div>"
    )


def scheduler_text(snap: Snapshot) -> str:
    """The scheduler's word for the job and how often it restarted it (SLURM_RESTART_COUNT)."""
    parts = [snap.scheduler] if snap.scheduler else []
    if snap.restarts:
        parts.append(f"restarted {snap.restarts} time(s), resumed from its checkpoint")
    return "; ".join(parts)


def log_before_traceback(lines: list[str]) -> list[str]:
    """The log lines before the job's own last traceback (Python's, as printed on stderr):
    where the mapped traceback is shown, the raw one is not shown again."""
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    return lines[: starts[-1]] if starts else lines


def snapshot_text(snap: Snapshot, traceback_lines: list[str] | None = None) -> str:
    """A compact plain-text status block."""
    head = f"{snap.job_id} [{snap.display_state}] on {snap.host}"
    if snap.resume_attempt > 1:
        head += f" (attempt {snap.resume_attempt})"
    lines = [
        head,
        f"  progress: {progress_text(snap.progress)}",
        f"  elapsed: {_dur(snap.elapsed)}   heartbeat: "
        + ("-" if snap.heartbeat_age is None else f"{snap.heartbeat_age:.1f}s ago")
        + (" (stale)" if snap.heartbeat_stale else "")
        + ("" if snap.exit_code is None else f"   exit: {snap.exit_code}"),
    ]
    if snap.scheduler or snap.restarts:
        lines.append(f"  scheduler: {scheduler_text(snap)}")
    if snap.diagnosis:
        lines.append(f"  diagnosis: {clean_text(snap.diagnosis)}")
    if resources_text(snap.resources):
        lines.append(f"  resources: {resources_text(snap.resources)}")
    if snap.watcher:
        lines.append(f"  watcher: {snap.watcher}")
    if snap.audit:
        lines.append("  machine: " + "; ".join(snap.audit))
    if snap.cost:
        lines.append(f"  cost: {snap.cost}")
    log = log_before_traceback(snap.log_tail) if traceback_lines else snap.log_tail
    if log:
        lines.append("  log:")
        lines.extend("    " + line for line in log)
    if traceback_lines:
        lines.append("  traceback:")
        lines.extend("    " + strip_ansi(line) for line in traceback_lines)
    return "\n".join(lines)


def state_html(state: str) -> str:
    """The state word, coloured."""
    color = _COLORS.get(state, "#888")
    return f"<span style='color:{color};font-weight:bold'>{html.escape(state)}</span>"


def snapshot_html(
    snap: Snapshot,
    traceback_lines: list[str] | None = None,
    header: bool = True,
    curve: str = "",
) -> str:
    """The same status block as HTML (all job text escaped); ``header=False`` leaves out the
    first line and the progress bar (the live view shows them as widgets); ``curve`` is the loss
    curve's HTML (:func:`curve_svg`)."""
    e = html.escape
    rows = [
        f"<b>{e(snap.job_id)}</b> {state_html(snap.display_state)} on {e(snap.host)}",
        f"<div>{e(progress_text(snap.progress))}</div>",
        f"<div>elapsed {_dur(snap.elapsed)} · heartbeat "
        + ("-" if snap.heartbeat_age is None else f"{snap.heartbeat_age:.1f}s ago")
        + (" (stale)" if snap.heartbeat_stale else "")
        + ("" if snap.exit_code is None else f" · exit {snap.exit_code}")
        + "</div>",
    ]
    if not header:
        rows = rows[1:]
    total = finite((snap.progress or {}).get("total"))
    step = finite((snap.progress or {}).get("step"))
    if total and total > 0 and step is not None and header:
        rows.append(
            f"<progress value='{min(max(step, 0.0), total):g}' max='{total:g}' "
            "style='width:100%'></progress>"
        )
    if snap.scheduler or snap.restarts:
        rows.append(f"<div style='color:#666'>scheduler: {e(scheduler_text(snap))}</div>")
    if curve:
        rows.append(curve)
    if resources_text(snap.resources):
        rows.append(f"<div class='rgt-resources'>{e(resources_text(snap.resources))}</div>")
    if snap.diagnosis:
        rows.append(f"<div class='rgt-diagnosis'><i>{e(clean_text(snap.diagnosis))}</i></div>")
    if snap.watcher:
        rows.append(f"<div style='color:#666'>{e(snap.watcher)}</div>")
    if snap.audit:
        rows.append(f"<div style='color:#666'>machine: {e('; '.join(snap.audit))}</div>")
    if snap.cost:
        rows.append(f"<div style='color:#666'>cost: {e(snap.cost)}</div>")
    log = log_before_traceback(snap.log_tail) if traceback_lines else snap.log_tail
    if log:
        rows.append("<pre style='max-height:14em;overflow:auto'>" + e("\n".join(log)) + "</pre>")
    if traceback_lines:
        rows.append(
            "<pre style='color:#cf222e'>"
            + e("\n".join(strip_ansi(t) for t in traceback_lines))
            + "</pre>"
        )
    return "<div class='rgt-job'>" + "".join(rows) + "</div>"


def strip_ansi(text: str) -> str:
    """Remove terminal control sequences (colours in traceback lines, and any a job wrote:
    cursor movement, titles, hyperlinks, clipboard writes) and control characters."""
    return "\n".join(clean_text(line) for line in text.split("\n"))


def transfer_text(done: int, total: int, path: str, elapsed: float) -> str:
    """``pulling 12.0 MB / 30.0 MB (40%) at 55.1 MB/s: outputs/x.pt``."""
    pct = 100 * done / total if total else 100
    rate = done / elapsed / 1e6 if elapsed > 0 else 0.0
    return f"pulling {done / 1e6:.1f} MB / {total / 1e6:.1f} MB ({pct:.0f}%) at {rate:.1f} MB/s: {path}"
