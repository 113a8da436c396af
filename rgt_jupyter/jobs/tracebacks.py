"""A job's Python traceback (its ``error.json``) shown as IPython shows one, in the cell's own
line numbers; the launch's smoke run, the API and the views all show it."""

from __future__ import annotations

import os
from typing import Any

from .records import clean_text, finite, short_text

#: A line of source shown in a traceback is cut at this many characters.
MAX_TEXT = 400


#: The colours of a traceback (IPython's).
RED, CYAN, RESET = "\x1b[31m", "\x1b[36m", "\x1b[0m"


def traceback_lines(
    error: dict[str, Any], program: str, line_offset: int, label: str, job_id: str, host: str
) -> list[str]:
    """Render a job's ``error.json`` like IPython does, with the cell's own line numbers.

    Frames in the job's program are shown as ``Cell <label>, line N`` where N counts lines of the
    notebook cell (the ``%%remote_run`` line included); other frames keep their file names.
    """
    program = os.path.abspath(program)
    error = error if isinstance(error, dict) else {}
    out = [
        f"{RED}{'-' * 75}{RESET}",
        f"{RED}{short_text(error.get('type'), 200)}{RESET}  (raised in job {job_id} on {host})",
    ]
    syntax = error.get("syntax") if isinstance(error.get("syntax"), dict) else None
    listed = error.get("frames")
    frames: list[Any] = listed[:200] if isinstance(listed, list) else []
    for frame in (f for f in frames if isinstance(f, dict)):
        line = finite(frame.get("line"))
        if os.path.abspath(str(frame.get("file"))) == program and line is not None:
            out.append(
                f"{CYAN}Cell {label}, line {int(line) + line_offset}{RESET}, "
                f"in {short_text(frame.get('name'), 200)}"
            )
        else:
            out.append(
                f"  File {short_text(str(frame.get('file')), 300)!r}, line "
                f"{short_text(frame.get('line'), 20)}, in {short_text(frame.get('name'), 200)}"
            )
        if frame.get("text"):
            out.append(f"    {short_text(frame['text'], MAX_TEXT)}")
    if syntax:
        line = finite(syntax.get("line"))
        where = (
            f"Cell {label}, line {int(line) + line_offset}"
            if line is not None and os.path.abspath(str(syntax.get("file"))) == program
            else f"File {short_text(str(syntax.get('file')), 300)!r}, line "
            f"{short_text(syntax.get('line'), 20)}"
        )
        out.append(f"{CYAN}{where}{RESET}")
        text = clean_text(str(syntax.get("text") or "")).rstrip("\n")[:MAX_TEXT]
        if text:
            out.append(f"    {text}")
            offset = finite(syntax.get("offset"))
            if offset and 0 < offset <= len(text) + 1:
                out.append("    " + " " * (int(offset) - 1) + "^")
    message = "\n".join(clean_text(m) for m in str(error.get("message")).split("\n")[:50])
    out.append(f"{RED}{short_text(error.get('type'), 200)}{RESET}: {message[: MAX_TEXT * 10]}")
    return out
