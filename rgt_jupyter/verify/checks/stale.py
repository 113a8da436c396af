"""A6: numbers that are byte-identical across runs that should differ, and checkpoints that do
not belong to the run that reports them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..model import Context, Finding, RunData
from .common import (
    ABSENT,
    finding,
    fmt,
    input_key,
    is_ignored,
    is_number,
    is_seed,
    read_inputs,
    resolve_metric,
    unique_runs,
)

#: Manifest files that are checkpoints (besides those under ``checkpoints/``).
_CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors")
#: results.json keys that give a run's last step.
_STEP_KEYS = ("last_step", "step", "global_step", "steps")


def _results_sha(run: RunData) -> str | None:
    key = input_key(run, "results.json")
    return run.used.get(key) if key is not None and run.results else None


def _should_differ(a: RunData, b: RunData, ignore: list[str]) -> list[str]:
    """Why two runs should report different numbers (different seeds, different config)."""
    reasons = []
    if a.seed is not None and b.seed is not None and a.seed != b.seed:
        reasons.append(f"seed {a.seed} vs {b.seed}")
    ca = {k: v for k, v in a.config.items() if not is_ignored(k, ignore) and not is_seed(k)}
    cb = {k: v for k, v in b.config.items() if not is_ignored(k, ignore) and not is_seed(k)}
    keys = sorted(k for k in set(ca) | set(cb) if ca.get(k, ABSENT) != cb.get(k, ABSENT))
    if keys and a.config and b.config:
        reasons.append("config " + ", ".join(keys))
    return reasons


def is_rerun(a: RunData, b: RunData, ignore: list[str]) -> bool:
    """Whether ``b`` is a deterministic rerun of ``a``: the same config, code hash and seed (all
    recorded), so the same numbers and checkpoint bytes are expected, not stale."""
    if a.seed is None or a.seed != b.seed:
        return False
    code = a.provenance.get("code_hash")
    if code is None or code != b.provenance.get("code_hash"):
        return False
    ca = {k: v for k, v in a.config.items() if not is_ignored(k, ignore)}
    cb = {k: v for k, v in b.config.items() if not is_ignored(k, ignore)}
    return ca == cb


def _pairs(runs: list[RunData]) -> Iterable[tuple[RunData, RunData]]:
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            yield a, b


def _involved(runs: list[RunData], rows: list[dict[str, Any]]) -> list[RunData]:
    """The runs named in ``rows``, in the order of ``runs``."""
    return [r for r in runs if any(r.run_id in row["runs"] for row in rows)]


def _listing(rows: list[dict[str, Any]]) -> str:
    """``a and b (why): value`` for each pair in ``rows``."""
    return "; ".join(
        f"{' and '.join(row['runs'])} ({', '.join(row['why'])}): {fmt(row['value'])}"
        for row in rows
    )


def _stale_results(ctx: Context, runs: list[RunData], name: str | None, split: str) -> Finding:
    check = "stale_artifact"
    inputs = read_inputs(runs, "run.json", "config.json", "results.json")
    sha = {run.run_id: _results_sha(run) for run in runs}
    value = {run.run_id: run.metric_value(name, split) if name else None for run in runs}
    computed: dict[str, Any] = {
        "part": "results",
        "metric": name,
        "split": split,
        "results_sha256": sha,
        "values": value,
    }
    same_file: list[dict[str, Any]] = []
    same_value: list[dict[str, Any]] = []
    compared = 0
    reruns: list[list[str]] = []
    for a, b in _pairs(runs):
        if is_rerun(a, b, ctx.ignore):
            reruns.append([a.run_id, b.run_id])
        why = _should_differ(a, b, ctx.ignore)
        if not why or sha[a.run_id] is None or sha[b.run_id] is None:
            continue
        compared += 1
        row = {"runs": [a.run_id, b.run_id], "why": why, "value": value[a.run_id]}
        if sha[a.run_id] == sha[b.run_id]:
            same_file.append(row)
        elif value[a.run_id] is not None and value[a.run_id] == value[b.run_id]:
            same_value.append(row)
    computed.update(
        compared_pairs=compared,
        same_results=same_file,
        same_value=same_value,
        deterministic_reruns=reruns,
    )
    rerun_note = (
        f"; {len(reruns)} pair(s) are deterministic reruns (same config, code and seed: the "
        "same numbers are expected)"
        if reruns
        else ""
    )

    def out(verdict: str, text: str, involved: list[RunData]) -> Finding:
        return finding(check, verdict, text, involved, computed, inputs)

    if same_file:
        return out(
            "bug",
            f"stale: the same number from runs that should differ "
            f"(a results file or checkpoint reused?): identical results.json in "
            f"{_listing(same_file)}; rerun into fresh output folders and check what each run "
            "loaded",
            _involved(runs, same_file),
        )
    if same_value:
        return out(
            "inconclusive",
            f"the same {name} value from runs that should "
            f"differ, though their results files differ: {_listing(same_value)}; a coincidence "
            "on a coarse metric or a reused checkpoint: check which checkpoint each "
            "evaluated",
            _involved(runs, same_value),
        )
    if compared == 0 and reruns:
        return out(
            "pass",
            "no two runs should differ (by seed or config)" + rerun_note,
            runs,
        )
    if compared == 0:
        return out(
            "not_checked",
            "no two runs that should differ (by seed or config) "
            "both have a results.json: nothing to compare for stale numbers",
            runs,
        )
    return out(
        "pass",
        f"{compared} pair(s) of runs that should differ report different results{rerun_note}",
        runs,
    )


def _checkpoint_files(run: RunData) -> dict[str, str]:
    """sha256 → path of the checkpoint files in the run's manifest."""
    out = {}
    for entry in run.manifest.get("files") or []:
        path, digest = str(entry.get("path", "")), entry.get("sha256")
        is_ckpt = path.startswith("checkpoints/") or "/checkpoints/" in path
        if digest and (is_ckpt or path.endswith(_CHECKPOINT_SUFFIXES)):
            out[str(digest).lower()] = path
    return out


def _declared_checkpoint(run: RunData) -> dict[str, Any] | None:
    declared = run.json("verify/checkpoint.json")
    for value in (declared, run.results.get("checkpoint"), (run.metric or {}).get("checkpoint")):
        if isinstance(value, dict):
            return value
        if isinstance(value, str):
            return {"path": value}
    return None


def _last_step(run: RunData) -> int | None:
    steps = [run.results.get(k) for k in _STEP_KEYS]
    steps += [e.get("step") for e in run.evals or []]
    known = [int(s) for s in steps if is_number(s)]
    return max(known) if known else None


def _manifest_entry(run: RunData, path: str) -> dict[str, Any] | None:
    path = path.removeprefix("./")
    for entry in run.manifest.get("files") or []:
        rel = str(entry.get("path", ""))
        if rel in (path, f"outputs/{path}") or rel.endswith("/" + path):
            return dict(entry)
    return None


def _checkpoint_problems(
    run: RunData, runs: list[RunData], declared: dict[str, Any], ignore: list[str]
) -> tuple[list[tuple[str, list[RunData]]], str | None, str | None]:
    """(problems as (text, runs involved), sha256 of the declared checkpoint, why unchecked)."""
    problems: list[tuple[str, list[RunData]]] = []
    path = declared.get("path")
    digest = str(declared["sha256"]).lower() if declared.get("sha256") else None
    entry = _manifest_entry(run, str(path)) if path else None
    if entry is not None and digest and str(entry.get("sha256", "")).lower() != digest:
        problems.append(
            (
                f"results.json of {run.run_id} names {path} with sha256 "
                f"{digest[:12]}, but the pulled file has {str(entry['sha256'])[:12]}: the "
                "number was not computed from this file",
                [run],
            )
        )
    digest = digest or (str(entry["sha256"]).lower() if entry and entry.get("sha256") else None)
    step, last = declared.get("step"), _last_step(run)
    if isinstance(step, int | float) and last is not None and step > last:
        problems.append(
            (
                f"the checkpoint {run.run_id} evaluated is from step {fmt(step)}, past "
                f"the run's last step {last}: it came from another, longer run",
                [run],
            )
        )
    if digest is None:
        return (
            problems,
            None,
            "the checkpoint is named without a sha256 and is not in manifest.json",
        )
    # A deterministic rerun writes the same bytes: holding them is expected, not a copy.
    owners = [
        o
        for o in runs
        if o is not run and digest in _checkpoint_files(o) and not is_rerun(run, o, ignore)
    ]
    if owners:
        names = ", ".join(o.run_id for o in owners)
        problems.append(
            (
                f"the checkpoint {run.run_id} evaluated ({digest[:12]}) is a checkpoint "
                f"file of {names}: it was copied from another run",
                [run, *owners],
            )
        )
    own = _checkpoint_files(run)
    shas = {str(e.get("sha256", "")).lower() for e in run.manifest.get("files") or []}
    if digest not in shas:
        if not own:
            return problems, digest, "no checkpoint of this run was pulled to compare against"
        problems.append(
            (
                f"the checkpoint {run.run_id} evaluated ({digest[:12]}) is none of its "
                f"{len(own)} checkpoint file(s): pull it, or find where it came from",
                [run],
            )
        )
    return problems, digest, None


def _stale_checkpoints(ctx: Context, runs: list[RunData]) -> list[Finding]:
    check = "stale_artifact"
    rels = ("manifest.json", "results.json", "verify/metric.json", "verify/evals.jsonl")
    problems: list[tuple[str, list[RunData]]] = []
    declared_shas: set[str] = set()
    verified: list[str] = []
    unchecked: dict[str, str] = {}
    for run in runs:
        declared = _declared_checkpoint(run)
        if not run.manifest.get("files"):
            unchecked[run.run_id] = "no manifest.json"
            continue
        if declared is None:
            continue
        found, digest, why = _checkpoint_problems(run, runs, declared, ctx.ignore)
        problems += found
        if digest:
            declared_shas.add(digest)
        if why:
            unchecked[run.run_id] = why
        elif not found:
            verified.append(run.run_id)
    shared = 0
    for a, b in _pairs(runs):
        if not _should_differ(a, b, ctx.ignore):
            continue
        common = set(_checkpoint_files(a)) & set(_checkpoint_files(b))
        shared += len(common)
        for digest in sorted(common - declared_shas):
            path = _checkpoint_files(a)[digest]
            problems.append(
                (
                    f"{a.run_id} and {b.run_id} should differ but hold the same "
                    f"checkpoint bytes ({path}, {digest[:12]}): one was copied from the "
                    "other",
                    [a, b],
                )
            )
    computed: dict[str, Any] = {
        "part": "checkpoints",
        "verified": verified,
        "unchecked": unchecked,
        "shared_checkpoint_files": shared,
    }
    if problems:
        return [
            finding(
                check,
                "bug",
                text,
                involved,
                {**computed, "problem": text},
                read_inputs(unique_runs(involved), *rels),
            )
            for text, involved in problems
        ]
    inputs = read_inputs(runs, *rels)
    if verified:
        more = f"; not checked: {', '.join(unchecked)}" if unchecked else ""
        return [
            finding(
                check,
                "pass",
                f"the checkpoint each of {', '.join(verified)} evaluated is its own{more}",
                runs,
                computed,
                inputs,
            )
        ]
    if unchecked:
        why = "; ".join(f"{rid}: {text}" for rid, text in unchecked.items())
        text = f"checkpoints not checked ({why}); no two runs share checkpoint bytes"
    else:
        text = (
            "no checkpoint named in results.json (results['checkpoint'] = {path, sha256, step}): "
            "which weights produced the number is not checked; no two runs share checkpoint bytes"
        )
    return [finding(check, "not_checked", text, runs, computed, inputs)]


def stale_artifact(ctx: Context) -> list[Finding]:
    """A6: numbers that are byte-identical across runs that should differ, and checkpoints that
    do not belong to the run that reports them."""
    runs = unique_runs(ctx.everything)
    name, _, split = resolve_metric(ctx)
    if len(runs) < 2 and not any(_declared_checkpoint(r) for r in runs):
        return [
            finding(
                "stale_artifact",
                "not_checked",
                "one run and no checkpoint named: "
                "nothing to compare for stale numbers or checkpoints",
                runs,
                {"metric": name, "split": split},
                read_inputs(runs, "results.json"),
            )
        ]
    return [_stale_results(ctx, runs, name, split), *_stale_checkpoints(ctx, runs)]
