"""Run the VERIFY checks over pulled runs: resolve what the user named, run every check, append
the findings to ``<project>/verify/findings.jsonl`` (never into a run), and show them as a
:class:`VerifyReport` (rich repr in a notebook, a dict, or ``rgt verify --json``)."""

from __future__ import annotations

import html
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..jobs.lookup import resolve_runs
from ..store.fsutil import atomic_write_bytes
from ..store.project import project_dir
from .checks import all_checks
from .checks.common import resolve_metric
from .model import Context, Finding, RunData, finding_key, read_findings

_ORDER = {"bug": 0, "finding": 1, "inconclusive": 2, "noise": 3, "effect": 4, "not_checked": 5}
#: The colour of each verdict: JupyterLab's theme variables, with a fallback for nbconvert,
#: nbviewer and GitHub. ``not_checked`` and ``noise`` are neutral: neither passed nor failed.
_COLORS = {
    "bug": "var(--jp-error-color1, #cf222e)",
    "finding": "var(--jp-error-color1, #cf222e)",
    "inconclusive": "var(--jp-warn-color1, #9a6700)",
    "noise": "var(--jp-ui-font-color2, #6e7781)",
    "not_checked": "var(--jp-ui-font-color2, #6e7781)",
    "pass": "var(--jp-success-color1, #1a7f37)",
    "effect": "var(--jp-success-color1, #1a7f37)",
}
#: The report's data for programs: a vendor type, which no frontend ranks above the HTML.
MIME = "application/vnd.rgt.verify+json"
#: Run ids named in a row before the rest are counted.
_SHOWN_RUNS = 3


class VerifyReport:
    """The findings of one ``%verify``: a rich view, a dict (:meth:`to_dict`), and the path of
    the findings log they were appended to."""

    def __init__(self, findings: list[Finding], context: Context, log: Path | None) -> None:
        self.findings = findings
        self.context = context
        self.log = log

    @property
    def problems(self) -> list[Finding]:
        """Bugs and integrity findings."""
        return [f for f in self.findings if f.is_problem]

    def by_claim(self) -> dict[str, list[Finding]]:
        """The findings of each claim id (``""`` for those made without one); the recorded
        findings of every ``%verify`` by claim are in
        :func:`~rgt_jupyter.verify.model.findings_by_claim`."""
        out: dict[str, list[Finding]] = {}
        for f in self.findings:
            out.setdefault(f.claim_id or "", []).append(f)
        return out

    def by_check(self, check: str) -> list[Finding]:
        """The findings of one check."""
        return [f for f in self.findings if f.check == check]

    def verdict(self, check: str) -> str | None:
        """The most serious verdict one check gave (None when it did not run)."""
        found = sorted((f.verdict for f in self.by_check(check)), key=lambda v: _ORDER.get(v, 9))
        return found[0] if found else None

    def to_dict(self) -> dict[str, Any]:
        """``{"findings": [...], "runs", "baselines", "metric", "direction", "split", "log"}``."""
        ctx = self.context
        return {
            "findings": [f.record() for f in self.findings],
            "runs": [r.run_id for r in ctx.runs],
            "baselines": [r.run_id for r in ctx.baselines],
            "metric": ctx.metric,
            "direction": ctx.direction,
            "split": ctx.split,
            "log": str(self.log) if self.log else None,
        }

    def _rows(self) -> list[tuple[str, str, str, int]]:
        """(verdict, check, disclosure, how many runs said it), most serious first; the same
        finding about several runs is one row."""
        return [(v, c, d, len(n)) for v, c, d, n in self._grouped()]

    def _grouped(self) -> list[tuple[str, str, str, list[str]]]:
        """(verdict, check, disclosure, the runs it is about), most serious first."""
        groups: dict[tuple[str, str, str], list[str]] = {}
        for f in self.findings:
            runs = groups.setdefault((f.verdict, f.check, f.disclosure), [])
            runs.extend(r for r in f.run_ids if r not in runs)
            if not f.run_ids:
                runs.append("")
        rows = [(v, c, d, runs) for (v, c, d), runs in groups.items()]
        return sorted(rows, key=lambda r: _ORDER.get(r[0], 9))

    def _head(self) -> str:
        """``%verify 4 runs vs 2 baselines: metric acc (max) on test`` (ids are in the table)."""
        ctx = self.context
        name, direction, split = resolve_metric(ctx)

        def some(runs: list[Any], word: str) -> str:
            return str(runs[0].run_id) if len(runs) == 1 else f"{len(runs)} {word}"

        versus = f" vs {some(ctx.baselines, 'baselines')}" if ctx.baselines else ""
        return (
            f"%verify {some(ctx.runs, 'runs')}{versus}: metric {name or '?'} "
            f"({direction or 'direction unknown'}) on {split}"
        )

    def text(self) -> str:
        """The report as plain text, most serious first."""

        ctx = self.context
        name, direction, split = resolve_metric(ctx)
        head = (
            f"%verify {', '.join(r.run_id for r in ctx.runs)}"
            + (f" vs {', '.join(r.run_id for r in ctx.baselines)}" if ctx.baselines else "")
            + f": metric {name or '?'} ({direction or 'direction unknown'}) on {split}"
        )
        lines = [head]
        for verdict, check, disclosure, n in self._rows():
            times = f" (x{n})" if n > 1 else ""
            lines.append(f"  [{verdict}] {check}: {disclosure}{times}")
        if self.log:
            lines.append(f"  findings appended to {self.log}")
        return "\n".join(lines)

    def html(self) -> str:
        """The report as an HTML table: verdict (coloured by the theme), check, the runs it is
        about, what it means; every run id in a folded list below."""
        e = html.escape
        rows = []
        for verdict, check, disclosure, runs in self._grouped():
            color = _COLORS.get(verdict, "inherit")
            named = [r for r in runs if r]
            shown = ", ".join(e(r) for r in named[:_SHOWN_RUNS])
            if len(named) > _SHOWN_RUNS:
                shown += f" +{len(named) - _SHOWN_RUNS} more"
            rows.append(
                f"<tr><td class='rgt-verdict rgt-{e(verdict)}' style='color:{color};"
                f"font-weight:bold;text-align:left'>{e(verdict)}</td>"
                f"<td style='text-align:left'>{e(check)}</td>"
                f"<td style='text-align:left'><code>{shown or '-'}</code></td>"
                f"<td style='text-align:left'>{e(disclosure)}</td></tr>"
            )
        ctx = self.context
        ids = [r.run_id for r in ctx.runs] + [r.run_id for r in ctx.baselines]
        folded = (
            "<details><summary>runs checked</summary><ul>"
            + "".join(f"<li><code>{e(r)}</code></li>" for r in ids)
            + "</ul></details>"
        )
        log = f"<div>findings appended to <code>{e(str(self.log))}</code></div>" if self.log else ""
        heads = "".join(
            f"<th style='text-align:left'>{h}</th>"
            for h in ("verdict", "check", "runs", "what it means")
        )
        return (
            f"<div class='rgt-verify'><b>{e(self._head())}</b><table><tr>{heads}</tr>"
            + "".join(rows)
            + f"</table>{folded}{log}</div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/plain": self.text(), "text/html": self.html(), MIME: self.to_dict()}

    def __repr__(self) -> str:
        return f"<VerifyReport {len(self.findings)} findings, {len(self.problems)} problems>"


def append_findings(findings: list[Finding], project: Path) -> Path:
    """Append ``findings`` to ``<project>/verify/findings.jsonl`` (the log only grows; each
    append is one durable write of whole lines). A finding already in the log (the same
    :func:`~rgt_jupyter.verify.model.finding_key`: check, runs, inputs' sha256, claim and what it
    said) is not appended again."""
    path = project / "verify" / "findings.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    seen = {finding_key(rec) for rec in read_findings(project)}
    lines = []
    for f in findings:
        rec = f.record()
        key = finding_key(rec)
        if key not in seen:
            seen.add(key)
            lines.append(json.dumps(rec, sort_keys=True, default=str) + "\n")
    data = "".join(lines)
    if not path.exists():
        atomic_write_bytes(path, b"")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def verify(
    runs: Iterable[str | os.PathLike[str]],
    baselines: Iterable[str | os.PathLike[str]] = (),
    metric: str | None = None,
    direction: str | None = None,
    split: str | None = None,
    changed: Iterable[str] = (),
    project: str | os.PathLike[str] | None = None,
    record: bool = True,
    claim: str | None = None,
) -> VerifyReport:
    """Run every check on ``runs`` (and ``baselines``); see the module docstring. ``claim``: the
    claim id the findings are recorded under."""

    proj = project_dir(project)
    arms = [
        resolve_runs([str(r) for r in runs], proj),
        resolve_runs([str(b) for b in baselines], proj),
    ]
    if not arms[0]:
        raise UsageError("%verify: name at least one run (a run id, a job, or a seed group)")
    if direction is not None and direction not in ("max", "min"):
        raise UsageError(f"%verify: --direction is max or min, not {direction!r}")
    ctx = Context(
        runs=[RunData(p) for p in arms[0]],
        baselines=[RunData(p) for p in arms[1]],
        metric=metric,
        direction=direction,
        changed=list(changed),
    )
    declared = next((r.metric for r in ctx.everything if r.metric), None) or {}
    ctx.metric = ctx.metric or declared.get("name")
    ctx.split = split or declared.get("split") or "test"
    findings: list[Finding] = []
    for name, check in all_checks():
        try:
            findings += check(ctx)
        except Exception as exc:  # noqa: BLE001 - one broken check is itself disclosed
            findings.append(
                Finding(
                    check=name,
                    verdict="not_checked",
                    disclosure=f"the check could not run: {type(exc).__name__}: {exc}",
                    run_ids=[r.run_id for r in ctx.everything],
                )
            )
    stamp = time.time()
    for f in findings:
        f.created = stamp
        f.claim_id = f.claim_id or claim
    log = append_findings(findings, proj) if record else None
    return VerifyReport(findings, ctx, log)


def verify_args(args: Any, project: str | os.PathLike[str] | None = None) -> VerifyReport:
    """:func:`verify` from the parsed ``%verify`` / ``rgt verify`` arguments."""
    return verify(
        args.runs,
        args.baseline,
        metric=args.metric,
        direction=args.direction,
        split=args.split,
        changed=args.changed,
        project=project,
        claim=getattr(args, "claim", None),
    )
