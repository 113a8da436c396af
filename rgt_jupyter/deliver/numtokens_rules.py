"""Why a number of notebook text is not a value: a version, a section, table or figure
reference, an identifier (``ResNet-50``), dimensions (``256x256``), a file name, or an equation
or item reference."""

from __future__ import annotations

import re

_VERSION_WORDS = frozenset(
    """python py torch pytorch cuda cudnn nccl numpy jax jaxlib tensorflow tf keras transformers
    version release v sklearn pandas scipy matplotlib ubuntu debian driver gcc clang node java
    triton jupyter jupyterlab ipython opencv pillow xformers deepspeed accelerate lightning
    rgt pip conda macos windows linux kernel rocm cmake nvcc""".split()
)
_STRUCT_WORDS = frozenset(
    """section sec sect table tab tbl fig figure figs eq eqn equation appendix app step chapter
    ch line algorithm alg lemma theorem thm definition def corollary proposition prop cell
    listing example ex part page pg exercise question stage phase item row column col claim
    footnote note epoch iteration iter""".split()
)

_UNITS = r"(?:dB|ms|µs|us|ns|px|[KMGT]i?B|[KMGT]?FLOPs|fps|[kMG]?Hz|mm|cm|km|kg|s|h|min|m|g|W)"
_UNIT_GLUED = re.compile(_UNITS + r"(?![A-Za-z])")
_DIM_AFTER = re.compile(r" ?[×x] ?\d")
_DIM_BEFORE = re.compile(r"\d ?[×x] ?$")
_PREV_WORD = re.compile(r"([A-Za-z]+)[^\w\n]{0,3}$")


def _ignored(
    s: str,
    body: str,
    body_start: int,
    prev: str,
    nxt: str,
    end: int,
    sign: str | None,
    exp: str | None,
    suf: str | None,
) -> str | None:
    """Why the number whose digits ``body`` start at ``body_start`` of the line ``s`` (and end
    at ``end``, between the characters ``prev`` and ``nxt``) is not a value; None when it may
    be one."""
    before = s[max(0, body_start - 24) : body_start]
    if prev and not prev.isalnum() and prev != "_":
        pw = _PREV_WORD.search(before)
        word = pw.group(1).lower() if pw else ""
        if word in _VERSION_WORDS and not sign:
            return f"version (after {pw.group(1) if pw else word})"
        stripped = before.rstrip()
        if stripped.endswith(("==", ">=", "<=", "~=", "!=")):
            return "version (pinned)"
        if word in _STRUCT_WORDS and not sign:
            return f"structural reference ({pw.group(1) if pw else word})"
        if stripped.endswith("§"):
            return "structural reference (§)"
    if prev:
        if prev in "vV" and (body_start < 2 or not s[body_start - 2].isalnum()):
            return "version (v)"
        if prev.isalnum() or prev == "_":
            return "identifier (glued to letters)"
        if prev == "@":
            return "identifier (glued to letters)"
        if prev in "×x* " and _DIM_BEFORE.search(s, max(0, body_start - 4), body_start):
            return "identifier (dimensions)"
        if prev == "#":
            return "reference (#)"
        if prev == "^" or s[max(0, body_start - 2) : body_start] in ("^{", "_{"):
            return "math index"
        if prev == "." and body_start >= 2 and s[body_start - 2].isalpha():
            return "identifier (glued to letters)"
    if nxt and not suf:
        after = s[end + 1] if end + 1 < len(s) else ""
        if nxt in "×x" and after.isdigit() or _DIM_AFTER.match(s, end):
            return "identifier (dimensions)"
        if nxt.isalpha() and not _UNIT_GLUED.match(s, end):
            return "identifier (glued to letters)"
        if nxt == "_" or (nxt == "-" and after.isalpha()):
            return "identifier (glued to letters)"
        if nxt == "." and after.isalpha():
            return "identifier (file name)"
        if (
            prev == "("
            and nxt == ")"
            and body.isdigit()
            and len(body) <= 2
            and not sign
            and not exp
        ):
            return "equation or item reference"
    return None
