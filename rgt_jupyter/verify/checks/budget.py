"""C (equal tuning budgets) and G5 (report how many configurations were tried): an arm tuned with
more trials wins partly by search, not by method (Dodge et al. 2019). Each arm's search gives its
expected best validation score after n trials, for n = 1..its budget, so the arms can be read at
the same budget.

A run declares the search that chose its config in ``verify/search.json``::

    {"metric": "acc", "direction": "max", "split": "val",
     "trials": [{"config": {...}, "value": 0.81}, ...]}

``value`` is each trial's validation score (a trial that failed has ``"value": null`` and still
counts toward the budget). The runs of an arm that share one search (the same file content) count
it once; different searches of one arm are pooled. Every arm must declare its search, or the
budgets are not_checked.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from ..model import Context, Finding, RunData
from .common import finding, is_number, normalize_direction, read_inputs, resolve_metric
from .resample import expected_max

CHECK = "tuning_budget"
SEARCH = "verify/search.json"


def _arm_search(runs: list[RunData]) -> dict[str, Any] | None:
    """The arm's trials (every distinct declared search pooled), or None when no run of the arm
    declares one."""
    seen: set[str] = set()
    trials: list[Any] = []
    direction = None
    for run in runs:
        search = run.json(SEARCH)
        if not isinstance(search, dict) or not isinstance(search.get("trials"), list):
            continue
        key = hashlib.sha256(json.dumps(search, sort_keys=True).encode()).hexdigest()
        if key in seen:
            continue
        seen.add(key)
        trials += search["trials"]
        direction = direction or normalize_direction(search.get("direction"))
    if not seen:
        return None
    values = [
        float(t["value"])
        for t in trials
        if isinstance(t, dict) and is_number(t.get("value")) and math.isfinite(float(t["value"]))
    ]
    return {"budget": len(trials), "scored": values, "searches": len(seen), "direction": direction}


def tuning_budget(ctx: Context) -> list[Finding]:
    """Flag arms tuned with unequal budgets, with each arm's expected-max-vs-trials curve."""
    _name, direction, _split = resolve_metric(ctx)
    runs = ctx.everything

    def out(verdict: str, text: str, computed: dict[str, Any]) -> list[Finding]:
        return [finding(CHECK, verdict, text, runs, computed, read_inputs(runs, SEARCH))]

    arms = {"variant": _arm_search(ctx.runs), "baseline": _arm_search(ctx.baselines)}
    if not ctx.baselines:
        return out("not_checked", "no baseline runs: no budgets to compare", {})
    undeclared = [arm for arm, s in arms.items() if s is None]
    if undeclared:
        return out(
            "not_checked",
            f"no {SEARCH} in the {' and '.join(undeclared)} runs: the tuning budgets are not "
            "compared; declare each arm's search (every trial and its validation score)",
            {"declared": {arm: s is not None for arm, s in arms.items()}},
        )
    declared = {arm: s for arm, s in arms.items() if s is not None}
    way = direction or next((s["direction"] for s in declared.values() if s["direction"]), None)
    higher = way != "min"
    curves = {
        arm: expected_max(s["scored"], len(s["scored"]), higher) if s["scored"] else []
        for arm, s in declared.items()
    }
    budgets = {arm: s["budget"] for arm, s in declared.items()}
    common = min(len(c) for c in curves.values())
    at_common = {arm: (c[common - 1] if common else None) for arm, c in curves.items()}
    computed: dict[str, Any] = {
        "direction": way,
        "budgets": budgets,
        "scored_trials": {arm: len(s["scored"]) for arm, s in declared.items()},
        "searches": {arm: s["searches"] for arm, s in declared.items()},
        "expected_max": curves,
        "common_budget": common,
        "expected_max_at_common_budget": at_common,
        "method": "Dodge et al. 2019 expected validation performance",
    }
    best = "max" if higher else "min"
    if common:
        read = (
            f"at {common} trials each the expected {best} is variant "
            f"{at_common['variant']:.4g} vs baseline {at_common['baseline']:.4g}"
        )
    else:
        read = "an arm has no scored trial"
    if budgets["variant"] != budgets["baseline"]:
        return out(
            "finding",
            f"unequal tuning budgets: variant {budgets['variant']} trials, baseline "
            f"{budgets['baseline']}; {read}; compare at equal budgets or disclose both",
            computed,
        )
    return out("pass", f"equal tuning budgets ({budgets['variant']} trials each); {read}", computed)
