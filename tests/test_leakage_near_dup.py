"""Near-duplicate, grouped and temporal leakage: signatures computed by ``job.save_split`` where
the data lives (texts as MinHash, images as dHash, rows as rounded-row hashes, group keys,
times), compared by the leakage check. Planted near duplicates (re-encoded and resized images,
paraphrased and shingle-overlapping texts, rows with float noise) are caught; clean splits are
flagged at most 1 %; without content the check says ``not_checked`` for it, with the line that
declares it."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rgt_jupyter.job as job
from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.verify.checks.leakage import DECLARE_CONTENT, leakage, read_signatures
from rgt_jupyter.verify.model import Context, Finding, RunData
from rgt_jupyter.verify.report import verify

from .test_agent import python38
from .verify_fixtures import make_run

REPO = Path(__file__).resolve().parent.parent


def _load_bench() -> Any:
    """``bench/leakage.py`` as a module."""
    spec = importlib.util.spec_from_file_location("leakage_bench", REPO / "bench" / "leakage.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The bench's item makers (one definition of the planted near duplicates for both).
BENCH = _load_bench()
VOCAB, _P = BENCH.VOCAB, BENCH._P
_paraphrase, _image, _reencoded = BENCH.paraphrase, BENCH.image, BENCH.reencoded
_row, _near_row = BENCH.row, BENCH.near_row


def _text(rng: np.random.Generator, words: int = 40) -> str:
    return " ".join(VOCAB[int(r)] for r in rng.choice(len(VOCAB), words, p=_P))


def _overlap(rng: np.random.Generator, text: str) -> str:
    """Most of the text, cut at characters, with new text before and after."""
    cut = len(text) // 10
    return _text(rng, 3) + text[cut : len(text) - cut] + _text(rng, 3)


def _declared_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, splits: dict[str, dict[str, Any]]
) -> RunData:
    """A run folder whose splits were declared through ``job.save_split(name, **kwargs)``."""
    root = make_run(tmp_path / "runs", "exp-1")
    monkeypatch.setenv("RGT_OUT", str(root / "outputs"))
    for name, kwargs in splits.items():
        job.save_split(name, **kwargs)
    return RunData(root)


def _leaks(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.verdict == "finding"]


def _near(finding: Finding, kind: str) -> dict[str, Any]:
    near: dict[str, Any] = finding.computed["pair"]["near_duplicates"][kind]
    return near


def _planted(n_train: int, n_test: int, n_planted: int, make: Any, twist: Any, seed: int) -> Any:
    """Train and test items, the first ``n_planted`` test items twisted copies of train items."""
    rng = np.random.default_rng(seed)
    train = [make(rng) for _ in range(n_train)]
    test = [twist(rng, train[i * 3]) for i in range(n_planted)]
    test += [make(rng) for _ in range(n_test - n_planted)]
    return train, test


# ----------------------------------------------------------------------------- planted near dups


@pytest.mark.parametrize(
    "kind,make,twist",
    [
        ("text", _text, _paraphrase),
        ("text", _text, _overlap),
        ("image", _image, _reencoded),
        ("row", _row, _near_row),
    ],
    ids=["paraphrased-text", "overlapping-text", "reencoded-resized-image", "near-row"],
)
def test_planted_near_duplicates_are_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, make: Any, twist: Any
) -> None:
    train, test = _planted(300, 100, 20, make, twist, seed=1)
    run = _declared_run(
        tmp_path,
        monkeypatch,
        {
            "train": {"ids": [f"tr{i}" for i in range(300)], "items": train},
            "test": {"ids": [f"te{i}" for i in range(100)], "items": test},
        },
    )
    (finding,) = _leaks(leakage(Context(runs=[run])))
    near = _near(finding, kind)
    # Every planted copy is caught, under another name and with other bytes.
    caught = {a for a, _ in _examples_all(run, kind)}
    assert {f"te{i}" for i in range(20)} <= caught
    assert near["count"] <= 20 + 1  # clean items flagged at most 1 %
    assert finding.computed["pair"]["overlap"] == 0
    assert finding.computed["checked"]["near_duplicates"]["verdict"] == "finding"
    assert ["te0", "tr0"] in near["examples"]
    assert "have a near duplicate in train" in finding.disclosure
    assert "Every claim on the test split is affected" in finding.disclosure
    assert "splits/test.sig" in " ".join(i["path"] for i in finding.inputs)


def _examples_all(run: RunData, kind: str) -> list[tuple[str, str]]:
    """Every (test id, train id) near-duplicate pair of ``kind``, not only the examples."""
    from rgt_jupyter.verify.checks.leakage import image_near, text_near

    test, train = read_signatures(run, "test"), read_signatures(run, "train")
    assert test is not None and train is not None
    if kind == "row":
        rows = dict(zip(train["row"][1], train["row"][0], strict=True))
        return [(i, rows[h]) for i, h in zip(*test["row"], strict=True) if h in rows]
    fn = text_near if kind == "text" else image_near
    pairs = fn(test[kind][1], train[kind][1])
    return [(test[kind][0][i], train[kind][0][j]) for i, j in pairs]


@pytest.mark.parametrize("kind,make", [("text", _text), ("image", _image), ("row", _row)])
def test_clean_splits_are_flagged_at_most_one_percent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, make: Any
) -> None:
    rng = np.random.default_rng(7)
    run = _declared_run(
        tmp_path,
        monkeypatch,
        {
            "train": {
                "ids": [f"tr{i}" for i in range(600)],
                "items": [make(rng) for _ in range(600)],
            },
            "test": {
                "ids": [f"te{i}" for i in range(300)],
                "items": [make(rng) for _ in range(300)],
            },
        },
    )
    assert len(_examples_all(run, kind)) <= 3
    findings = leakage(Context(runs=[run]))
    if not _leaks(findings):
        (ok,) = findings
        assert ok.verdict == "pass"
        assert ok.computed["checked"]["near_duplicates"]["verdict"] == "pass"
        assert ok.computed["checked"]["content"]["verdict"] == "pass"
        assert "No near duplicates" in ok.disclosure


def test_text_signatures_with_and_without_numpy_agree() -> None:
    rng = np.random.default_rng(3)
    texts = [_text(rng) for _ in range(50)] + ["", "ab", "Ünïcode — text ✓ " * 4]
    with_np = job._text_sigs_np(np, texts)
    assert with_np == [job._text_sig_py(t) for t in texts]
    assert with_np[50] is None and with_np[51] is not None


def test_signatures_in_python_3_8_without_numpy(tmp_path: Path) -> None:
    """The job API signs texts and rows on a bare Python 3.8; images say why they are not."""
    py38 = python38()
    lib = tmp_path / "lib" / "rgt_jupyter"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "job.py").write_bytes((REPO / "rgt_jupyter" / "remote" / "job.py").read_bytes())
    prog = (
        "import sys; sys.modules['numpy'] = None\n"
        "import rgt_jupyter.job as job\n"
        "job.save_split('train', ['a', 'b', 'c'], items=['some text here', 'more text', "
        "[[1, 2], [3, 4]]], groups=['g1', 'g2', 'g1'], times=['2024-01-01', '2024-02-01', "
        "'2024-03-01T00:00:00Z'])\n"
        "job.save_split('test', ['d'], items=[(1.0, 'x')], kind='row')\n"
    )
    out = tmp_path / "out"
    env = {"PYTHONPATH": str(tmp_path / "lib"), "RGT_OUT": str(out), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([py38, "-c", prog], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in (out / "splits" / "train.sig").read_text().splitlines()]
    head, rows = lines[0], lines[1:]
    assert head["schema"] == "rgt-split-sig/1" and head["text"]["bins"] == 64
    assert head["image"] is None and "numpy" in head["not_signed"]["image"]
    assert "text" in rows[0] and "image" not in rows[2]
    assert rows[2]["group"] == "g1" and rows[2]["time"] == 1709251200.0
    expected = job._text_sigs_np(np, ["some text here"])[0]
    assert expected is not None and rows[0]["text"] == job._sig_b64(expected)
    assert (out / "splits" / "train.sha256").is_file()


# ----------------------------------------------------------------------------- groups and time


def test_grouped_leakage_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _declared_run(
        tmp_path,
        monkeypatch,
        {
            "train": {
                "ids": [f"tr{i}" for i in range(40)],
                "groups": [f"p{i % 10}" for i in range(40)],
            },
            "test": {
                "ids": [f"te{i}" for i in range(10)],
                "groups": ["p3", "p3", "p7"] + [f"q{i}" for i in range(7)],
            },
        },
    )
    (finding,) = _leaks(leakage(Context(runs=[run])))
    groups = finding.computed["pair"]["groups"]
    assert groups["shared_groups"] == 2 and groups["count"] == 3
    assert groups["examples"] == ["p3", "p7"] and groups["example_items"] == ["te0", "te1", "te2"]
    assert "3 of 10 test items belong to 2 groups also in train" in finding.disclosure
    assert finding.computed["checked"]["groups"]["verdict"] == "finding"


def test_temporal_leakage_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    train_times = [f"2024-0{m}-15" for m in range(1, 7)]  # January to June
    test_times = ["2024-03-01T12:00:00Z", "2024-07-01", "2024-08-01", "2024-09-01"]
    run = _declared_run(
        tmp_path,
        monkeypatch,
        {
            "train": {"ids": [f"tr{i}" for i in range(6)], "times": train_times},
            "val": {"ids": ["va0"], "times": [1719964800]},  # 2024-07-03, after train
            "test": {"ids": [f"te{i}" for i in range(4)], "times": test_times},
        },
    )
    findings = _leaks(leakage(Context(runs=[run])))
    by_pair = {tuple(f.computed["pair"]["splits"]): f for f in findings}
    test_train = by_pair[("test", "train")].computed["pair"]["temporal"]
    assert test_train["count"] == 1 and test_train["examples"] == ["te0"]
    assert "older than the newest train item" in by_pair[("test", "train")].disclosure
    test_val = by_pair[("test", "val")].computed["pair"]["temporal"]
    assert test_val["count"] == 2 and test_val["later"] == "test"
    assert ("train", "val") not in by_pair and ("val", "train") not in by_pair


def test_in_order_times_and_disjoint_groups_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _declared_run(
        tmp_path,
        monkeypatch,
        {
            "train": {"ids": ["a", "b"], "groups": ["g1", "g2"], "times": [1.0, 2.0]},
            "test": {"ids": ["c"], "groups": ["g3"], "times": [3.0]},
        },
    )
    ok, content = leakage(Context(runs=[run]))
    assert ok.verdict == "pass" and content.verdict == "not_checked"
    checked = ok.computed["checked"]
    assert checked["groups"]["verdict"] == checked["time"]["verdict"] == "pass"
    assert checked["content"]["verdict"] == checked["near_duplicates"]["verdict"] == "not_checked"


# ----------------------------------------------------------------------------- not checked


def test_content_is_not_checked_without_hashes(tmp_path: Path) -> None:
    run = RunData(make_run(tmp_path / "runs", "bare-1", splits={"train": ["a"], "test": ["b"]}))
    ok, content = leakage(Context(runs=[run]))
    # Ids pass; content is a finding of its own: not_checked, with the line that declares it.
    assert content.verdict == "not_checked" and content.computed["aspect"] == "content"
    assert DECLARE_CONTENT in content.disclosure and "hashes=None" not in content.disclosure
    checked = ok.computed["checked"]
    assert checked["ids"]["verdict"] == "pass"
    assert checked["content"]["verdict"] == "not_checked"
    assert DECLARE_CONTENT in checked["content"]["reason"]
    assert "Content was not compared (not_checked)" in ok.disclosure
    assert DECLARE_CONTENT in ok.disclosure and "hashes=None" not in ok.disclosure
    for aspect in ("near_duplicates", "groups", "time"):
        assert checked[aspect]["verdict"] == "not_checked"


def test_id_leak_without_hashes_points_at_the_declaring_line(tmp_path: Path) -> None:
    run = RunData(make_run(tmp_path / "runs", "bare-2", splits={"train": ["a"], "test": ["a"]}))
    (leak,) = leakage(Context(runs=[run]))
    assert leak.verdict == "finding"
    assert leak.computed["checked"]["content"]["verdict"] == "not_checked"
    assert DECLARE_CONTENT in leak.disclosure and "hashes=None" not in leak.disclosure


# ----------------------------------------------------------------------------- through a real job

PROGRAM = """\
import random
import numpy as np
import rgt_jupyter.job as job
rng = random.Random(0)
vocab = ["w%d" % i for i in range(2000)]
train = [" ".join(rng.choice(vocab) for _ in range(40)) for _ in range(200)]
test = [" ".join(rng.choice(vocab) for _ in range(40)) for _ in range(50)]
test[0] = train[5].upper() + " and more"
imgs = np.random.default_rng(0).random((20, 8, 8)).repeat(4, axis=1).repeat(4, axis=2)
job.save_split("train", ["tr%d" % i for i in range(200)], items=train,
               groups=["u%d" % (i % 40) for i in range(200)], times=list(range(200)))
job.save_split("test", ["te%d" % i for i in range(50)], items=test,
               groups=["v%d" % i for i in range(49)] + ["u7"], times=[150] + list(range(300, 349)))
job.save_split("val", ["im%d" % i for i in range(10)], items=list(imgs[:10]), kind="image")
job.save_split("holdout", ["ho%d" % i for i in range(10)], items=list(imgs[10:]), kind="image")
job.save_results({"test": {"accuracy": 0.5}})
"""


def test_through_a_real_job(project: Path) -> None:
    handle = submit(PROGRAM, project, name="splits")
    assert isinstance(handle, Job)
    assert handle.wait(120) == "finished", handle.log()
    run = handle.pull()
    sig = run.path / "outputs" / "splits" / "train.sig"
    # Signatures travel, not the texts.
    assert sig.is_file() and not re.search(r" w\d", sig.read_text())
    report = verify([str(run.path)], project=project)
    findings = report.by_check("leakage")
    by_pair = {tuple(f.computed["pair"]["splits"]): f for f in findings if f.verdict == "finding"}
    pair = by_pair[("test", "train")].computed["pair"]
    assert pair["overlap"] == 0
    assert pair["near_duplicates"]["text"]["examples"] == [["te0", "tr5"]]
    assert pair["groups"]["example_items"] == ["te49"]
    assert pair["temporal"]["examples"] == ["te0"]
    assert not any(
        "image" in (p.computed["pair"]["near_duplicates"] or {}) for p in by_pair.values()
    )


# ----------------------------------------------------------------------------- the bench


def test_bench_runs_at_small_n_and_the_committed_figures_meet_the_goals(tmp_path: Path) -> None:
    out = tmp_path / "leakage.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "leakage.py"), "--n", "3000", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    small = json.loads(out.read_text())
    assert small["scale"]["n"] == 3000 and small["machine"]["cpu_count"]
    for name, det in small["detection"].items():
        assert det["recall"] >= 0.95, name
    committed = json.loads((REPO / "bench" / "results" / "leakage.json").read_text())
    assert committed["scale"]["n"] >= 1_000_000
    assert committed["scale"]["check_seconds"] < committed["goals"]["check_seconds_max"] == 600
    assert committed["scale"]["cores"] <= 2
    for name, det in committed["detection"].items():
        assert det["recall"] >= committed["goals"]["recall_min"], name
    for name, clean in committed["clean"].items():
        assert clean["flagged_rate"] <= committed["goals"]["clean_flagged_max"] == 0.01, name


def test_encoded_bytes_get_a_content_hash_and_missing_items_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _declared_run(
        tmp_path,
        monkeypatch,
        {
            "train": {"ids": ["a", "b", "c"], "items": [b"\x89PNG...", None, None]},
            "test": {"ids": ["d", "e"], "items": [b"\x89PNG...", None]},
        },
    )
    assert run.split_hashes("train") == {"a": job._content_sha(b"\x89PNG...")}
    (leak,) = leakage(Context(runs=[run]))
    assert leak.computed["pair"]["renamed_same_content"] == 1  # d is a, not b, c or e
    assert leak.computed["pair"]["examples"] == ["d"]
    assert leak.computed["pair"]["near_duplicates"] is None  # nothing was signed
