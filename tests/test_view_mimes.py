"""Rich outputs carry HTML and plain text, and their data only under vendor types: JupyterLab
ranks ``application/json`` above ``text/html``, so a bundle holding it shows a JSON tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rgt_jupyter.verify.report import MIME, verify
from rgt_jupyter.views.restore import RESULTS_MIME, results_bundle

from .test_verify import _arm

#: What a bundle may hold: nothing a frontend ranks above the HTML.
ALLOWED = {"text/plain", "text/html", MIME, RESULTS_MIME}


def _check(bundle: dict[str, Any]) -> None:
    assert "text/html" in bundle and "text/plain" in bundle
    assert set(bundle) <= ALLOWED, set(bundle) - ALLOWED


def test_the_verify_report_is_a_table_with_runs_and_neutral_not_checked(project: Path) -> None:
    runs = project / "runs"
    variant = _arm(runs, "wide", 64, [0.90, 0.91, 0.92, 0.93, 0.94])
    base = _arm(runs, "base", 8, [0.80, 0.81, 0.82, 0.83, 0.84])
    report = verify(variant, baselines=base, direction="max", project=project)
    bundle = report._repr_mimebundle_()
    _check(bundle)
    assert bundle[MIME] == report.to_dict()
    page = bundle["text/html"]
    assert ">runs</th>" in page
    head = page.split("</b>", 1)[0]
    assert "5 runs vs 5 baselines" in head and "wide-s0" not in head, head
    assert "+2 more" in page or all(p.name in page for p in variant)
    assert all(p.name in page for p in variant + base), "every run id, folded below the table"
    verdicts = {f.verdict for f in report.findings}
    assert "not_checked" in verdicts or "pass" in verdicts, verdicts
    for verdict, colour in (("not_checked", "--jp-ui-font-color2"), ("pass", "--jp-success")):
        cells = [c for c in page.split("<td ")[1:] if f"rgt-{verdict}'" in c]
        assert all(colour in cell for cell in cells), (verdict, cells[:1])


def test_results_are_a_table_with_curves_summarised() -> None:
    curve = [2.0 - i / 100 for i in range(200)]
    results = {"train": {"loss": 0.01, "curve": curve}, "test": {"accuracy": 0.93}, "tag": "x"}
    bundle = results_bundle(results)
    _check(bundle)
    assert bundle[RESULTS_MIME] == results
    assert "train.curve" in bundle["text/html"] and "test.accuracy" in bundle["text/html"]
    assert "200 values: first 2, last 0.01" in bundle["text/plain"], bundle["text/plain"]
    assert str(curve[57]) not in bundle["text/html"], "a long curve is summarised, not listed"
