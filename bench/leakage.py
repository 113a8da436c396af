"""Benchmark: near-duplicate leakage from split signatures, at scale and on planted copies.

Scale: ``--n`` texts (default 1,000,000; 80 % train, 20 % test, 0.1 % of test paraphrased copies
of train items) are signed by ``job.save_split(..., items=texts)`` as a job does, then the
leakage check of ``%verify`` reads the signatures and compares the splits. It reports the time
to sign, the time to check (the goal: under 10 minutes on 2 cores), the recall of the planted
copies and the share of clean test items flagged.

Detection (at ``min(n, 5000)`` items a kind): planted near duplicates (paraphrased text,
shingle-overlapping text, images resized to half and re-encoded with JPEG-like noise, rows with
float noise and re-spelt strings) must be caught (recall >= 0.95), and clean splits of each kind
flagged at most 1 %.

Texts are words of 2 to 9 random letters drawn by Zipf's law (p ~ 1/rank); images are smooth
blobs. Writes ``bench/results/leakage.json`` (or ``--out``).

    python bench/leakage.py [--n 1000000] [--cores 2] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from _machine import machine  # noqa: E402 - the bench folder on the path

import rgt_jupyter.job as job  # noqa: E402 - needs the repo
from rgt_jupyter.verify.checks.leakage import (  # noqa: E402 - needs the repo
    IMAGE_MAX_HAMMING,
    TEXT_MIN_JACCARD,
    image_near,
    leakage,
    read_signatures,
    text_near,
)
from rgt_jupyter.verify.model import Context, RunData  # noqa: E402 - needs the repo

GOALS = {"check_seconds_max": 600, "recall_min": 0.95, "clean_flagged_max": 0.01}
_VOCAB_RNG = np.random.default_rng(12345)
VOCAB = [
    "".join(chr(97 + c) for c in _VOCAB_RNG.integers(0, 26, _VOCAB_RNG.integers(2, 10)))
    for _ in range(3000)
]
_P = 1 / np.arange(1, len(VOCAB) + 1)
_P /= _P.sum()


# ----------------------------------------------------------------------------- items


def texts(rng: np.random.Generator, n: int, words: int = 40) -> list[str]:
    """``n`` texts of ``words`` Zipf-drawn words."""
    draws = rng.choice(len(VOCAB), size=(n, words), p=_P)
    return [" ".join(VOCAB[i] for i in row) for row in draws.tolist()]


def paraphrase(rng: np.random.Generator, text: str) -> str:
    """A few words replaced, one inserted, case and punctuation changed."""
    words = text.split()
    for at in rng.choice(len(words), size=max(1, len(words) // 12), replace=False):
        words[int(at)] = VOCAB[int(rng.integers(len(VOCAB)))]
    words.insert(int(rng.integers(len(words))), "indeed")
    return (", ".join(words[:5]) + ". " + " ".join(words[5:])).upper() + "!"


def overlap(rng: np.random.Generator, text: str) -> str:
    """Most of the text, cut at characters, with new text before and after."""
    cut = len(text) // 10
    return texts(rng, 1, 3)[0] + text[cut : len(text) - cut] + texts(rng, 1, 3)[0]


def image(rng: np.random.Generator, size: int = 64) -> np.ndarray:
    """A smooth RGB image: random light and dark blobs."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = np.zeros((size, size, 3))
    for _ in range(16):
        cy, cx, s = rng.random(), rng.random(), 0.04 + 0.12 * rng.random()
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
        img += blob[..., None] * (rng.random(3) - 0.5) * 2
    img -= img.min()
    return np.clip(255 * img / img.max(), 0, 255).astype(np.uint8)


def reencoded(rng: np.random.Generator, img: np.ndarray) -> np.ndarray:
    """Resized to half by 2x2 averaging, then JPEG-like noise."""
    h, w = img.shape[0] // 2, img.shape[1] // 2
    half = img.astype(float).reshape(h, 2, w, 2, 3).mean(axis=(1, 3))
    return np.clip(np.round(half + rng.normal(0, 2.0, half.shape)), 0, 255).astype(np.uint8)


def row(rng: np.random.Generator) -> list[Any]:
    return [*(rng.normal(size=6) * 100).tolist(), f"City {int(rng.integers(50))}"]


def near_row(rng: np.random.Generator, values: list[Any]) -> list[Any]:
    noisy = [v * (1 + 1e-7 * rng.normal()) for v in values[:-1]]
    return [*noisy, "  " + str(values[-1]).lower() + " "]


# ----------------------------------------------------------------------------- runs


def _run(root: Path, name: str, train: list[Any], test: list[Any]) -> RunData:
    """A run folder whose train and test splits were declared through ``job.save_split``."""
    folder = root / name
    (folder / "outputs").mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"run_id": name}))
    os.environ["RGT_OUT"] = str(folder / "outputs")
    job.save_split("train", [f"tr{i}" for i in range(len(train))], items=train)
    job.save_split("test", [f"te{i}" for i in range(len(test))], items=test)
    return RunData(folder)


def _count(run: RunData) -> int:
    findings = leakage(Context(runs=[run]))
    return sum(
        near["count"]
        for f in findings
        for near in ((f.computed.get("pair") or {}).get("near_duplicates") or {}).values()
    )


def detection(root: Path, n: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Recall on planted near duplicates and the flagged rate of clean splits, per kind."""
    rng = np.random.default_rng(seed)
    n_train, n_test = int(n * 0.8), n - int(n * 0.8)
    planted = max(10, n_test // 10)
    kinds: dict[str, tuple[Callable[[np.random.Generator], Any], Any]] = {
        "text": (lambda r: texts(r, 1)[0], None),
        "image": (image, None),
        "row": (row, None),
    }
    twists = {
        "paraphrased_text": ("text", paraphrase),
        "overlapping_text": ("text", overlap),
        "reencoded_resized_image": ("image", reencoded),
        "near_duplicate_row": ("row", near_row),
    }
    det: dict[str, Any] = {}
    for name, (kind, twist) in twists.items():
        make = kinds[kind][0]
        train = [make(rng) for _ in range(n_train)]
        test = [twist(rng, train[i]) for i in range(planted)]
        clean_test = [make(rng) for _ in range(n_test - planted)]
        run = _run(root, name, train, test + clean_test)
        te, tr = read_signatures(run, "test"), read_signatures(run, "train")
        assert te is not None and tr is not None
        if kind == "row":
            rows = set(tr["row"][1])
            hit = {i for i, h in zip(*te["row"], strict=True) if h in rows}
        else:
            fn = text_near if kind == "text" else image_near
            hit = {te[kind][0][i] for i, _ in fn(te[kind][1], tr[kind][1])}
        planted_ids = {f"te{i}" for i in range(planted)}
        det[name] = {
            "planted": planted,
            "caught": len(hit & planted_ids),
            "recall": len(hit & planted_ids) / planted,
            "clean_flagged": len(hit - planted_ids),
            "n_train": n_train,
        }
        assert _count(run) == len(hit)
    clean: dict[str, Any] = {}
    for kind, (make, _) in kinds.items():
        run = _run(
            root,
            f"clean_{kind}",
            [make(rng) for _ in range(n_train)],
            [make(rng) for _ in range(n_test)],
        )
        flagged = _count(run)
        clean[kind] = {"n_train": n_train, "n_test": n_test, "flagged": flagged}
        clean[kind]["flagged_rate"] = flagged / n_test
    return det, clean


def scale(root: Path, n: int, seed: int) -> dict[str, Any]:
    """``n`` texts signed and checked, with planted paraphrases at 0.1 % of test."""
    rng = np.random.default_rng(seed)
    n_train = int(n * 0.8)
    n_test = n - n_train
    planted = max(1, n_test // 1000)
    t0 = time.perf_counter()
    train = texts(rng, n_train)
    test = [paraphrase(rng, train[i * 7]) for i in range(planted)] + texts(rng, n_test - planted)
    made = time.perf_counter() - t0
    t0 = time.perf_counter()
    run = _run(root, "scale", train, test)
    signed = time.perf_counter() - t0
    del train, test
    sig_bytes = sum(
        (run.path / "outputs" / "splits" / f"{s}.sig").stat().st_size for s in ("train", "test")
    )
    t0 = time.perf_counter()
    findings = leakage(Context(runs=[run]))
    checked = time.perf_counter() - t0
    (finding,) = [f for f in findings if f.verdict == "finding"]
    near = finding.computed["pair"]["near_duplicates"]["text"]
    te, tr = read_signatures(run, "test"), read_signatures(run, "train")
    assert te is not None and tr is not None
    hit = {te["text"][0][i] for i, _ in text_near(te["text"][1], tr["text"][1])}
    planted_ids = {f"te{i}" for i in range(planted)}
    return {
        "n": n,
        "n_train": n_train,
        "n_test": n_test,
        "cores": len(os.sched_getaffinity(0)),
        "generate_seconds": round(made, 2),
        "sign_seconds": round(signed, 2),
        "sign_us_per_item": round(1e6 * signed / n, 1),
        "signature_bytes": sig_bytes,
        "check_seconds": round(checked, 2),
        "flagged": near["count"],
        "planted": planted,
        "planted_recall": len(hit & planted_ids) / planted,
        "clean_flagged_rate": len(hit - planted_ids) / (n_test - planted),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="texts at scale (80/20 split)")
    parser.add_argument("--cores", type=int, default=2, help="CPUs to run on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "leakage.json")
    args = parser.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))[: args.cores]
    os.sched_setaffinity(0, cpus)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        det, clean = detection(root / "det", min(args.n, 5000), args.seed)
        big = scale(root / "scale", args.n, args.seed + 1)
    result = {
        "bench": "leakage",
        "machine": machine(),
        "settings": {
            "text_min_jaccard": TEXT_MIN_JACCARD,
            "image_max_hamming": IMAGE_MAX_HAMMING,
            "text": job.SIG_TEXT,
            "image": job.SIG_IMAGE,
            "row": job.SIG_ROW,
        },
        "goals": GOALS,
        "scale": big,
        "detection": det,
        "clean": clean,
    }
    ok = (
        big["check_seconds"] < GOALS["check_seconds_max"]
        and all(d["recall"] >= GOALS["recall_min"] for d in det.values())
        and all(c["flagged_rate"] <= GOALS["clean_flagged_max"] for c in clean.values())
    )
    result["goals_met"] = ok
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps({"scale": big, "detection": det, "clean": clean}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
