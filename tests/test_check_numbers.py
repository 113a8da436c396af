"""rgt check-numbers: typed numbers are found among generated and innocent ones, matched to
results.json at display rounding, and the CLI's modes exit as documented."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat as _nbformat
import pytest

from rgt_jupyter.deliver.check_numbers import NumberItem, NumbersReport, check_numbers, main

from .verify_fixtures import make_run

# nbformat has no type hints: its builders are used through Any.
nbformat: Any = _nbformat

RESULTS = {"test": {"psnr": 31.42, "accuracy": 0.873, "ssim": 0.8912}, "val": {"psnr": 31.1}}


def _runs(project: Path) -> Path:
    run = make_run(project / "runs", "base-s0", results=RESULTS, config={"lr": 0.0003})
    return run / "results.json"


def _record(results: Path, project: Path, key: str, value: float, text: str) -> dict[str, Any]:
    return {
        "ref": f"base-s0:{key}",
        "run_id": "base-s0",
        "results_json": results.relative_to(project).as_posix(),
        "sha256": hashlib.sha256(results.read_bytes()).hexdigest(),
        "key": key,
        "value": value,
        "fmt": ".2f",
        "text": text,
        "claim_id": None,
    }


def _md(source: str, **meta: Any) -> Any:
    return nbformat.v4.new_markdown_cell(source, metadata=meta)


def _code(source: str, outputs: list[Any] | None = None, count: int | None = None) -> Any:
    cell = nbformat.v4.new_code_cell(source, execution_count=count)
    cell.outputs = outputs or []
    return cell


def _write(tmp: Path, cells: list[Any], name: str = "nb.ipynb") -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    path = tmp / name
    nbformat.write(nb, path)
    return path


def _one(report: NumbersReport, text: str) -> NumberItem:
    found = [i for i in report.items if i.text == text]
    assert len(found) == 1, [(i.text, i.status, i.reason) for i in report.items]
    return found[0]


INNOCENT_MD = """\
# Results

## 4.2 Main table

We train with PyTorch 2.1.0 and python 3.10 a ResNet-50 on CIFAR-10 in fp16, as in [12] (2023).
Top-5 accuracy is shown in Figure 3 and Table 2; AP@0.5 and mAP50 on Set5 at 336×336.

1. the baseline
2. ours

The learning rate was {{rgt:base-s0:config.lr|g}}, PSNR {{rgt:base-s0:test.psnr|.2f}} dB.
In [7]: was the cell, run on 2024-03-01 at 12:30 from commit 3f9a2c1d.
"""


def test_typed_numbers_are_found_among_generated_and_innocent_ones(
    project: Path, tmp_path: Path
) -> None:
    results = _runs(project)
    generated = nbformat.v4.new_output(
        "display_data",
        data={
            "text/markdown": "PSNR **31.42** dB vs. 29.87 dB for the baseline",
            "text/plain": "PSNR 31.42 dB vs. 29.87 dB for the baseline",
        },
        metadata={
            "rgt_jupyter": {"generated": [_record(results, project, "test.psnr", 31.42, "31.42")]}
        },
    )
    progress = nbformat.v4.new_output(
        "stream",
        name="stdout",
        text="\x1b[32mepoch 3/10\x1b[0m\r 45%|████▌     | 45/100 [00:01<00:02, 31.42it/s]\n",
    )
    figure = nbformat.v4.new_output(
        "display_data", data={"text/plain": "<Figure size 800x400 with 1 Axes>", "image/png": ""}
    )
    cells = [
        _md(INNOCENT_MD + "\nOur PSNR on the test split is 31.50 dB.\n"),
        _code(
            "import matplotlib.pyplot as plt\n"
            "fig, ax = plt.subplots(figsize=(8, 4), dpi=150)\n"
            "for i in range(10):\n"
            "    ax.plot(xs[i], lw=2, alpha=0.5)\n"
            "torch.manual_seed(1234)\n"
            "train(lr=3e-4, epochs=90, batch_size=256)\n",
            [figure, progress],
            count=7,
        ),
        _code("rgt.md(template, psnr=rgt.num('base-s0:test.psnr', '.2f'))", [generated], 8),
        _md("Accuracy reaches 87.3% on the test split.\n\nSSIM is 0.8912 on test."),
    ]
    ids = [c.id for c in cells]
    report = check_numbers(_write(tmp_path, cells), project=project)

    typed = {(i.cell_id, i.where, i.line, i.text) for i in report.typed}
    assert typed == {
        (ids[0], "markdown", 14, "31.50"),
        (ids[2], "output", 1, "29.87"),
        (ids[3], "markdown", 1, "87.3%"),
        (ids[3], "markdown", 3, "0.8912"),
    }
    assert _one(report, "31.42").status == "generated"
    placeholders = [i for i in report.items if i.text.startswith("{{rgt:")]
    assert [p.status for p in placeholders] == ["generated", "generated"]
    assert placeholders[0].match == {"ref": "base-s0:config.lr", "fmt": "g"}
    first = [i for i in report.items if i.cell_index == 0]
    for text, reason in [
        ("2.1.0", "version"),
        ("3.10", "version"),
        ("4.2", "heading number"),
        ("2023", "year"),
        ("[12]", "citation"),
        ("3", "structural reference"),
        ("2", "structural reference"),
        ("0.5", "identifier"),
        ("In [7]:", "execution count"),
        ("2024-03-01", "date"),
        ("3f9a2c1d", "hex"),
    ]:
        assert any(
            i.text == text and i.status == "ignored" and (i.reason or "").startswith(reason)
            for i in first
        ), (text, [(i.text, i.reason) for i in first])
    assert {"list marker"} <= {i.reason for i in first}
    for text in ("50", "10", "16", "5", "336"):
        assert all(i.status == "ignored" for i in report.items if i.text == text), text
    code = [i for i in report.items if i.where == "code_source"]
    assert code and all(i.status == "ignored" for i in code), [(i.text, i.reason) for i in code]
    assert {i.reason for i in code if i.text in ("3e-4", "90", "256", "1234")} == {
        "configuration literal: lr",
        "configuration literal: epochs",
        "configuration literal: batch_size",
        "configuration literal: seed",
    }
    outputs = [i for i in report.items if i.cell_id == ids[1] and i.where == "output"]
    assert outputs and all(i.status == "ignored" for i in outputs)
    assert "execution count" not in {i.reason for i in report.items if i.cell_id == ids[1]}
    assert report.summary["typed"] == 4 and report.summary["generated"] == 3


def test_display_rounding_percent_and_sign(project: Path, tmp_path: Path) -> None:
    _runs(project)
    cells = [
        _md("Accuracy: 87.3% (test)."),
        _md("PSNR 31.4 dB on test."),
        _md("PSNR 31.5 dB on test."),
        _md("The PSNR changed by \u221231.40 dB, and the loss by \u22120.5."),
        _md("| Method | PSNR |\n|---|---|\n| Ours | 31.50 |\n"),
    ]
    report = check_numbers(_write(tmp_path, cells), project=project)

    pct = _one(report, "87.3%")
    assert pct.status == "typed" and pct.match is not None
    assert pct.match["key_path"] == "test.accuracy" and pct.match["raw"] == 0.873
    assert pct.match["scale"] == 100
    assert pct.suggestion == "use {{rgt:base-s0:test.accuracy|.1%}}"

    rounded = _one(report, "31.4")
    assert rounded.status == "typed" and rounded.match is not None
    assert rounded.match["key_path"] == "test.psnr" and rounded.match["raw"] == 31.42
    assert rounded.suggestion == "use {{rgt:base-s0:test.psnr|.1f}}"
    assert rounded.decimals == 1 and rounded.value == 31.4

    drift = _one(report, "31.5")
    assert drift.status == "typed" and drift.match is None and drift.suggestion is None

    minus = _one(report, "-0.5")
    assert minus.value == -0.5 and minus.decimals == 1
    assert _one(report, "-31.40").value == -31.4

    cell = _one(report, "31.50")
    assert cell.status == "typed" and cell.line == 3 and cell.match is None
    assert "Ours / PSNR" in cell.context


def test_code_literals_and_outputs(project: Path, tmp_path: Path) -> None:
    _runs(project)
    printed = nbformat.v4.new_output("stream", name="stdout", text="PSNR 31.42\nPSNR 30.95\n")
    cells = [
        _code('psnr = 31.42\nbaseline = {"ssim": 0.8912}\nthreshold = 0.37\n'),
        _code("x = 31.42  # rgt: literal\nplt.figure(figsize=(6.5, 4))\n"),
        _code('print("PSNR", r["test"]["psnr"])\nprint("PSNR 30.95")\n', [printed]),
        _code("%%time\ny = 31.42\n"),
        _code("!ls runs\n%matplotlib inline\nz = 45.5\n"),
    ]
    report = check_numbers(_write(tmp_path, cells), project=project)
    items = [i for i in report.items if i.where == "code_source"]
    found = {(i.cell_index, i.line, i.text): (i.status, i.reason) for i in items}
    assert found[(0, 1, "31.42")] == ("typed", "metric value hardcoded (psnr)")
    assert found[(0, 2, "0.8912")][0] == "typed"
    # A literal with no result name that no run shows is no result.
    assert found[(0, 3, "0.37")][0] == "ignored"
    assert (found[(0, 3, "0.37")][1] or "").startswith("code literal")
    assert found[(1, 1, "31.42")] == ("ignored", "pragma: rgt: literal")
    assert found[(1, 2, "6.5")] == ("ignored", "safe code literal: figsize")
    assert found[(3, 2, "31.42")][0] == "typed"  # after a %%time line
    # IPython syntax is transformed first: the literal is read as code.
    assert (found[(4, 3, "45.5")][1] or "").startswith("code literal")
    typed_code = next(i for i in items if i.cell_index == 0 and i.line == 1)
    assert typed_code.match is not None and typed_code.match["key_path"] == "test.psnr"
    out = {i.text: i for i in report.items if i.where == "output"}
    # Untagged, and the source does not type it: computed (here, read from results.json).
    assert out["31.42"].status == "ignored"
    assert (out["31.42"].reason or "").startswith("computed by the cell")
    assert out["30.95"].status == "typed"  # echoes the string typed in the source
    assert out["30.95"].output_index == 0 and out["30.95"].line == 2


def test_pragmas(project: Path, tmp_path: Path) -> None:
    _runs(project)
    cells = [
        _md("PSNR 31.50 dB on test.", tags=["rgt:ignore-numbers"]),
        _md("<!-- rgt:ignore -->\nPSNR 31.60 dB on test.\nstill 31.70 PSNR\n\nPSNR 31.80 on test."),
        _md("PSNR 31.90 on test. <!-- rgt:ignore -->"),
    ]
    report = check_numbers(_write(tmp_path, cells), project=project)
    assert [i.text for i in report.typed] == ["31.80"]
    assert report.summary["pragmas"] == 4


def test_stale_generated_output(project: Path, tmp_path: Path) -> None:
    results = _runs(project)
    record = _record(results, project, "test.psnr", 31.42, "31.42")
    output = nbformat.v4.new_output(
        "execute_result",
        data={"text/plain": "31.42"},
        metadata={"rgt_jupyter": {"generated": [record]}},
        execution_count=1,
    )
    nb = _write(tmp_path, [_code("rgt.num('base-s0:test.psnr', '.2f')", [output], 1)])
    report = check_numbers(nb, project=project)
    item = _one(report, "31.42")
    assert item.status == "generated" and not item.stale
    assert item.match is not None and item.match["key_path"] == "test.psnr"
    assert main([str(nb), "--strict", "--project", str(project)]) == 0

    results.write_text(json.dumps({"test": {"psnr": 31.45}}))
    report = check_numbers(nb, project=project)
    item = _one(report, "31.42")
    assert item.status == "generated" and item.stale
    assert report.summary["stale"] == 1
    assert "stale 31.42" in report.text()
    assert main([str(nb), "--strict", "--project", str(project)]) == 1


def test_cli_modes_and_json(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _runs(project)
    typed = _write(tmp_path, [_md("PSNR 31.4 dB on test.")], "typed.ipynb")
    clean = _write(tmp_path, [_md("PSNR {{rgt:base-s0:test.psnr|.1f}} dB in 2023.")], "ok.ipynb")

    assert main([str(typed), "--project", str(project)]) == 0
    text = capsys.readouterr().out
    assert "typed.ipynb#" in text and ":1 typed 31.4" in text
    assert "→ use {{rgt:base-s0:test.psnr|.1f}}" in text
    assert main([str(typed), "--strict", "--project", str(project)]) == 1
    assert main([str(clean), "--strict", "--project", str(project)]) == 0
    capsys.readouterr()

    assert main([str(typed), "--json", "--project", str(project)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "rgt/numbers-audit/v1"
    assert doc["notebook"] == str(typed)
    assert doc["notebook_sha256"] == hashlib.sha256(typed.read_bytes()).hexdigest()
    assert doc["summary"]["typed"] == 1
    finding = next(f for f in doc["findings"] if f["status"] == "typed")
    for key in ("cell_index", "cell_id", "cell_type", "where", "line", "col", "text", "value"):
        assert key in finding
    assert finding["cell_index"] == 0 and finding["text"] == "31.4"
    assert doc["evidence_files"][0]["run_id"] == "base-s0"

    assert main([str(tmp_path / "missing.ipynb")]) == 2

    proc = subprocess.run(
        [sys.executable, "-m", "rgt_jupyter.deliver.check_numbers", str(typed), "--strict"],
        capture_output=True,
        text=True,
        cwd=project,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "typed 31.4" in proc.stdout


def test_runs_argument_and_mimebundle(project: Path, tmp_path: Path) -> None:
    run = _runs(project).parent
    nb = _write(tmp_path, [_md("SSIM 0.891 on test; accuracy 0.873.")])
    report = check_numbers(nb, project=tmp_path, runs=[run])
    assert {i.text for i in report.typed} == {"0.891", "0.873"}
    assert all(i.match is not None for i in report.typed)
    bundle = report._repr_mimebundle_()
    assert "0.891" in bundle["text/html"] and "typed 0.873" in bundle["text/plain"]
    assert check_numbers(nb, project=tmp_path).typed[0].match is None
