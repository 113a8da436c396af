"""Markdown placeholders ``{{rgt:<ref>|<fmt>}}``: found, rendered from the runs, and rendered
at export by the nbconvert preprocessor :class:`RgtPlaceholders` (the notebook's own source keeps
the placeholders; the exported copy shows the numbers and records their sources in the cell's
``metadata["rgt_jupyter"]``).

Export with it: ``jupyter nbconvert --to html
--Exporter.preprocessors=rgt_jupyter.deliver.placeholders.RgtPlaceholders nb.ipynb``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, Unicode

from ..errors import UsageError
from ..store.project import project_dir
from .numbers import PLACEHOLDER, num

__all__ = ["PLACEHOLDER", "Placeholder", "RgtPlaceholders", "find", "render"]


@dataclass(frozen=True)
class Placeholder:
    """One placeholder in a text: its reference, format (None when absent) and ``[start, end)``
    span of the placeholder as written."""

    ref: str
    fmt: str | None
    start: int
    end: int
    text: str


#: Fenced code blocks and inline code spans: a placeholder written there is shown as written.
_CODE = re.compile(r"(?ms)^(```|~~~).*?^\1[^\n]*$|(`+)(?!`).+?(?<!`)\2(?!`)")


def find(text: str) -> list[Placeholder]:
    """Every placeholder in ``text``, in order (not those inside code spans or fences, which
    show the syntax rather than ask for a number)."""
    code = [(m.start(), m.end()) for m in _CODE.finditer(text)]
    found = []
    for match in PLACEHOLDER.finditer(text):
        if any(a <= match.start() < b for a, b in code):
            continue
        fmt = match.group("fmt")
        found.append(
            Placeholder(
                ref=match.group("ref").strip(),
                fmt=(fmt.strip() or None) if fmt is not None else None,
                start=match.start(),
                end=match.end(),
                text=match.group(0),
            )
        )
    return found


def render(
    text: str, project: str | os.PathLike[str] | Path | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """``text`` with each placeholder replaced by its number, and the numbers' sources in order
    (each with ``span`` ``[start, end)`` in the rendered text and ``placeholder``, as written)."""
    proj = project_dir(project)
    out: list[str] = []
    sources: list[dict[str, Any]] = []
    pos = 0
    length = 0
    for ph in find(text):
        literal = text[pos : ph.start]
        out += [literal]
        length += len(literal)
        number = num(ph.ref, ph.fmt, proj)
        span = [length, length + len(number.text)]
        sources.append({**number.source(), "span": span, "placeholder": ph.text})
        out.append(number.text)
        length += len(number.text)
        pos = ph.end
    out.append(text[pos:])
    return "".join(out), sources


class RgtPlaceholders(Preprocessor):
    """Renders the placeholders of markdown cells at export. A cell with placeholders gets
    ``metadata["rgt_jupyter"] = {"generated": [sources], "template": <source as written>}``; a
    placeholder that does not resolve raises :class:`UsageError` naming the cell."""

    enabled = Bool(True).tag(config=True)
    project = Unicode(
        "",
        help="The project root; default: $RGT_PROJECT, else found from the notebook's folder.",
    ).tag(config=True)

    def __init__(self, **kwargs: Any) -> None:
        base: Any = super()  # nbconvert's Preprocessor is untyped
        base.__init__(**kwargs)

    def preprocess(self, nb: Any, resources: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Render every markdown cell of ``nb`` (in place); returns ``(nb, resources)``."""
        base: Any = super()
        out: tuple[Any, dict[str, Any]] = base.preprocess(nb, resources)
        return out

    def _project(self, resources: dict[str, Any]) -> Path:
        if self.project:
            return project_dir(self.project)
        folder = (resources.get("metadata") or {}).get("path")
        if folder and not os.environ.get("RGT_PROJECT"):
            return project_dir(folder)
        return project_dir(None)

    def preprocess_cell(
        self, cell: Any, resources: dict[str, Any], index: int
    ) -> tuple[Any, dict[str, Any]]:
        """Render one markdown cell's placeholders."""
        if cell.get("cell_type") != "markdown" or not find(cell.source):
            return cell, resources
        try:
            rendered, sources = render(cell.source, self._project(resources))
        except UsageError as exc:
            name = cell.get("id") or f"#{index}"
            raise UsageError(f"markdown cell {name} (index {index}): {exc}") from exc
        meta = cell.metadata.setdefault("rgt_jupyter", {})
        meta["generated"] = sources
        meta["template"] = cell.source
        cell.source = rendered
        return cell, resources
