"""rgt check-numbers on what papers are made of: innocent numbers decided by their context
(counts, hardware, bibliographies, citations, dataset names, computed outputs), typed results in
every written form (separators, powers of ten, code strings, figure titles, comments), stale
numbers across two pulled runs of one job, and rgt's own report outputs left out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat as _nbformat
import pytest

from rgt_jupyter import submit
from rgt_jupyter.deliver.check_numbers import NumberItem, check_numbers
from rgt_jupyter.deliver.placeholders import render
from rgt_jupyter.deliver.report import deliver

from .conftest import wait_for
from .verify_fixtures import make_run

nbformat: Any = _nbformat

RESULTS = {
    "test": {"accuracy": 0.9118, "psnr": 31.42, "top1": 0.934},
    "train": {"lr_found": 0.00043, "images": 12345},
}


def _check(project: Path, *cells: Any) -> list[NumberItem]:
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    path = project / "paper.ipynb"
    nbformat.write(nb, str(path))
    return check_numbers(path, project).items


def _md(text: str) -> Any:
    return nbformat.v4.new_markdown_cell(text)


def _numbers(items: list[NumberItem]) -> list[NumberItem]:
    return [i for i in items if i.status != "generated"]


@pytest.fixture
def results(project: Path) -> Path:
    return make_run(project / "runs", "base-s0", results=RESULTS)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("The backbone has 23.5M parameters.", "count"),
        ("We pretrain on 118k images.", "count (images)"),
        ("It holds 10000 test images.", "count (images)"),
        ("Across 15 corruptions the drop is small.", "count (corruptions)"),
        ("A node has 64 cores and 768 GB of RAM.", "count (cores)"),
        ("A node has 64 cores and 768 GB of RAM.", "hardware or setup (memory or storage)"),
        ("Trained on 8× A100 for a day.", "hardware or setup (a count of accelerators)"),
        ("CPUs run at 2.4 GHz.", "hardware or setup (a clock rate)"),
        ("As shown in [14]: it helps.", "citation"),
        ("Results on WMT'14 En-De.", "name with a year"),
        ("In Proc. CVPR, pages 770–778.", "bibliography (page range)"),
        ("J. Mach. Learn. Res., vol. 15, 2014.", "bibliography (volume or issue)"),
        ("See arXiv:2104.12345v2.", "bibliography (arXiv id)"),
        ("https://doi.org/ and doi 10.1109/5.771073 too.", "bibliography (DOI)"),
    ],
)
def test_innocent_numbers_are_told_by_their_context(
    project: Path, results: Path, text: str, reason: str
) -> None:
    items = _numbers(_check(project, _md(text)))
    assert items, text
    assert not [i for i in items if i.status in ("typed", "ambiguous")], [
        (i.text, i.status, i.reason) for i in items
    ]
    assert any((i.reason or "").startswith(reason) for i in items), [
        (i.text, i.reason) for i in items
    ]


def test_a_reference_list_is_innocent_to_the_next_heading(project: Path, results: Path) -> None:
    items = _check(
        project,
        _md("## Results\n\nAccuracy reaches 91.18% on test."),
        _md("## References\n\n1. K. He et al. Deep residual learning. CVPR 2016, 770-778.\n"),
        _md("2. A. Smith. Nets. JMLR 12(3):45-67, 2011."),
        _md("## Appendix\n\nTop-1 accuracy 93.4% on test."),
    )
    flagged = {i.text for i in items if i.status in ("typed", "ambiguous")}
    assert flagged == {"91.18%", "93.4%"}, flagged
    assert {i.reason for i in items if i.cell_index in (1, 2) and i.text in ("770", "45")} == {
        "bibliography (reference list)"
    }


def test_results_words_still_make_a_count_like_number_typed(project: Path, results: Path) -> None:
    items = _numbers(_check(project, _md("We improve by 3.2 points and run 2.5 times faster.")))
    assert {i.text: i.status for i in items} == {"3.2": "typed", "2.5": "typed"}


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("The train split has 12\u2009345 images counted.", "12,345"),
        ("The train split has 12\u202f345 images counted.", "12,345"),
        ("The train split has 12\u00a0345 images counted.", "12,345"),
        ("The train split has 12'345 images counted.", "12,345"),
    ],
)
def test_thousands_separators_of_every_kind_make_one_number(
    project: Path, results: Path, text: str, shown: str
) -> None:
    # "images counted" is no count noun right after the number: it is the train set's size.
    text = text.replace(" images counted", " in total (images)")
    (item,) = [i for i in _numbers(_check(project, _md(text))) if i.value == 12345]
    assert item.text == shown and item.status == "typed"
    assert item.suggestion == "use {{rgt:base-s0:train.images|,d}}"


@pytest.mark.parametrize(
    "text",
    [
        "The lr found is 4.3 × 10⁻⁴.",
        "The lr found is 4.3e-4.",
        "The lr found is $4.3\\times10^{-4}$.",
    ],
)
def test_scientific_notation_in_every_written_form(project: Path, results: Path, text: str) -> None:
    (item,) = [i for i in _numbers(_check(project, _md(text))) if i.match]
    assert item.status == "typed" and item.match["key_path"] == "train.lr_found"
    assert item.suggestion == "use {{rgt:base-s0:train.lr_found|.1e}}"


def test_a_percent_with_two_decimals_matches_and_its_suggestion_renders(
    project: Path, results: Path
) -> None:
    (item,) = _numbers(_check(project, _md("Accuracy 91.18% on test.")))
    assert item.status == "typed" and item.suggestion
    placeholder = item.suggestion.removeprefix("use ")
    rendered, _ = render(placeholder, project)
    assert rendered == "91.18%"


CODE = """import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 3))
ax.set_title("ResNet-50: 93.4 % top-1")  # test accuracy was 93.4 % before
ax.plot([1, 2], label=f"ours (PSNR 31.42 dB)")
note = "not shown 77.7 accuracy"
# lr = 0.5 tried
for epoch in range(10):
    print(f"epoch {epoch} loss {0.1:.3f}")
print("final accuracy 88.1")
"""


def test_typed_numbers_in_code_text_are_found_with_line_and_column(
    project: Path, results: Path
) -> None:
    cell = nbformat.v4.new_code_cell(CODE)
    cell.outputs = [
        nbformat.v4.new_output(
            "stream", name="stdout", text="epoch 9 loss 0.100\nfinal accuracy 88.1\n"
        )
    ]
    items = _check(project, cell)
    found = {(i.where, i.line, i.text): i for i in items if i.status == "typed"}
    lines = CODE.splitlines()
    for item in found.values():
        if item.where != "output":  # the line and column point at the number as written
            assert lines[item.line - 1][item.col - 1 :].startswith(item.text), item
    title = found[("code_string", 3, "93.4 %")]
    assert title.suggestion == 'format rgt.num("base-s0:test.top1", ".1%") into the text'
    assert ("code_comment", 3, "93.4 %") in found
    assert found[("code_string", 4, "31.42")].match["key_path"] == "test.psnr"
    assert ("code_string", 9, "88.1") in found
    echoed = [i for i in items if i.where == "output" and i.text == "88.1"]
    assert [i.status for i in echoed] == ["typed"], "the output repeats a typed string"
    # A string that nothing shows, a comment without a result word, a format spec and a
    # computed output are not typed results.
    assert not [i for i in items if i.text in ("77.7", ".3", "0.5") and i.status == "typed"]
    computed = [i for i in items if i.where == "output" and i.text in ("9", "0.100")]
    assert computed and all(i.status != "typed" for i in computed), [
        (i.text, i.status, i.reason) for i in computed
    ]


def test_an_output_computed_from_a_range_literal_is_not_an_echo(
    project: Path, results: Path
) -> None:
    cell = nbformat.v4.new_code_cell("for n in range(2048):\n    pass\nprint(n + 1)\n")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="2048\n")]
    (out,) = [i for i in _check(project, cell) if i.where == "output"]
    assert out.status != "typed", out.reason


def test_rgts_own_report_outputs_are_left_out(project: Path, results: Path) -> None:
    paper = project / "draft.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[_md("Accuracy 91.18% on test.")]), str(paper))
    bundle = deliver("draft.ipynb", project)._repr_mimebundle_()
    cell = nbformat.v4.new_code_cell("%deliver")
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle)]
    items = _check(project, cell)
    assert not [i for i in items if i.where == "output"], [(i.text, i.status) for i in items]


PROGRAM = (
    "import json, os\n"
    "out = os.environ['RGT_OUT']\n"
    "json.dump({{'test': {{'accuracy': {acc}}}}}, open(os.path.join(out, 'results.json'), 'w'))\n"
)


@pytest.mark.timeout(600)
def test_a_number_of_an_older_run_of_the_job_is_stale_and_the_newest_is_suggested(
    project: Path,
) -> None:
    runs = []
    for acc in (0.9118, 0.9203):
        job = submit(PROGRAM.format(acc=acc), project, name="wide")
        wait_for(lambda job=job: job.state == "finished", 180, "the job to end")
        runs.append(job.pull())
    old, new = (r.run_id for r in runs)
    items = _check(project, _md("Accuracy 91.18% before, 92.03% now."))
    stale, current = (i for i in items if i.status == "typed")
    assert stale.text == "91.18%" and stale.stale is True
    assert old in (stale.reason or "") and new in (stale.reason or "")
    assert stale.match and stale.match["newest"]["run_id"] == new
    assert stale.suggestion == f"use {{{{rgt:{new}:test.accuracy|.2%}}}}"
    assert current.stale is False and current.match and current.match["run_id"] == new
    assert render(stale.suggestion.removeprefix("use "), project)[0] == "92.03%"
    report = check_numbers(project / "paper.ipynb", project)
    assert "stale 91.18%" in report.text() and report.summary["stale"] == 1
    assert json.loads(json.dumps(report.to_dict()))["findings"]


def test_a_suggestion_discloses_the_open_verify_problems_of_its_run(
    project: Path, results: Path
) -> None:
    from rgt_jupyter.verify.model import Finding
    from rgt_jupyter.verify.report import append_findings

    problem = Finding(
        "confounding", "finding", "the arms differ in batch size as well", ["base-s0"], created=1.0
    )
    append_findings([problem], project)
    items = _check(project, _md("Accuracy 91.18% on test, {{rgt:base-s0:test.psnr|.2f}} dB."))
    typed = [i for i in items if i.status == "typed"]
    assert typed[0].findings == ["confounding: the arms differ in batch size as well"]
    placeholder = [i for i in items if i.status == "generated"]
    assert placeholder[0].findings == typed[0].findings
    report = check_numbers(project / "paper.ipynb", project)
    assert "[%verify on base-s0: confounding: the arms differ" in report.text()
    # A later pass of the same check closes it.
    append_findings(
        [Finding("confounding", "pass", "arms match", ["base-s0"], created=2.0)], project
    )
    assert not [i for i in _check(project, _md("Accuracy 91.18% on test.")) if i.findings]


def test_a_gain_or_a_ratio_of_two_runs_is_matched_to_both(project: Path) -> None:
    make_run(project / "runs", "wide-s0", results={"test": {"accuracy": 0.9312, "ms": 41.0}})
    make_run(project / "runs", "base-s0", results={"test": {"accuracy": 0.9104, "ms": 73.8}})
    items = _check(
        project,
        _md("Widening gains +2.1 points on test and runs 1.8× faster than the base on test."),
    )
    gain, ratio = (i for i in items if i.status == "typed")
    assert gain.match and gain.match["derived"]["kind"] == "difference"
    assert set(gain.match["derived"]["of"]) == {"wide-s0:test.accuracy", "base-s0:test.accuracy"}
    assert gain.match["derived"]["scale"] == 100
    assert ratio.match and ratio.match["derived"]["kind"] == "ratio"
    assert set(ratio.match["derived"]["of"]) == {"wide-s0:test.ms", "base-s0:test.ms"}
    assert "rgt.num(" in (gain.suggestion or "") and "rgt.md" in (gain.suggestion or "")
    text = check_numbers(project / "paper.ipynb", project).text()
    assert "the difference of" in text and "the ratio of" in text


def test_a_number_drawn_on_an_exported_figure_is_checked_under_its_cell(
    project: Path, results: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rgt_jupyter.deliver.figures import figure
    from rgt_jupyter.deliver.numbers import num

    drawing = (
        'fig, ax = plt.subplots()\nax.bar(["ours"], [acc])\n'
        'rgt.figure(fig, "acc-bar", data=[{"acc": acc}], code=In[-1])\n'
    )
    fig, ax = plt.subplots(figsize=(3, 2))
    acc = num("base-s0:test.top1", project=project)
    ax.bar(["ours"], [float(acc)])
    ax.set_title("ResNet-50: 93.4 % top-1")  # typed on the figure itself
    ax.set_xlabel("epoch 30")
    figure(fig, "acc-bar", data=[{"acc": acc}], project=project, formats=("png",), code=drawing)
    plt.close(fig)
    items = _check(project, _md("## Results"), nbformat.v4.new_code_cell(drawing))
    drawn = [i for i in items if i.where == "figure_text"]
    typed = [i for i in drawn if i.status == "typed"]
    assert [(i.cell_index, i.text) for i in typed] == [(1, "93.4 %")], drawn
    assert typed[0].suggestion == 'format rgt.num("base-s0:test.top1", ".1%") into the text'
    assert "figure acc-bar, axes 0 title" in typed[0].context
    # An epoch on an axis label is no result; a figure another notebook drew is not read here.
    assert all(i.status != "typed" for i in drawn if i.text == "30")
    other = _check(project, _md("Nothing here."), nbformat.v4.new_code_cell("x = 1"))
    assert not [i for i in other if i.where == "figure_text"]
