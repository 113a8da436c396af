"""Reading a notebook for the DELIVER tools (``check-numbers``, ``deliver``, ``repro``,
``reconcile``): the file is read once, checked against the shape of nbformat 4 (older versions
are converted first) and given back as plain JSON with every multi-line string joined.

A file that is not such a notebook (not UTF-8, not JSON, an nbformat other than 1-4, no
``cells`` list, a cell or an output of the wrong shape: a stream whose text is a list of
numbers, an image that is not base64, a string with an unpaired surrogate) raises
:class:`NotebookError`, one line naming the file, where in it and what is wrong, before any tool
writes anything.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib
import json
import os
from pathlib import Path
from typing import Any

from ..errors import UsageError

#: A notebook file larger than this is not read.
MAX_BYTES = 1 << 30
CELL_TYPES = ("code", "markdown", "raw")
OUTPUT_TYPES = ("stream", "display_data", "execute_result", "error", "update_display_data")
#: Binary mime types: their value is base64 text.
_BASE64 = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "application/pdf")
_FIX = "open it in Jupyter and save it again, or restore it from version control"


class NotebookError(UsageError):
    """A file that is not a notebook the DELIVER tools can read; the message names the file and
    what is wrong."""


_KINDS = {
    bool: ("a boolean", "booleans"),
    int: ("a number", "numbers"),
    float: ("a number", "numbers"),
    str: ("text", "strings"),
    dict: ("an object", "objects"),
    list: ("a list", "lists"),
    type(None): ("null", "nulls"),
}


def _kind(value: Any) -> str:
    """How a JSON value is described in a message: ``a number``, ``a list of numbers``."""
    if isinstance(value, list) and value:
        inner = sorted({_KINDS.get(type(v), ("", type(v).__name__))[1] for v in value[:50]})
        return "a list of " + " and ".join(inner)
    return _KINDS.get(type(value), (type(value).__name__, ""))[0]


class _Checker:
    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, where: str, what: str) -> NotebookError:
        place = f"{where}: " if where else ""
        return NotebookError(f"{self.name}: not a notebook rgt can read: {place}{what}; {_FIX}")

    def text(self, value: Any, where: str, field: str) -> str:
        """A string, or a list of strings (joined); anything else is refused."""
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = "".join(value)
        if not isinstance(value, str):
            raise self.fail(where, f'"{field}" must be text, not {_kind(value)}')
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise self.fail(
                where, f'"{field}" holds an unpaired surrogate ({exc.reason})'
            ) from None
        return value

    def mapping(self, value: Any, where: str, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f'"{field}" must be an object, not {_kind(value)}')
        return value

    def strings(self, value: Any, where: str, field: str) -> None:
        """Every string inside a JSON value encodes as UTF-8."""
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                self.text(item, where, field)
            elif isinstance(item, dict):
                stack += list(item.keys()) + list(item.values())
            elif isinstance(item, list):
                stack += item

    def data(self, bundle: Any, where: str) -> None:
        bundle = self.mapping(bundle, where, "data")
        for mime in list(bundle):
            here = f"{where}, {mime}"
            if mime == "application/json" or mime.endswith("+json"):
                self.strings(bundle[mime], here, mime)
                continue
            bundle[mime] = self.text(bundle[mime], here, mime)
            if mime in _BASE64:
                try:
                    base64.b64decode("".join(bundle[mime].split()), validate=True)
                except (binascii.Error, ValueError):
                    raise self.fail(here, "the image is not base64") from None

    def output(self, out: Any, where: str) -> None:
        if not isinstance(out, dict):
            raise self.fail(where, f"an output must be an object, not {_kind(out)}")
        kind = out.get("output_type")
        if kind not in OUTPUT_TYPES:
            raise self.fail(where, f"unknown output_type {str(kind)[:40]!r}")
        if "metadata" in out:
            self.mapping(out["metadata"], where, "metadata")
            self.strings(out["metadata"], where, "metadata")
        if kind == "stream":
            self.text(out.get("name"), where, "name")
            out["text"] = self.text(out.get("text"), where, "text")
        elif kind == "error":
            self.text(out.get("ename"), where, "ename")
            self.text(out.get("evalue"), where, "evalue")
            tb = out.get("traceback")
            if not isinstance(tb, list) or not all(isinstance(t, str) for t in tb):
                raise self.fail(where, f'"traceback" must be a list of text, not {_kind(tb)}')
            for line in tb:
                self.text(line, where, "traceback")
        else:
            self.data(out.get("data"), where)

    def cell(self, cell: Any, where: str) -> None:
        if not isinstance(cell, dict):
            raise self.fail(where, f"a cell must be an object, not {_kind(cell)}")
        kind = cell.get("cell_type")
        if kind not in CELL_TYPES:
            raise self.fail(where, f"unknown cell_type {str(kind)[:40]!r}")
        if "id" in cell and not isinstance(cell["id"], str):
            raise self.fail(where, f'"id" must be text, not {_kind(cell["id"])}')
        if "metadata" in cell:
            self.mapping(cell["metadata"], where, "metadata")
            self.strings(cell["metadata"], where, "metadata")
        cell["source"] = self.text(cell.get("source"), where, "source")
        if kind != "code":
            return
        count = cell.get("execution_count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise self.fail(where, f'"execution_count" must be a number, not {_kind(count)}')
        outputs = cell.setdefault("outputs", [])
        if not isinstance(outputs, list):
            raise self.fail(where, f'"outputs" must be a list, not {_kind(outputs)}')
        for j, out in enumerate(outputs):
            self.output(out, f"{where}, output {j}")


def _convert(text: str, name: str, major: int) -> dict[str, Any]:
    """An nbformat 1-3 notebook converted to version 4 (as plain JSON)."""
    try:
        nbformat = importlib.import_module("nbformat")
        node = nbformat.convert(nbformat.reader.reads(text), 4)
        value: dict[str, Any] = json.loads(json.dumps(node))
    except Exception as exc:  # noqa: BLE001 - any failure of the conversion is the answer
        detail = " ".join(str(exc).split())[:120]
        raise NotebookError(
            f"{name}: not a notebook rgt can read: nbformat {major} could not be converted to "
            f"version 4 ({type(exc).__name__}: {detail}); {_FIX}"
        ) from None
    return value


def read_notebook(path: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """The notebook at ``path`` as nbformat-4 JSON (multi-line strings joined) and the sha256
    of its bytes; raises :class:`NotebookError` when it is not one (see the module docstring)."""
    name = str(path)
    file = Path(path)
    try:
        size = file.stat().st_size
        if not file.is_file():
            raise NotebookError(f"{name}: not a file")
        if size > MAX_BYTES:
            raise NotebookError(
                f"{name}: {size / 2**30:.1f} GiB, larger than the {MAX_BYTES >> 30} GiB a "
                "notebook may be here; clear its outputs and save it again"
            )
        raw = file.read_bytes()
    except FileNotFoundError:
        raise NotebookError(f"{name}: no such file") from None
    except OSError as exc:
        raise NotebookError(f"{name}: cannot be read ({exc.strerror or exc})") from None
    check = _Checker(name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 1].hex()
        raise check.fail("", f"it is not UTF-8 text (byte {exc.start} is 0x{bad})") from None
    try:
        nb = json.loads(text)
    except RecursionError:
        raise check.fail("", "its JSON is nested too deeply") from None
    except ValueError as exc:
        reason = getattr(exc, "msg", None) or " ".join(str(exc).split())[:120]
        at = (
            f" at line {exc.lineno}, column {exc.colno}"
            if isinstance(exc, json.JSONDecodeError)
            else ""
        )
        raise check.fail("", f"it is not valid JSON{at} ({reason})") from None
    if not isinstance(nb, dict):
        raise check.fail("", f"the top level is {_kind(nb)}, not an object")
    major = nb.get("nbformat")
    if isinstance(major, bool) or not isinstance(major, int):
        raise check.fail("", f'"nbformat" must be a number, not {_kind(major)}')
    if not 1 <= major <= 4:
        raise check.fail("", f"nbformat {major} is not supported (4, or 1-3 converted)")
    if major < 4:
        nb = _convert(text, name, major)
    if "metadata" in nb:
        check.mapping(nb["metadata"], "", "metadata")
    cells = nb.get("cells")
    if not isinstance(cells, list):
        what = "it has no cells list" if cells is None else f'"cells" is {_kind(cells)}'
        raise check.fail("", what)
    for i, cell in enumerate(cells):
        check.cell(cell, f"cell {i}")
    return nb, hashlib.sha256(raw).hexdigest()
