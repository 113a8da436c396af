"""DELIVER figures: the export chain (CSV, sources, outputs, sidecars back to the results.json
bytes), deterministic bytes, and the pixel re-open gate on planted defects."""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from rgt_jupyter.deliver import pixel
from rgt_jupyter.deliver.figures import FigureExport, figure

from .verify_fixtures import make_run

CELL = "fig = bar_chart(numbers)\nexport(fig)\n"
ALL_CHECKS = {"open", "blank", "size", "dpi", "clipped", "tofu", "truncated_axis", "log_axis"}


@dataclass(frozen=True)
class Num:
    """A stand-in with the attributes of ``deliver.numbers.GeneratedNumber``."""

    value: Any
    text: str
    ref: str
    run_id: str
    results_json: str
    sha256: str
    key: str
    fmt: str = ".3f"
    claim_id: str | None = None

    def source(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def number(run: Path, key: str, claim_id: str | None = None) -> Num:
    """The value at ``key`` (dotted) of the run's results.json, as a generated number."""
    path = run / "results.json"
    data = path.read_bytes()
    value: Any = json.loads(data)
    for part in key.split("."):
        value = value[part]
    return Num(
        value=value,
        text=f"{value:.3f}",
        ref=f"{run.name}:{key}",
        run_id=run.name,
        results_json=str(path),
        sha256=sha(data),
        key=key,
        claim_id=claim_id,
    )


def two_runs(
    project: Path, base: float = 0.8012345678901234, ours: float = 0.8234567890123456
) -> list[Num]:
    runs = project / "runs"
    a = make_run(runs, "base-1", results={"test": {"accuracy": base, "n": 100}})
    b = make_run(runs, "ours-1", results={"test": {"accuracy": ours, "n": 100}})
    return [number(a, "test.accuracy", "C1"), number(b, "test.accuracy", "C1")]


def rows(nums: list[Num]) -> list[dict[str, Any]]:
    return [{"model": n.run_id.split("-")[0], "accuracy": n} for n in nums]


def bar_chart(values: list[float], ylim: tuple[float, float] | None = None) -> Figure:
    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.bar(["base", "ours"], values, color=["#888888", "#1f77b4"])
    ax.set_ylabel("test accuracy")
    ax.set_title("Accuracy on test")
    if ylim is not None:
        ax.set_ylim(*ylim)
    fig.tight_layout()
    return fig


def export(project: Path, nums: list[Num], id: str = "acc", **kw: Any) -> FigureExport:
    fig = bar_chart([float(n.value) for n in nums])
    return figure(fig, id, rows(nums), claims=["C1"], project=project, code=CELL, **kw)


def sidecar(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(Path(f"{path}.provenance").read_text())
    return record


def statuses(record: dict[str, Any]) -> dict[str, str]:
    return {c["check"]: c["status"] for c in record["pixel_check"]["checks"]}


def test_bar_chart_exports_csv_sources_and_sidecars(project: Path) -> None:
    nums = two_runs(project)
    out = export(project, nums)
    folder = project / "figures" / "acc"
    assert out.folder == folder
    assert out.outputs == {"png": folder / "acc.png", "svg": folder / "acc.svg"}
    assert out.sidecars == {
        "png": folder / "acc.png.provenance",
        "svg": folder / "acc.svg.provenance",
    }
    with Image.open(folder / "acc.png") as im:
        assert im.format == "PNG" and im.size == (600, 450)
    assert (folder / "acc.svg").read_bytes().lstrip().startswith(b"<?xml")

    # Full precision, no rounding.
    assert (folder / "source_data.csv").read_text() == (
        "model,accuracy\nbase,0.8012345678901234\nours,0.8234567890123456\n"
    )
    sources = json.loads((folder / "source_data.sources.json").read_text())
    cells = {(c["row"], c["column"]): c for c in sources["cells"]}
    assert cells[(0, "model")]["kind"] == "label"
    for i, n in enumerate(nums):
        cell = cells[(i, "accuracy")]
        assert cell["kind"] == "generated"
        assert cell["value"] == repr(n.value)
        assert cell["source"] == n.source()

    for fmt, path in out.outputs.items():
        record = sidecar(path)
        assert record == out.provenance[fmt]
        assert record["figure"] == "acc"
        assert record["supports_claims"] == ["C1"]
        assert record["output"]["path"] == f"figures/acc/acc.{fmt}"
        assert record["output"]["sha256"] == sha(path.read_bytes())
        assert record["source_data"]["path"] == "figures/acc/source_data.csv"
        assert record["source_data"]["sha256"] == sha((folder / "source_data.csv").read_bytes())
        assert record["sources"]["sha256"] == sha(
            (folder / "source_data.sources.json").read_bytes()
        )
        assert [(b["run_id"], b["keys"]) for b in record["built_from"]] == [
            ("base-1", ["test.accuracy"]),
            ("ours-1", ["test.accuracy"]),
        ]
        assert record["code"]["sha256"] == sha(CELL.encode())
        assert set(record["code"]) >= {"commit", "dirty"}
        assert set(record["versions"]) >= {"matplotlib", "numpy", "python"}
        assert record["created"]
        assert record["pixel_check"]["passed"] is True
        assert record["disclosures"] == []
    assert out.findings == [] and out.disclosures == [] and out.passed


def test_sidecar_walks_back_to_the_exact_results_json_bytes(project: Path) -> None:
    nums = two_runs(project)
    out = export(project, nums)
    png = out.outputs["png"]
    record = sidecar(png)
    assert record["output"]["sha256"] == sha(png.read_bytes())

    table = list(csv.DictReader(io.StringIO((project / record["source_data"]["path"]).read_text())))
    assert (
        sha((project / record["source_data"]["path"]).read_bytes())
        == record["source_data"]["sha256"]
    )
    sources_bytes = (project / record["sources"]["path"]).read_bytes()
    assert sha(sources_bytes) == record["sources"]["sha256"]
    sources = json.loads(sources_bytes)

    walked = 0
    for cell in sources["cells"]:
        if cell["kind"] != "generated":
            continue
        entry = next(
            b
            for b in record["built_from"]
            if {"row": cell["row"], "column": cell["column"]} in b["cells"]
        )
        results = project / entry["results_json"]
        data = results.read_bytes()
        assert sha(data) == entry["sha256"] == cell["source"]["sha256"]
        value: Any = json.loads(data)
        for part in cell["source"]["key"].split("."):
            value = value[part]
        # The CSV value is the results.json value, bit for bit.
        assert float(table[cell["row"]][cell["column"]]) == value
        walked += 1
    assert walked == 2


def test_same_inputs_give_byte_identical_outputs(project: Path) -> None:
    nums = two_runs(project)
    names = ["acc.png", "acc.svg", "acc.pdf", "source_data.csv", "source_data.sources.json"]
    folder = project / "figures" / "acc"
    first_out = export(project, nums, formats=("png", "svg", "pdf"))
    first = {n: (folder / n).read_bytes() for n in names}
    second_out = export(project, nums, formats=("png", "svg", "pdf"))
    second = {n: (folder / n).read_bytes() for n in names}
    assert first == second
    for fmt in ("png", "svg", "pdf"):
        a = {k: v for k, v in first_out.provenance[fmt].items() if k != "created"}
        b = {k: v for k, v in second_out.provenance[fmt].items() if k != "created"}
        assert a == b


def test_a_new_results_value_changes_the_csv_and_the_hashes(project: Path) -> None:
    nums = two_runs(project)
    before = export(project, nums)
    csv_before = before.source_data.read_bytes()
    runs = project / "runs"
    rerun = make_run(runs, "ours-2", results={"test": {"accuracy": 0.8634567890123456, "n": 100}})
    after = export(project, [nums[0], number(rerun, "test.accuracy", "C1")])
    assert after.source_data.read_bytes() != csv_before
    assert b"0.8634567890123456" in after.source_data.read_bytes()
    for fmt in ("png", "svg"):
        old, new = before.provenance[fmt], after.provenance[fmt]
        assert new["output"]["sha256"] != old["output"]["sha256"]
        assert new["source_data"]["sha256"] != old["source_data"]["sha256"]
        assert new["built_from"][1]["run_id"] == "ours-2"
        assert new["built_from"][1]["sha256"] == sha((rerun / "results.json").read_bytes())


def test_a_typed_float_and_a_changed_results_json_are_disclosed(project: Path) -> None:
    nums = two_runs(project)
    results = Path(nums[1].results_json)
    results.write_text(json.dumps({"test": {"accuracy": 0.9, "n": 100}}))
    data: list[dict[str, Any]] = [*rows(nums), {"model": "paper", "accuracy": 0.79}]
    fig = bar_chart([0.80, 0.82])
    out = figure(fig, "acc", data, claims=["C1"], project=project)
    record = out.provenance["png"]
    assert record["typed"] == [{"row": 2, "column": "accuracy", "value": "0.79"}]
    sources = json.loads(out.sources.read_text())
    assert [c["kind"] for c in sources["cells"] if c["row"] == 2] == ["label", "typed"]
    changed = next(b for b in record["built_from"] if b["run_id"] == "ours-1")
    assert changed["sha256_now"] != changed["sha256"]
    text = "\n".join(record["disclosures"])
    assert "typed number 0.79" in text
    assert "runs/ours-1/results.json changed since its numbers were generated" in text
    assert record["pixel_check"]["passed"] is True


def test_rich_repr_shows_the_png_and_carries_the_sources(project: Path) -> None:
    nums = two_runs(project)
    out = export(project, nums)
    data, metadata = out._repr_mimebundle_()
    assert base64.b64decode(data["image/png"]) == out.outputs["png"].read_bytes()
    assert data["image/png"] in data["text/html"]
    assert "every check passed" in data["text/plain"]
    assert metadata["rgt_jupyter"]["figure"] == "acc"
    assert metadata["rgt_jupyter"]["generated"] == [n.source() for n in nums]
    assert metadata["rgt_jupyter"]["provenance"] == {
        "png": "figures/acc/acc.png.provenance",
        "svg": "figures/acc/acc.svg.provenance",
    }
    json.dumps(metadata)


# Pixel gate: each planted defect is found; a clean figure passes every check.


def blank_figure() -> Figure:
    fig = Figure(figsize=(4, 3))
    fig.add_subplot()
    return fig


def clipped_text() -> Figure:
    fig = bar_chart([0.80, 0.82])
    fig.text(1.2, 0.5, "n = 100 test images")
    return fig


def clipped_ylabel() -> Figure:
    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.bar(["base", "ours"], [0.80, 0.82])
    ax.set_ylabel("top-1 accuracy on the held-out test split (100 images)", fontsize=16)
    return fig


def missing_glyph() -> Figure:
    fig = bar_chart([0.80, 0.82])
    fig.axes[0].set_title("Accuracy \u4e2d")
    return fig


def truncated_axis() -> Figure:
    return bar_chart([0.80, 0.82], ylim=(0.79, 0.83))


def log_axis() -> Figure:
    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.plot([1, 10, 100], [0.5, 0.7, 0.8])
    ax.set_xscale("log")
    fig.tight_layout()
    return fig


@pytest.mark.parametrize(
    ("build", "check", "status", "words"),
    [
        (blank_figure, "blank", "fail", "has no data"),
        (clipped_text, "clipped", "fail", "'n = 100 test images' runs past the right edge"),
        (clipped_ylabel, "clipped", "fail", "runs past the left/bottom/top edge"),
        (missing_glyph, "tofu", "fail", "U+4E2D"),
        (truncated_axis, "truncated_axis", "disclose", "exaggerates the gap"),
        (log_axis, "log_axis", "disclose", "log scale"),
    ],
)
def test_pixel_gate_finds_each_planted_defect(
    project: Path, build: Callable[[], Figure], check: str, status: str, words: str
) -> None:
    nums = two_runs(project)
    out = figure(build(), "defect", rows(nums), project=project)
    for fmt in ("png", "svg"):
        record = sidecar(out.outputs[fmt])
        found = next(c for c in record["pixel_check"]["checks"] if c["check"] == check)
        assert found["status"] == status, found
        assert words in found["detail"]
        assert record["pixel_check"]["passed"] is (status != "fail")
        assert any(
            d.startswith(f"pixel gate {check} ({status}, {fmt})") for d in record["disclosures"]
        )
        # A finding never blocks: the file was written and its sidecar hashes it.
        assert record["output"]["sha256"] == sha(out.outputs[fmt].read_bytes())
    assert any(f["check"] == check and f["status"] == status for f in out.findings)


def test_a_clean_figure_passes_every_check(project: Path) -> None:
    out = export(project, two_runs(project))
    assert statuses(out.provenance["png"]) == dict.fromkeys(ALL_CHECKS, "pass")
    assert statuses(out.provenance["svg"]) == dict.fromkeys(ALL_CHECKS - {"dpi"}, "pass")


def test_the_clipped_ylabel_is_also_ink_in_the_border(tmp_path: Path) -> None:
    fig = clipped_ylabel()
    path = tmp_path / "f.png"
    fig.savefig(path, dpi=100)
    found = {c["check"]: c for c in pixel.check(path)}
    assert found["clipped"]["status"] == "fail"
    assert "border" in found["clipped"]["detail"]


def write_png(path: Path, pixels: np.ndarray[Any, Any]) -> Path:
    Image.fromarray(pixels.astype(np.uint8)).save(path, dpi=(150, 150))
    return path


def test_pixel_check_on_files_alone(tmp_path: Path) -> None:
    white = np.full((200, 300, 3), 255)
    uniform = {c["check"]: c for c in pixel.check(write_png(tmp_path / "u.png", white))}
    assert uniform["blank"]["status"] == "fail" and "uniform" in uniform["blank"]["detail"]

    speck = white.copy()
    speck[100:105, 100:105] = 0  # 25 of 60000 pixels
    sparse = {c["check"]: c for c in pixel.check(write_png(tmp_path / "s.png", speck))}
    assert sparse["blank"]["status"] == "fail" and "counts as blank" in sparse["blank"]["detail"]

    inked = white.copy()
    inked[50:150, 50:250] = 30
    inked[0:1, 10:20] = 0
    found = {
        c["check"]: c
        for c in pixel.check(
            write_png(tmp_path / "i.png", inked), expected_size_px=(300, 200), expected_dpi=150
        )
    }
    assert found["blank"]["status"] == "pass"
    assert found["size"]["status"] == "pass" and found["dpi"]["status"] == "pass"
    assert found["clipped"]["status"] == "fail"

    wrong = {
        c["check"]: c
        for c in pixel.check(tmp_path / "i.png", expected_size_px=(600, 400), expected_dpi=300)
    }
    assert wrong["size"]["status"] == "fail" and "expected 600x400" in wrong["size"]["detail"]
    assert wrong["dpi"]["status"] == "fail"

    missing = pixel.check(tmp_path / "none.png")
    assert missing == [{"check": "open", "status": "fail", "detail": "none.png does not exist"}]
    (tmp_path / "bad.svg").write_text("<svg")
    assert pixel.check(tmp_path / "bad.svg")[0]["status"] == "fail"


def test_bad_ids_and_formats_are_refused(project: Path) -> None:
    fig = bar_chart([0.8, 0.82])
    with pytest.raises(ValueError, match="figure id"):
        figure(fig, "../escape", [], project=project)
    with pytest.raises(ValueError, match="formats"):
        figure(fig, "acc", [], project=project, formats=("gif",))
    assert not (project / "figures").exists()


def test_tofu_reports_the_draw_warning_and_the_font_cmap(tmp_path: Path) -> None:
    fig = missing_glyph()
    path = tmp_path / "f.png"
    with pytest.warns(UserWarning, match="missing from font"):
        fig.savefig(path, dpi=100)
    found = {c["check"]: c for c in pixel.check(path, fig)}
    detail = found["tofu"]["detail"]
    assert found["tofu"]["status"] == "fail"
    assert "Glyph 20013 (\\N{CJK UNIFIED IDEOGRAPH-4E2D}) missing from font(s)" in detail
    assert "'\u4e2d' (U+4E2D) in 'Accuracy \u4e2d' is not in DejaVu Sans" in detail


def test_a_bar_covering_most_of_the_image_is_not_taken_for_the_background(project: Path) -> None:
    nums = two_runs(project)[:1]
    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.bar(["base"], [float(nums[0].value)], width=1.0)
    ax.margins(x=0)
    fig.subplots_adjust(left=0.12, right=0.98, top=0.98, bottom=0.1)
    out = figure(fig, "wide", rows(nums), project=project, formats=("png",))
    with Image.open(out.outputs["png"]) as im:
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None
    assert max(colours)[1] != (255, 255, 255)  # the bar's colour is the most common one
    assert statuses(out.provenance["png"]) == dict.fromkeys(ALL_CHECKS, "pass")
