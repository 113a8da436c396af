"""H4, E7: the reported headline number recomputed from the saved per-item predictions."""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from ..model import Context, Finding, RunData
from .common import (
    DECLARE_METRIC,
    SAVE_PREDICTIONS,
    examples,
    is_number,
    metric_keys,
    missing_metric_words,
    per_run,
    run_finding,
)

#: Reported values with at least this many decimals are taken as stored at full precision.
FULL_PRECISION_DECIMALS = 10
REL_TOL = 1e-9
ABS_TOL = 1e-12
#: A stored number with this many significant digits is a float written in full (its shortest
#: text), not a rounding; its precision is float32's or float64's.
FULL_DIGITS = 15
EPS32 = 2.0**-24
EPS64 = 2.0**-53

#: The ``fn`` a declared metric may name to be recomputed from its predictions.
FNS = ("accuracy", "error_rate", "mse", "rmse", "mae")


def _decimals(value: float) -> int:
    """Decimals in the shortest text of ``value`` (0.91 → 2)."""
    try:
        exponent = Decimal(repr(value)).normalize().as_tuple().exponent
    except InvalidOperation:
        return FULL_PRECISION_DECIMALS
    return max(0, -exponent) if isinstance(exponent, int) else FULL_PRECISION_DECIMALS


def _shown(value: float) -> tuple[int, int] | None:
    """(decimals, significant digits) of the shortest text of ``value`` (None if not finite)."""
    try:
        sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    except InvalidOperation:
        return None
    if not isinstance(exponent, int):
        return None
    return max(0, -exponent), len(digits)


def _full_eps(value: float) -> float:
    """Half an ulp of a float stored in full: float32's when the value is one, else float64's."""
    return abs(value) * (EPS32 if float(np.float32(value)) == value else EPS64)


def stored_resolution(values: list[Any]) -> tuple[list[float], str]:
    """How far each stored number may be from what was computed, from the precision the column
    shows: ints are exact; floats written in full (≥ 15 significant digits anywhere in the
    column) are off by half an ulp (float32 or float64); otherwise the column was rounded to the
    most decimals it shows (whole numbers are exact), and each value is off by half a unit of that place. Also says which."""
    floats = [v for v in values if isinstance(v, float)]
    shown = [_shown(v) for v in floats]
    full = any(s is None or s[1] >= FULL_DIGITS for s in shown)
    if not floats:
        return [0.0] * len(values), "exact"
    if full:
        as32 = all(float(np.float32(v)) == v for v in floats)
        return [_full_eps(v) if isinstance(v, float) else 0.0 for v in values], (
            "float32" if as32 else "float64"
        )
    places = max(s[0] for s in shown if s is not None)
    if places == 0:
        # Whole numbers stored as floats (labels, counts) are exact, not a rounding.
        return [0.0] * len(values), "exact"
    half = 0.5 * 10.0**-places
    return [half if isinstance(v, float) else 0.0 for v in values], f"{places} decimals"


def _propagated(fn: str, rows: list[dict[str, Any]]) -> tuple[float, dict[str, str]]:
    """How far ``fn`` over ``rows`` may move from the rounding of the stored predictions and
    targets alone (first order for mse, exact bounds for mae and rmse), and each column's
    stored precision."""
    if fn in ("accuracy", "error_rate"):
        return 0.0, {}
    preds = [x for r in rows for x in _elements(r["pred"]) or []]
    targets = [x for r in rows for x in _elements(r["target"]) or []]
    raw_p = [x for r in rows for x in _raw(r["pred"])]
    raw_t = [x for r in rows for x in _raw(r["target"])]
    if len(preds) != len(targets) or len(raw_p) != len(preds) or len(raw_t) != len(targets):
        return 0.0, {}
    rp, sp = stored_resolution(raw_p)
    rt, st = stored_resolution(raw_t)
    deltas = np.asarray(rp) + np.asarray(rt)
    diffs = np.abs(np.asarray(preds) - np.asarray(targets))
    if not len(diffs):
        return 0.0, {}
    precision = {"pred": sp, "target": st}
    if fn == "mae":
        return float(deltas.mean()), precision
    bound = float((2 * diffs * deltas + deltas**2).mean())
    if fn == "mse":
        return bound, precision
    mse = float((diffs**2).mean())
    return math.sqrt(mse + bound) - math.sqrt(max(mse - bound, 0.0)), precision


def _raw(value: Any) -> list[Any]:
    """The stored numbers of a prediction or target, flattened, as stored (int or float)."""
    if isinstance(value, list):
        return [x for item in value for x in _raw(item)]
    return [value] if is_number(value) else []


def _elements(value: Any) -> list[float] | None:
    """A prediction or target as numbers (a list is flattened), or None when not numeric."""
    if is_number(value):
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


def _is_float32(value: float) -> bool:
    return float(np.float32(value)) == value


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
        return [run_finding("rederive", verdict, run, text, computed, rels)]

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
        computed["duplicate_ids"] = {"count": extra, "examples": examples(repeated)}
        out += say(
            "finding",
            f"{extra} of {len(rows)} {split} predictions repeat an id (e.g. "
            f"{', '.join(examples(repeated))}): those items are counted more than once in "
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
                f"declared items have no prediction (e.g. {', '.join(examples(missing)) or '-'}) "
                f"and {len(unknown)} predictions are for items not in it (e.g. "
                f"{', '.join(examples(unknown)) or '-'}). The reported {name} is not over the "
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
        keys = metric_keys(run.results)
        if keys:
            return out + say(
                "not_checked",
                f"results.json has no {name!r} on {split}: the declared metric name is none of "
                f"its keys ({missing_metric_words(name, split, keys)}). Declare the name "
                f"results.json uses ({DECLARE_METRIC}) or pass --metric.",
                {**computed, "results_keys": keys},
            )
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
    stored, columns = _propagated(fn, usable)
    stored *= scale
    if decimals < FULL_PRECISION_DECIMALS:
        tolerance = 0.5 * 10.0**-decimals * (1 + 1e-9) + ABS_TOL
        precision = f"{decimals} decimals"
    else:
        shown = _shown(reported / scale)
        float32 = shown is not None and shown[1] >= FULL_DIGITS and _is_float32(reported / scale)
        tolerance = max(REL_TOL * abs(reported), ABS_TOL)
        if float32:
            # float32 arithmetic over n items: a few ulps, not float64's 1e-9.
            tolerance = max(tolerance, 16 * EPS32 * abs(reported))
        precision = "full precision (float32)" if float32 else "full precision"
        if exact_fraction:
            precision += f" (the reported value is an exact fraction of n={n})"
    if stored:
        precision += f", predictions stored at {columns['pred']}, targets at {columns['target']}"
    tolerance += stored * (1 + 1e-6)
    ok = abs(value - reported) <= tolerance
    computed["tolerance"] = tolerance
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
    return per_run("rederive", ctx, _rederive_run)
