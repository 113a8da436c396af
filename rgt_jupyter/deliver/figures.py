"""Figures with a provenance chain: every mark's number traceable to the results.json bytes.

:func:`figure` exports a matplotlib figure to ``figures/<id>/`` of the project:

* ``source_data.csv``: the ``data`` rows, raw values at full precision (``repr(float)``);
* ``source_data.sources.json``: for each cell (row, column), its kind (``generated``, ``typed``,
  ``label`` or ``empty``) and, for a generated number, its ``source()`` dict;
* ``<id>.<fmt>`` per format, written deterministically (same inputs, same bytes);
* ``<id>.<fmt>.provenance`` per output (JSON): what it was built from (each results.json path
  with its sha256, run id and keys), the hashes of the CSV, the sources and the output, the code,
  library versions, the pixel gate's results (:mod:`.pixel`) and the disclosures.

Nothing blocks: typed numbers, changed or missing results.json files and pixel-gate findings are
written into the sidecars and returned as findings and disclosures.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import io
import json
import numbers
import platform
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ..store.fsutil import atomic_write_bytes
from ..store.project import project_dir
from ..store.provenance import git_state
from . import pixel

SIDECAR_SCHEMA = "rgt/figure-provenance/v1"
SOURCES_SCHEMA = "rgt/figure-sources/v1"
#: Save metadata per format: the entries that would change from one save to the next are dropped.
SAVE_METADATA: dict[str, dict[str, None]] = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
    "pdf": {"Creator": None, "Producer": None, "CreationDate": None},
}
_RASTER = {"png"}
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass
class FigureExport:
    """What :func:`figure` wrote: paths (absolute), the sidecar dicts and the findings."""

    id: str
    project: Path
    folder: Path
    outputs: dict[str, Path]
    sidecars: dict[str, Path]
    provenance: dict[str, dict[str, Any]]
    source_data: Path
    sources: Path
    generated: list[dict[str, Any]]
    findings: list[dict[str, Any]] = field(default_factory=list)
    disclosures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No pixel-gate check failed (disclosures do not count)."""
        return not any(f["status"] == "fail" for f in self.findings)

    def text(self) -> str:
        """A plain-text summary: the files, then every finding and disclosure."""
        rel = ", ".join(_rel(p, self.project) for p in self.outputs.values())
        lines = [
            f"figure {self.id}: {rel} (+ provenance sidecars, {_rel(self.source_data, self.project)})"
        ]
        if self.findings:
            for f in self.findings:
                lines.append(
                    f"  [{f['status']}] {f['check']} ({', '.join(f['formats'])}): {f['detail']}"
                )
        else:
            lines.append("  pixel gate: every check passed")
        other = [d for d in self.disclosures if not d.startswith("pixel gate")]
        lines.extend(f"  disclosed: {d}" for d in other)
        return "\n".join(lines)

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        data: dict[str, Any] = {"text/plain": self.text()}
        image = ""
        png = self.outputs.get("png")
        if png is not None and png.is_file():
            encoded = base64.b64encode(png.read_bytes()).decode("ascii")
            data["image/png"] = encoded
            image = f"<img src='data:image/png;base64,{encoded}' alt='{html.escape(self.id)}'/>"
        rows = "".join(
            f"<li><b>{html.escape(f['status'])}</b> {html.escape(f['check'])}: "
            f"{html.escape(f['detail'])}</li>"
            for f in self.findings
        ) + "".join(
            f"<li>disclosed: {html.escape(d)}</li>"
            for d in self.disclosures
            if not d.startswith("pixel gate")
        )
        summary = "pixel gate: every check passed" if not self.findings else ""
        data["text/html"] = (
            f"<div class='rgt-figure'>{image}<div><b>{html.escape(self.id)}</b> "
            f"{html.escape(summary)}<ul>{rows}</ul></div></div>"
        )
        metadata = {
            "rgt_jupyter": {
                "figure": self.id,
                "generated": self.generated,
                "provenance": {fmt: _rel(p, self.project) for fmt, p in self.sidecars.items()},
            }
        }
        return data, metadata

    def __repr__(self) -> str:
        return (
            f"<FigureExport {self.id}: {', '.join(self.outputs)}; "
            f"{len(self.findings)} findings, {len(self.disclosures)} disclosures>"
        )


@dataclass
class _Cell:
    row: int
    column: str
    kind: str
    text: str
    source: dict[str, Any] | None = None


def figure_texts(fig: Figure) -> list[dict[str, str]]:
    """The text drawn on ``fig`` that a reader takes for claims: its title, each axes' titles,
    axis labels, texts and annotations, and legend entries (tick labels are left out: they are
    the axes' scale). Each as ``{"where": ..., "text": ...}``, empty texts skipped."""
    found: list[dict[str, str]] = []

    def add(where: str, text: str) -> None:
        if text and text.strip():
            found.append({"where": where, "text": text})

    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None:
        add("figure title", suptitle.get_text())
    for k, ax in enumerate(fig.get_axes()):
        for loc in ("left", "center", "right"):
            add(f"axes {k} title", ax.get_title(loc=loc))
        add(f"axes {k} x label", ax.get_xlabel())
        add(f"axes {k} y label", ax.get_ylabel())
        for text in ax.texts:
            add(f"axes {k} text", text.get_text())
        legend = ax.get_legend()
        if legend is not None:
            for entry in legend.get_texts():
                add(f"axes {k} legend", entry.get_text())
    for text in fig.texts:
        add("figure text", text.get_text())
    return found


def figure(
    fig: Figure,
    id: str,
    data: Sequence[dict[str, Any]],
    claims: Iterable[str] = (),
    project: str | Path | None = None,
    formats: Iterable[str] = ("png", "svg"),
    dpi: float = 150,
    size_in: tuple[float, float] | None = None,
    code: str | None = None,
) -> FigureExport:
    """Export ``fig`` as ``figures/<id>/<id>.<fmt>`` with its source data and one provenance
    sidecar per output; never refuses over a finding.

    ``data``: the rows behind the marks. A value is a label (str, int, bool, None), a generated
    number (anything with ``value`` and ``results_json``/``sha256``/``key``, such as a
    ``GeneratedNumber``) or a bare float, which is recorded and disclosed as typed. ``claims``:
    the claim ids the figure supports. ``size_in`` resizes the figure (inches) before saving.
    ``code``: the text that drew the figure (a notebook cell's source), recorded by sha256.
    """
    if not _ID.fullmatch(id):
        raise ValueError(f"figure id {id!r}: use letters, digits, '.', '_' and '-' only")
    fmts = list(dict.fromkeys(f.lower().lstrip(".") for f in formats))
    unknown = [f for f in fmts if f not in SAVE_METADATA]
    if unknown or not fmts:
        raise ValueError(f"formats {unknown or fmts}: choose from {sorted(SAVE_METADATA)}")
    root = project_dir(project)
    folder = root / "figures" / id
    if size_in is not None:
        fig.set_size_inches(size_in[0], size_in[1])
    width_in, height_in = (float(v) for v in fig.get_size_inches())
    size_px = (width_in * dpi, height_in * dpi)

    columns, cells = _cells(data)
    csv_bytes = _csv_bytes(columns, cells, len(data))
    sources_bytes = _json_bytes(
        {
            "schema": SOURCES_SCHEMA,
            "figure": id,
            "columns": columns,
            "rows": len(data),
            "cells": [
                {
                    "row": c.row,
                    "column": c.column,
                    "kind": c.kind,
                    "value": c.text,
                    **({"source": c.source} if c.source is not None else {}),
                }
                for c in cells
            ],
        }
    )
    csv_path = folder / "source_data.csv"
    sources_path = folder / "source_data.sources.json"
    atomic_write_bytes(csv_path, csv_bytes)
    atomic_write_bytes(sources_path, sources_bytes)

    built_from, chain_disclosures = _built_from(cells, root)
    typed = [c for c in cells if c.kind == "typed"]
    base_disclosures = [
        f"typed number {c.text} (row {c.row}, column {c.column!r}) is not generated from a "
        "results.json"
        for c in typed
    ] + chain_disclosures
    if not any(c.kind == "generated" for c in cells):
        base_disclosures.append("no generated number in the source data: nothing traces to a run")

    common = {
        "schema": SIDECAR_SCHEMA,
        "figure": id,
        "supports_claims": list(claims),
        "built_from": built_from,
        "source_data": {
            "path": _rel(csv_path, root),
            "sha256": _sha(csv_bytes),
            "rows": len(data),
            "columns": columns,
        },
        "sources": {"path": _rel(sources_path, root), "sha256": _sha(sources_bytes)},
        "typed": [{"row": c.row, "column": c.column, "value": c.text} for c in typed],
        # The words drawn on it (titles, labels, annotations, legends): the typed-number
        # check reads them too.
        "texts": figure_texts(fig),
        "code": {
            "sha256": _sha(code.encode()) if code is not None else None,
            **git_state(root),
        },
        "versions": {
            "matplotlib": matplotlib.__version__,
            "numpy": np.__version__,
            "pillow": _pillow_version(),
            "python": platform.python_version(),
        },
    }

    outputs: dict[str, Path] = {}
    sidecars: dict[str, Path] = {}
    records: dict[str, dict[str, Any]] = {}
    findings: dict[tuple[str, str, str], dict[str, Any]] = {}
    all_disclosures: list[str] = list(base_disclosures)
    for fmt in fmts:
        out = folder / f"{id}.{fmt}"
        payload = _render(fig, fmt, dpi, id)
        atomic_write_bytes(out, payload)
        checks = pixel.check(
            out,
            fig=fig,
            expected_size_px=size_px,
            expected_dpi=float(dpi),
        )
        gate = [
            f"pixel gate {c['check']} ({c['status']}, {fmt}): {c['detail']}"
            for c in checks
            if c["status"] != "pass"
        ]
        for c in checks:
            if c["status"] == "pass":
                continue
            entry = findings.setdefault(
                (c["check"], c["status"], c["detail"]), {**c, "formats": []}
            )
            entry["formats"].append(fmt)
        all_disclosures.extend(gate)
        record = {
            **common,
            "output": {
                "path": _rel(out, root),
                "format": fmt,
                "sha256": _sha(payload),
                "bytes": len(payload),
            },
            "render": {
                "dpi": dpi,
                "size_in": [width_in, height_in],
                "size_px": [round(size_px[0]), round(size_px[1])] if fmt in _RASTER else None,
                "svg_hashsalt": _salt(id) if fmt == "svg" else None,
                "metadata_dropped": sorted(SAVE_METADATA[fmt]),
            },
            "pixel_check": {
                "passed": all(c["status"] != "fail" for c in checks),
                "checks": checks,
            },
            "disclosures": base_disclosures + gate,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        sidecar = folder / f"{id}.{fmt}.provenance"
        atomic_write_bytes(sidecar, _json_bytes(record))
        outputs[fmt] = out
        sidecars[fmt] = sidecar
        records[fmt] = record

    generated: list[dict[str, Any]] = []
    seen: set[str] = set()
    for cell in cells:
        if cell.source is None:
            continue
        key = json.dumps(cell.source, sort_keys=True)
        if key not in seen:
            seen.add(key)
            generated.append(cell.source)
    return FigureExport(
        id=id,
        project=root,
        folder=folder,
        outputs=outputs,
        sidecars=sidecars,
        provenance=records,
        source_data=csv_path,
        sources=sources_path,
        generated=generated,
        findings=list(findings.values()),
        disclosures=list(dict.fromkeys(all_disclosures)),
    )


def is_number(value: Any) -> bool:
    """Whether ``value`` is a generated number (duck-typed on the GeneratedNumber attributes)."""
    return hasattr(value, "value") and any(
        hasattr(value, a) for a in ("results_json", "sha256", "key")
    )


def _cells(data: Sequence[dict[str, Any]]) -> tuple[list[str], list[_Cell]]:
    columns: list[str] = []
    for row in data:
        for key in row:
            if str(key) not in columns:
                columns.append(str(key))
    cells: list[_Cell] = []
    for i, row in enumerate(data):
        values = {str(k): v for k, v in row.items()}
        for column in columns:
            if column not in values:
                cells.append(_Cell(i, column, "empty", ""))
                continue
            value = values[column]
            if is_number(value):
                cells.append(_Cell(i, column, "generated", _text(value.value), _source_of(value)))
            elif value is None:
                cells.append(_Cell(i, column, "empty", ""))
            elif isinstance(value, (str, bool, int, np.integer)):
                cells.append(_Cell(i, column, "label", _text(value)))
            elif isinstance(value, numbers.Real):
                cells.append(_Cell(i, column, "typed", _text(value)))
            else:
                cells.append(_Cell(i, column, "label", _text(value)))
    return columns, cells


def _text(value: Any) -> str:
    """A cell's raw value as text, floats at full precision."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return str(value)


def _source_of(number: Any) -> dict[str, Any]:
    source = getattr(number, "source", None)
    if callable(source):
        raw = source()
    else:
        raw = {
            a: getattr(number, a, None)
            for a in ("value", "text", "ref", "run_id", "results_json", "sha256", "key")
            + ("fmt", "claim_id")
        }
    plain: dict[str, Any] = json.loads(json.dumps(dict(raw), default=str))
    return plain


def _built_from(cells: list[_Cell], root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """One entry per distinct (results.json, recorded sha256), with the file re-hashed now."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for c in cells:
        if c.source is None:
            continue
        raw_path = c.source.get("results_json")
        path = _resolve(raw_path, root) if raw_path else None
        rel = _rel(path, root) if path is not None else None
        key = (rel or "", str(c.source.get("sha256") or ""))
        entry = groups.setdefault(
            key,
            {
                "results_json": rel,
                "sha256": c.source.get("sha256"),
                "run_id": c.source.get("run_id"),
                "keys": [],
                "refs": [],
                "claim_ids": [],
                "cells": [],
            },
        )
        for name, attr in (("keys", "key"), ("refs", "ref"), ("claim_ids", "claim_id")):
            item = c.source.get(attr)
            if item is not None and item not in entry[name]:
                entry[name].append(item)
        entry["cells"].append({"row": c.row, "column": c.column})
    disclosures: list[str] = []
    entries = list(groups.values())
    for entry in entries:
        rel = entry["results_json"]
        if rel is None:
            entry["sha256_now"] = None
            disclosures.append(
                f"numbers {entry['refs'] or entry['keys']} name no results.json: not traceable"
            )
            continue
        path = _resolve(rel, root)
        now = _sha(path.read_bytes()) if path.is_file() else None
        entry["sha256_now"] = now
        if now is None:
            disclosures.append(f"{rel} is missing: the numbers built from it cannot be re-checked")
        elif now != entry["sha256"]:
            disclosures.append(
                f"{rel} changed since its numbers were generated (sha256 {entry['sha256']} "
                f"recorded, {now} now)"
            )
    return entries, disclosures


def _render(fig: Figure, fmt: str, dpi: float, id: str) -> bytes:
    """The figure saved as ``fmt`` with fixed dpi, page size, SVG hash salt and no varying
    metadata: the same figure gives the same bytes."""
    buffer = io.BytesIO()
    rc: Any = {"svg.hashsalt": _salt(id), "savefig.bbox": "standard"}
    with matplotlib.rc_context(rc), warnings.catch_warnings():
        # A missing glyph is reported by the pixel gate's tofu check instead.
        warnings.filterwarnings("ignore", message=pixel.MISSING_GLYPH.pattern)
        fig.savefig(buffer, format=fmt, dpi=dpi, metadata=dict(SAVE_METADATA[fmt]))
    return buffer.getvalue()


def _salt(id: str) -> str:
    return f"rgt-figure:{id}"


def _resolve(path: str | Path, root: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else root / p


def _rel(path: Path, root: Path) -> str:
    """``path`` relative to the project root when inside it, else absolute (POSIX form)."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, default=str) + "\n").encode()


def _csv_bytes(columns: list[str], cells: list[_Cell], rows: int) -> bytes:
    table: list[list[str]] = [["" for _ in columns] for _ in range(rows)]
    index = {c: i for i, c in enumerate(columns)}
    for c in cells:
        table[c.row][index[c.column]] = c.text
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(table)
    return buffer.getvalue().encode()


def _pillow_version() -> str | None:
    try:
        import PIL  # deferred: Pillow, only when a figure is exported
    except ImportError:
        return None
    return str(PIL.__version__)
