"""Plain-text and HTML views of jobs and runs, and remote tracebacks (no ipywidgets here)."""

from __future__ import annotations

import base64
import html
import math
from typing import Any

from ..jobs.records import clean_text, finite, short_text
from ..jobs.snapshot import Snapshot
from .findings import findings_html, findings_lines

#: State colours: JupyterLab's theme variables (light and dark), with fallbacks for nbconvert,
#: nbviewer and GitHub.
_COLORS = {
    "queued": "var(--jp-ui-font-color2, #6e7781)",
    "running": "var(--jp-brand-color1, #1f6feb)",
    "finished": "var(--jp-success-color1, #1a7f37)",
    "failed": "var(--jp-error-color1, #cf222e)",
    "preempted": "var(--jp-warn-color1, #9a6700)",
    "lost": "var(--jp-error-color1, #cf222e)",
    "stalled": "var(--jp-warn-color1, #9a6700)",
    "running, agent lost": "var(--jp-error-color1, #cf222e)",
}
#: How much of a job the status views show: one line and the bar, the default, or everything
#: unfolded (``%config RgtMagics.job_view``).
LOOKS = ("minimal", "compact", "full")
_MUTED = "var(--jp-ui-font-color2, #6e7781)"
_BORDER = "var(--jp-border-color2, #d0d7de)"
_LINE = "var(--jp-brand-color1, #1f6feb)"
#: Progress records the rate is measured over (the newest ones).
RATE_WINDOW = 20


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
    for k, v in list(progress.items())[: MAX_METRICS + 4]:
        if k in ("t", "step", "total", "source"):
            continue
        number = finite(v)
        if isinstance(v, float) and number is not None:
            metrics.append(f"{short_text(k, 30)}={v:.4g}")
        else:
            metrics.append(f"{short_text(k, 30)}={short_text(v, 40)}")
    metrics = metrics[:MAX_METRICS]
    source = progress.get("source")
    if isinstance(source, str) and source:
        # Read from the job's tqdm bar or TensorBoard events, not reported by job.progress.
        metrics.append(f"(from {short_text(source, 24)})")
    return "  ".join([text, *metrics])


def rate_text(records: list[dict[str, Any]], snap: Snapshot) -> str:
    """``12.3 steps/s · ETA 4:10`` (``2.1 s/step`` when slower than one a second) from the
    newest progress records' steps and times; after the end ``took 1:23``; empty when unknown."""
    if snap.terminal:
        return f"took {_dur(snap.elapsed)}" if snap.elapsed is not None else ""
    recent = [(finite(r.get("t")), finite(r.get("step"))) for r in records[-RATE_WINDOW:] if r]
    points = [(t, step) for t, step in recent if t is not None and step is not None]
    if len(points) < 2:
        return ""
    (t0, s0), (t1, s1) = points[0], points[-1]
    if t1 <= t0 or s1 <= s0:
        return ""
    rate = (s1 - s0) / (t1 - t0)
    speed = f"{rate:.3g} steps/s" if rate >= 1 else f"{1 / rate:.3g} s/step"
    total = finite((snap.progress or {}).get("total"))
    step = finite((snap.progress or {}).get("step"))
    if total and step is not None and total > step:
        return f"{speed} · ETA {_dur((total - step) / rate)}"
    return speed


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


def curve_svg(records: list[dict[str, Any]], width: int = 320, height: int = 96) -> str:
    """A small line chart of the job's loss (or first metric) against its step, with its axes'
    ranges: an SVG picture in an ``<img>`` (so a sanitised view, an untrusted notebook's, shows
    it too), drawn in colours that read on light and dark themes, under a caption with the last
    value."""
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
    left, right, top, bottom = 44, 6, 6, 16  # room for the axes' labels
    plot_w, plot_h = width - left - right, height - top - bottom
    coords = " ".join(
        f"{left + (x - x0) / dx * plot_w:.1f},{top + plot_h - (y - y0) / dy * plot_h:.1f}"
        for x, y in points
    )
    e = html.escape

    def text(x: float, y: float, value: str, anchor: str = "start") -> str:
        return (
            f"<text x='{x:.0f}' y='{y:.0f}' text-anchor='{anchor}' fill='#8c959f' "
            f"font-size='9' font-family='sans-serif'>{e(value)}</text>"
        )

    svg = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}'>"
        f"<polyline fill='none' stroke='#8c959f' points='{left},{top} {left},{top + plot_h} "
        f"{left + plot_w},{top + plot_h}'/>"
        + text(left - 3, top + 8, f"{y1:.3g}", "end")
        + text(left - 3, top + plot_h, f"{y0:.3g}", "end")
        + text(left, height - 3, f"step {_count(x0)}")
        + text(left + plot_w, height - 3, f"{_count(x1)}", "end")
        + f"<polyline fill='none' stroke='#4493f8' stroke-width='1.5' points='{coords}'/></svg>"
    )
    data = base64.b64encode(svg.encode()).decode("ascii")
    return (
        f"<div class='rgt-curve'><div style='color:{_MUTED}'>{e(key)}: {ys[-1]:.4g} "
        f"(min {y0:.4g}, max {y1:.4g})</div>"
        f"<img alt='{e(key)} against step' width='{width}' height='{height}' "
        f"src='data:image/svg+xml;base64,{data}'/></div>"
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


def _heartbeat(snap: Snapshot) -> str:
    """The heartbeat's age while the job runs; nothing after the end (its clock is stopped)."""
    if snap.terminal:
        return ""
    age = "-" if snap.heartbeat_age is None else f"{snap.heartbeat_age:.1f}s ago"
    return f"heartbeat: {age}" + (" (stale)" if snap.heartbeat_stale else "")


def bucket_text(status: dict[str, Any] | None) -> str:
    """Where a job's checkpoints stand in its bucket, in words ("" for a job without one)."""
    if not status:
        return ""
    url = status.get("url", "")
    step, error = status.get("durable_step"), status.get("error")
    newest = f"step {step} durable in the bucket {url}" if step is not None else ""
    if error:
        text = f"NOT durable in the bucket {url}: {error}"
        return text + (
            f"; the newest durable there is {newest.split(' durable')[0]}" if newest else ""
        )
    text = newest or f"none in the bucket {url} yet"
    if status.get("uploading"):
        text += f"; uploading {status['uploading']}"
    return text


def snapshot_text(snap: Snapshot, traceback_lines: list[str] | None = None, rate: str = "") -> str:
    """A compact plain-text status block (``rate``: :func:`rate_text`)."""
    head = f"{snap.job_id} [{snap.display_state}] on {snap.host}"
    if snap.resume_attempt > 1:
        head += f" (attempt {snap.resume_attempt})"
    clocks = [f"elapsed: {_dur(snap.elapsed)}", _heartbeat(snap)]
    if snap.exit_code is not None:
        clocks.append(f"exit: {snap.exit_code}")
    lines = [
        head,
        f"  progress: {progress_text(snap.progress)}" + (f"   {rate}" if rate else ""),
        "  " + "   ".join(c for c in clocks if c),
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
    if bucket_text(snap.bucket):
        lines.append(f"  checkpoints: {bucket_text(snap.bucket)}")
    if snap.cadence:
        lines.append(f"  {snap.cadence}")
    lines.extend(findings_lines(snap.findings))
    log = log_before_traceback(snap.log_tail) if traceback_lines else snap.log_tail
    if log:
        lines.append("  log:")
        lines.extend("    " + line for line in log)
    if traceback_lines:
        lines.append("  traceback:")
        lines.extend("    " + strip_ansi(line) for line in traceback_lines)
    return "\n".join(lines)


def state_html(state: str) -> str:
    """The state word, coloured by the theme."""
    color = _COLORS.get(state, _MUTED)
    return f"<span style='color:{color};font-weight:bold'>{html.escape(state)}</span>"


def snapshot_html(
    snap: Snapshot,
    traceback_lines: list[str] | None = None,
    header: bool = True,
    curve: str = "",
    rate: str = "",
    look: str = "compact",
) -> str:
    """The same status block as HTML (all job text escaped), compact: state, progress with rate
    and ETA, the curve, the diagnosis and the newest log lines (scrolled to the end); where it
    runs, the watcher, resources and cost folded under "details". ``header=False`` leaves out
    the first line and the progress bar (the live view shows them as widgets); ``curve`` is the
    loss curve's HTML (:func:`curve_svg`); ``rate``: :func:`rate_text`. ``look`` (one of
    :data:`LOOKS`): ``minimal`` leaves out the curve, the log and the details (a failure's
    diagnosis and traceback, a cost and an OOM warning stay), ``full`` shows a taller log and
    the details unfolded."""
    if look not in LOOKS:
        raise ValueError(f"look {look!r}: one of {', '.join(LOOKS)}")
    minimal, full = look == "minimal", look == "full"
    e = html.escape
    clocks = [f"elapsed {_dur(snap.elapsed)}", _heartbeat(snap).replace("heartbeat:", "heartbeat")]
    if snap.exit_code is not None:
        clocks.append(f"exit {snap.exit_code}")
    rows = [
        f"<b>{e(snap.job_id)}</b> {state_html(snap.display_state)} on {e(snap.host)}",
        f"<div>{e(progress_text(snap.progress))}"
        + (f" <span style='color:{_MUTED}'>{e(rate)}</span>" if rate else "")
        + "</div>",
        f"<div style='color:{_MUTED}'>" + " · ".join(c for c in clocks if c) + "</div>",
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
    if curve and not minimal:
        rows.append(curve)
    if snap.diagnosis:
        rows.append(f"<div class='rgt-diagnosis'><i>{e(clean_text(snap.diagnosis))}</i></div>")
    if snap.findings:
        rows.append(findings_html(snap.findings))
    log = log_before_traceback(snap.log_tail) if traceback_lines else snap.log_tail
    if log and not minimal:
        # A column-reverse box starts scrolled to its end: the newest line is the one in view.
        rows.append(
            f"<div class='rgt-log' style='max-height:{24 if full else 9}em;overflow:auto;"
            "display:flex;"
            f"flex-direction:column-reverse;border:1px solid {_BORDER}'>"
            f"<pre style='margin:0'>{e(chr(10).join(log))}</pre></div>"
        )
    if traceback_lines:
        rows.append(
            f"<pre style='color:{_COLORS['failed']}'>"
            + e("\n".join(strip_ansi(t) for t in traceback_lines))
            + "</pre>"
        )
    details = []
    if snap.scheduler or snap.restarts:
        details.append(f"scheduler: {scheduler_text(snap)}")
    used = resources_text(snap.resources)
    if "OOM risk" in used:  # a warning stays in view
        rows.append(f"<div class='rgt-resources'>{e(used)}</div>")
    elif used:
        details.append(used)
    if snap.cost:  # what the machine costs stays in view
        rows.append(f"<div class='rgt-cost'>cost: {e(snap.cost)}</div>")
    if bucket_text(snap.bucket):  # whether the checkpoints outlive the machine, too
        warn = " rgt-warn" if (snap.bucket or {}).get("error") else ""
        rows.append(
            f"<div class='rgt-bucket{warn}'>checkpoints: {e(bucket_text(snap.bucket))}</div>"
        )
    if snap.cadence:
        rows.append(f"<div class='rgt-cadence rgt-warn'>{e(snap.cadence)}</div>")
    if snap.watcher:
        details.append(snap.watcher)
    if snap.audit:
        details.append("machine: " + "; ".join(snap.audit))
    if details and not minimal:
        rows.append(
            f"<details{' open' if full else ''} style='color:{_MUTED}'><summary>details</summary>"
            + "".join(f"<div>{e(d)}</div>" for d in details)
            + "</details>"
        )
    return "<div class='rgt-job'>" + "".join(rows) + "</div>"


def strip_ansi(text: str) -> str:
    """Remove terminal control sequences (colours in traceback lines, and any a job wrote:
    cursor movement, titles, hyperlinks, clipboard writes) and control characters."""
    return "\n".join(clean_text(line) for line in text.split("\n"))


def age_text(seconds: float) -> str:
    """How old something is: ``42 s``, ``17 min``, ``3.5 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
