"""Numeric literals of a code cell, read with :mod:`ast` (after IPython's input transformer when
the cell is not plain Python), each with the call, keyword and assignment target it feeds; safe
and configuration literals carry their reason."""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from dataclasses import dataclass
from typing import Any

from ..numtext import decimals_of
from .context import CONFIG_NAMES, CONFIG_PARTS
from .text import METRIC_WORDS, TOKEN, Token, sig_digits

# Names in code whose literal is a metric value (``psnr = 31.42``, ``{"acc": 0.9}``).
_METRIC_NAME_WORDS = METRIC_WORDS - {"test", "val", "validation", "dev", "holdout", "params"}

_LAYOUT_NAMES = frozenset(
    """figsize dpi fontsize labelsize titlesize size alpha lw linewidth linewidths ls rotation
    markersize ms s pad labelpad bins ncol ncols nrows zorder width height capsize elinewidth
    markeredgewidth mew bbox_to_anchor loc wspace hspace aspect framealpha handlelength
    columnspacing indent axis dim dims decimals ndigits precision maxsplit timeout max_workers
    fontweight markevery ticks xticks yticks""".split()
)
_RANGE_CALLS = frozenset({"range", "enumerate", "islice", "arange", "linspace", "logspace"})
_SEED_CALLS = frozenset(
    {"seed", "manual_seed", "manual_seed_all", "set_seed", "seed_everything", "default_rng"}
)
_LAYOUT_CALLS = frozenset(
    """figure subplots subplot add_subplot set_size_inches tight_layout subplots_adjust legend
    text annotate reshape view permute transpose unsqueeze squeeze flatten zeros ones full empty
    randn rand randint head tail sleep zip set_printoptions set_option option_context
    set_figwidth set_figheight GridSpec add_gridspec""".split()
)

# Calls and keywords whose string arguments are shown: printed, displayed, or drawn on a figure.
_TEXT_SINKS = frozenset(
    """print display Markdown HTML Latex Math markdown write title suptitle set_title xlabel
    ylabel set_xlabel set_ylabel set_zlabel annotate text figtext legend set_text set_label
    set_xticklabels set_yticklabels bar_label table info warning log caption""".split()
)
_TEXT_KEYWORDS = frozenset("label title text xlabel ylabel caption s".split())
_FORMAT_FIELD = re.compile(r"\{[^{}\n]*\}|%[-+ #0]*\d*(?:\.\d+)?[diouxXeEfFgGs%]")
_HARDWARE_PART = re.compile(r"[ahvtlkp]\d{2,3}|rtx\d*|a\d{4}|mi\d{3}|tpu\w*|gpu|cpu")
_OPENING = re.compile(r"[rRbBuUfF]{0,2}(?:\"\"\"|\'\'\'|\"|\')")
_CODE_PRAGMA = re.compile(r"#\s*rgt:\s*literal\b")
_MAGIC_STRIP = re.compile(r"%%(?:time|timeit|capture|prun)\b[^\n]*\n")


@dataclass(frozen=True, slots=True)
class ShownText:
    """Text a code cell shows: a string that reaches a print, a display or a figure (``where``
    ``code_string``), or a comment (``code_comment``); at ``line``/``col`` (1-based) of the
    cell, its format fields blanked."""

    line: int
    col: int
    text: str
    where: str


@dataclass(slots=True)
class _Ctx:
    call: str = ""
    arg: int = -1
    kw: str = ""
    key: str = ""
    target: str = ""
    index: bool = False


def _name_of(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        sl = node.slice
        if isinstance(sl, ast.Constant) and isinstance(sl.value, str):
            return sl.value
        return _name_of(node.value)
    if isinstance(node, ast.Call):
        return _name_of(node.func)
    return ""


def _name_reason(name: str) -> str | None:
    low = name.lower().rsplit(".", 1)[-1]
    if low in _LAYOUT_NAMES:
        return f"safe code literal: {name}"
    if low in CONFIG_NAMES or any(p in CONFIG_PARTS for p in re.split(r"[^a-z0-9]+", low)):
        return f"configuration literal: {name}"
    return None


def metric_named(name: str, leaf_names: frozenset[str] = frozenset()) -> bool:
    """Whether a keyword, dict key or variable name names a metric (``test_psnr``, ``acc``)."""
    low = name.lower()
    if low in leaf_names:
        return True
    parts = [p for p in re.split(r"[^a-z0-9]+", low) if p]
    if any(_HARDWARE_PART.fullmatch(p) for p in parts):
        return False  # a100_flops: a device's specification, not a run's result
    return any(p in _METRIC_NAME_WORDS for p in parts)


class CodeScanner:
    """Numeric literals of a code cell, with the call, keyword and target they feed."""

    def __init__(self) -> None:
        self._transformer: Any = None
        #: What the last scanned cell shows as text: strings that reach a sink, and comments.
        self.shown: list[ShownText] = []

    def scan(self, source: str) -> tuple[list[Token], str | None]:
        """The literals (safe ones carry a reason), and an error when the cell cannot be parsed."""
        offset = 0
        code = source
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError):
            m = _MAGIC_STRIP.match(source)
            if m:
                offset = source.count("\n", 0, m.end())
                source = source[m.end() :]
            try:
                code = self._transform(source)
                tree = ast.parse(code)
            except (SyntaxError, ValueError) as exc:
                return (
                    [],
                    f"not parsed as Python: {exc.msg if isinstance(exc, SyntaxError) else exc}",
                )
        lines = code.split("\n")
        pragma = {
            i + 1 for i, line in enumerate(lines) if "rgt" in line and _CODE_PRAGMA.search(line)
        }
        out: list[Token] = []
        self.shown = []
        self._walk(tree, _Ctx(), lines, out)
        for tok in out:
            if tok.line in pragma and tok.reason is None:
                tok.reason = "pragma: rgt: literal"
            tok.line += offset
        self.shown += _comments(code)
        self.shown = [
            ShownText(t.line + offset, t.col, t.text, t.where)
            for t in self.shown
            if t.line not in pragma and any(ch.isdigit() for ch in t.text)
        ]
        return out, None

    def _transform(self, source: str) -> str:
        if self._transformer is None:
            # Imported on first use: IPython costs a quarter second and plain cells skip it.
            module = importlib.import_module("IPython.core.inputtransformer2")
            self._transformer = module.TransformerManager()
        return str(self._transformer.transform_cell(source))

    def _walk(self, node: ast.AST, ctx: _Ctx, lines: list[str], out: list[Token]) -> None:
        if isinstance(node, ast.Constant):
            self._literal(node, node, ctx, lines, out, negative=False)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
            if isinstance(node.op, ast.USub | ast.UAdd):
                self._literal(
                    node, node.operand, ctx, lines, out, negative=isinstance(node.op, ast.USub)
                )
                return
        if isinstance(node, ast.BinOp | ast.Compare | ast.BoolOp):
            # A literal inside arithmetic is no value the target is given (``loss * (1.0 / n)``).
            sub = _Ctx(ctx.call, ctx.arg, ctx.kw, "", "", ctx.index)
            for child in ast.iter_child_nodes(node):
                self._walk(child, sub, lines, out)
            return
        if isinstance(node, ast.FormattedValue):
            self._walk(node.value, ctx, lines, out)  # its format spec (.3f) is no shown text
            return
        if isinstance(node, ast.Call):
            name = _name_of(node.func)
            self._walk(node.func, ctx, lines, out)
            for i, arg in enumerate(node.args):
                self._walk(arg, _Ctx(name, i, "", ctx.key, ctx.target, ctx.index), lines, out)
            for kw in node.keywords:
                sub = _Ctx(name, -1, kw.arg or "", ctx.key, ctx.target, ctx.index)
                self._walk(kw.value, sub, lines, out)
            return
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                self._walk(t, ctx, lines, out)
            if node.value is not None:
                target = _name_of(targets[0]) if len(targets) == 1 else ""
                sub = _Ctx("", -1, "", "", target or ctx.target, False)
                self._walk(node.value, sub, lines, out)
            return
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if k is not None:
                    self._walk(k, ctx, lines, out)
                key = k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else ""
                sub = _Ctx(ctx.call, ctx.arg, ctx.kw, key or ctx.key, ctx.target, ctx.index)
                self._walk(v, sub, lines, out)
            return
        if isinstance(node, ast.Subscript):
            self._walk(node.value, ctx, lines, out)
            self._walk(
                node.slice, _Ctx(ctx.call, ctx.arg, ctx.kw, ctx.key, ctx.target, True), lines, out
            )
            return
        if isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            pairs = list(
                zip(positional[len(positional) - len(node.defaults) :], node.defaults, strict=True)
            )
            pairs += [
                (a, d)
                for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True)
                if d is not None
            ]
            for a, d in pairs:
                self._walk(d, _Ctx("", -1, a.arg, "", "", False), lines, out)
            return
        for child in ast.iter_child_nodes(node):
            self._walk(child, ctx, lines, out)

    def _literal(
        self,
        node: ast.expr,
        const: ast.Constant,
        ctx: _Ctx,
        lines: list[str],
        out: list[Token],
        *,
        negative: bool,
    ) -> None:
        raw = const.value
        if isinstance(raw, str):
            if ctx.call in _TEXT_SINKS or ctx.kw in _TEXT_KEYWORDS:
                text = _FORMAT_FIELD.sub(lambda m: " " * len(m.group()), raw)
                line = lines[const.lineno - 1] if 0 < const.lineno <= len(lines) else ""
                opening = _OPENING.match(line, const.col_offset)
                col = const.col_offset + 1 + (len(opening.group()) if opening else 0)
                if any(ch.isdigit() for ch in text):
                    self.shown.append(ShownText(const.lineno, col, text, "code_string"))
            return
        if isinstance(raw, bool) or not isinstance(raw, int | float | complex):
            return
        lineno = node.lineno
        line = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
        col = node.col_offset
        end = node.end_col_offset if node.end_lineno == lineno and node.end_col_offset else col
        if not line.isascii():
            encoded = line.encode()
            text = encoded[col:end].decode(errors="replace")
            col = len(encoded[:col].decode(errors="replace"))
        else:
            text = line[col:end]
        text = text or repr(raw)
        tok = Token(lineno, col + 1, text)
        tok.context = line.strip()[:100]
        out.append(tok)
        if isinstance(raw, complex):
            tok.reason = "complex literal"
            return
        digits = text.lstrip("+-").replace(" ", "").replace("_", "").lower()
        try:
            mant = digits.split("e")[0] if not digits.startswith("0x") else str(raw)
            tok.decimals = decimals_of(mant)
            tok.sig = sig_digits(mant)
            tok.value = float(-raw if negative else raw)
        except (ValueError, OverflowError):
            tok.reason = "not a decimal literal"
            return
        power = digits.split("e")[1] if "e" in digits and "x" not in digits else "0"
        if len(power.lstrip("+-")) > 4:  # no measured number; int() of it may not even parse
            tok.reason = "exponent out of range"
            return
        tok.exponent = int(power)
        tok.sign_shown = negative
        tok.name = ctx.kw or ctx.key or ctx.target
        tok.words = frozenset(w for w in re.split(r"[^a-z0-9]+", tok.name.lower()) if w)
        tok.reason = _code_reason(ctx)


def _code_reason(ctx: _Ctx) -> str | None:
    if ctx.index:
        return "safe code literal: index"
    if ctx.kw:
        reason = _name_reason(ctx.kw)
        if reason:
            return reason
    if ctx.call in _RANGE_CALLS:
        return f"safe code literal: {ctx.call}()"
    if ctx.call == "round" and ctx.arg == 1:
        return "safe code literal: round digits"
    if ctx.call in _SEED_CALLS:
        return "configuration literal: seed"
    if ctx.call in _LAYOUT_CALLS and not ctx.kw:
        return f"safe code literal: {ctx.call}()"
    for name in (ctx.key, ctx.target):
        if name:
            reason = _name_reason(name)
            if reason:
                return reason
    return None


def _comments(code: str) -> list[ShownText]:
    """The comments of ``code`` (read by :mod:`tokenize`), without their ``#``."""
    found: list[ShownText] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                text = tok.string[1:]
                if text.lstrip().startswith(("!", "type:", "noqa", "pragma", "%")):
                    continue
                found.append(ShownText(tok.start[0], tok.start[1] + 2, text, "code_comment"))
    except (tokenize.TokenError, SyntaxError, ValueError):
        pass  # the cell parsed as Python, so this is a tokenizer corner: no comments read
    return found


def source_numbers(source: str) -> frozenset[str]:
    """The digit strings written anywhere in a cell's source (for outputs that echo them)."""
    return frozenset(m.group("body") for m in TOKEN.finditer(source))
