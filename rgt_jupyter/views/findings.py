"""The training findings of a job in its view: what was seen, the likely cause, what to try."""

from __future__ import annotations

import html
from typing import Any

from ..jobs.records import clean_text, short_text

#: At most this many findings are shown (the first ones: the earliest symptom leads).
MAX_FINDINGS = 8
_WARN = "var(--jp-warn-color1, #9a6700)"
_MUTED = "var(--jp-ui-font-color2, #6e7781)"


def _parts(f: dict[str, Any]) -> tuple[str, str, str, str]:
    kind = short_text(clean_text(str(f.get("kind") or "finding")), 40)
    step = f.get("step")
    at = f" (step {step})" if isinstance(step, int) and not isinstance(step, bool) else ""
    seen = short_text(clean_text(str(f.get("seen") or "")), 300)
    cause = short_text(clean_text(str(f.get("cause") or "")), 300)
    fix = short_text(clean_text(str(f.get("fix") or "")), 300)
    return kind + at, seen, cause, fix


def findings_lines(findings: list[dict[str, Any]]) -> list[str]:
    """The plain-text lines of the findings (none without any)."""
    if not findings:
        return []
    lines = ["  training findings:"]
    for f in findings[:MAX_FINDINGS]:
        head, seen, cause, fix = _parts(f)
        lines.append(f"    {head}: {seen}")
        lines.append(f"      likely: {cause}")
        lines.append(f"      try: {fix}")
    if len(findings) > MAX_FINDINGS:
        lines.append(f"    and {len(findings) - MAX_FINDINGS} more")
    return lines


def findings_html(findings: list[dict[str, Any]]) -> str:
    """The findings as HTML (all job text escaped; empty without any)."""
    if not findings:
        return ""
    e = html.escape
    items = []
    for f in findings[:MAX_FINDINGS]:
        head, seen, cause, fix = _parts(f)
        items.append(
            f"<li><b>{e(head)}</b>: {e(seen)}<br/>"
            f"<span style='color:{_MUTED}'>likely:</span> {e(cause)}<br/>"
            f"<span style='color:{_MUTED}'>try:</span> {e(fix)}</li>"
        )
    more = len(findings) - MAX_FINDINGS
    tail = f"<div style='color:{_MUTED}'>and {more} more</div>" if more > 0 else ""
    return (
        f"<div class='rgt-findings'><div style='color:{_WARN}'>training findings</div>"
        f"<ul style='margin:0'>{''.join(items)}</ul>{tail}</div>"
    )
