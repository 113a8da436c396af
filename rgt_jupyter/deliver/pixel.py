"""The pixel re-open gate: a saved figure is re-opened and looked at, not trusted.

:func:`check` re-opens the file (raster formats with Pillow, SVG as XML) and, when the matplotlib
figure is given, draws it once more with a recording Agg renderer to inspect what was drawn. Each
result is ``{"check", "status", "detail"}`` with status ``pass``, ``fail`` or ``disclose``; a
finding never blocks anything, the caller attaches it to the figure's provenance.

Checks, one result each:

* ``open``: the file exists and is a readable image of its format.
* ``blank``: a uniform image, under 0.5 % of pixels off the background colour, an SVG without
  marks; a visible axes with no data (and no text, table or image) or no ink inside it.
* ``size``: a side at or past the Agg limit (2^16 px); the size differs from the one asked.
* ``dpi``: the dpi recorded in a raster file differs from the one asked.
* ``clipped``: a drawn text line that reaches outside the figure; ink in the outer 2 px border.
* ``tofu``: a "Glyph ... missing from font(s)" warning while drawing; a character absent from the
  cmap of every font matplotlib resolves for that text.
* ``truncated_axis``: bars all on one side of 0 whose value-axis limits exclude 0 (disclose).
* ``log_axis``: an axes with a log (or other non-linear) scale (disclose).
"""

from __future__ import annotations

import io
import math
import re
import unicodedata
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties

#: The order results come back in.
CHECKS = ("open", "blank", "size", "dpi", "clipped", "tofu", "truncated_axis", "log_axis")
#: Fraction of non-background pixels under which an image counts as blank.
BLANK_FRACTION = 0.005
#: Width of the border, in pixels, that must hold no ink.
BORDER_PX = 2
#: A pixel is ink when one of its RGBA channels differs from the background by more than this.
INK_TOLERANCE = 8
#: Agg cannot draw an image with a side this long or longer.
AGG_LIMIT_PX = 1 << 16
#: How far (display pixels) a text line may reach past the figure edge before it counts.
CLIP_TOLERANCE_PX = 1.0
#: Elements that put marks on an SVG page.
_SVG_MARKS = {"path", "use", "image", "text", "rect", "circle", "ellipse", "line", "polyline"}
_RASTER = {"png", "jpg", "jpeg", "tif", "tiff", "webp", "bmp", "gif"}
_STATUS_RANK = {"pass": 0, "disclose": 1, "fail": 2}
_LINEAR = {"linear"}
#: A matplotlib warning about a character the font cannot draw.
MISSING_GLYPH = re.compile(r"Glyph .* missing from (current )?font")


@dataclass
class _Results:
    """Per check, the (status, detail) items found so far."""

    items: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def add(self, name: str, status: str, detail: str) -> None:
        self.items.setdefault(name, []).append((status, detail))

    def ok(self, name: str, detail: str) -> None:
        self.add(name, "pass", detail)

    def merged(self) -> list[dict[str, str]]:
        """One result per check: the worst status, the details of that status joined."""
        out: list[dict[str, str]] = []
        for name in CHECKS:
            found = self.items.get(name)
            if not found:
                continue
            worst = max((s for s, _ in found), key=lambda s: _STATUS_RANK[s])
            details = [d for s, d in found if s == worst]
            out.append({"check": name, "status": worst, "detail": "; ".join(details)})
        return out


@dataclass
class _DrawnText:
    """One line of text as the renderer was asked to draw it (Agg coordinates: y from the top)."""

    x: float
    y: float
    text: str
    prop: FontProperties
    angle: float
    ismath: Any


class _RecordingRenderer(RendererAgg):
    """An Agg renderer that remembers every text line it draws."""

    def __init__(self, width: int, height: int, dpi: float) -> None:
        cast(Any, super()).__init__(width, height, dpi)
        self.drawn: list[_DrawnText] = []

    def draw_text(
        self,
        gc: Any,
        x: float,
        y: float,
        s: str,
        prop: FontProperties,
        angle: float,
        ismath: Any = False,
        mtext: Any = None,
    ) -> None:
        self.drawn.append(_DrawnText(float(x), float(y), s, prop, float(angle), ismath))
        cast(Any, super()).draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)


def check(
    path: str | Path,
    fig: Figure | None = None,
    expected_size_px: tuple[float, float] | None = None,
    expected_dpi: float | None = None,
) -> list[dict[str, str]]:
    """Re-open the saved figure at ``path`` and inspect ``fig`` (when given); the results, one
    per check that applies, in :data:`CHECKS` order.

    ``expected_size_px`` is (width, height) in pixels at ``expected_dpi``; for an SVG it is
    compared with the page size in points through ``expected_dpi``. The ``dpi`` check applies to
    raster files only.
    """
    results = _Results()
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    image: np.ndarray[Any, Any] | None = None
    if not path.is_file():
        results.add("open", "fail", f"{path.name} does not exist")
    elif fmt == "svg":
        _check_svg(path, results, expected_size_px, expected_dpi)
    elif fmt in _RASTER:
        image = _check_raster(path, results, expected_size_px, expected_dpi)
    else:
        data = path.read_bytes()
        if data:
            results.ok("open", f"{path.name}: {len(data)} bytes (not re-opened as pixels)")
        else:
            results.add("open", "fail", f"{path.name} is empty")
    if fig is not None:
        _check_figure(fig, results, image)
    return results.merged()


def _check_raster(
    path: Path,
    results: _Results,
    expected_size_px: tuple[float, float] | None,
    expected_dpi: float | None,
) -> np.ndarray[Any, Any] | None:
    from PIL import Image, UnidentifiedImageError  # deferred: Pillow, only when pixels are compared

    try:
        with Image.open(io.BytesIO(path.read_bytes())) as im:
            im.load()
            size = im.size
            info_dpi = im.info.get("dpi")
            pixels = np.asarray(im.convert("RGBA"), dtype=np.int16)
    except (OSError, UnidentifiedImageError) as exc:
        results.add("open", "fail", f"{path.name} does not open as an image: {exc}")
        return None
    results.ok("open", f"{path.name}: {size[0]}x{size[1]} px")
    _size(results, (float(size[0]), float(size[1])), expected_size_px, "px", 1.0)
    if expected_dpi is not None:
        if not info_dpi:
            results.add("dpi", "fail", f"no dpi recorded in the file; expected {expected_dpi:g}")
        else:
            got = float(info_dpi[0])
            if abs(got - expected_dpi) > 0.5:
                results.add("dpi", "fail", f"dpi {got:g} in the file; expected {expected_dpi:g}")
            else:
                results.ok("dpi", f"{round(got)} dpi")
    # The background is the border's most common colour: a large mark (one wide bar) can cover
    # more of the image than the background does, but the border is mostly background.
    ink, background = _ink(pixels, _ring(pixels, 8))
    total = ink.size
    count = int(ink.sum())
    bg = "#" + "".join(f"{int(c):02x}" for c in background)
    if count == 0:
        results.add("blank", "fail", f"the image is one uniform colour ({bg})")
    elif count < BLANK_FRACTION * total:
        results.add(
            "blank",
            "fail",
            f"only {count} of {total} pixels ({100 * count / total:.2f} %) differ from the "
            f"background {bg}; under {100 * BLANK_FRACTION:g} % counts as blank",
        )
    else:
        results.ok("blank", f"{100 * count / total:.1f} % of pixels carry ink")
    b = BORDER_PX
    border = np.zeros_like(ink)
    border[:b, :] = border[-b:, :] = border[:, :b] = border[:, -b:] = True
    edge = int((ink & border).sum())
    if edge:
        results.add(
            "clipped",
            "fail",
            f"{edge} px of ink in the outer {b} px border: marks run off the edge",
        )
    else:
        results.ok("clipped", f"no ink in the outer {b} px border")
    return pixels


def _ink(
    pixels: np.ndarray[Any, Any], sample: np.ndarray[Any, Any] | None = None
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The ink mask of an RGBA array and its background: the most common colour of ``sample``
    (pixels of the same array; default: all of them)."""
    source = pixels if sample is None else sample
    flat = source.reshape(-1, source.shape[-1]).astype(np.uint32)
    packed = (flat[:, 0] << 24) | (flat[:, 1] << 16) | (flat[:, 2] << 8) | flat[:, 3]
    colours, counts = np.unique(packed, return_counts=True)
    mode = int(colours[int(np.argmax(counts))])
    background = np.array([(mode >> s) & 0xFF for s in (24, 16, 8, 0)], dtype=np.int16)
    ink = np.asarray((np.abs(pixels - background) > INK_TOLERANCE).any(axis=-1))
    return ink, background


def _ring(pixels: np.ndarray[Any, Any], width: int) -> np.ndarray[Any, Any]:
    """The pixels of the outer ``width`` px border, as one (N, channels) array."""
    return np.concatenate(
        [
            pixels[:width, :].reshape(-1, pixels.shape[-1]),
            pixels[-width:, :].reshape(-1, pixels.shape[-1]),
            pixels[:, :width].reshape(-1, pixels.shape[-1]),
            pixels[:, -width:].reshape(-1, pixels.shape[-1]),
        ]
    )


def _size(
    results: _Results,
    got: tuple[float, float],
    expected: tuple[float, float] | None,
    unit: str,
    tolerance: float,
) -> None:
    w, h = got
    if unit == "px" and max(w, h) >= AGG_LIMIT_PX:
        results.add("size", "fail", f"{w:g}x{h:g} px: a side reaches the Agg limit {AGG_LIMIT_PX}")
    elif expected is not None and (
        abs(w - expected[0]) > tolerance or abs(h - expected[1]) > tolerance
    ):
        results.add(
            "size",
            "fail",
            f"{w:g}x{h:g} {unit}; expected {expected[0]:g}x{expected[1]:g} {unit}",
        )
    else:
        results.ok("size", f"{w:g}x{h:g} {unit}")


def _check_svg(
    path: Path,
    results: _Results,
    expected_size_px: tuple[float, float] | None,
    expected_dpi: float | None,
) -> None:
    try:
        root = ET.fromstring(path.read_bytes())
    except ET.ParseError as exc:
        results.add("open", "fail", f"{path.name} does not parse as XML: {exc}")
        return
    if _local(root.tag) != "svg":
        results.add("open", "fail", f"{path.name}: the root element is <{_local(root.tag)}>")
        return
    results.ok("open", f"{path.name} parses as SVG")
    marks = sum(1 for el in root.iter() if _local(el.tag) in _SVG_MARKS)
    # A matplotlib figure always draws its background patch: one mark is an empty page.
    if marks <= 1:
        results.add("blank", "fail", f"the SVG holds {marks} mark(s): nothing is drawn")
    else:
        results.ok("blank", f"{marks} marks")
    width, height = _svg_points(root.get("width")), _svg_points(root.get("height"))
    if width is None or height is None:
        results.add("size", "fail", "the SVG has no width/height in points")
        return
    expected = None
    if expected_size_px is not None and expected_dpi:
        expected = (
            expected_size_px[0] / expected_dpi * 72.0,
            expected_size_px[1] / expected_dpi * 72.0,
        )
    _size(results, (width, height), expected, "pt", 1.0)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _svg_points(value: str | None) -> float | None:
    if not value:
        return None
    match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(pt|px|in)?\s*", value)
    if not match:
        return None
    number = float(match.group(1))
    scale = {"pt": 1.0, None: 0.75, "px": 0.75, "in": 72.0}[match.group(2)]
    return number * scale


def _check_figure(fig: Figure, results: _Results, image: np.ndarray[Any, Any] | None) -> None:
    width, height = float(fig.bbox.width), float(fig.bbox.height)
    renderer = _RecordingRenderer(max(1, int(width)), max(1, int(height)), float(fig.dpi))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.draw(renderer)
    glyph_warnings = sorted(
        {str(w.message) for w in caught if MISSING_GLYPH.search(str(w.message))}
    )
    _figure_blank(fig, results, image, width)
    with warnings.catch_warnings():
        # Measuring a line repeats the draw's missing-glyph warning, already recorded above.
        warnings.filterwarnings("ignore", message=MISSING_GLYPH.pattern)
        _text_clipped(renderer, results, width, height)
    _tofu(renderer.drawn, glyph_warnings, results)
    _truncated(fig, results)
    _scales(fig, results)


def _axes_label(fig: Figure, index: int) -> str:
    ax = fig.axes[index]
    title = ax.get_title()
    return f"axes {index}" + (f" ({title!r})" if title else "")


def _figure_blank(
    fig: Figure, results: _Results, image: np.ndarray[Any, Any] | None, width: float
) -> None:
    axes = [(i, ax) for i, ax in enumerate(fig.axes) if ax.get_visible()]
    if not axes:
        if not (fig.texts or fig.images or fig.patches or fig.lines or fig.artists):
            results.add("blank", "fail", "the figure has no axes and no artists")
        return
    for i, ax in axes:
        if not ax.has_data() and not (ax.texts or ax.tables or ax.images):
            results.add("blank", "fail", f"{_axes_label(fig, i)} has no data")
            continue
        if image is None:
            continue
        scale = image.shape[1] / width if width else 1.0
        box = ax.get_window_extent()
        rows = image.shape[0]
        inset = 3
        c0 = max(0, int(math.ceil(box.x0 * scale)) + inset)
        c1 = min(image.shape[1], int(math.floor(box.x1 * scale)) - inset)
        r0 = max(0, rows - int(math.floor(box.y1 * scale)) + inset)
        r1 = min(rows, rows - int(math.ceil(box.y0 * scale)) - inset)
        if c1 <= c0 or r1 <= r0:
            continue
        ink, _ = _ink(image[r0:r1, c0:c1])
        if not ink.any():
            results.add("blank", "fail", f"{_axes_label(fig, i)} has no ink inside it")


def _line_box(
    renderer: RendererAgg, line: _DrawnText, canvas_height: float
) -> tuple[float, float, float, float]:
    """The drawn line's box (x0, y0, x1, y1) in display coordinates (y from the bottom)."""
    w, h, d = cast(Any, renderer).get_text_width_height_descent(line.text, line.prop, line.ismath)
    theta = math.radians(line.angle)
    cos, sin = math.cos(theta), math.sin(theta)
    base_y = canvas_height - line.y
    xs: list[float] = []
    ys: list[float] = []
    for dx in (0.0, float(w)):
        for dy in (-float(d), float(h) - float(d)):
            xs.append(line.x + dx * cos - dy * sin)
            ys.append(base_y + dx * sin + dy * cos)
    return min(xs), min(ys), max(xs), max(ys)


def _text_clipped(
    renderer: _RecordingRenderer, results: _Results, width: float, height: float
) -> None:
    canvas_height = float(renderer.height)
    tol = CLIP_TOLERANCE_PX
    out: list[str] = []
    for line in renderer.drawn:
        if not line.text.strip():
            continue
        x0, y0, x1, y1 = _line_box(renderer, line, canvas_height)
        sides = [
            name
            for name, past in (
                ("left", -x0),
                ("bottom", -y0),
                ("right", x1 - width),
                ("top", y1 - height),
            )
            if past > tol
        ]
        if sides:
            out.append(f"{line.text!r} runs past the {'/'.join(sides)} edge")
    if out:
        more = f" (+{len(out) - 5} more)" if len(out) > 5 else ""
        results.add("clipped", "fail", "; ".join(out[:5]) + more)
    else:
        results.ok("clipped", f"{len(renderer.drawn)} text line(s) inside the figure")


def _font_charmaps(prop: FontProperties, cache: dict[str, tuple[str, set[int]]]) -> list[Any]:
    from matplotlib import font_manager  # deferred: matplotlib, only when a figure is rendered

    try:
        paths: list[Any] = list(font_manager.fontManager._find_fonts_by_props(prop))
    except (AttributeError, ValueError):
        paths = [font_manager.findfont(prop)]
    maps = []
    for fpath in paths:
        key = str(fpath)
        if key not in cache:
            font = font_manager.get_font(fpath)
            cache[key] = (str(font.family_name), set(font.get_charmap()))
        maps.append(cache[key])
    return maps


def _tofu(drawn: Iterable[_DrawnText], glyph_warnings: list[str], results: _Results) -> None:
    cache: dict[str, tuple[str, set[int]]] = {}
    problems = list(glyph_warnings)
    seen: set[tuple[str, str]] = set()
    for line in drawn:
        if line.ismath:
            continue
        key = (line.text, str(line.prop))
        if key in seen:
            continue
        seen.add(key)
        fonts = _font_charmaps(line.prop, cache)
        missing = [
            ch
            for ch in dict.fromkeys(line.text)
            if not ch.isspace()
            and unicodedata.category(ch) not in ("Cc", "Cf")
            and not any(ord(ch) in cmap for _, cmap in fonts)
        ]
        if missing:
            names = ", ".join(dict.fromkeys(name for name, _ in fonts))
            chars = ", ".join(f"{ch!r} (U+{ord(ch):04X})" for ch in missing)
            problems.append(f"{chars} in {line.text!r} is not in {names}")
    if problems:
        results.add("tofu", "fail", "; ".join(problems))
    else:
        results.ok("tofu", "every drawn character has a glyph")


def _truncated(fig: Figure, results: _Results) -> None:
    found = False
    for i, ax in enumerate(fig.axes):
        edges: list[tuple[float, float]] = []
        horizontal = False
        for container in ax.containers:
            if not isinstance(container, BarContainer):
                continue
            horizontal = getattr(container, "orientation", None) == "horizontal"
            for rect in container.patches:
                if horizontal:
                    a, b = rect.get_x(), rect.get_x() + rect.get_width()
                else:
                    a, b = rect.get_y(), rect.get_y() + rect.get_height()
                if math.isfinite(a) and math.isfinite(b):
                    edges.append((min(a, b), max(a, b)))
        if not edges:
            continue
        found = True
        axis_name = "x" if horizontal else "y"
        scale = ax.get_xscale() if horizontal else ax.get_yscale()
        if scale not in _LINEAR:
            continue
        lim = ax.get_xlim() if horizontal else ax.get_ylim()
        lo, hi = min(lim), max(lim)
        positive = all(a >= 0 for a, _ in edges)
        negative = all(b <= 0 for _, b in edges)
        if positive and lo > 0:
            tops = [b for _, b in edges]
            results.add(
                "truncated_axis",
                "disclose",
                f"{_axes_label(fig, i)}: the bars start at 0 but the {axis_name} axis starts at "
                f"{lo:g}, which exaggerates the gap between them" + _exaggeration(tops, lo),
            )
        elif negative and hi < 0:
            bottoms = [-a for a, _ in edges]
            results.add(
                "truncated_axis",
                "disclose",
                f"{_axes_label(fig, i)}: the bars end at 0 but the {axis_name} axis ends at "
                f"{hi:g}, which exaggerates the gap between them" + _exaggeration(bottoms, -hi),
            )
        else:
            results.ok("truncated_axis", f"{_axes_label(fig, i)}: the value axis includes 0")
    if not found:
        results.ok("truncated_axis", "no bar chart")


def _exaggeration(values: list[float], cut: float) -> str:
    big, small = max(values), min(values)
    if small <= 0 or small <= cut or big == small:
        return ""
    return (
        f" (the longest bar is drawn {(big - cut) / (small - cut):.2g}x the shortest; "
        f"the values differ by {big / small:.3g}x)"
    )


def _scales(fig: Figure, results: _Results) -> None:
    for i, ax in enumerate(fig.axes):
        for name, scale in (("x", ax.get_xscale()), ("y", ax.get_yscale())):
            if scale not in _LINEAR:
                results.add(
                    "log_axis",
                    "disclose",
                    f"{_axes_label(fig, i)}: the {name} axis is on a {scale} scale",
                )
    if "log_axis" not in results.items:
        results.ok("log_axis", "every axis is linear")
