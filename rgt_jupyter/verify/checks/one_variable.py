"""A1: each variant run differs from its baseline in the declared keys and nothing else (config,
code, commit, environment, hardware)."""

from __future__ import annotations

import difflib
from typing import Any

from ..model import Context, Finding, RunData
from .common import ABSENT, finding, fmt, is_ignored, is_seed, read_inputs, unique_runs

#: A code change moves the code hash and the commit together: declaring any of these covers all.
_CODE_WORDS = ("code", "code_hash", "git", "git.commit", "git.dirty")
_CODE_KEYS = ("code_hash", "git.commit", "git.dirty")


def _gpu(hardware: dict[str, Any]) -> Any:
    """The GPUs of a run: ``hardware.gpu`` when recorded, else the names and drivers in the
    nvidia-smi query, else torch's device names (None when unknown)."""
    if hardware.get("gpu") is not None:
        return hardware["gpu"]
    smi = hardware.get("nvidia_smi")
    if isinstance(smi, dict) and isinstance(smi.get("stdout"), str):
        gpus = []
        for line in smi["stdout"].splitlines():
            fields = [f.strip() for f in line.split(",")]
            if fields and fields[0]:
                driver = fields[3] if len(fields) > 3 else "?"
                gpus.append(f"{fields[0]} (driver {driver})")
        return sorted(gpus)
    torch = hardware.get("torch")
    if isinstance(torch, dict) and isinstance(torch.get("devices"), list):
        return sorted(str(d) for d in torch["devices"])
    return [] if smi is None and "nvidia_smi" in hardware else None


def _provenance(run: RunData) -> dict[str, Any]:
    """The diffed provenance of a run as dotted keys; None marks what was not recorded."""
    prov = run.provenance
    git: dict[str, Any] = prov["git"] if isinstance(prov.get("git"), dict) else {}
    hardware: dict[str, Any] = prov["hardware"] if isinstance(prov.get("hardware"), dict) else {}
    out: dict[str, Any] = {
        "code_hash": prov.get("code_hash"),
        "git.commit": git.get("commit"),
        "git.dirty": git.get("dirty"),
        "python": prov.get("python"),
        "hardware.platform": hardware.get("platform"),
        "hardware.gpu": _gpu(hardware),
    }
    env = prov.get("env_lock")
    if isinstance(env, dict):
        out.update({f"env_lock.{k}": v for k, v in env.items()})
    else:
        out["env_lock"] = None
    return out


def _covers(declared: str, key: str) -> bool:
    if declared in _CODE_WORDS and key in _CODE_KEYS:
        return True
    return key == declared or key.startswith(declared + ".")


def _diff_pair(
    ctx: Context, variant: RunData, baseline: RunData, seed_free: bool
) -> tuple[dict[str, tuple[Any, Any]], list[str], dict[str, Any] | None]:
    """(differences key → (variant, baseline), keys unknown for one of them, the seed pair when
    it differs but is left to the seed check)."""
    diff: dict[str, tuple[Any, Any]] = {}
    unknown: list[str] = []
    seeds: dict[str, Any] | None = None
    cv = {k: v for k, v in variant.config.items() if not is_ignored(k, ctx.ignore)}
    cb = {k: v for k, v in baseline.config.items() if not is_ignored(k, ctx.ignore)}
    if not variant.config or not baseline.config:
        # A config saved for one run only would show every key as changed: unknown, not a diff.
        unknown.append("config")
        cv, cb = {}, {}
    for key in sorted(set(cv) | set(cb)):
        a, b = cv.get(key, ABSENT), cb.get(key, ABSENT)
        if a != b:
            diff[key] = (a, b)
    if "seed" not in cv and "seed" not in cb:
        if variant.seed is None or baseline.seed is None:
            unknown.append("seed")
        elif variant.seed != baseline.seed:
            diff["seed"] = (variant.seed, baseline.seed)
    if seed_free:
        moved = {k: v for k, v in diff.items() if is_seed(k)}
        if moved:
            seeds = {k: {"variant": a, "baseline": b} for k, (a, b) in moved.items()}
            diff = {k: v for k, v in diff.items() if k not in moved}
    pv, pb = _provenance(variant), _provenance(baseline)
    for key in sorted(set(pv) | set(pb)):
        a, b = pv.get(key, ABSENT), pb.get(key, ABSENT)
        if key.startswith("env_lock.") and (
            pv.get("env_lock", 0) is None or pb.get("env_lock", 0) is None
        ):
            continue
        if a is None or b is None:
            unknown.append(key)
        elif a != b:
            diff[key] = (a, b)
    return diff, unknown, seeds


def _both(key: str, values: tuple[Any, Any]) -> str:
    return f"{key} (variant {fmt(values[0])}, baseline {fmt(values[1])})"


def one_variable(ctx: Context) -> list[Finding]:
    """A1: each variant run differs from its baseline in the declared keys and nothing else
    (config, code, commit, environment, hardware); seeds are paired where they match up."""
    check = "one_variable"
    rels = ("run.json", "config.json", "verify/changed.json")
    every = sorted({k for run in ctx.runs for k in (run.changed or [])})
    declared = list(ctx.changed) or every
    if not ctx.runs or not ctx.baselines:
        what = "variant" if not ctx.runs else "baseline"
        return [
            finding(
                check,
                "not_checked",
                f"no {what} runs: nothing to diff; pass the {what} runs to %verify to check "
                "that only the declared key changed",
                ctx.everything,
                {"declared": declared},
                read_inputs(ctx.everything, *rels),
            )
        ]
    seed_free = "seed" not in declared and (len(ctx.runs) > 1 or len(ctx.baselines) > 1)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    members: dict[tuple[str, str], list[RunData]] = {}
    for variant in ctx.runs:
        paired = [b for b in ctx.baselines if variant.seed is not None and b.seed == variant.seed]
        # What this run declared (or what %verify was told): never another run's declaration.
        mine = list(ctx.changed) or list(variant.changed or [])
        for baseline in paired or ctx.baselines[:1]:
            diff, unknown, seeds = _diff_pair(ctx, variant, baseline, seed_free)
            known = _known_keys(variant, baseline)
            no_such = {d: _close(d, known) for d in mine if not _exists(d, known)}
            wanted = [d for d in mine if d not in no_such]
            extra = [k for k in diff if not any(_covers(d, k) for d in wanted)]
            unapplied = [d for d in wanted if not any(_covers(d, k) for k in diff)]
            no_config = "config" in unknown
            if no_config:
                unapplied = [d for d in unapplied if any(_covers(d, k) for k in _CODE_KEYS)]
            verdict, text = _one_variable_verdict(diff, wanted, extra, unapplied, no_config)
            if no_such:
                verdict, text = _no_such_key(no_such, verdict, text)
            if seeds:
                text += "; seeds are not paired (left to the seed-noise check)"
            key = (verdict, text)
            groups.setdefault(key, []).append(
                {
                    "variant": variant.run_id,
                    "baseline": baseline.run_id,
                    "diff": {k: {"variant": a, "baseline": b} for k, (a, b) in diff.items()},
                    "extra": extra,
                    "not_applied": unapplied,
                    "no_such_key": no_such,
                    "unknown": unknown,
                    "seeds": seeds,
                    "paired_by_seed": bool(paired),
                }
            )
            members.setdefault(key, []).extend([variant, baseline])
    findings = []
    for (verdict, text), pairs in groups.items():
        runs = members[(verdict, text)]
        computed = {"declared": declared, "ignore": list(ctx.ignore), "pairs": pairs}
        findings.append(
            finding(check, verdict, text, runs, computed, read_inputs(unique_runs(runs), *rels))
        )
    return findings


def _known_keys(variant: RunData, baseline: RunData) -> list[str]:
    """Every key a declaration may name for this pair: config keys (and their parents),
    provenance keys, the seed and the code words."""
    keys = set(variant.config) | set(baseline.config) | set(_provenance(variant))
    keys |= set(_provenance(baseline)) | {"seed", *_CODE_WORDS}
    for key in list(keys):
        parts = key.split(".")
        keys |= {".".join(parts[:i]) for i in range(1, len(parts))}
    return sorted(keys)


def _exists(declared: str, known: list[str]) -> bool:
    return declared in known or any(_covers(declared, k) for k in known)


def _close(declared: str, known: list[str]) -> list[str]:
    return difflib.get_close_matches(declared, known, n=3, cutoff=0.6)


def _no_such_key(no_such: dict[str, list[str]], verdict: str, text: str) -> tuple[str, str]:
    """The verdict once declared keys that are in neither run are said as such: a typo is not
    an unapplied change, and what the pair shows cannot be read as the ablation (inconclusive,
    unless it is a bug anyway)."""
    listing = "; ".join(
        f"{key!r}" + (f" (did you mean {', '.join(repr(c) for c in near)}?)" if near else "")
        for key, near in no_such.items()
    )
    said = (
        f"no such key: {listing} is declared changed but is a key of neither run's config or "
        "provenance; fix the name in --changed or job.declare_changed"
    )
    return ("bug" if verdict == "bug" else "inconclusive"), f"{said}; {text}"


def _one_variable_verdict(
    diff: dict[str, tuple[Any, Any]],
    declared: list[str],
    extra: list[str],
    unapplied: list[str],
    no_config: bool,
) -> tuple[str, str]:
    if no_config and not diff:
        return (
            "inconclusive",
            "no config saved for both runs and the provenance is identical: whether the "
            "ablation applied cannot be told; save the config with job.save_config",
        )
    if not diff and not declared:
        # A run beside a baseline of the same config is a control, not an ablation.
        return (
            "pass",
            "config and provenance are identical to the baseline and no key was declared "
            "changed: a control pair (a rerun of the same config)",
        )
    if not diff:
        return (
            "bug",
            f"the ablation never applied: config and provenance are identical to the baseline "
            f"although {', '.join(declared)} was declared; check that the change reaches the run "
            "(config passed, code pushed)",
        )
    if not declared:
        if len(diff) == 1:
            key = next(iter(diff))
            return (
                "inconclusive",
                f"only {_both(key, diff[key])} differs, but no key was declared changed; "
                f"declare it (job.declare_changed([{key!r}]) or changed=) to make it the ablation",
            )
        listing = "; ".join(_both(k, v) for k, v in diff.items())
        return (
            "inconclusive",
            f"{len(diff)} things differ and none was declared changed: {listing}; declare the "
            "intended key, and rerun with only it changed if the rest was not meant",
        )
    parts = []
    if extra:
        listing = "; ".join(_both(k, diff[k]) for k in extra)
        parts.append(f"confounded: besides the declared change, it also differs in {listing}")
    if unapplied:
        listing = ", ".join(unapplied)
        parts.append(f"declared but not applied: {listing} has the same value as the baseline")
    if parts:
        return (
            "bug",
            "; ".join(parts) + "; rerun with only the declared key changed (or declare the others)",
        )
    listing = "; ".join(_both(k, v) for k, v in diff.items())
    return "pass", f"only the declared change differs from the baseline: {listing}"
