"""What the checks share: the metric a comparison is about, the inputs a finding cites, the
finding builders, and the hints and formatting their disclosures use.

The metric, its direction and split come from :func:`resolve_metric`: what ``%verify`` was given,
else what the runs declared in ``verify/metric.json``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable
from typing import Any, TypeGuard

import numpy as np

from ..model import Context, Finding, RunData, flatten

#: A key one side of a diff does not have.
ABSENT = "<absent>"
_DIRECTION_WORDS = {
    "max": "max",
    "maximize": "max",
    "maximise": "max",
    "higher": "max",
    "higher_is_better": "max",
    "min": "min",
    "minimize": "min",
    "minimise": "min",
    "lower": "min",
    "lower_is_better": "min",
}

#: How many example ids a finding lists.
EXAMPLES = 5

#: The job-side calls a disclosure points to when something was not declared.
SAVE_SPLIT = "job.save_split(name, ids, items=items)"
SAVE_PREDICTIONS = "job.save_predictions(split, ids, preds, targets)"
LOG_EVAL = "job.log_eval(split, step, metrics, purpose=...)"
SAVE_OUTPUTS = "job.save_outputs(split, ids, vectors)"
SAVE_SHUFFLE = "job.save_shuffle_score(metric, real, shuffled, n)"
DECLARE_METRIC = 'job.declare_metric(name, direction, split="test", fn=None)'

#: What a declared file that cannot be read raises.
READ_ERRORS = (ValueError, OSError, TypeError, UnicodeDecodeError)


# ----------------------------------------------------------------------------- the metric


def normalize_direction(value: Any) -> str | None:
    """``"max"`` or ``"min"`` for the usual spellings (``higher_is_better``, ``minimize``...),
    else None."""
    return _DIRECTION_WORDS.get(str(value).strip().lower()) if value is not None else None


def resolve_metric(ctx: Context) -> tuple[str | None, str | None, str]:
    """(metric name, direction ``"max"``/``"min"``, split) of a comparison: what ``ctx`` was
    given, else what the runs declared in ``verify/metric.json`` (the variant's first)."""
    declared = [m for m in (run.metric for run in ctx.everything) if m]
    name = ctx.metric or next((str(m["name"]) for m in declared if m.get("name")), None)
    same = [m for m in declared if m.get("name") in (None, name)]
    direction = normalize_direction(ctx.direction) or next(
        (d for d in (normalize_direction(m.get("direction")) for m in same) if d), None
    )
    split = ctx.split or next((str(m["split"]) for m in same if m.get("split")), None) or "test"
    return name, direction, split


def metric_keys(results: dict[str, Any]) -> list[str]:
    """The numeric keys of a results.json as dotted paths (``test.accuracy``,
    ``metrics.acc.test.value``), sorted."""
    out = []
    for key, value in flatten(results).items():
        if is_number(value):
            out.append(key)
    return sorted(out)


def missing_metric_words(name: str | None, split: str, keys: list[str]) -> str:
    """``the keys it has: a, b; closest: 'accuracy'`` for a metric name results.json lacks: the
    keys that exist and the closest match among their names (difflib)."""
    names = sorted({part for key in keys for part in key.split(".")} - {split, "value", "metrics"})
    near = difflib.get_close_matches(str(name), names, n=3, cutoff=0.5) if name else []
    shown = ", ".join(keys[:12]) + (f" and {len(keys) - 12} more" if len(keys) > 12 else "")
    closest = f"; closest: {', '.join(repr(n) for n in near)}" if near else "; no close match"
    return f"the keys it has: {shown}{closest}"


# ----------------------------------------------------------------------------- inputs and findings


def input_key(run: RunData, rel: str) -> str | None:
    """The recorded input key of ``rel`` in ``run`` (None when the run has no such file)."""
    path = run.file(rel)
    return str(path.relative_to(run.path)) if path is not None else None


def read_inputs(runs: Iterable[RunData], *rels: str) -> list[dict[str, str]]:
    """``[{path, sha256}]`` of the named files of each run that exist."""
    out: list[dict[str, str]] = []
    for run in runs:
        keys = [k for k in (input_key(run, rel) for rel in rels) if k is not None]
        if keys:
            out += run.inputs(*keys)
    return out


def run_inputs(run: RunData, *rels: str) -> list[dict[str, str]]:
    """The recorded inputs among ``rels``, each looked up where a pull puts it (the run folder
    or its ``outputs/``)."""
    return run.inputs(*[key for rel in rels for key in (rel, f"outputs/{rel}")])


def ids_of(runs: Iterable[RunData]) -> list[str]:
    """The run ids of ``runs``, each once, in order."""
    return list(dict.fromkeys(run.run_id for run in runs))


def unique_runs(runs: list[RunData]) -> list[RunData]:
    """``runs`` without repeats (the same object listed twice), in order."""
    return list({id(run): run for run in runs}.values())


def finding(
    check: str,
    verdict: str,
    disclosure: str,
    runs: Iterable[RunData],
    computed: dict[str, Any],
    inputs: list[dict[str, str]],
) -> Finding:
    """A finding about ``runs``, citing ``inputs``."""
    return Finding(check, verdict, disclosure, ids_of(runs), computed=computed, inputs=inputs)


def run_finding(
    check: str,
    verdict: str,
    run: RunData,
    disclosure: str,
    computed: dict[str, Any],
    rels: Iterable[str],
) -> Finding:
    """A finding about one run, citing the files ``rels`` it read (see :func:`run_inputs`)."""
    return finding(check, verdict, disclosure, [run], computed, run_inputs(run, *rels))


def per_run(
    check: str, ctx: Context, fn: Callable[[RunData, Context], list[Finding]]
) -> list[Finding]:
    """``fn`` on every compared run; a declared file that cannot be read makes that run
    ``not_checked``, with the error."""
    out: list[Finding] = []
    for run in ctx.everything:
        try:
            out += fn(run, ctx)
        except READ_ERRORS as exc:
            error = f"{type(exc).__name__}: {exc}"
            text = (
                f"Could not read what run {run.run_id} declared ({error}); fix or re-save the file."
            )
            out.append(finding(check, "not_checked", text, [run], {"error": error}, run.inputs()))
    return out


# ----------------------------------------------------------------------------- values and words


def metric_values(runs: list[RunData], name: str | None, split: str) -> list[tuple[RunData, float]]:
    """(run, finite reported value of ``name`` on ``split``) for the runs that report one."""
    if name is None:
        return []
    out = []
    for run in runs:
        value = run.metric_value(name, split)
        if value is not None and math.isfinite(value):
            out.append((run, value))
    return out


def mean_of(values: list[float]) -> float:
    """The mean of ``values``, as a float."""
    return float(np.mean(values))


def delta_label(delta: float, direction: str | None) -> str | None:
    """``better``/``worse``/``equal`` of a variant-minus-baseline delta (None with no
    direction)."""
    if direction is None:
        return None
    if delta == 0:
        return "equal"
    return "better" if (delta > 0) == (direction == "max") else "worse"


def delta_words(delta: float, direction: str | None) -> str:
    """:func:`delta_label`, or ``higher``/``lower``/``equal`` with no direction."""
    label = delta_label(delta, direction)
    if label is not None:
        return label
    return "higher" if delta > 0 else "lower" if delta < 0 else "equal"


def fmt(value: Any) -> str:
    """A value for a disclosure: floats to 4 significant digits, the rest cut at 60 characters."""
    if isinstance(value, float):
        return f"{value:.4g}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def signed(value: float) -> str:
    """A delta with its sign, to 4 significant digits."""
    return f"{value:+.4g}"


def examples(items: Iterable[Any]) -> list[str]:
    """The first ``EXAMPLES`` of ``items`` in sorted order, as text."""
    return sorted(str(i) for i in items)[:EXAMPLES]


def is_number(value: Any) -> TypeGuard[int | float]:
    """Whether ``value`` is an int or float (a bool is not)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


# ----------------------------------------------------------------------------- keys and splits


def is_ignored(key: str, ignore: list[str]) -> bool:
    """Whether a dotted config key is one of ``ignore``, or under or ends in one."""
    return any(
        key == word or key.startswith(word + ".") or key.endswith("." + word) for word in ignore
    )


def is_seed(key: str) -> bool:
    """Whether a dotted config key is a seed."""
    return key == "seed" or key.endswith(".seed")


def is_test(split: str, ctx: Context) -> bool:
    """Whether a split is the held-out one claims are made on."""
    name = split.lower()
    return name == ctx.split.lower() or name.startswith("test")
