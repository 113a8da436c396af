"""A0: the compared metric has a direction (else deltas cannot be called better or worse), and
the runs agree on it."""

from __future__ import annotations

from typing import Any

from ..model import Context, Finding
from .common import (
    delta_label,
    delta_words,
    finding,
    mean_of,
    metric_keys,
    metric_values,
    missing_metric_words,
    normalize_direction,
    read_inputs,
    resolve_metric,
    signed,
)


def metric_direction(ctx: Context) -> list[Finding]:
    """A0: the compared metric has a direction (else deltas cannot be called better or worse),
    and the runs agree on it."""
    name, direction, split = resolve_metric(ctx)
    runs = ctx.everything
    inputs = read_inputs(runs, "verify/metric.json", "results.json")
    declared: dict[str, Any] = {}
    for run in runs:
        meta = run.metric
        if meta and meta.get("name") in (None, name) and meta.get("direction") is not None:
            declared[run.run_id] = meta["direction"]
    given = normalize_direction(ctx.direction)
    computed: dict[str, Any] = {
        "metric": name,
        "split": split,
        "direction": direction,
        "source": "given" if given else "declared" if direction else None,
        "declared": declared,
    }
    var = [v for _, v in metric_values(ctx.runs, name, split)]
    base = [v for _, v in metric_values(ctx.baselines, name, split)]
    delta_text = ""
    if var and base:
        delta = mean_of(var) - mean_of(base)
        computed.update(
            variant_mean=mean_of(var),
            baseline_mean=mean_of(base),
            delta=delta,
            label=delta_label(delta, direction),
        )
        delta_text = f"; variant vs baseline {signed(delta)} ({delta_words(delta, direction)})"

    def out(verdict: str, text: str) -> list[Finding]:
        return [finding("metric_direction", verdict, text, runs, computed, inputs)]

    if name is None:
        return out(
            "inconclusive",
            "no metric named: nothing can be called better or worse; declare it with "
            "job.declare_metric(name, direction) or pass metric= to %verify",
        )
    normalized = {rid: normalize_direction(d) for rid, d in declared.items()}
    distinct = sorted({d for d in normalized.values() if d})
    if len(distinct) > 1:
        listing = ", ".join(f"{rid}: {d}" for rid, d in normalized.items())
        return out(
            "bug",
            f"the runs declare different directions for {name} ({listing}): one of them is "
            "wrong; fix the declaration before comparing",
        )
    if given and distinct and distinct[0] != given:
        return out(
            "bug",
            f"the direction given ({given}) contradicts the one the runs declare for {name} "
            f"({distinct[0]}): fix the declaration or the argument",
        )
    unknown = sorted({str(d) for rid, d in declared.items() if normalized[rid] is None})
    if direction is None:
        extra = f" (unrecognised: {', '.join(unknown)})" if unknown else ""
        return out(
            "inconclusive",
            f"no direction for {name}{extra}: deltas cannot be called better or worse; declare "
            f"it with job.declare_metric(name, direction){delta_text}",
        )
    keys = sorted({k for run in runs for k in metric_keys(run.results)})
    if not var and not base and keys:
        computed["results_keys"] = keys
        return out(
            "inconclusive",
            f"no run's results.json has {name!r} on {split}, so nothing is compared "
            f"({missing_metric_words(name, split, keys)}); declare the name results.json uses "
            "with job.declare_metric or pass --metric",
        )
    words = "higher" if direction == "max" else "lower"
    return out("pass", f"{name} on {split}: {words} is better ({direction}){delta_text}")
