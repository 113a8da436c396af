"""What ``rgt reconcile`` reports: drifts, every number compared, the ones left alone."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ...errors import UsageError


class ReconcileError(UsageError):
    """EVIDENCE.json or a document could not be read, or the command was used wrongly."""


def fmt(value: float | int | str | None) -> str:
    """A value as the report shows it (``(missing)`` for None, a float by its repr)."""
    if value is None:
        return "(missing)"
    return repr(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Drift:
    """One copy of a number that disagrees with its authority."""

    doc: str
    line: int
    metric: str
    reported: str
    authoritative: float | int | str | None
    claim_id: str | None
    context: str
    kind: str = "value"

    def text(self) -> str:
        """The two-line block of the text report."""
        head = (
            f"{self.doc}:{self.line}  metric '{self.metric}': reported {self.reported} "
            f"!= authoritative {fmt(self.authoritative)}"
        )
        return f"{head}\n  context: {self.context}"

    def to_dict(self) -> dict[str, Any]:
        """The fields, for JSON."""
        return asdict(self)


@dataclass(frozen=True)
class Checked:
    """One number compared with an authority; ``status`` is ``match``, ``ambiguous`` (several
    rows were possible and one matched), ``derived`` (a difference of two entries), ``other
    metric`` (it equals another metric named beside it) or ``drift``."""

    doc: str
    line: int
    metric: str
    reported: str
    authoritative: float | int | str | None
    claim_id: str | None
    status: str
    kind: str = "value"
    transform: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields, for JSON."""
        return asdict(self)


@dataclass(frozen=True)
class Ignored:
    """A number beside a metric anchor that is not read as a value, with the reason."""

    doc: str
    line: int
    text: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """The fields, for JSON."""
        return asdict(self)


@dataclass
class ReconcileReport:
    """The outcome of :func:`reconcile`: drifts, every number compared, and the ignored ones."""

    evidence: str
    docs: list[str]
    scalars: int
    drifts: list[Drift] = field(default_factory=list)
    checked: list[Checked] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing drifted."""
        return not self.drifts

    @property
    def exit_code(self) -> int:
        """0 when clean, 1 when anything drifted."""
        return 0 if self.ok else 1

    def text(self) -> str:
        """The report in the original reconcile.py's text form."""
        lines = [
            f"Reconciled {len(self.docs)} doc(s) against {self.scalars} authoritative "
            f"scalar(s) in {self.evidence}."
        ]
        if self.ok:
            lines.append("No drift.")
        lines.extend(d.text() for d in self.drifts)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The report, for JSON."""
        return {
            "evidence": self.evidence,
            "docs": list(self.docs),
            "scalars": self.scalars,
            "drifts": [d.to_dict() for d in self.drifts],
            "checked": [c.to_dict() for c in self.checked],
            "ignored": [i.to_dict() for i in self.ignored],
        }

    def __repr__(self) -> str:
        return self.text()


class Log:
    """Collects what a scan compared, what drifted and what it left alone."""

    def __init__(self) -> None:
        self.drifts: list[Drift] = []
        self.checked: list[Checked] = []
        self.ignored: list[Ignored] = []

    def record(
        self,
        where: tuple[str, int, str | None],
        metric: str,
        reported: str,
        authority: float | int | str | None,
        status: str,
        context: str,
        kind: str = "value",
        transform: str | None = None,
    ) -> None:
        """One comparison at ``where`` (doc, line, claim id); a ``drift`` is also a Drift."""
        doc, line, claim = where
        self.checked.append(
            Checked(doc, line, metric, reported, authority, claim, status, kind, transform)
        )
        if status == "drift":
            self.drifts.append(Drift(doc, line, metric, reported, authority, claim, context, kind))
