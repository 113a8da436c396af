"""``%deliver`` / ``rgt deliver``: audit what a notebook ships, disclose, block nothing.

In one pass: the typed-number check of the notebook (:mod:`.check_numbers`); ``EVIDENCE.json``
kept in step with the runs (:func:`.evidence.sync`); every exported figure's sidecar checked
against the current results (a figure built from bytes that changed since is stale) and its pixel
gate; the documents reconciled against the evidence (:mod:`.reconcile`); and the disclosure gate
of every shipped number (claim rows): verified (its ``%verify`` findings quoted), in the
evidence, regenerable, reconciled, and its split/leakage status, with the caption suffix to use.
The manifest of what was delivered is written to ``delivery/<notebook>.manifest.json`` (what
``rgt repro`` compares a rebuild with), the number audit to ``delivery/<notebook>.numbers.json``.
"""

from __future__ import annotations

import hashlib
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store.fsutil import atomic_write_bytes
from ..store.project import project_dir
from ..verify.model import findings_by_run
from .check_numbers import check_numbers
from .evidence import evidence_path, load, sync
from .manifest import collect
from .notebook import read_notebook
from .reconcile import reconcile
from .repro import manifest_path


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, default=str) + "\n").encode()


def _caption(row: dict[str, Any]) -> str:
    """``(test, n=100, ±0.08 over 3 seeds)`` or ``(test, single seed, no variance band)``."""
    parts = [str(row.get("split") or "split not declared")]
    if row.get("n") is not None:
        parts.append(f"n={row['n']}")
    variance = row.get("variance") or {}
    seeds = variance.get("seeds")
    if variance.get("value") is not None:
        parts.append(f"±{variance['value']:g}" + (f" over {seeds} seeds" if seeds else ""))
    else:
        parts.append("single seed, no variance band")
    return "(" + ", ".join(parts) + ")"


def disclosure_gate(
    project: Path, drifts: list[dict[str, Any]], regenerable: set[str]
) -> list[dict[str, Any]]:
    """One record per evidence row: the five checks of the gate and the caption suffix."""

    if not evidence_path(project).is_file():
        return []
    findings = findings_by_run(project)
    records = []
    for claim in load(project).get("claims", []):
        for index, row in enumerate(claim.get("evidence", [])):
            run = str(row.get("run") or "")
            mine = findings.get(run, [])
            problems = [f for f in mine if f.get("verdict") in ("bug", "finding")]
            split_audit = [f for f in mine if f.get("check") in ("leakage", "test_selection")]
            results = project / str(row.get("results_json") or "")
            now = hashlib.sha256(results.read_bytes()).hexdigest() if results.is_file() else None
            claim_drifts = [d for d in drifts if d.get("claim_id") == claim.get("id")]
            checks = {
                "verified": "verified" if mine and not problems else "unverified",
                "in_evidence": "mapped"
                if claim.get("paper_anchor") and claim.get("repo_implementation")
                else "unmapped",
                "regenerable": "generated"
                if now is not None
                and now == row.get("results_sha256")
                and (
                    {str(claim.get("id")), f"{row.get('results_json')}:{row.get('key')}"}
                    & regenerable
                )
                else "transcribed",
                "reconciled": "reconciled"
                if not claim_drifts
                else "drift "
                + "; ".join(
                    f"{d.get('reported')} vs {d.get('authoritative')}" for d in claim_drifts
                ),
                "split_audit": "clean"
                if split_audit and all(f.get("verdict") in ("pass",) for f in split_audit)
                else ("findings" if split_audit else "not audited"),
            }
            records.append(
                {
                    "claim_id": claim.get("id"),
                    "row": index,
                    "value": row.get("value"),
                    "metric": row.get("metric"),
                    "split": row.get("split"),
                    "checks": checks,
                    "findings": [f"{f.get('check')}: {f.get('disclosure')}" for f in problems],
                    "caption_suffix": _caption(row),
                }
            )
    return records


#: The vendor mime type of the report's data (never ranked above its HTML).
MIME = "application/vnd.rgt.deliver+json"


@dataclass
class DeliveryReport:
    """What ``%deliver`` found; nothing in it blocked anything."""

    notebook: str | None
    numbers: Any = None
    evidence_changes: list[str] = field(default_factory=list)
    figures: list[dict[str, Any]] = field(default_factory=list)
    drifts: list[dict[str, Any]] = field(default_factory=list)
    gate: list[dict[str, Any]] = field(default_factory=list)
    manifest: str | None = None

    @property
    def typed(self) -> list[dict[str, Any]]:
        """Typed numbers found in the notebook."""
        return [
            i
            for i in (self.numbers.to_dict()["findings"] if self.numbers else [])
            if i.get("status") == "typed"
        ]

    @property
    def clean(self) -> bool:
        """No typed number, stale figure, drift or unverified claim (what ``--strict`` asks)."""
        unverified = [
            g for g in self.gate if g["checks"]["verified"] != "verified" or g["findings"]
        ]
        stale = [f for f in self.figures if f["problems"]]
        return not (self.typed or stale or self.drifts or unverified)

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready data."""
        return {
            "notebook": self.notebook,
            "numbers": self.numbers.to_dict() if self.numbers else None,
            "evidence_changes": self.evidence_changes,
            "figures": self.figures,
            "drifts": self.drifts,
            "gate": self.gate,
            "manifest": self.manifest,
            "clean": self.clean,
        }

    def text(self) -> str:
        """The report, most serious first."""
        lines = [f"%deliver {self.notebook or '(no notebook)'}"]
        for item in self.typed:
            hint = f" -> {item['suggestion']}" if item.get("suggestion") else ""
            lines.append(
                f"  typed number {item['text']!r} in cell {item.get('cell_id')} line "
                f"{item.get('line')}{hint}"
            )
        for fig in self.figures:
            for problem in fig["problems"]:
                lines.append(f"  figure {fig['figure']}: {problem}")
        for d in self.drifts:
            lines.append(
                f"  drift {d.get('doc')}:{d.get('line')} {d.get('metric')}: reported "
                f"{d.get('reported')} != {d.get('authoritative')}"
            )
        for change in self.evidence_changes:
            lines.append(f"  EVIDENCE.json updated: {change}")
        for g in self.gate:
            # Each check's word says what it found (verified, transcribed, drift 0.91 vs 0.93).
            state = ", ".join(str(v) for v in g["checks"].values())
            lines.append(
                f"  {g['claim_id']}#{g['row']} {g['value']} {g['caption_suffix']}: {state}"
            )
            lines.extend(f"    finding: {f}" for f in g["findings"])
        lines.append("  clean" if self.clean else "  disclosed above (nothing was blocked)")
        if self.manifest:
            lines.append(f"  manifest: {self.manifest}")
        return "\n".join(lines)

    def html(self) -> str:
        """The report as HTML: a verdict line, then one table per kind of finding, the claims
        with a coloured word per check (theme colours, with fallbacks outside JupyterLab)."""
        e = html.escape
        good, bad = "var(--jp-success-color1, #1a7f37)", "var(--jp-error-color1, #cf222e)"
        verdict = (
            f"<span style='color:{good};font-weight:bold'>clean</span>"
            if self.clean
            else f"<span style='color:{bad};font-weight:bold'>disclosed below</span> "
            "(nothing was blocked)"
        )
        parts = [f"<div class='rgt-deliver'><b>%deliver {e(self.notebook or '')}</b>: {verdict}"]

        def table(title: str, head: list[str], rows: list[list[str]]) -> None:
            if rows:
                cells = "".join(
                    "<tr>" + "".join(f"<td style='text-align:left'>{c}</td>" for c in r) + "</tr>"
                    for r in rows
                )
                heads = "".join(f"<th>{e(h)}</th>" for h in head)
                parts.append(f"<div><b>{e(title)}</b><table><tr>{heads}</tr>{cells}</table></div>")

        table(
            "Numbers typed by hand",
            ["cell", "line", "number", "generate it with"],
            [
                [e(str(i.get("cell_id"))), e(str(i.get("line"))), f"<code>{e(i['text'])}</code>"]
                + [f"<code>{e(str(i.get('suggestion') or ''))}</code>"]
                for i in self.typed
            ],
        )
        table(
            "Figures",
            ["figure", "problem"],
            [[e(str(f["figure"])), e(p)] for f in self.figures for p in f["problems"]],
        )
        table(
            "Documents that drifted",
            ["where", "metric", "reported", "runs say"],
            [
                [e(f"{d.get('doc')}:{d.get('line')}"), e(str(d.get("metric")))]
                + [e(str(d.get("reported"))), e(str(d.get("authoritative")))]
                for d in self.drifts
            ],
        )
        table("EVIDENCE.json updated", ["change"], [[e(c)] for c in self.evidence_changes])
        ok_words = {"verified", "mapped", "generated", "reconciled", "clean"}
        table(
            "Claims",
            ["claim", "value", "checks", "findings"],
            [
                [
                    e(f"{g['claim_id']}#{g['row']}"),
                    e(f"{g['value']} {g['caption_suffix']}".strip()),
                    " ".join(
                        f"<span style='color:{good if v in ok_words else bad}'>{e(str(v))}</span>"
                        for v in g["checks"].values()
                    ),
                    "<br>".join(e(f) for f in g["findings"]),
                ]
                for g in self.gate
            ],
        )
        if self.manifest:
            parts.append(f"<div>manifest: <code>{e(self.manifest)}</code></div>")
        return "".join(parts) + "</div>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        # The vendor type carries the data and marks the output as rgt's own report, which
        # the typed-number check leaves out (its numbers are the check's, not the paper's).
        data = json.loads(json.dumps(self.to_dict(), default=str))
        return {"text/plain": self.text(), "text/html": self.html(), MIME: data}


def _figure_checks(project: Path) -> list[dict[str, Any]]:
    out = []
    root = project / "figures"
    for sidecar in sorted(root.glob("*/*.provenance")) if root.is_dir() else []:
        data = json.loads(sidecar.read_text())
        problems = []
        for item in data.get("built_from", []):
            path = project / str(item.get("results_json"))
            now = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
            if now != item.get("sha256"):
                problems.append(
                    f"stale: {item.get('results_json')} changed since {sidecar.name} was "
                    "exported; run its cell again"
                )
        output = project / str((data.get("output") or {}).get("path", ""))
        if output.is_file() and hashlib.sha256(output.read_bytes()).hexdigest() != (
            data.get("output") or {}
        ).get("sha256"):
            problems.append(f"{output.name} differs from what its sidecar records")
        problems += list(data.get("disclosures", []))
        out.append({"figure": data.get("figure"), "sidecar": str(sidecar), "problems": problems})
    return out


def deliver(
    notebook: str | Path | None = None,
    project: Path | None = None,
    docs: list[str | Path] | None = None,
) -> DeliveryReport:
    """Audit a delivery; see the module docstring."""

    proj = project_dir(project)
    report = DeliveryReport(str(notebook) if notebook else None)
    path = None
    if notebook is not None:
        path = Path(notebook)
        path = path if path.is_absolute() else proj / path
        read_notebook(path)  # a file that is not a notebook is refused before anything is written
    if evidence_path(proj).is_file():
        report.evidence_changes = [str(c) for c in sync(proj)]
    regenerable: set[str] = set()
    if path is not None:
        report.numbers = check_numbers(path, project=proj)
        manifest = collect(path, proj)
        # A claim row is regenerable when the notebook generates it: through its claim id, or
        # through the same run and key.
        regenerable = {str(n["claim_id"]) for n in manifest["numbers"] if n.get("claim_id")}
        regenerable |= {f"{n['results_json']}:{n['key']}" for n in manifest["numbers"]}
        target = manifest_path(path, proj)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, _json_bytes(manifest))
        atomic_write_bytes(
            target.with_name(f"{path.stem}.numbers.json"), _json_bytes(report.numbers.to_dict())
        )
        report.manifest = str(target)
    report.figures = _figure_checks(proj)
    if evidence_path(proj).is_file():
        paths = (
            [Path(d) for d in docs] if docs else [p for p in [proj / "README.md"] if p.is_file()]
        )
        if paths:
            report.drifts = reconcile(paths, project=proj).to_dict()["drifts"]
    report.gate = disclosure_gate(proj, report.drifts, regenerable)
    return report
