"""B8: the test split used to select (early stopping, checkpoints, tuning) or looked at more
than once."""

from __future__ import annotations

from typing import Any

from ..model import Context, Finding, RunData
from .common import LOG_EVAL, is_number, is_test, per_run, run_finding

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
    has_count = is_number(count)
    if evals is None and not has_count and sel_split is None:
        return [
            run_finding(
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
    on_test = [r for r in selecting if is_test(str(r.get("split", "")), ctx)]
    looks = [
        r
        for r in records
        if is_test(str(r.get("split", "")), ctx) and _purpose(r) not in SELECTION_PURPOSES
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
            run_finding(
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
            run_finding(
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
            run_finding(
                "test_selection",
                "finding",
                run,
                f"results.json records test_evaluations = {count}: the test split was looked at "
                "more than once. Report one test evaluation of the model selected on val.",
                computed,
                rels,
            )
        )
    if isinstance(sel_split, str) and is_test(sel_split, ctx):
        out.append(
            run_finding(
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
    return [run_finding("test_selection", "pass", run, text, computed, rels)]


def test_selection(ctx: Context) -> list[Finding]:
    """B8: the test split used for early stopping, checkpoint choice or tuning, evaluated more
    than once, or named as the selection split in results.json."""
    return per_run("test_selection", ctx, _test_selection_run)


# Its name starts with "test": keep pytest from collecting it where a test module imports it.
test_selection.__test__ = False  # type: ignore[attr-defined]
