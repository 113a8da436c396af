"""A finished job's output, shown again: its log tail, its ``results.json`` and the figures it
saved in ``$RGT_OUT``, read through the job's transport (nothing is pulled or changed).

Used when a ``%%remote_run`` cell whose job already finished is run again (after the notebook
was reopened or the kernel restarted), and by ``%watch --restore``.
"""

from __future__ import annotations

import base64
import html
import json
import math
import posixpath
from typing import Any, Protocol

from ..jobs.records import clean_log
from ..jobs.spec import JobSpec
from ..transport import Transport


class Job(Protocol):
    """What is read of a job here (:class:`rgt_jupyter.Job` is one)."""

    id: str
    spec: JobSpec

    @property
    def transport(self) -> Transport: ...


#: Figures larger than this are named, not shown.
MAX_FIGURE_BYTES = 5 << 20
MAX_FIGURES = 8
_IMAGES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".svg": "image/svg+xml",
}


#: A job's results for programs: a vendor type, which no frontend ranks above the HTML.
RESULTS_MIME = "application/vnd.rgt.results+json"
#: Leaves of results.json shown in the table before the rest are counted.
MAX_LEAVES = 40


def _leaves(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted.key, value)`` of every scalar or list of numbers, depth first."""
    if isinstance(value, dict):
        out: list[tuple[str, Any]] = []
        for key, item in value.items():
            out += _leaves(item, f"{prefix}.{key}" if prefix else str(key))
        return out
    return [(prefix or "(value)", value)]


def _shown(value: Any) -> str:
    """A leaf in a few words: a number as written, a long list by its size, ends and range."""
    if isinstance(value, list):
        numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(value) > 6 and len(numbers) == len(value):
            finite = [v for v in numbers if math.isfinite(v)] or [math.nan]
            return (
                f"{len(value)} values: first {value[0]:.4g}, last {value[-1]:.4g}, "
                f"min {min(finite):.4g}, max {max(finite):.4g}"
            )
        text = json.dumps(value, default=str)
        return text if len(text) <= 120 else f"{len(value)} items: {text[:100]}…"
    return json.dumps(value, default=str)


def results_bundle(results: Any) -> dict[str, Any]:
    """``results.json`` as a table of its leaves (long curves summarised), with the data itself
    under :data:`RESULTS_MIME` for programs."""
    leaves = _leaves(results)
    lines = [f"  {key}: {_shown(value)}" for key, value in leaves[:MAX_LEAVES]]
    more = len(leaves) - MAX_LEAVES
    if more > 0:
        lines.append(f"  … {more} more (the whole file is in the run's results.json)")
    rows = "".join(
        f"<tr><td style='text-align:left'><code>{html.escape(key)}</code></td>"
        f"<td style='text-align:left'>{html.escape(_shown(value))}</td></tr>"
        for key, value in leaves[:MAX_LEAVES]
    )
    tail = f"<div>… {more} more</div>" if more > 0 else ""
    return {
        "text/plain": "results.json:\n" + "\n".join(lines),
        "text/html": "<div class='rgt-results'><b>results.json</b><table>"
        f"{rows}</table>{tail}</div>",
        RESULTS_MIME: results,
    }


def _figures(job: Job, root: str, depth: int = 2) -> list[str]:
    """Image files under ``root`` (two levels deep at most), sorted by path."""
    out: list[str] = []
    try:
        names = sorted(job.transport.listdir(root))
    except OSError:
        return out
    for name in names:
        path = posixpath.join(root, name)
        st = job.transport.stat(path)
        if st is None:
            continue
        if st.is_dir and depth > 1:
            out += _figures(job, path, depth - 1)
        elif posixpath.splitext(name)[1].lower() in _IMAGES:
            out.append(path)
    return out


def restore_bundles(job: Job, log_lines: int = 40) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Display bundles (data, metadata) of the job's saved output, in the order shown."""
    spec = job.spec
    meta = {"rgt_jupyter": {"job_id": job.id, "restored": True}}
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    tail = clean_log(job.transport.tail(f"{spec.control_dir}/log", 65536), log_lines)
    if tail:
        out.append(({"text/plain": f"log of {job.id} (last lines):\n" + "\n".join(tail)}, meta))
    text = job.transport.read_text(f"{spec.out_dir}/results.json")
    if text:
        try:
            out.append((results_bundle(json.loads(text)), meta))
        except ValueError:
            out.append(({"text/plain": "results.json (not valid JSON):\n" + text[:4000]}, meta))
    figures = _figures(job, spec.out_dir)
    for path in figures[:MAX_FIGURES]:
        rel = posixpath.relpath(path, spec.out_dir)
        st = job.transport.stat(path)
        if st is None or st.size > MAX_FIGURE_BYTES:
            out.append(({"text/plain": f"figure {rel}: too large to show here; %pull it"}, meta))
            continue
        data = job.transport.read_bytes(path)
        mime = _IMAGES[posixpath.splitext(path)[1].lower()]
        shown = data.decode("utf-8", "replace") if mime == "image/svg+xml" else None
        value = shown if shown is not None else base64.b64encode(data).decode("ascii")
        out.append(({mime: value, "text/plain": f"<figure {rel}>"}, {**meta, "path": rel}))
    if len(figures) > MAX_FIGURES:
        out.append(
            ({"text/plain": f"... and {len(figures) - MAX_FIGURES} more figures; %pull them"}, meta)
        )
    return out
