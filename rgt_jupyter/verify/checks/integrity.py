"""Integrity checks: is the number what it claims to be? Each reads what a job declared (see
:mod:`..model`) and returns, for every run of the variant and of the baseline, at least one
finding: ``pass``, ``finding`` or ``not_checked`` (``collapse`` says ``bug`` or
``inconclusive`` when the outputs are near-constant).

- :func:`leakage`: splits that share items, by id or by content under another name, and items
  ingested twice under names that differ only in case.
- :func:`test_selection`: the test split used to select (early stopping, checkpoints, tuning)
  or looked at more than once.
- :func:`collapse`: near-identical outputs for distinct inputs, one dominant prediction, or a
  score on shuffled inputs equal to the real one.
- :func:`rederive`: the reported headline number recomputed from the saved predictions.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from ..model import Context, Finding, RunData

#: How many example ids a finding lists.
EXAMPLES = 5

#: Mean off-diagonal output cosine at or above which outputs are collapsed, and suspect.
COLLAPSED_COSINE = 0.99
SUSPECT_COSINE = 0.95
#: Share of all predictions taken by one value at or above which predictions are degenerate,
#: and the fewest predictions that share is judged on.
DOMINANT_SHARE = 0.95
MIN_PREDICTIONS = 10
#: Real and shuffled scores this close are the same score.
EQUAL_SCORES = 1e-9
#: Without a standard error, real within this fraction of shuffled is "the same".
RELATIVE_SAME = 0.01
#: Real-minus-shuffled within this many standard errors is indistinguishable (``bug``), and
#: within the second one not clearly apart (``inconclusive``).
SAME_SE = 1.0
APART_SE = 1.96
#: Reported values with at least this many decimals are taken as stored at full precision.
FULL_PRECISION_DECIMALS = 10
REL_TOL = 1e-9
ABS_TOL = 1e-12

#: Evaluation purposes that select something (a checkpoint, a stopping step, a setting).
SELECTION_PURPOSES = frozenset(
    {
        "early_stopping",
        "checkpoint_selection",
        "tuning",
        "selection",
        "model_selection",
        "hyperparameter_search",
        "hparam_search",
        "threshold",
        "threshold_selection",
    }
)
#: Metric-name parts that mean a score is not a proportion even when it lies in [0, 1].
NOT_PROPORTION = ("mse", "mae", "rmse", "loss", "nll", "psnr", "ssim", "lpips", "fid", "r2", "corr")
FNS = ("accuracy", "error_rate", "mse", "rmse", "mae")

SAVE_SPLIT = "job.save_split(name, ids, hashes=None)"
SAVE_PREDICTIONS = "job.save_predictions(split, ids, preds, targets)"
LOG_EVAL = "job.log_eval(split, step, metrics, purpose=...)"
SAVE_OUTPUTS = "job.save_outputs(split, ids, vectors)"
SAVE_SHUFFLE = "job.save_shuffle_score(metric, real, shuffled, n)"
DECLARE_METRIC = 'job.declare_metric(name, direction, split="test", fn=None)'

#: What a declared file that cannot be read raises.
READ_ERRORS = (ValueError, OSError, TypeError, UnicodeDecodeError)


# ----------------------------------------------------------------------------- helpers


def _inputs(run: RunData, *rels: str) -> list[dict[str, str]]:
    """The recorded inputs among ``rels``, each looked up where a pull puts it (the run folder
    or its ``outputs/``)."""
    return run.inputs(*[key for rel in rels for key in (rel, f"outputs/{rel}")])


def _names(run: RunData, sub: str, suffix: str) -> list[str]:
    """The split names of the ``<sub>/<split><suffix>`` files a run holds."""
    found: set[str] = set()
    for base in (run.path / sub, run.path / "outputs" / sub):
        if base.is_dir():
            found |= {p.name[: -len(suffix)] for p in base.glob(f"*{suffix}") if p.is_file()}
    return sorted(found)


def _examples(items: Iterable[Any]) -> list[str]:
    return sorted(str(i) for i in items)[:EXAMPLES]


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f} %" if whole else "n/a"


def _frac(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _is_test(split: str, ctx: Context) -> bool:
    """Whether a split is the held-out one claims are made on."""
    name = split.lower()
    return name == ctx.split.lower() or name.startswith("test")


def _finding(
    check: str,
    verdict: str,
    run: RunData,
    disclosure: str,
    computed: dict[str, Any],
    rels: Iterable[str],
) -> Finding:
    return Finding(
        check=check,
        verdict=verdict,
        disclosure=disclosure,
        run_ids=[run.run_id],
        computed=computed,
        inputs=_inputs(run, *rels),
    )


def _per_run(
    check: str, ctx: Context, fn: Callable[[RunData, Context], list[Finding]]
) -> list[Finding]:
    """``fn`` on every compared run; a declared file that cannot be read makes that run
    ``not_checked``, with the error."""
    out: list[Finding] = []
    for run in ctx.everything:
        try:
            out += fn(run, ctx)
        except READ_ERRORS as exc:
            out.append(
                Finding(
                    check=check,
                    verdict="not_checked",
                    disclosure=(
                        f"Could not read what run {run.run_id} declared "
                        f"({type(exc).__name__}: {exc}); fix or re-save the file."
                    ),
                    run_ids=[run.run_id],
                    computed={"error": f"{type(exc).__name__}: {exc}"},
                    inputs=run.inputs(),
                )
            )
    return out


# ----------------------------------------------------------------------------- leakage


def _fold(item: str) -> str:
    """An id as a case-insensitive file system sees it."""
    return os.path.normcase(item).casefold()


def _duplicates(split: str, ids: list[str]) -> dict[str, Any] | None:
    """Ids of one split that name the same item once case is folded (``Train/a.png`` and
    ``train/a.png``), or repeat exactly."""
    groups: dict[str, list[str]] = {}
    for item in ids:
        groups.setdefault(_fold(item), []).append(item)
    clashes = {key: names for key, names in groups.items() if len(names) > 1}
    if not clashes:
        return None
    extra = sum(len(names) - 1 for names in clashes.values())
    return {
        "split": split,
        "n_ids": len(ids),
        "n_unique_casefolded": len(groups),
        "n_duplicates": extra,
        "fraction": extra / len(ids),
        "examples": [sorted(names) for _, names in sorted(clashes.items())[:EXAMPLES]],
    }


def _pair(
    a: str,
    b: str,
    ids: dict[str, list[str]],
    hashes: dict[str, dict[str, str] | None],
    ctx: Context,
) -> dict[str, Any]:
    """What splits ``a`` and ``b`` share, measured on the focus split (the test split when one
    of them is, else the smaller)."""
    if _is_test(b, ctx) and not _is_test(a, ctx):
        a, b = b, a
    elif not _is_test(a, ctx) and len(set(ids[b])) < len(set(ids[a])):
        a, b = b, a
    focus, other = a, b
    f_ids, o_ids = set(ids[focus]), set(ids[other])
    f_hash, o_hash = hashes[focus], hashes[other]
    shared = f_ids & o_ids
    out: dict[str, Any] = {"splits": [focus, other], "fraction_of": focus}
    if f_hash is not None and o_hash is not None:
        known = {i for i in shared if i in f_hash and i in o_hash}
        different = {i for i in known if f_hash[i] != o_hash[i]}
        by_id = shared - different
        o_digests = {o_hash[i] for i in o_ids if i in o_hash}
        by_content = {i for i in f_ids if i in f_hash and f_hash[i] in o_digests} - by_id
        out["content_compared"] = True
        out["same_name_same_content"] = len(shared & known) - len(different)
        out["same_name_unknown_content"] = len(shared - known)
        out["renamed_same_content"] = len(by_content)
        if different:
            out["same_names_different_content"] = {
                "count": len(different),
                "note": "same names, different content: not a leak",
                "examples": _examples(different),
            }
    else:
        # Without hashes, ids equal once case is folded name one file on a case-insensitive
        # file system, so they count as shared too.
        o_folded = {_fold(i) for i in o_ids}
        case_only = {i for i in f_ids - shared if _fold(i) in o_folded}
        by_id, by_content = shared | case_only, set()
        out["content_compared"] = False
        out["case_only_matches"] = len(case_only)
    leaked = by_id | by_content
    out["shared_names"] = len(shared)
    out["overlap"] = len(leaked)
    out["n_focus"] = len(f_ids)
    out["fraction"] = _frac(len(leaked), len(f_ids))
    out["examples"] = _examples(leaked)
    return out


def _leak_text(pair: dict[str, Any], ctx: Context) -> str:
    focus, other = pair["splits"]
    how = []
    if pair["content_compared"]:
        same = pair["overlap"] - pair["renamed_same_content"]
        if same:
            how.append(f"{same} by name")
        if pair["renamed_same_content"]:
            how.append(f"{pair['renamed_same_content']} by identical content under another name")
    elif pair["case_only_matches"]:
        how.append(f"{pair['case_only_matches']} by names that differ only in case")
    text = (
        f"{pair['overlap']} of {pair['n_focus']} {focus} items "
        f"({_pct(pair['overlap'], pair['n_focus'])}) also appear in {other}"
        + (f" ({', '.join(how)})" if how else "")
        + f", e.g. {', '.join(pair['examples'])}."
    )
    if _is_test(focus, ctx):
        text += f" Every claim on the {focus} split is affected."
    elif {focus.lower(), other.lower()} & {"val", "valid", "validation", "dev"}:
        text += (
            " The validation split is not disjoint from training, so anything selected on it "
            "is unreliable."
        )
    text += " Make the splits disjoint, then retrain and re-evaluate."
    if not pair["content_compared"]:
        text += f" Content was not compared (give hashes to {SAVE_SPLIT})."
    return text


def _leakage_run(run: RunData, ctx: Context) -> list[Finding]:
    names = run.splits()
    rels = [f"splits/{s}.ids" for s in names] + [f"splits/{s}.sha256" for s in names]
    ids = {s: run.split_ids(s) or [] for s in names}
    hashes = {s: run.split_hashes(s) for s in names}
    out: list[Finding] = []
    for split in names:
        dup = _duplicates(split, ids[split])
        if dup:
            out.append(
                _finding(
                    "leakage",
                    "finding",
                    run,
                    f"{dup['n_duplicates']} of {dup['n_ids']} ids of split {split} name items "
                    f"already in it once case is folded (e.g. {' / '.join(dup['examples'][0])}): "
                    "the same item was ingested more than once, as a case-insensitive file "
                    "system does with Train/ and train/. De-duplicate the split and re-evaluate.",
                    {"duplicate_ingestion": dup},
                    [f"splits/{split}.ids"],
                )
            )
    if len(names) < 2:
        out.append(
            _finding(
                "leakage",
                "not_checked",
                run,
                (
                    f"Only split {names[0]} was declared, so it could not be compared with another."
                    if names
                    else "No splits were declared, so leakage between them was not checked."
                )
                + f" Declare every split (train, val, test) with {SAVE_SPLIT}; "
                "with hashes, leaks under another name are found too.",
                {"splits": names},
                rels,
            )
        )
        return out
    pairs = [_pair(a, b, ids, hashes, ctx) for i, a in enumerate(names) for b in names[i + 1 :]]
    for pair in pairs:
        if pair["overlap"]:
            out.append(
                _finding("leakage", "finding", run, _leak_text(pair, ctx), {"pair": pair}, rels)
            )
    if out:
        return out
    compared = all(p["content_compared"] for p in pairs)
    notes = [
        f"{p['splits'][0]}/{p['splits'][1]}: {p['same_names_different_content']['count']} "
        "same names, different content (not a leak)"
        for p in pairs
        if "same_names_different_content" in p
    ]
    text = f"Splits {', '.join(names)} share no items (compared by id" + (
        " and by content hash)." if compared else ", case-folded)."
    )
    if notes:
        text += " " + "; ".join(notes) + "."
    if not compared:
        text += f" Content was not compared: declare hashes with {SAVE_SPLIT}."
    computed = {
        "splits": {s: {"n": len(ids[s]), "hashes": hashes[s] is not None} for s in names},
        "pairs": pairs,
        "content_compared": compared,
    }
    return [_finding("leakage", "pass", run, text, computed, rels)]


def leakage(ctx: Context) -> list[Finding]:
    """B1, B2: items shared between declared splits, by id and by content hash regardless of
    name (same name with different content is not a leak), and ids of one split that collide
    once case is folded."""
    return _per_run("leakage", ctx, _leakage_run)


# ----------------------------------------------------------------------------- test selection


def _purpose(record: dict[str, Any]) -> str:
    value = record.get("purpose")
    if not isinstance(value, str) or not value.strip():
        return "report"
    return value.strip().lower().replace("-", "_").replace(" ", "_")


def _test_selection_run(run: RunData, ctx: Context) -> list[Finding]:
    evals = run.evals
    results = run.results
    rels = ["verify/evals.jsonl", "results.json"]
    count: Any = results.get("test_evaluations")
    selection = results.get("selection")
    sel_split = selection.get("split") if isinstance(selection, dict) else None
    has_count = isinstance(count, int | float) and not isinstance(count, bool)
    if evals is None and not has_count and sel_split is None:
        return [
            _finding(
                "test_selection",
                "not_checked",
                run,
                "No evaluations were logged and results.json records neither the selection "
                "split nor test_evaluations, so whether the test split was used to select was "
                f"not checked. Log every evaluation with {LOG_EVAL}.",
                {},
                rels,
            )
        ]
    out: list[Finding] = []
    records = evals or []
    selecting = [r for r in records if _purpose(r) in SELECTION_PURPOSES]
    on_test = [r for r in selecting if _is_test(str(r.get("split", "")), ctx)]
    looks = [
        r
        for r in records
        if _is_test(str(r.get("split", "")), ctx) and _purpose(r) not in SELECTION_PURPOSES
    ]
    steps = {r.get("step") for r in looks if r.get("step") is not None}
    n_looks = len(steps) + sum(1 for r in looks if r.get("step") is None)
    computed: dict[str, Any] = {
        "n_evaluations": len(records),
        "selection_splits": sorted({str(r.get("split")) for r in selecting}),
        "selection_purposes": sorted({_purpose(r) for r in selecting}),
        "test_selection_evaluations": len(on_test),
        "test_report_evaluations": n_looks,
        "results_test_evaluations": count if has_count else None,
        "results_selection_split": sel_split,
    }
    if on_test:
        purposes = sorted({_purpose(r) for r in on_test})
        splits = sorted({str(r.get("split")) for r in on_test})
        out.append(
            _finding(
                "test_selection",
                "finding",
                run,
                f"The test split was used to select ({', '.join(purposes)} on "
                f"{', '.join(splits)}, {len(on_test)} evaluations): the reported test number "
                "is optimistic and every claim on that split is affected. Select on val and "
                "report a fresh test evaluation of the val-selected model.",
                computed,
                rels,
            )
        )
    if n_looks > 1:
        out.append(
            _finding(
                "test_selection",
                "finding",
                run,
                f"The test split was evaluated {n_looks} times (at different steps): looking at "
                "test repeatedly lets it steer choices. Report one test evaluation of the "
                "model selected on val.",
                computed,
                rels,
            )
        )
    if has_count and count > 1:
        out.append(
            _finding(
                "test_selection",
                "finding",
                run,
                f"results.json records test_evaluations = {count}: the test split was looked at "
                "more than once. Report one test evaluation of the model selected on val.",
                computed,
                rels,
            )
        )
    if isinstance(sel_split, str) and _is_test(sel_split, ctx):
        out.append(
            _finding(
                "test_selection",
                "finding",
                run,
                f"results.json says the model was selected on {sel_split}: the test split was "
                "used to select, so every claim on it is affected. Select on val and report a "
                "fresh test evaluation of the val-selected model.",
                computed,
                rels,
            )
        )
    if out:
        return out
    if evals is None:
        looked = f"results.json records {count} test evaluation(s)" if has_count else ""
    else:
        looked = f"the test split was evaluated {n_looks} time(s)"
    if selecting or sel_split is not None:
        used = set(computed["selection_splits"]) | ({str(sel_split)} if sel_split else set())
        text = f"Selection used {', '.join(sorted(used))} only" + (
            f"; {looked}." if looked else "."
        )
    else:
        text = (
            "No selecting evaluation was logged"
            + (f"; {looked}." if looked else ".")
            + f" Log early stopping and checkpoint choices with {LOG_EVAL} so their split is "
            "checked too."
        )
    return [_finding("test_selection", "pass", run, text, computed, rels)]


def test_selection(ctx: Context) -> list[Finding]:
    """B8: the test split used for early stopping, checkpoint choice or tuning, evaluated more
    than once, or named as the selection split in results.json."""
    return _per_run("test_selection", ctx, _test_selection_run)


# Its name starts with "test": keep pytest from collecting it where a test module imports it.
test_selection.__test__ = False  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- collapse


def _mean_cosine(vectors: np.ndarray) -> tuple[float | None, int]:
    """Mean cosine over distinct pairs of non-zero rows, and the number of zero rows. Uses
    ``(|Σu|² - n) / (n(n-1))`` over unit rows ``u``, so no n×n matrix is built."""
    norms = np.linalg.norm(vectors, axis=1)
    nonzero = norms > 0
    units = vectors[nonzero] / norms[nonzero, None]
    n = len(units)
    if n < 2:
        return None, int((~nonzero).sum())
    total = units.sum(axis=0)
    value = (float(total @ total) - n) / (n * (n - 1))
    return min(1.0, max(-1.0, value)), int((~nonzero).sum())


def _collapse_outputs(run: RunData, split: str) -> Finding:
    rel = f"verify/outputs/{split}.json"
    data = run.outputs(split) or {}
    raw_ids = data.get("ids")
    try:
        vectors = np.asarray(data.get("vectors"), dtype=float)
    except (TypeError, ValueError):
        vectors = np.empty((0, 0))
    if vectors.ndim == 1:
        vectors = vectors[:, None]
    if vectors.ndim != 2 or len(vectors) < 2 or not np.isfinite(vectors).all():
        return _finding(
            "collapse",
            "not_checked",
            run,
            f"The outputs saved for {split} are not at least two finite vectors of one length, "
            f"so collapse was not checked. Save them with {SAVE_OUTPUTS}.",
            {"split": split, "shape": list(vectors.shape)},
            [rel],
        )
    if isinstance(raw_ids, list) and len(raw_ids) == len(vectors):
        first: dict[str, int] = {}
        for index, item in enumerate(raw_ids):
            first.setdefault(str(item), index)
        vectors = vectors[sorted(first.values())]
    n = len(vectors)
    unique = len(np.unique(vectors, axis=0))
    # The cosine of two scalars is only their sign, so one-number outputs are judged on how
    # many distinct values they take.
    cosine, zero_rows = _mean_cosine(vectors) if vectors.shape[1] > 1 else (None, 0)
    spread = float(vectors.std(axis=0).mean())
    centre = float(np.linalg.norm(vectors.mean(axis=0)))
    computed: dict[str, Any] = {
        "split": split,
        "n_items": n,
        "dim": int(vectors.shape[1]),
        "unique_rows": unique,
        "mean_offdiag_cosine": cosine,
        "zero_rows": zero_rows,
        "mean_feature_std": spread,
        "norm_of_mean_vector": centre,
        "thresholds": {"collapsed": COLLAPSED_COSINE, "suspect": SUSPECT_COSINE},
    }
    if unique == 1:
        return _finding(
            "collapse",
            "bug",
            run,
            f"Collapsed: all {n} distinct {split} inputs give the same output vector. The model "
            "ignores its input; check the input scale and normalisation first (per-feature "
            "standardisation), then the loss.",
            computed,
            [rel],
        )
    if cosine is not None and cosine >= COLLAPSED_COSINE:
        return _finding(
            "collapse",
            "bug",
            run,
            f"Collapsed: near-constant outputs, mean cosine {cosine:.4f} between outputs of "
            f"{n} distinct {split} inputs (≥ {COLLAPSED_COSINE}). Any score from this model "
            "does not come from reading its input; check input scale and normalisation first.",
            computed,
            [rel],
        )
    if cosine is not None and cosine >= SUSPECT_COSINE:
        return _finding(
            "collapse",
            "inconclusive",
            run,
            f"Suspect: mean cosine {cosine:.4f} between outputs of {n} distinct {split} inputs "
            f"({SUSPECT_COSINE}–{COLLAPSED_COSINE}). Compare the real-input score with a "
            f"shuffled-input one ({SAVE_SHUFFLE}) before trusting the number.",
            computed,
            [rel],
        )
    shown = "n/a" if cosine is None else f"{cosine:.4f}"
    return _finding(
        "collapse",
        "pass",
        run,
        f"Outputs of {n} distinct {split} inputs differ (mean cosine {shown}, {unique} unique).",
        computed,
        [rel],
    )


def _key(value: Any) -> Hashable:
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, Hashable) else repr(value)


def _collapse_predictions(run: RunData, split: str) -> Finding:
    rel = f"predictions/{split}.jsonl"
    rows = [r for r in run.predictions(split) or [] if "pred" in r]
    preds = Counter(_key(r["pred"]) for r in rows)
    n = len(rows)
    computed: dict[str, Any] = {"split": split, "n": n, "unique_predictions": len(preds)}
    if n < MIN_PREDICTIONS:
        return _finding(
            "collapse",
            "not_checked",
            run,
            f"Only {n} predictions were saved for {split}; at least {MIN_PREDICTIONS} are needed "
            f"to judge whether one prediction dominates. Save them with {SAVE_PREDICTIONS}.",
            computed,
            [rel],
        )
    top, top_n = preds.most_common(1)[0]
    share = top_n / n
    targets = Counter(_key(r["target"]) for r in rows if "target" in r)
    target_share = targets[top] / sum(targets.values()) if targets else None
    computed.update(
        {
            "top_prediction": str(top),
            "top_share": share,
            "target_share_of_top": target_share,
            "threshold": DOMINANT_SHARE,
        }
    )
    if len(preds) == 1:
        return _finding(
            "collapse",
            "bug",
            run,
            f"Degenerate predictions: all {n} {split} predictions are {top!s}. The model "
            "ignores its input; no score from it measures the method.",
            computed,
            [rel],
        )
    if share >= DOMINANT_SHARE:
        if target_share is not None and target_share >= DOMINANT_SHARE:
            return _finding(
                "collapse",
                "inconclusive",
                run,
                f"{share:.1%} of {n} {split} predictions are {top!s}, and so are "
                f"{target_share:.1%} of the targets: predicting the majority always would "
                "score the same. Report per-class recall or a balanced metric.",
                computed,
                [rel],
            )
        return _finding(
            "collapse",
            "bug",
            run,
            f"Degenerate predictions: {share:.1%} of {n} {split} predictions are {top!s} "
            f"(≥ {DOMINANT_SHARE:.0%}). The model predicts one class almost regardless of "
            "its input; check the loss, class balance and input normalisation.",
            computed,
            [rel],
        )
    return _finding(
        "collapse",
        "pass",
        run,
        f"{len(preds)} distinct predictions over {n} {split} items; the most common is "
        f"{share:.1%} of them.",
        computed,
        [rel],
    )


def _is_proportion(metric: str, real: float, shuffled: float) -> bool:
    name = metric.lower()
    return (
        0.0 <= real <= 1.0
        and 0.0 <= shuffled <= 1.0
        and not any(part in name for part in NOT_PROPORTION)
    )


def _collapse_shuffle(run: RunData) -> Finding:
    rel = "verify/shuffle.json"
    data = run.shuffle or {}
    metric = str(data.get("metric") or "score")
    real: Any = data.get("real")
    shuffled: Any = data.get("shuffled")
    n = data.get("n")
    numbers = all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        for v in (real, shuffled)
    )
    if not numbers:
        return _finding(
            "collapse",
            "not_checked",
            run,
            f"verify/shuffle.json lacks finite real and shuffled scores. Save them with "
            f"{SAVE_SHUFFLE}.",
            {"shuffle": data},
            [rel],
        )
    real, shuffled = float(real), float(shuffled)
    gap = abs(real - shuffled)
    count: int | None = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
    computed: dict[str, Any] = {
        "metric": metric,
        "real": real,
        "shuffled": shuffled,
        "n": n,
        "difference": real - shuffled,
    }
    if real == shuffled or gap <= EQUAL_SCORES:
        return _finding(
            "collapse",
            "bug",
            run,
            f"The outputs ignore the input: {metric} on real inputs ({real!r}) equals {metric} "
            f"on inputs shuffled across items ({shuffled!r}). Check that the model receives "
            "its own item's input (batching, masking, conditioning) before reading any score.",
            computed,
            [rel],
        )
    if count is not None and _is_proportion(metric, real, shuffled):
        p = min(max((real + shuffled) / 2, 0.5 / count), 1 - 0.5 / count)
        se = math.sqrt(2 * p * (1 - p) / count)
        z = gap / se
        computed.update({"se_difference": se, "z": z, "rule": "binomial standard error"})
        if z < SAME_SE:
            return _finding(
                "collapse",
                "bug",
                run,
                f"The outputs ignore the input: {metric} real {real:.4g} vs shuffled "
                f"{shuffled:.4g} differ by {z:.2f} standard errors at n={n}, within noise. "
                "The model does not measurably read its own input.",
                computed,
                [rel],
            )
        if z < APART_SE:
            return _finding(
                "collapse",
                "inconclusive",
                run,
                f"{metric} real {real:.4g} vs shuffled {shuffled:.4g}: {z:.2f} standard errors "
                f"apart at n={n}, not clearly above the shuffled-input score. Evaluate more "
                "items or compare per item.",
                computed,
                [rel],
            )
    else:
        scale = max(abs(real), abs(shuffled))
        computed.update({"relative_difference": gap / scale, "rule": "relative 1 %"})
        if gap <= RELATIVE_SAME * scale:
            return _finding(
                "collapse",
                "bug",
                run,
                f"The outputs ignore the input: {metric} real {real:.6g} vs shuffled "
                f"{shuffled:.6g} are within {RELATIVE_SAME:.0%} of each other.",
                computed,
                [rel],
            )
    return _finding(
        "collapse",
        "pass",
        run,
        f"{metric} on real inputs ({real:.4g}) differs from shuffled inputs ({shuffled:.4g}): "
        "the outputs depend on the input.",
        computed,
        [rel],
    )


def _collapse_run(run: RunData, ctx: Context) -> list[Finding]:
    out = [_collapse_outputs(run, s) for s in _names(run, "verify/outputs", ".json")]
    out += [_collapse_predictions(run, s) for s in _names(run, "predictions", ".jsonl")]
    if run.shuffle is not None:
        out.append(_collapse_shuffle(run))
    if not out:
        out.append(
            _finding(
                "collapse",
                "not_checked",
                run,
                "No outputs, predictions or shuffled-input score were saved, so collapse was not "
                f"checked. Save some with {SAVE_OUTPUTS}, {SAVE_PREDICTIONS} or {SAVE_SHUFFLE}.",
                {},
                [],
            )
        )
    return out


def collapse(ctx: Context) -> list[Finding]:
    """F1, F2, F5: near-identical outputs for distinct inputs (mean off-diagonal cosine),
    one prediction for (almost) every item, and a real-input score equal to the
    shuffled-input one."""
    return _per_run("collapse", ctx, _collapse_run)


# ----------------------------------------------------------------------------- re-derive


def _decimals(value: float) -> int:
    """Decimals in the shortest text of ``value`` (0.91 → 2)."""
    try:
        exponent = Decimal(repr(value)).normalize().as_tuple().exponent
    except InvalidOperation:
        return FULL_PRECISION_DECIMALS
    return max(0, -exponent) if isinstance(exponent, int) else FULL_PRECISION_DECIMALS


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _elements(value: Any) -> list[float] | None:
    """A prediction or target as numbers (a list is flattened), or None when not numeric."""
    if _number(value):
        return [float(value)]
    if isinstance(value, list):
        out: list[float] = []
        for item in value:
            inner = _elements(item)
            if inner is None:
                return None
            out += inner
        return out
    return None


def _recompute(fn: str, rows: list[dict[str, Any]]) -> tuple[float | None, str | None]:
    """The metric ``fn`` over ``rows``, or why it cannot be computed."""
    if fn in ("accuracy", "error_rate"):
        acc = sum(1 for r in rows if r["pred"] == r["target"]) / len(rows)
        return (acc if fn == "accuracy" else 1.0 - acc), None
    diffs: list[float] = []
    for r in rows:
        pred, target = _elements(r["pred"]), _elements(r["target"])
        if pred is None or target is None:
            return None, f"a prediction or target is not numeric (id {r.get('id')!r})"
        if len(pred) != len(target):
            return None, f"prediction and target differ in length (id {r.get('id')!r})"
        diffs += [p - t for p, t in zip(pred, target, strict=True)]
    if not diffs:
        return None, "predictions and targets are empty lists"
    values = np.asarray(diffs)
    if fn == "mae":
        return float(np.abs(values).mean()), None
    mse = float((values**2).mean())
    return (mse if fn == "mse" else math.sqrt(mse)), None


def _reported_entry(run: RunData, name: str, split: str) -> dict[str, Any]:
    """``metrics.<name>.<split>`` of results.json when it is a dict (it may carry n and scale)."""
    metrics = run.results.get("metrics")
    entry = metrics.get(name) if isinstance(metrics, dict) else None
    entry = entry.get(split) if isinstance(entry, dict) else None
    return entry if isinstance(entry, dict) else {}


def _rederive_run(run: RunData, ctx: Context) -> list[Finding]:
    declared = run.metric or {}
    name = declared.get("name") or ctx.metric
    split = str(declared.get("split") or ctx.split)
    fn = declared.get("fn")
    pred_rel = f"predictions/{split}.jsonl"
    rels = ["verify/metric.json", pred_rel, "results.json", f"splits/{split}.ids"]

    def say(verdict: str, text: str, computed: dict[str, Any]) -> list[Finding]:
        return [_finding("rederive", verdict, run, text, computed, rels)]

    if not name or fn not in FNS:
        why = "no metric was declared" if not name else f"its fn is {fn!r}"
        return say(
            "not_checked",
            f"Not re-derivable: {why}. Declare the headline metric and how to compute it from "
            f"predictions with {DECLARE_METRIC} (fn: {', '.join(FNS)}).",
            {"metric": name, "fn": fn},
        )
    rows = run.predictions(split)
    if rows is None:
        return say(
            "not_checked",
            f"Not re-derivable: no per-item predictions were saved for {split}, so the reported "
            f"{name} cannot be recomputed. Save them with {SAVE_PREDICTIONS}.",
            {"metric": name, "fn": fn, "split": split},
        )
    reported = run.metric_value(name, split)
    entry = _reported_entry(run, name, split)
    usable = [r for r in rows if "pred" in r and "target" in r]
    computed: dict[str, Any] = {
        "metric": name,
        "fn": fn,
        "split": split,
        "reported": reported,
        "n_rows": len(rows),
        "n_usable": len(usable),
    }
    if not usable:
        return say(
            "finding",
            f"{split} has {len(rows)} usable predictions (n = 0), so the reported {name} "
            f"({reported}) rests on nothing: an empty result is not a null result. Check that "
            "the evaluation ran over the split and saved its predictions.",
            computed,
        )
    out: list[Finding] = []
    if len(usable) < len(rows):
        lacking = len(rows) - len(usable)
        computed["rows_missing_pred_or_target"] = lacking
        out += say(
            "finding",
            f"{lacking} of {len(rows)} {split} prediction rows lack a pred or a target, so "
            f"{name} can be recomputed over the other {len(usable)} only. Save every item with "
            f"{SAVE_PREDICTIONS}.",
            dict(computed),
        )
    ids = [str(r["id"]) for r in rows if "id" in r]
    repeated = {i: c for i, c in Counter(ids).items() if c > 1}
    if repeated:
        extra = sum(c - 1 for c in repeated.values())
        computed["duplicate_ids"] = {"count": extra, "examples": _examples(repeated)}
        out += say(
            "finding",
            f"{extra} of {len(rows)} {split} predictions repeat an id (e.g. "
            f"{', '.join(_examples(repeated))}): those items are counted more than once in "
            f"{name}. Save one prediction per item.",
            dict(computed),
        )
    declared_ids = run.split_ids(split)
    if declared_ids is not None:
        have, want = set(ids), set(declared_ids)
        missing, unknown = want - have, have - want
        computed["split_coverage"] = {
            "declared": len(want),
            "predicted": len(have),
            "missing": len(missing),
            "not_in_split": len(unknown),
            "rows_without_id": len(rows) - len(ids),
        }
        if missing or unknown or len(ids) < len(rows):
            out += say(
                "finding",
                f"The {split} predictions are not the declared {split} split: {len(missing)} "
                f"declared items have no prediction (e.g. {', '.join(_examples(missing)) or '-'}) "
                f"and {len(unknown)} predictions are for items not in it (e.g. "
                f"{', '.join(_examples(unknown)) or '-'}). The reported {name} is not over the "
                "declared split; evaluate on exactly its items.",
                dict(computed),
            )
    value, reason = _recompute(fn, usable)
    if value is None:
        return out + say(
            "not_checked",
            f"Not re-derivable with fn={fn}: {reason}. Declare a fn that fits the predictions with "
            f"{DECLARE_METRIC}.",
            computed,
        )
    scale = 100.0 if str(entry.get("scale", "")).lower() == "percent" else 1.0
    value *= scale
    n = len(usable)
    computed.update({"recomputed": value, "n": n, "scale": scale})
    if entry.get("n") is not None and entry.get("n") != n:
        computed["reported_n"] = entry.get("n")
        out += say(
            "finding",
            f"results.json gives n = {entry.get('n')} for {name} on {split}, but {n} "
            "predictions were saved: the number and its predictions describe different sets.",
            dict(computed),
        )
    if reported is None:
        return out + say(
            "finding",
            f"results.json reports no {name} on {split}, though its {n} predictions give "
            f"{value:.6g}: an empty result is not a null result. Record the value in results.json.",
            computed,
        )
    declared_decimals = declared.get("decimals")
    decimals = (
        declared_decimals
        if isinstance(declared_decimals, int) and not isinstance(declared_decimals, bool)
        else _decimals(reported)
    )
    # A count-based metric reported as an exact fraction of n (1.0, 0.5 with n = 50) is taken
    # at full precision: it is a value the predictions could give exactly, not a rounding.
    share = reported / scale * n
    exact_fraction = fn in ("accuracy", "error_rate") and abs(share - round(share)) <= 1e-9 * n
    if exact_fraction and not isinstance(declared_decimals, int):
        decimals = FULL_PRECISION_DECIMALS
    if decimals < FULL_PRECISION_DECIMALS:
        tolerance = 0.5 * 10.0**-decimals * (1 + 1e-9) + ABS_TOL
        ok = abs(value - reported) <= tolerance
        precision = f"{decimals} decimals"
    else:
        ok = math.isclose(value, reported, rel_tol=REL_TOL, abs_tol=ABS_TOL)
        precision = "full precision"
        if exact_fraction:
            precision += f" (the reported value is an exact fraction of n={n})"
    computed.update({"compared_at": precision, "difference": value - reported})
    if not ok:
        out += say(
            "finding",
            f"The reported {name} ({reported!r}) is not what its predictions give: "
            f"{value:.10g} (n={n}, fn={fn}, compared at {precision}). Re-derive the number "
            "from the saved predictions and find where the two diverge (another checkpoint, "
            "split or post-processing); store reported values unrounded.",
            computed,
        )
    elif not out:
        out += say(
            "pass",
            f"The reported {name} ({reported!r}) is what its {n} {split} predictions give "
            f"({value:.6g}, at {precision}).",
            computed,
        )
    return out


def rederive(ctx: Context) -> list[Finding]:
    """H4, E7: the headline metric recomputed from the saved per-item predictions with the
    declared ``fn`` and compared with results.json at the precision it was reported; empty
    predictions, repeated ids and predictions over other items than the split are findings."""
    return _per_run("rederive", ctx, _rederive_run)
