"""DELIVER numbers: generated numbers, markdown placeholders and EVIDENCE.json, read from real
run folders under ``<project>/runs``."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell

from rgt_jupyter.deliver import evidence
from rgt_jupyter.deliver.numbers import GeneratedNumber, md, num, resolve, results
from rgt_jupyter.deliver.placeholders import RgtPlaceholders, find, render
from rgt_jupyter.errors import UsageError
from rgt_jupyter.store.registry import Registry

from .verify_fixtures import make_run

nbf: Any = nbformat  # nbformat's constructors are untyped

ACC = 0.8734512345678912  # more digits than any display, so full precision is visible


def _results(acc: float = ACC, n: int = 1000) -> dict[str, Any]:
    return {
        "test": {"accuracy": acc, "n": n, "direction": "max"},
        "val": {"accuracy": 0.9},
        "metrics": {"AP@0.5": {"test": {"value": 0.4125, "n": 50}}},
        "curve": [0.5, 0.25, 0.125],
        "note": "fine",
    }


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def runs(project: Path) -> dict[str, Path]:
    """Two pulled runs of the project."""
    return {
        "r1": make_run(project / "runs", "r1", results=_results()),
        "r2": make_run(project / "runs", "r2", results=_results(acc=0.61, n=200)),
    }


def test_num_shows_its_text_and_carries_its_source(runs: dict[str, Path]) -> None:
    n = num("r1:test.accuracy", ".1%")
    assert (str(n), f"{n}", float(n)) == ("87.3%", "87.3%", ACC)
    assert f"{n:.3f}" == "0.873"
    assert n.source() == {
        "value": ACC,
        "text": "87.3%",
        "ref": "r1:test.accuracy",
        "run_id": "r1",
        "results_json": "runs/r1/results.json",
        "sha256": _sha(runs["r1"] / "results.json"),
        "key": "test.accuracy",
        "fmt": ".1%",
        "claim_id": None,
    }
    assert num("r1:test.accuracy").text == repr(ACC)
    assert num("r1:test.n", ",d").text == "1,000"
    assert num("r1:curve.2", ".3g").text == "0.125"
    assert num("r1:metrics.AP@0.5.test.value", ".2f").text == "0.41"
    # What IPython displays: the text, with the source in the output's metadata.
    formatter: Any = InteractiveShell.instance().display_formatter
    data, meta = formatter.format(n)
    assert data["text/markdown"] == "87.3%" and data["text/plain"] == "87.3%"
    assert meta["rgt_jupyter"] == {"generated": [n.source()]}


def test_results_is_a_read_only_view_of_the_bytes_it_hashed(runs: dict[str, Path]) -> None:
    res = results("r1")
    assert res.run_id == "r1" and res.sha256 == _sha(runs["r1"] / "results.json")
    assert res["test"]["accuracy"] == ACC and set(res) == set(_results())
    with pytest.raises(TypeError):
        res["test"]["accuracy"] = 1.0
    with pytest.raises(TypeError):
        res["curve"][0] = 1.0
    n = res.num("test.accuracy", ".2f")
    assert isinstance(n, GeneratedNumber)
    assert (n.text, n.ref, n.sha256, n.value) == ("0.87", "r1:test.accuracy", res.sha256, ACC)
    assert results(str(runs["r2"])).num("test.n").text == "200"  # a run folder names it too


def test_a_job_name_is_its_newest_pulled_run_and_a_seed_group_is_refused(
    project: Path, runs: dict[str, Path]
) -> None:
    registry = Registry(project)
    registry.add_job("job-a", "train", "job-a", 1, "local", "localhost", {})
    registry.add_run("r1", "job-a", runs["r1"], True)
    registry.add_run("r2", "job-a", runs["r2"], True)
    assert num("train:test.accuracy").run_id == "r2"
    for seed in (0, 1):
        spec = {"group": {"id": "g1", "name": "sweep", "seed": seed}}
        registry.add_job(f"job-s{seed}", f"sweep-s{seed}", f"job-s{seed}", 1, "local", "h", spec)
        run = make_run(project / "runs", f"s{seed}", results=_results(acc=0.5 + seed / 10))
        registry.add_run(f"s{seed}", f"job-s{seed}", run, True)
    with pytest.raises(UsageError, match=r"seed group \(sweep-s0, sweep-s1\).*one seed"):
        num("sweep:test.accuracy")
    assert num("sweep-s1:test.accuracy").text == "0.6"  # one seed's job is one run


def test_bad_references_say_what_to_do(runs: dict[str, Path]) -> None:
    with pytest.raises(UsageError) as bad_key:
        num("r1:test.acc")
    assert "the keys at test are: accuracy, direction, n" in str(bad_key.value)
    with pytest.raises(
        UsageError, match="the keys at the top level are: curve, metrics, note, test, val"
    ):
        num("r1:tset.accuracy")
    with pytest.raises(UsageError, match="a list of 3 items; '3' is not an index 0..2"):
        num("r1:curve.3")
    with pytest.raises(UsageError, match="is a mapping, not a number: .*test.accuracy"):
        num("r1:test")
    with pytest.raises(UsageError, match="not a number"):
        num("r1:note")
    with pytest.raises(UsageError, match="format 'q'"):
        num("r1:test.accuracy", "q")
    for ref in (":test.accuracy", "r1:", "r1: "):
        with pytest.raises(UsageError, match="write <run id, run folder or job>:<key.path>"):
            resolve(ref)
    with pytest.raises(UsageError, match="empty part"):
        num("r1:test..accuracy")
    with pytest.raises(UsageError, match="not a run folder, a run id, a job"):
        num("r9:test.accuracy")


def test_md_fills_placeholders_and_fields_and_records_each_span(runs: dict[str, Path]) -> None:
    base = num("r2:test.accuracy", ".1%")
    out = md(
        "Ours {{rgt:r1:test.accuracy|.1%}} vs {base} on $n={{rgt:r1:test.n}}$, "
        "$x^{2}$; {base:.3f} ({name})",
        base=base,
        name="CIFAR",
    )
    assert out.text == "Ours 87.3% vs 61.0% on $n=1000$, $x^{2}$; 0.610 (CIFAR)"
    data, meta = out._repr_mimebundle_()
    assert data == {"text/plain": out.text, "text/markdown": out.text}
    gen = meta["rgt_jupyter"]["generated"]
    assert [g["ref"] for g in gen] == [
        "r1:test.accuracy",
        "r2:test.accuracy",
        "r1:test.n",
        "r2:test.accuracy",
    ]
    assert [out.text[g["span"][0] : g["span"][1]] for g in gen] == [
        "87.3%",
        "61.0%",
        "1000",
        "0.610",
    ]
    assert [g["fmt"] for g in gen] == [".1%", ".1%", None, ".3f"]
    assert gen[0]["sha256"] == _sha(runs["r1"] / "results.json")
    assert gen[1]["value"] == 0.61 and gen[2]["key"] == "test.n"
    with pytest.raises(UsageError, match="not a generated number"):
        md("{acc}", acc=0.87)
    with pytest.raises(UsageError, match="acc passed but not used"):
        md("{ac}", acc=base)


def test_placeholders_are_found_rendered_and_their_sources_recorded(
    runs: dict[str, Path],
) -> None:
    text = "Accuracy {{rgt:r1:test.accuracy|.2f}} (n={{ rgt:r1:test.n }})."
    found = find(text)
    assert [(p.ref, p.fmt) for p in found] == [("r1:test.accuracy", ".2f"), ("r1:test.n", None)]
    assert [text[p.start : p.end] for p in found] == [p.text for p in found]
    assert found[1].text == "{{ rgt:r1:test.n }}"
    rendered, sources = render(text)
    assert rendered == "Accuracy 0.87 (n=1000)."
    assert [rendered[s["span"][0] : s["span"][1]] for s in sources] == ["0.87", "1000"]
    assert sources[0]["sha256"] == _sha(runs["r1"] / "results.json")
    assert sources[0]["placeholder"] == "{{rgt:r1:test.accuracy|.2f}}"
    assert render("no numbers here") == ("no numbers here", [])


def test_the_nbconvert_preprocessor_renders_markdown_and_names_a_broken_cell(
    runs: dict[str, Path],
) -> None:
    nb = nbf.v4.new_notebook()
    nb.cells = [
        nbf.v4.new_markdown_cell("We reach {{rgt:r1:test.accuracy|.1%}}.", id="results"),
        nbf.v4.new_code_cell("s = '{{rgt:r1:test.accuracy|.1%}}'", id="code"),
    ]
    out, _ = RgtPlaceholders().preprocess(nb, {})
    cell = out.cells[0]
    assert cell.source == "We reach 87.3%."
    meta = cell.metadata["rgt_jupyter"]
    assert meta["template"] == "We reach {{rgt:r1:test.accuracy|.1%}}."
    assert [(g["ref"], g["text"], g["span"]) for g in meta["generated"]] == [
        ("r1:test.accuracy", "87.3%", [9, 14])
    ]
    assert meta["generated"][0]["sha256"] == _sha(runs["r1"] / "results.json")
    assert out.cells[1].source == "s = '{{rgt:r1:test.accuracy|.1%}}'"  # code is not markdown
    assert "rgt_jupyter" not in out.cells[1].metadata
    broken = nbf.v4.new_notebook()
    broken.cells = [
        nbf.v4.new_markdown_cell("fine", id="intro"),
        nbf.v4.new_markdown_cell("{{rgt:r1:test.acc|.2f}}", id="typo-cell"),
    ]
    with pytest.raises(UsageError, match=r"markdown cell typo-cell \(index 1\).*accuracy"):
        RgtPlaceholders().preprocess(broken, {})


def test_claim_references_resolve_through_evidence_json(
    project: Path, runs: dict[str, Path]
) -> None:
    claim = evidence.add_claim(
        "C1",
        "Ours beats the baseline",
        ["r1:test.accuracy", {"ref": "r2:metrics.AP@0.5.test.value", "figure": "figures/f1"}],
        paper_anchor="Table 2",
        repo_implementation="train.py:42",
    )
    stored = json.loads((project / "EVIDENCE.json").read_text())
    assert stored["schema_version"] == "1.0" and stored["claims"] == [claim]
    assert claim["evidence"][0] == {
        "run": "r1",
        "key": "test.accuracy",
        "metric": "accuracy",
        "direction": "max",
        "split": "test",
        "n": 1000,
        "value": ACC,
        "results_json": "runs/r1/results.json",
        "results_sha256": _sha(runs["r1"] / "results.json"),
    }
    assert repr(ACC) in (project / "EVIDENCE.json").read_text()  # full precision
    row1 = claim["evidence"][1]
    assert (row1["metric"], row1["split"], row1["n"], row1["figure"]) == (
        "AP@0.5",
        "test",
        50,
        "figures/f1",
    )
    first, second = num("C1", ".2f"), num("C1#1", ".3f")
    assert (first.text, first.claim_id, first.run_id, first.ref) == ("0.87", "C1", "r1", "C1")
    assert (second.text, second.claim_id, second.key) == (
        "0.412",
        "C1",
        "metrics.AP@0.5.test.value",
    )
    assert render("{{rgt:C1#1|.1%}}")[0] == "41.2%"
    with pytest.raises(UsageError, match=r"2 evidence row\(s\): use C1#0 to C1#1"):
        num("C1#2")
    with pytest.raises(UsageError, match="its claims are: C1"):
        num("C9")
    with pytest.raises(UsageError, match="already in EVIDENCE.json"):
        evidence.add_claim("C1", "again", ["r1:test.accuracy"])
    (runs["r1"] / "results.json").write_text(json.dumps(_results(acc=0.5)))
    with pytest.warns(UserWarning, match="run `rgt evidence`"):
        assert num("C1").value == 0.5


def test_sync_takes_the_new_value_and_hash_and_reports_the_change(
    project: Path, runs: dict[str, Path]
) -> None:
    evidence.add_claim("C1", "s", ["r1:test.accuracy", "r2:test.accuracy"])
    evidence.add_claim("C2", "t", ["r2:val.accuracy"])
    assert evidence.sync() == []
    old_sha = _sha(runs["r1"] / "results.json")
    (runs["r1"] / "results.json").write_text(json.dumps(_results(acc=0.9012345678901234)))
    new_sha = _sha(runs["r1"] / "results.json")
    changes = evidence.sync()
    assert [(c.claim_id, c.index, c.ref, c.fields, c.error) for c in changes] == [
        (
            "C1",
            0,
            "r1:test.accuracy",
            {"value": (ACC, 0.9012345678901234), "results_sha256": (old_sha, new_sha)},
            None,
        )
    ]
    assert str(changes[0]) == (
        f"C1#0 r1:test.accuracy: value {ACC!r} -> 0.9012345678901234; "
        f"results_sha256 {old_sha[:12]} -> {new_sha[:12]}"
    )
    row = evidence.load()["claims"][0]["evidence"][0]
    assert (row["value"], row["results_sha256"]) == (0.9012345678901234, new_sha)
    assert evidence.sync() == []
    # A row whose key is gone is reported and kept; the others are still synced.
    (runs["r2"] / "results.json").write_text(json.dumps({"test": {"accuracy": 0.7}}))
    before = evidence.load()["claims"][1]["evidence"][0]
    changes = evidence.sync()
    assert [(c.claim_id, c.index, bool(c.fields)) for c in changes] == [
        ("C1", 1, True),
        ("C2", 0, False),
    ]
    assert changes[1].error is not None and "no key 'val.accuracy'" in changes[1].error
    assert "does not resolve, row kept as it was" in str(changes[1])
    stored = evidence.load()
    assert stored["claims"][1]["evidence"][0] == before
    assert stored["claims"][0]["evidence"][1]["value"] == 0.7


def test_evidence_writes_are_atomic(
    project: Path, runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    evidence.add_claim("C1", "s", ["r1:test.accuracy"])
    path = project / "EVIDENCE.json"
    before = path.read_bytes()

    def crash(fd: int) -> None:
        raise OSError("disk gone")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", crash)
        with pytest.raises(OSError, match="disk gone"):
            evidence.add_claim("C2", "t", ["r2:test.accuracy"])
    assert path.read_bytes() == before
    assert sorted(p.name for p in project.iterdir()) == [".rgt", "EVIDENCE.json", "runs"]
    with pytest.raises(UsageError, match="plain JSON only"):
        evidence.save(
            {**evidence.load(), "claims": [{"id": "C3", "evidence": [{"value": float("nan")}]}]}
        )
    assert path.read_bytes() == before
    with pytest.raises(UsageError, match="rename the key 'schema' to 'schema_version'"):
        evidence.save({"project": "p", "schema": "1.0", "claims": []})
