"""What ``rgt check-numbers`` reports: every number of a notebook with its status."""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "rgt/numbers-audit/v1"
STATUSES = ("typed", "generated", "ignored", "ambiguous")


@dataclass(slots=True)
class NumberItem:
    """One number of the notebook and its status."""

    cell_index: int
    cell_id: str
    cell_type: str
    where: str  # markdown | code_source | code_string | code_comment | output | figure_text
    line: int
    col: int
    text: str
    value: float | None
    decimals: int | None
    status: str  # typed | generated | ignored | ambiguous
    reason: str | None = None
    match: dict[str, Any] | None = None
    suggestion: str | None = None
    output_index: int | None = None
    mime: str | None = None
    stale: bool = False
    role: str = "value"
    context: str = ""
    #: The open ``%verify`` problems of the run its match or suggestion names
    #: (``check: disclosure``), disclosed beside it.
    findings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (all fields)."""
        return asdict(self)


@dataclass
class NumbersReport:
    """Every number of one notebook, classified; ``text()`` lists the typed ones."""

    notebook: Path
    notebook_sha256: str
    items: list[NumberItem] = field(default_factory=list)
    evidence_files: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def summary(self) -> dict[str, int]:
        """Counts by status, plus ``total``, ``stale``, ``matched`` (typed with a results.json
        match) and ``pragmas``."""
        counts = dict.fromkeys(STATUSES, 0)
        stale = matched = pragmas = 0
        for item in self.items:
            counts[item.status] += 1
            stale += item.stale
            matched += item.status == "typed" and item.match is not None
            pragmas += bool(item.reason and item.reason.startswith("pragma"))
        return {
            **counts,
            "total": len(self.items),
            "stale": stale,
            "matched": matched,
            "pragmas": pragmas,
        }

    @property
    def typed(self) -> list[NumberItem]:
        """The typed numbers."""
        return [i for i in self.items if i.status == "typed"]

    @property
    def stale(self) -> list[NumberItem]:
        """Generated numbers whose results file changed since."""
        return [i for i in self.items if i.stale]

    def to_dict(self) -> dict[str, Any]:
        """``{"schema", "notebook", "notebook_sha256", "summary", "findings", ...}``."""
        return {
            "schema": SCHEMA,
            "notebook": str(self.notebook),
            "notebook_sha256": self.notebook_sha256,
            "summary": self.summary,
            "evidence_files": self.evidence_files,
            "warnings": self.warnings,
            "findings": [i.to_dict() for i in self.items],
        }

    def _where(self, item: NumberItem) -> str:
        return f"{self.notebook.name}#{item.cell_id}:{item.line}"

    def _line(self, item: NumberItem) -> str:
        place = {
            "markdown": "markdown",
            "code_source": "code",
            "code_string": f"code string, column {item.col}",
            "code_comment": f"code comment, column {item.col}",
            "figure_text": f"figure text {item.line}",
        }.get(item.where, "output")
        if item.output_index is not None:
            place = f"output {item.output_index}"
        if item.stale and item.status == "typed":
            # Typed, and it shows an older run of its job than the newest one.
            line = f"{self._where(item)} stale {item.text} ({place}; {item.reason})"
            line = f"{line} → {item.suggestion}" if item.suggestion else line
            return line + _disclosed(item)
        if item.stale:
            m = item.match or {}
            return f"{self._where(item)} stale {item.text} ({place}; {m.get('file')} changed)"
        if item.match and "derived" in item.match:
            d = item.match["derived"]
            what = f"the {d['kind']} of {d['of'][0]} and {d['of'][1]}"
        elif item.match:
            m = item.match
            what = f"matches {m['run_id']}:{m['key_path']} = {m['raw']!r}"
        else:
            what = "no results.json value matches"
        line = f"{self._where(item)} typed {item.text} ({place}; {what})"
        line = f"{line} → {item.suggestion}" if item.suggestion else line
        return line + _disclosed(item)

    def text(self) -> str:
        """A summary line, then one line per typed (and stale) number."""
        s = self.summary
        head = (
            f"{self.notebook.name}: {s['typed']} typed, {s['generated']} generated, "
            f"{s['stale']} stale, {s['ignored']} ignored, {s['ambiguous']} ambiguous"
        )
        lines = [head] + [self._line(i) for i in self.items if i.status == "typed" or i.stale]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None, **kwargs: Any
    ) -> dict[str, str]:
        rows = "".join(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>".format(
                html.escape(self._where(i)),
                html.escape(i.text),
                "stale" if i.stale else i.status,
                html.escape(i.suggestion or ""),
            )
            for i in self.items
            if i.status == "typed" or i.stale
        )
        s = self.summary
        head = html.escape(
            f"{s['typed']} typed, {s['generated']} generated, {s['stale']} stale, "
            f"{s['ignored']} ignored, {s['ambiguous']} ambiguous"
        )
        table = (
            "<table><tr><th>where</th><th>number</th><th>status</th><th>suggestion</th></tr>"
            f"{rows}</table>"
            if rows
            else ""
        )
        return {
            "text/plain": self.text(),
            "text/html": f"<p><b>{html.escape(self.notebook.name)}</b>: {head}</p>{table}",
        }


def _disclosed(item: NumberItem) -> str:
    """The run's open ``%verify`` problems, said beside the number."""
    if not item.findings:
        return ""
    run = (item.match or {}).get("newest", {}).get("run_id") or (item.match or {}).get("run_id")
    return f" [%verify on {run}: " + "; ".join(item.findings) + "]"
