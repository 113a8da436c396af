"""G1 over several tasks, as rliable (Agarwal et al. 2021) reports them: the interquartile mean
(IQM) of every run x task score of each arm and the probability of improvement, each with a
percentile 95 % interval from a bootstrap stratified by task.

A run declares its per-task scores in ``results.json`` under ``tasks``: ``{"tasks": {task:
value}}``, or ``{"tasks": {task: {metric: value}}}`` with the compared metric named (one run per
seed, each scoring every task). Scores should be on a comparable scale across tasks (normalised,
as rliable assumes); the IQM pools them. Only the tasks every compared run reports are used.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..model import Context, Finding, RunData
from .common import finding, is_number, read_inputs, resolve_metric, signed
from .resample import task_comparison

CHECK = "tasks_iqm"
MIN_TASKS = 2


def task_scores(run: RunData, metric: str | None) -> dict[str, float]:
    """Task → finite score the run reports under ``results.json: tasks``."""
    table = run.results.get("tasks")
    out: dict[str, float] = {}
    if not isinstance(table, dict):
        return out
    for task, value in table.items():
        if isinstance(value, dict) and metric is not None:
            value = value.get(metric)
        if isinstance(value, dict) and "value" in value:
            value = value["value"]
        if is_number(value) and math.isfinite(float(value)):
            out[str(task)] = float(value)
    return out


def tasks_iqm(ctx: Context) -> list[Finding]:
    """IQM and probability of improvement across tasks, with stratified bootstrap CIs."""
    name, direction, _split = resolve_metric(ctx)
    runs = ctx.everything
    computed: dict[str, Any] = {"metric": name, "direction": direction}

    def out(verdict: str, text: str) -> list[Finding]:
        inputs = read_inputs(runs, "results.json", "verify/metric.json")
        return [finding(CHECK, verdict, text, runs, computed, inputs)]

    scores = {run.run_id: task_scores(run, name) for run in runs}
    if not any(scores.values()):
        return out("not_checked", 'no run reports per-task scores (results.json "tasks")')
    if not ctx.baselines or len(ctx.runs) < 2 or len(ctx.baselines) < 2:
        return out("not_checked", "per-task scores need ≥2 runs in each arm to compare")
    tasks = sorted(set.intersection(*(set(s) for s in scores.values())))
    computed["tasks"] = tasks
    if len(tasks) < MIN_TASKS:
        return out("not_checked", f"the runs share {len(tasks)} task(s): need {MIN_TASKS}")

    def matrix(arm: list[RunData]) -> np.ndarray:
        return np.array([[scores[r.run_id][t] for t in tasks] for r in arm])

    stats = task_comparison(
        matrix(ctx.runs), matrix(ctx.baselines), higher_is_better=direction != "min"
    )
    computed.update(stats)
    p, (p_lo, p_hi) = stats["probability_of_improvement"], stats["probability_of_improvement_ci95"]
    d_lo, d_hi = stats["iqm_diff_ci95"]
    text = (
        f"IQM over {len(tasks)} tasks: variant {stats['iqm_variant']:.4g} vs baseline "
        f"{stats['iqm_baseline']:.4g} ({signed(stats['iqm_diff'])}, 95 % CI [{d_lo:.4g}, "
        f"{d_hi:.4g}]); P(variant better) {p:.2f} [{p_lo:.2f}, {p_hi:.2f}] "
        "(stratified bootstrap)"
    )
    if direction is None:
        computed["note"] = "no direction declared: improvement read as higher"
    if p_lo > 0.5 or p_hi < 0.5:
        return out("effect", f"effect across tasks: {text}")
    return out("noise", f"within run-to-run noise across tasks: {text}")
