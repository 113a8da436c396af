"""The labelled corpus of ``rgt check-numbers``: real documents (papers' READMEs, model cards,
notebooks from public repositories) and synthetic ones, each with every number labelled by
hand, and the runs whose ``results.json`` hold the documents' reported results.

Layout, under ``tests/fixtures/numbers_corpus/``:

* ``docs/<doc>.ipynb``: the document (nbformat 4);
* ``labels/<doc>.json``: ``[{"cell", "text", "occurrence", "label", "class" | "form",
  "output"?}]``, a number as written (``text``), its ``occurrence``-th (0-based) appearance in
  cell ``cell``'s source (or in the text of its output ``output``), ``label`` ``innocent``
  (with its ``class``) or ``result`` (with the ``form`` it is written in);
* ``runs/<doc>.json``: ``{"<run id>": {"job", "created", "results"}}``, the runs to make;
* ``SOURCES.json``: where each real document comes from (repository, path, commit, licence,
  URL).

:func:`evaluate` makes a project with a document's runs, runs :func:`check_numbers` on it, and
matches the reported items to the labels by cell, line and overlapping columns (the labels'
positions are found in the text as the scanner normalises it). :func:`summarize` counts recall
by form and false alarms per 200 innocent numbers by class.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from rgt_jupyter.deliver.check_numbers import NumberItem, check_numbers
from rgt_jupyter.deliver.numtokens import CodeScanner, TextScanner, normalize
from rgt_jupyter.errors import RgtError
from rgt_jupyter.store.registry import Registry

from .verify_fixtures import make_run

CORPUS = Path(__file__).resolve().parent / "fixtures" / "numbers_corpus"
DOCS = CORPUS / "docs"
LABELS = CORPUS / "labels"
RUNS = CORPUS / "runs"
SOURCES = CORPUS / "SOURCES.json"

INNOCENT_CLASSES = frozenset(
    """year citation bibliography version name count hardware config counted numbering date
    code-layout computed-output other""".split()
)
RESULT_FORMS = frozenset(
    """exact percent rounded table latex pm derived sci separator code-title code-comment
    code-string code-literal stale output""".split()
)
#: How many misses :func:`summarize` lists (false alarms: 10 per class).
EXAMPLES = 200
#: Statuses that flag a number (a false alarm when the number is innocent).
FLAGGED = frozenset({"typed", "ambiguous"})
_SUGGESTED = re.compile(r"(\{\{\s*rgt:[^{}]*\}\})(.*)$")
_SUGGESTED_NUM = re.compile(r"rgt\.num\(\s*[\"']([^\"']+)[\"'](?:\s*,\s*[\"']([^\"']*)[\"'])?")


@dataclass(frozen=True)
class Label:
    """One hand-labelled number of one document."""

    doc: str
    cell: int
    text: str
    occurrence: int
    label: str
    kind: str  # the innocent class, or the result form
    output: int | None = None

    @property
    def result(self) -> bool:
        """A reported result (else innocent)."""
        return self.label == "result"


@dataclass
class Outcome:
    """How the check treated one labelled number: the items that overlap it."""

    label: Label
    items: list[NumberItem] = field(default_factory=list)
    detected: bool = False
    flagged: bool = False
    suggestion_ok: bool | None = None


@dataclass
class DocResult:
    """One document checked: each label's outcome, the items no label covers, and the error
    when the check failed on the document."""

    doc: str
    outcomes: list[Outcome] = field(default_factory=list)
    unlabelled: list[NumberItem] = field(default_factory=list)
    error: str | None = None


# -- reading the corpus


def documents() -> list[str]:
    """The names of the corpus's documents, sorted."""
    return sorted(p.stem for p in DOCS.glob("*.ipynb"))


def notebook(doc: str) -> dict[str, Any]:
    """The document as a notebook dict."""
    data: dict[str, Any] = json.loads((DOCS / f"{doc}.ipynb").read_text(encoding="utf-8"))
    return data


def labels(doc: str) -> list[Label]:
    """The document's labels."""
    path = LABELS / f"{doc}.json"
    rows = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    return [
        Label(
            doc=doc,
            cell=int(r["cell"]),
            text=str(r["text"]),
            occurrence=int(r.get("occurrence", 0)),
            label=str(r["label"]),
            kind=str(r.get("form") if r["label"] == "result" else r.get("class")),
            output=r.get("output"),
        )
        for r in rows
    ]


def runs(doc: str) -> dict[str, dict[str, Any]]:
    """The runs to make for the document: ``{run id: {"job", "created", "results"}}``."""
    path = RUNS / f"{doc}.json"
    data: dict[str, dict[str, Any]] = (
        json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    )
    return data


def sources() -> list[dict[str, Any]]:
    """Where each real document comes from."""
    data: list[dict[str, Any]] = json.loads(SOURCES.read_text(encoding="utf-8"))
    return data


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def cell_text(nb: dict[str, Any], cell: int, output: int | None = None) -> str:
    """The source of cell ``cell``, or the text of its output ``output`` (stdout, or the first
    of text/markdown, text/html, text/latex, text/plain)."""
    c = nb["cells"][cell]
    if output is None:
        return _text(c.get("source"))
    out = c.get("outputs", [])[output]
    if out.get("output_type") == "stream":
        return _text(out.get("text"))
    data = out.get("data", {})
    for mime in ("text/markdown", "text/html", "text/latex", "text/plain"):
        if mime in data:
            return _text(data[mime])
    return ""


def span(text: str, written: str, occurrence: int) -> tuple[int, int, int] | None:
    """(line, start, end) of the ``occurrence``-th ``written`` in ``text``: the line 1-based,
    the columns 0-based in the line as :func:`normalize` makes it; None when not there."""
    pos = -1
    for _ in range(occurrence + 1):
        pos = text.find(written, pos + 1)
        if pos < 0:
            return None
    line_start = text.rfind("\n", 0, pos) + 1
    line_end = text.find("\n", pos)
    line = text[line_start : len(text) if line_end < 0 else line_end]
    start = len(normalize(line[: pos - line_start]))
    end = len(normalize(line[: pos - line_start + len(written)]))
    return text.count("\n", 0, pos) + 1, start, max(end, start + 1)


# -- the project a document is checked in


def make_project(root: Path, doc_runs: dict[str, dict[str, Any]]) -> Path:
    """A project under ``root`` holding the runs, pulled in ``created`` order: each job is in
    the registry with its runs, oldest first, so a job name names its newest run."""
    project = root / "project"
    (project / "runs").mkdir(parents=True, exist_ok=True)
    registry = Registry(project)
    base = time.time() - 86400
    jobs: dict[str, str] = {}
    for run_id, run in sorted(doc_runs.items(), key=lambda kv: kv[1].get("created", 0)):
        job = str(run.get("job", run_id))
        created = base + float(run.get("created", 0)) * 60
        if job not in jobs:
            jobs[job] = f"job-{job}"
            registry.add_job(jobs[job], job, job, 1, "local", "localhost", {}, created_at=created)
        folder = make_run(project / "runs", run_id, results=run["results"])
        record = json.loads((folder / "run.json").read_text())
        record.update(name=job, job_id=jobs[job], times={"created": created, "pulled": created})
        (folder / "run.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        registry.add_run(run_id, jobs[job], folder, True, at=created)
    return project


# -- matching the check's items to the labels


def _item_span(item: NumberItem) -> tuple[int, int]:
    start = max(0, item.col - 1)
    return start, start + max(1, len(item.text))


def _placeholder(suggestion: str | None) -> tuple[str, str] | None:
    """The placeholder a suggestion asks for, and the text it keeps after it: ``use
    {{rgt:<ref>|<fmt>}}`` or ``rgt.num("<ref>", "<fmt>")``; None for any other advice."""
    m = _SUGGESTED.search(suggestion or "")
    if m is not None:
        return m.group(1), m.group(2)
    m = _SUGGESTED_NUM.search(suggestion or "")
    if m is not None:
        fmt = f"|{m.group(2)}" if m.group(2) is not None else ""
        return f"{{{{rgt:{m.group(1)}{fmt}}}}}", ""
    return None


def _rendered(suggestion: str | None, project: Path) -> str | None:
    """What the suggested placeholder renders to (with the text kept after it); None when
    there is none or it does not resolve."""
    from rgt_jupyter.deliver.placeholders import render  # deferred: imports nbconvert

    found = _placeholder(suggestion)
    if found is None:
        return None
    try:
        text, _ = render(found[0], project)
    except (RgtError, ValueError, TypeError, KeyError):
        return None
    return text + found[1]


def _reading(text: str) -> tuple[Decimal, int, bool] | None:
    """A shown number read as (value, decimals of its mantissa, shown as a percent): LaTeX
    (``$93.4\\%$``, ``\\times10^{-4}``), superscript powers, separators, a sign and a unit
    after it dropped."""
    s = normalize(text).replace("$", "").replace("\\%", "%").replace("\\times", "×")
    s = s.replace("\\,", "").replace("{", "").replace("}", "")
    s = re.sub(r"(?<=\d)[,' ](?=\d{3}\b)", "", s)
    m = _READ.search(s)
    if m is None:
        return None
    mantissa, power = m.group("m"), m.group("e") or m.group("p")
    try:
        value = Decimal(mantissa).scaleb(int(power) if power else 0)
    except (InvalidOperation, ValueError):
        return None
    return -value if m.group("sg") else value, len(mantissa.partition(".")[2]), bool(m.group("pct"))


_READ = re.compile(
    r"(?P<sg>-)?(?P<m>\d*\.?\d+)\s*(?:[eE](?P<e>[-+]?\d+)|\s*[×x*·]\s*10\^?(?P<p>[-+]?\d+))?\s*(?P<pct>%)?"
)


def _same_number(shown: str, written: str) -> bool:
    """Whether ``shown`` (a rendered placeholder) is the number ``written`` as written: same
    value, same decimals, both percent or neither."""
    a, b = _reading(shown), _reading(written)
    return a is not None and a == b


def evaluate(doc: str, root: Path) -> DocResult:
    """Check ``doc`` in a fresh project under ``root`` and match the items to its labels."""
    result = DocResult(doc)
    doc_labels = labels(doc)
    project = make_project(root, runs(doc))
    try:
        report = check_numbers(DOCS / f"{doc}.ipynb", project=project)
    except Exception as exc:  # reported with the document, never raised
        import traceback  # deferred: only on a crash

        result.error = "".join(traceback.format_exception(exc))
        return result
    nb = notebook(doc)
    where: dict[tuple[int, int | None, int], list[tuple[int, int, Outcome]]] = defaultdict(list)
    for lab in doc_labels:
        outcome = Outcome(lab)
        result.outcomes.append(outcome)
        found = span(cell_text(nb, lab.cell, lab.output), lab.text, lab.occurrence)
        if found is not None:
            line, start, end = found
            where[(lab.cell, lab.output, line)].append((start, end, outcome))
    for item in report.items:
        out_index = item.output_index if item.where == "output" else None
        start, end = _item_span(item)
        hits = [
            o
            for s, e, o in where.get((item.cell_index, out_index, item.line), [])
            if s < end and start < e
        ]
        if not hits:
            result.unlabelled.append(item)
        for outcome in hits:
            outcome.items.append(item)
    for outcome in result.outcomes:
        for item in outcome.items:
            if item.status not in FLAGGED:
                continue
            outcome.flagged = True
            shown = _rendered(item.suggestion, project)
            works = shown is not None and _same_number(shown, outcome.label.text)
            if item.suggestion is not None:
                outcome.suggestion_ok = bool(outcome.suggestion_ok) or works
            if item.status == "typed" or works:
                outcome.detected = True
        if any(i.stale for i in outcome.items):
            outcome.detected = outcome.flagged = True
    return result


def summarize(results: Iterable[DocResult]) -> dict[str, Any]:
    """Recall by form, false alarms per 200 innocent numbers by class, counts, the misses and
    false alarms (a few examples of each), unlabelled items and crashes."""
    results = list(results)
    by_form: dict[str, Counter[str]] = defaultdict(Counter)
    by_class: dict[str, Counter[str]] = defaultdict(Counter)
    misses: list[dict[str, Any]] = []
    alarms: list[dict[str, Any]] = []
    suggestions = Counter[str]()
    for res in results:
        for o in res.outcomes:
            lab = o.label
            row = {
                "doc": lab.doc,
                "cell": lab.cell,
                "text": lab.text,
                "kind": lab.kind,
                "items": [
                    {"text": i.text, "status": i.status, "reason": i.reason} for i in o.items
                ],
            }
            if lab.result:
                by_form[lab.kind]["n"] += 1
                by_form[lab.kind]["detected"] += o.detected
                if not o.detected:
                    misses.append(row)
                if o.suggestion_ok is not None:
                    suggestions["with_suggestion"] += 1
                    suggestions["suggestion_renders"] += o.suggestion_ok
            else:
                by_class[lab.kind]["n"] += 1
                by_class[lab.kind]["false_alarms"] += o.flagged
                if o.flagged:
                    alarms.append(row)
    n_res = sum(c["n"] for c in by_form.values())
    n_det = sum(c["detected"] for c in by_form.values())
    n_inn = sum(c["n"] for c in by_class.values())
    n_fa = sum(c["false_alarms"] for c in by_class.values())

    def per200(fa: int, n: int) -> float | None:
        return round(200 * fa / n, 2) if n else None

    return {
        "documents": len(results),
        "results": n_res,
        "innocent": n_inn,
        "recall": round(n_det / n_res, 4) if n_res else None,
        "recall_by_form": {
            k: {"n": c["n"], "detected": c["detected"], "recall": round(c["detected"] / c["n"], 4)}
            for k, c in sorted(by_form.items())
        },
        "false_alarms": n_fa,
        "false_alarms_per_200": per200(n_fa, n_inn),
        "false_alarms_by_class": {
            k: {
                "n": c["n"],
                "false_alarms": c["false_alarms"],
                "per_200": per200(c["false_alarms"], c["n"]),
            }
            for k, c in sorted(by_class.items())
        },
        "suggestions": dict(suggestions),
        "misses": misses[:EXAMPLES],
        "false_alarm_items": _per_kind(alarms, 10),
        "unlabelled": [
            {
                "doc": r.doc,
                "cell": i.cell_index,
                "where": i.where,
                "output": i.output_index,
                "line": i.line,
                "col": i.col,
                "text": i.text,
                "status": i.status,
                "reason": i.reason,
            }
            for r in results
            for i in r.unlabelled
            if i.status in FLAGGED
        ],
        "unlabelled_ignored": sum(
            1 for r in results for i in r.unlabelled if i.status not in FLAGGED
        ),
        "crashes": {r.doc: r.error for r in results if r.error},
    }


def _per_kind(rows: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    seen: Counter[str] = Counter()
    out = []
    for row in rows:
        seen[row["kind"]] += 1
        if seen[row["kind"]] <= most:
            out.append(row)
    return out


# -- the numbers a document holds, as the package's scanner finds them


def scanned_numbers(doc: str) -> list[dict[str, Any]]:
    """Every number the package's scanner finds in the document: in markdown cells, in code
    cells (literals, and the text of strings shown and comments) and in their outputs. Each as
    ``{"cell", "output", "line", "start", "end", "text"}`` (columns 0-based, ``output`` None
    for the cell's source)."""
    nb = notebook(doc)
    text_scanner = TextScanner(frozenset())
    code_scanner = CodeScanner()
    out: list[dict[str, Any]] = []

    def add(cell: int, output: int | None, toks: Iterable[Any]) -> None:
        for tok in toks:
            if tok.kind == "placeholder" or tok.reason in ("code fence", "progress bar"):
                continue
            if not any(ch.isdigit() for ch in tok.text):
                continue
            start = max(0, tok.col - 1)
            end = start + max(1, len(tok.text))
            out.append(
                {
                    "cell": cell,
                    "output": output,
                    "line": tok.line,
                    "start": start,
                    "end": end,
                    "text": tok.text,
                }
            )

    for i, cell in enumerate(nb["cells"]):
        source = _text(cell.get("source"))
        if cell.get("cell_type") == "markdown":
            add(i, None, text_scanner.markdown(source))
        elif cell.get("cell_type") == "code":
            toks, _ = code_scanner.scan(source)
            add(i, None, list(toks) + _shown_numbers(code_scanner))
            for k, _output in enumerate(cell.get("outputs") or []):
                add(i, k, TextScanner(frozenset()).output_text(cell_text(nb, i, k)))
    return out


def _shown_numbers(code_scanner: CodeScanner) -> list[Any]:
    """The numbers of the text a code cell shows (strings that reach a print or a figure, and
    comments), at their place in the cell."""
    scanner = TextScanner(frozenset())
    out = []
    for shown in code_scanner.shown:
        for tok in scanner.output_text(shown.text):
            if tok.kind == "placeholder":
                continue
            tok.col = (shown.col if tok.line == 1 else 1) + tok.col - 1
            tok.line = shown.line + tok.line - 1
            out.append(tok)
    return out
