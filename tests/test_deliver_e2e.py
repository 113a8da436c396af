"""DELIVER end to end, on real runs: ``example_notebooks/quickstart.ipynb`` and
``example_notebooks/verify.ipynb`` make ten runs,
``example_notebooks/paper_figures.ipynb`` turns them into a table, a figure and a paragraph of
generated numbers; ``rgt deliver --strict`` passes, every figure sidecar walks back to the exact
results.json bytes, and after a results.json changes, ``rgt repro`` reports exactly the outputs
that depend on it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rgt_jupyter.deliver.repro import execute

NOTEBOOKS = Path(__file__).resolve().parent.parent / "example_notebooks"


def _rgt(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rgt_jupyter", "--project", str(project), *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.mark.timeout(1200)
def test_paper_figures_deliver_strict_and_repro_names_what_changed(project: Path) -> None:
    for name in ("quickstart.ipynb", "verify.ipynb", "paper_figures.ipynb"):
        shutil.copyfile(NOTEBOOKS / name, project / name)
    execute(project / "quickstart.ipynb", project, launch=True)
    execute(project / "verify.ipynb", project, launch=True)
    paper = project / "paper_figures.ipynb"
    execute(paper, project)

    delivered = _rgt(project, "deliver", "paper_figures.ipynb", "--strict", "--json")
    assert delivered.returncode == 0, delivered.stdout[-4000:] + delivered.stderr[-4000:]
    report = json.loads(delivered.stdout)
    assert report["clean"] and report["numbers"]["summary"].get("typed", 0) == 0
    assert [g["checks"]["verified"] for g in report["gate"]] == ["verified", "verified"]
    assert all(g["checks"]["regenerable"] == "generated" for g in report["gate"])

    # Every exported file's sidecar walks back to the exact results.json bytes.
    sidecars = sorted((project / "figures" / "accuracy").glob("*.provenance"))
    assert {p.name for p in sidecars} == {"accuracy.png.provenance", "accuracy.svg.provenance"}
    for sidecar in sidecars:
        prov = json.loads(sidecar.read_text())
        output = project / prov["output"]["path"]
        assert hashlib.sha256(output.read_bytes()).hexdigest() == prov["output"]["sha256"]
        assert len(prov["built_from"]) == 9
        for item in prov["built_from"]:
            data = (project / item["results_json"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == item["sha256"]

    same = _rgt(project, "repro", "paper_figures.ipynb", "--json")
    assert same.returncode == 0, same.stdout[-4000:] + same.stderr[-4000:]
    assert json.loads(same.stdout)["identical"] is True

    # One run's result changes: exactly what depends on it is reported.
    results = next(
        p / "results.json"
        for p in (project / "runs").iterdir()
        if json.loads((p / "run.json").read_text())["name"] == "wide-s0"
    )
    value = json.loads(results.read_text())
    value["test"]["accuracy"] = 0.5
    results.write_text(json.dumps(value))
    changed = _rgt(project, "repro", "paper_figures.ipynb", "--json")
    assert changed.returncode == 1, changed.stdout[-4000:] + changed.stderr[-4000:]
    changes = json.loads(changed.stdout)["changes"]
    numbers = {c["where"]: c for c in changes if c["kind"] == "number"}
    figures = {c["where"] for c in changes if c["kind"] == "figure"}
    # The table's cell, the paragraph's placeholder and the figure cell's record of its data:
    # all of wide-s0, nothing else.
    assert {c["ref"] for c in numbers.values()} == {"wide-s0:test.accuracy"}, numbers
    assert {c["now"] for c in numbers.values()} == {"0.500", "50.0%", "0.5"}, numbers
    assert {w.split("/")[0] for w in numbers} == {"paper-05", "paper-07", "paper-08"}
    assert figures == {
        "figures/accuracy/accuracy.png",
        "figures/accuracy/accuracy.svg",
        "figures/accuracy/source_data.csv",
        "figures/accuracy/source_data.sources.json",
    }

    # Running the notebook again and delivering shows the new number everywhere.
    execute(paper, project)
    again = _rgt(project, "deliver", "paper_figures.ipynb", "--json")
    assert again.returncode == 0, again.stderr[-4000:]
    manifest = json.loads((project / "delivery" / "paper_figures.manifest.json").read_text())
    texts = {n["where"]: n["text"] for n in manifest["numbers"]}
    assert set(numbers) <= set(texts)
    assert {texts[w] for w in numbers} == {"0.500", "50.0%", "0.5"}


def test_deliver_magic_discloses_a_typed_number(ip: Any, project: Path) -> None:
    import nbformat
    from nbformat.v4 import new_markdown_cell, new_notebook

    from rgt_jupyter.deliver.report import DeliveryReport

    from .conftest import run_cell
    from .verify_fixtures import make_run

    make_run(project / "runs", "r1", results={"test": {"accuracy": 0.8731}})
    nb = new_notebook(
        cells=[
            new_markdown_cell("Accuracy is {{rgt:r1:test.accuracy|.1%}}.", id="gen"),
            new_markdown_cell("We reach 87.3% accuracy.", id="typed"),
        ]
    )
    nbformat.write(nb, str(project / "nb.ipynb"))
    result, text = run_cell(ip, "%deliver --notebook nb.ipynb")
    assert result.error_in_exec is None, text
    report = result.result
    assert isinstance(report, DeliveryReport) and not report.clean
    assert [(t["cell_id"], t["text"]) for t in report.typed] == [("typed", "87.3%")]
    assert "{{rgt:r1:test.accuracy|.1%}}" in report.text()
    assert (project / "delivery" / "nb.manifest.json").is_file()
    # The rich view is a report, not a <pre> of the text: a verdict, a table of typed numbers.
    page = report._repr_mimebundle_()["text/html"]
    assert "<pre" not in page and "disclosed below" in page
    assert "Numbers typed by hand" in page and "<code>87.3%</code>" in page
    assert "{{rgt:r1:test.accuracy|.1%}}" in page
