"""Why a number of text is not a value, for :mod:`.text`: by its shape and the characters and
words right around it (a version, a structural reference, an identifier, dimensions, a file
name, an equation or item reference)."""

from __future__ import annotations

import re

_VERSION_WORDS = frozenset(
    """python py torch pytorch cuda cudnn nccl numpy jax jaxlib tensorflow tf keras transformers
    version release v sklearn pandas scipy matplotlib ubuntu debian driver gcc clang node java
    triton jupyter jupyterlab ipython opencv pillow xformers deepspeed accelerate lightning
    rgt pip conda macos windows linux kernel rocm cmake nvcc""".split()
)
_VERSION_RANGE = re.compile(
    r"\b(?:" + "|".join(sorted(_VERSION_WORDS)) + r")\s?v?\d+(?:\.\d+)*\s?[-–]$", re.I
)
_STRUCT_WORDS = frozenset(
    """section sec sect table tab tbl fig figure figs eq eqn equation appendix app step chapter
    ch line algorithm alg lemma theorem thm definition def corollary proposition prop cell
    listing example ex part page pg exercise question stage phase item row column col claim
    footnote note epoch iteration iter panel subplot""".split()
)

UNITS = r"(?:dB|ms|µs|us|ns|px|[KMGT]i?B|[KMGT]?FLOPs|fps|[kMG]?Hz|mm|cm|km|kg|s|h|min|m|g|W)"
_UNIT_GLUED = re.compile(UNITS + r"(?![A-Za-z])")
_DIM_AFTER = re.compile(r" ?[×x] ?\d")
_DIM_BEFORE = re.compile(r"\d ?[×x] ?$")
_PREV_WORD = re.compile(r"([A-Za-z]+)[^\w\n]{0,3}$")


def ignored_reason(
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
        if prev in "-–" and _VERSION_RANGE.search(before):
            return "version (a range of versions)"
        stripped = before.rstrip()
        if stripped.endswith(("==", ">=", "<=", "~=", "!=")):
            return "version (pinned)"
        if word in _STRUCT_WORDS and not sign:
            return f"structural reference ({pw.group(1) if pw else word})"
        if stripped.lower().endswith("out of"):
            return "a scale's maximum (out of)"
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
        if prev == "<" and body == "3" and not nxt.isalnum():
            return "emoticon (<3)"
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
