"""The checks that compare runs: metric direction (A0), one-variable diff (A1), seed noise (A4 and
G1, G2, G6, G7) and stale artifacts (A6).

Each returns at least one finding, a ``pass`` or ``not_checked`` one included. The metric, its
direction and split come from :func:`resolve_metric`: what ``%verify`` was given, else what the
runs declared in ``verify/metric.json``.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..model import Context, Finding, RunData

#: Significance level, power of the minimum detectable effect, and the bootstrap's resamples and
#: seed (fixed, so a verdict is reproducible).
ALPHA = 0.05
POWER = 0.8
BOOTSTRAP_RESAMPLES = 10_000
PERMUTATION_RESAMPLES = 9_999
RNG_SEED = 0

_ABSENT = "<absent>"
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
#: A code change moves the code hash and the commit together: declaring any of these covers all.
_CODE_WORDS = ("code", "code_hash", "git", "git.commit", "git.dirty")
_CODE_KEYS = ("code_hash", "git.commit", "git.dirty")
_CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors")
_STEP_KEYS = ("last_step", "step", "global_step", "steps")
_METRIC_FILES = ("run.json", "results.json", "verify/metric.json")


# ----------------------------------------------------------------------------- shared helpers


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


def _key(run: RunData, rel: str) -> str | None:
    """The recorded input key of ``rel`` in ``run`` (None when the run has no such file)."""
    path = run.file(rel)
    return str(path.relative_to(run.path)) if path is not None else None


def _inputs(runs: Iterable[RunData], *rels: str) -> list[dict[str, str]]:
    """``[{path, sha256}]`` of the named files of each run that exist."""
    out: list[dict[str, str]] = []
    for run in runs:
        keys = [k for k in (_key(run, rel) for rel in rels) if k is not None]
        if keys:
            out += run.inputs(*keys)
    return out


def _ids(runs: Iterable[RunData]) -> list[str]:
    return list(dict.fromkeys(run.run_id for run in runs))


def _values(runs: list[RunData], name: str | None, split: str) -> list[tuple[RunData, float]]:
    """(run, finite reported value of ``name`` on ``split``) for the runs that report one."""
    if name is None:
        return []
    out = []
    for run in runs:
        value = run.metric_value(name, split)
        if value is not None and math.isfinite(value):
            out.append((run, value))
    return out


def _num(value: Any) -> float | None:
    """A JSON-safe float (None for nan and infinities)."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _signed(value: float) -> str:
    return f"{value:+.4g}"


def _label(delta: float, direction: str | None) -> str | None:
    """``better``/``worse``/``equal`` of a variant-minus-baseline delta (None with no
    direction)."""
    if direction is None:
        return None
    if delta == 0:
        return "equal"
    return "better" if (delta > 0) == (direction == "max") else "worse"


def _label_words(delta: float, direction: str | None) -> str:
    label = _label(delta, direction)
    if label is not None:
        return label
    return "higher" if delta > 0 else "lower" if delta < 0 else "equal"


def _mean(values: list[float]) -> float:
    return float(np.mean(values))


def _std(values: list[float]) -> float | None:
    return float(np.std(values, ddof=1)) if len(values) > 1 else None


def _arm(pairs: list[tuple[RunData, float]]) -> dict[str, Any]:
    values = [v for _, v in pairs]
    return {
        "values": {run.run_id: v for run, v in pairs},
        "seeds": {run.run_id: run.seed for run, _ in pairs},
        "n": len(values),
        "mean": _mean(values) if values else None,
        "std": _std(values),
    }


def _finding(
    check: str,
    verdict: str,
    disclosure: str,
    runs: Iterable[RunData],
    computed: dict[str, Any],
    inputs: list[dict[str, str]],
) -> Finding:
    return Finding(check, verdict, disclosure, _ids(runs), computed=computed, inputs=inputs)


# ----------------------------------------------------------------------------- A0 direction


def metric_direction(ctx: Context) -> list[Finding]:
    """A0: the compared metric has a direction (else deltas cannot be called better or worse),
    and the runs agree on it."""
    name, direction, split = resolve_metric(ctx)
    runs = ctx.everything
    inputs = _inputs(runs, "verify/metric.json", "results.json")
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
    var = [v for _, v in _values(ctx.runs, name, split)]
    base = [v for _, v in _values(ctx.baselines, name, split)]
    delta_text = ""
    if var and base:
        delta = _mean(var) - _mean(base)
        computed.update(
            variant_mean=_mean(var),
            baseline_mean=_mean(base),
            delta=delta,
            label=_label(delta, direction),
        )
        delta_text = f"; variant vs baseline {_signed(delta)} ({_label_words(delta, direction)})"

    def out(verdict: str, text: str) -> list[Finding]:
        return [_finding("metric_direction", verdict, text, runs, computed, inputs)]

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
    words = "higher" if direction == "max" else "lower"
    return out("pass", f"{name} on {split}: {words} is better ({direction}){delta_text}")


# ----------------------------------------------------------------------------- A1 one variable


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


def _ignored(key: str, ignore: list[str]) -> bool:
    return any(
        key == word or key.startswith(word + ".") or key.endswith("." + word) for word in ignore
    )


def _is_seed(key: str) -> bool:
    return key == "seed" or key.endswith(".seed")


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
    cv = {k: v for k, v in variant.config.items() if not _ignored(k, ctx.ignore)}
    cb = {k: v for k, v in baseline.config.items() if not _ignored(k, ctx.ignore)}
    if not variant.config or not baseline.config:
        # A config saved for one run only would show every key as changed: unknown, not a diff.
        unknown.append("config")
        cv, cb = {}, {}
    for key in sorted(set(cv) | set(cb)):
        a, b = cv.get(key, _ABSENT), cb.get(key, _ABSENT)
        if a != b:
            diff[key] = (a, b)
    if "seed" not in cv and "seed" not in cb:
        if variant.seed is None or baseline.seed is None:
            unknown.append("seed")
        elif variant.seed != baseline.seed:
            diff["seed"] = (variant.seed, baseline.seed)
    if seed_free:
        moved = {k: v for k, v in diff.items() if _is_seed(k)}
        if moved:
            seeds = {k: {"variant": a, "baseline": b} for k, (a, b) in moved.items()}
            diff = {k: v for k, v in diff.items() if k not in moved}
    pv, pb = _provenance(variant), _provenance(baseline)
    for key in sorted(set(pv) | set(pb)):
        a, b = pv.get(key, _ABSENT), pb.get(key, _ABSENT)
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
    return f"{key} (variant {_fmt(values[0])}, baseline {_fmt(values[1])})"


def one_variable(ctx: Context) -> list[Finding]:
    """A1: each variant run differs from its baseline in the declared keys and nothing else
    (config, code, commit, environment, hardware); seeds are paired where they match up."""
    check = "one_variable"
    rels = ("run.json", "config.json", "verify/changed.json")
    declared = list(ctx.changed) or sorted({k for run in ctx.runs for k in (run.changed or [])})
    if not ctx.runs or not ctx.baselines:
        what = "variant" if not ctx.runs else "baseline"
        return [
            _finding(
                check,
                "not_checked",
                f"no {what} runs: nothing to diff; pass the {what} runs to %verify to check "
                "that only the declared key changed",
                ctx.everything,
                {"declared": declared},
                _inputs(ctx.everything, *rels),
            )
        ]
    seed_free = "seed" not in declared and (len(ctx.runs) > 1 or len(ctx.baselines) > 1)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    members: dict[tuple[str, str], list[RunData]] = {}
    for variant in ctx.runs:
        paired = [b for b in ctx.baselines if variant.seed is not None and b.seed == variant.seed]
        for baseline in paired or ctx.baselines[:1]:
            diff, unknown, seeds = _diff_pair(ctx, variant, baseline, seed_free)
            extra = [k for k in diff if not any(_covers(d, k) for d in declared)]
            unapplied = [d for d in declared if not any(_covers(d, k) for k in diff)]
            no_config = "config" in unknown
            if no_config:
                unapplied = [d for d in unapplied if any(_covers(d, k) for k in _CODE_KEYS)]
            verdict, text = _one_variable_verdict(diff, declared, extra, unapplied, no_config)
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
            _finding(check, verdict, text, runs, computed, _inputs(_unique(runs), *rels))
        )
    return findings


def _unique(runs: list[RunData]) -> list[RunData]:
    return list({id(run): run for run in runs}.values())


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
    if not diff:
        said = f" although {', '.join(declared)} was declared" if declared else ""
        return (
            "bug",
            f"the ablation never applied: config and provenance are identical to the baseline"
            f"{said}; check that the change reaches the run (config passed, code pushed)",
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


# ----------------------------------------------------------------------------- A4 + G seed noise


def _permutation_p(variant: list[float], baseline: list[float]) -> tuple[float, bool, float]:
    """(two-sided permutation p of the difference of means, exact?, smallest p it can give)."""
    from scipy import stats

    def statistic(x: Any, y: Any, axis: int) -> Any:
        return np.mean(x, axis=axis) - np.mean(y, axis=axis)

    seeded = "rng" in inspect.signature(stats.permutation_test).parameters
    kwargs: dict[str, Any] = {"rng" if seeded else "random_state": RNG_SEED}
    result = stats.permutation_test(
        (variant, baseline),
        statistic,
        vectorized=True,
        n_resamples=PERMUTATION_RESAMPLES,
        alternative="two-sided",
        **kwargs,
    )
    partitions = math.comb(len(variant) + len(baseline), len(variant))
    exact = partitions <= PERMUTATION_RESAMPLES
    smallest = min(1.0, 2 / partitions) if exact else 2 / (PERMUTATION_RESAMPLES + 1)
    return float(result.pvalue), exact, smallest


def _mde(s_pooled: float, n1: int, n2: int) -> float:
    """The minimum detectable effect at ``ALPHA`` with power ``POWER`` (pooled t, df n1+n2-2)."""
    from scipy import stats

    df = n1 + n2 - 2
    t_sum = float(stats.t.ppf(1 - ALPHA / 2, df) + stats.t.ppf(POWER, df))
    return t_sum * s_pooled * math.sqrt(1 / n1 + 1 / n2)


def _seeds_needed(s_pooled: float, delta: float, limit: int = 1000) -> int | None:
    """Seeds per arm for which ``|delta|`` would be the minimum detectable effect."""
    if s_pooled <= 0 or delta == 0:
        return None
    for n in range(2, limit + 1):
        if _mde(s_pooled, n, n) <= abs(delta):
            return n
    return None


def compare_arms(variant: list[float], baseline: list[float]) -> dict[str, Any]:
    """The statistics of variant vs baseline seeds (each ≥2): means, stds, difference of
    means with a bootstrap 95 % CI, Welch's t, a permutation test, Cohen's d and Hedges' g, and
    the minimum detectable effect."""
    from scipy import stats

    n1, n2 = len(variant), len(baseline)
    m1, m2 = _mean(variant), _mean(baseline)
    s1, s2 = float(np.std(variant, ddof=1)), float(np.std(baseline, ddof=1))
    delta = m1 - m2
    rng = np.random.default_rng(RNG_SEED)
    boot_v = rng.choice(variant, size=(BOOTSTRAP_RESAMPLES, n1), replace=True).mean(axis=1)
    boot_b = rng.choice(baseline, size=(BOOTSTRAP_RESAMPLES, n2), replace=True).mean(axis=1)
    low, high = (float(x) for x in np.percentile(boot_v - boot_b, [2.5, 97.5]))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        welch = stats.ttest_ind(variant, baseline, equal_var=False)
        perm_p, exact, smallest = _permutation_p(variant, baseline)
    s_pooled = math.sqrt(((n1 - 1) * s1**2 + (n2 - 1) * s2**2) / (n1 + n2 - 2))
    d = delta / s_pooled if s_pooled > 0 else None
    g = d * (1 - 3 / (4 * (n1 + n2) - 9)) if d is not None else None
    use_perm = smallest < ALPHA
    p = perm_p if use_perm else _num(welch.pvalue)
    return {
        "n_variant": n1,
        "n_baseline": n2,
        "mean_variant": m1,
        "mean_baseline": m2,
        "std_variant": s1,
        "std_baseline": s2,
        "diff": delta,
        "relative_diff": delta / abs(m2) if m2 else None,
        "ci95": [low, high],
        "ci_excludes_zero": low > 0 or high < 0,
        "bands_overlap": (m1 - s1) <= (m2 + s2) and (m2 - s2) <= (m1 + s1),
        "welch_t": _num(welch.statistic),
        "welch_df": _num(getattr(welch, "df", None)),
        "welch_p": _num(welch.pvalue),
        "permutation_p": perm_p,
        "permutation_exact": exact,
        "permutation_smallest_p": smallest,
        "p": p,
        "p_test": "permutation" if use_perm else "welch",
        "s_pooled": s_pooled,
        "cohens_d": _num(d),
        "hedges_g": _num(g),
        "mde": _mde(s_pooled, n1, n2),
        "alpha": ALPHA,
        "power": POWER,
        "seeds_needed": _seeds_needed(s_pooled, delta),
        "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "rng_seed": RNG_SEED},
    }


def _draw(
    variant_mean: float, baseline: list[tuple[RunData, float]], direction: str | None
) -> tuple[dict[str, Any], str]:
    """G6: the variant mean against the baseline's mean, best and worst seed (highest and
    lowest without a direction), each named."""
    ordered = sorted(baseline, key=lambda pair: pair[1])
    top, bottom = ordered[-1], ordered[0]
    if direction == "min":
        named = {"best": bottom, "worst": top}
    elif direction == "max":
        named = {"best": top, "worst": bottom}
    else:
        named = {"highest": top, "lowest": bottom}
    mean = _mean([v for _, v in baseline])
    computed: dict[str, Any] = {"vs_mean": {"value": mean, "delta": variant_mean - mean}}
    words = [f"{_signed(variant_mean - mean)} vs the baseline mean"]
    for label, (run, value) in named.items():
        delta = variant_mean - value
        computed[f"vs_{label}"] = {"run_id": run.run_id, "value": value, "delta": delta}
        words.append(f"{_signed(delta)} vs its {label} seed ({run.run_id})")
    return computed, ", ".join(words)


def seed_noise(ctx: Context) -> list[Finding]:
    """A4, G1, G2, G6, G7: is the variant-vs-baseline difference larger than the seeds' spread?"""
    check = "seed_noise"
    name, direction, split = resolve_metric(ctx)
    runs = ctx.everything
    inputs = _inputs(runs, *_METRIC_FILES)
    var, base = _values(ctx.runs, name, split), _values(ctx.baselines, name, split)
    computed: dict[str, Any] = {
        "metric": name,
        "split": split,
        "direction": direction,
        "variant": _arm(var),
        "baseline": _arm(base),
    }

    def out(verdict: str, text: str) -> list[Finding]:
        return [_finding(check, verdict, text, runs, computed, inputs)]

    if name is None:
        return out(
            "not_checked",
            "no metric named: declare it with job.declare_metric(name, "
            "direction) or pass metric= to %verify",
        )
    if not var:
        return out(
            "not_checked",
            f"no variant run reports {name} on {split} in results.json: "
            "nothing to compare; save it with the split named",
        )
    vx, bx = [v for _, v in var], [v for _, v in base]
    if not bx:
        if len(vx) < 2:
            return out(
                "not_checked",
                f"one variant run and no baseline value of {name}: no "
                "spread to measure; pass baseline runs and run ≥3 seeds",
            )
        return out(
            "pass",
            f"{name} {_mean(vx):.4g} ± {_std(vx):.2g} (std over {len(vx)} seeds): the seed "
            "variance band to report beside it; no baseline, so no difference is called",
        )
    delta = _mean(vx) - _mean(bx)
    draw, draw_text = _draw(_mean(vx), base, direction)
    computed.update(diff=delta, label=_label(delta, direction), baseline_draw=draw)
    head = (
        f"{name} variant {_mean(vx):.4g} vs baseline {_mean(bx):.4g} "
        f"({_signed(delta)}, {_label_words(delta, direction)})"
    )
    if len(vx) < 2 or len(bx) < 2:
        counts = f"{len(vx)} variant and {len(bx)} baseline run(s)"
        return out(
            "inconclusive",
            f"single seed, no variance band: {head} from {counts}; run "
            "≥3 seeds per arm to tell an effect from seed noise",
        )
    stats = compare_arms(vx, bx)
    computed.update(stats)
    ci = f"95 % CI [{stats['ci95'][0]:.4g}, {stats['ci95'][1]:.4g}]"
    p_text = f"p = {stats['p']:.2g} ({stats['p_test']})" if stats["p"] is not None else "p n/a"
    if stats["s_pooled"] == 0:
        return out(
            "inconclusive",
            f"no spread across seeds: {head}; every run of an arm gave "
            "the same value, so the seeds may not have applied (see stale_artifact)",
        )
    if stats["ci_excludes_zero"] and stats["p"] is not None and stats["p"] < ALPHA:
        return out(
            "effect",
            f"effect: {head}, {ci}, {p_text}, Hedges' g "
            f"{stats['hedges_g']:.2g}; {draw_text}; report mean ± std over the seeds "
            "with this CI",
        )
    mde = f"{stats['mde']:.3g}"
    if not stats["ci_excludes_zero"] and abs(delta) < stats["mde"]:
        return out(
            "noise",
            f"within seed noise: {head}, {ci} includes 0, {p_text}; the MDE is "
            f"{mde}, so claim no difference (run more seeds if a smaller effect matters)",
        )
    needed = stats["seeds_needed"]
    more = f"about {needed} seeds per arm would detect it" if needed else "run more seeds"
    return out(
        "inconclusive",
        f"underpowered: {head}, {ci}, {p_text}; the MDE is {mde} with "
        f"{len(vx)}+{len(bx)} seeds; run more seeds ({more})",
    )


# ----------------------------------------------------------------------------- A6 stale artifact


def _results_sha(run: RunData) -> str | None:
    key = _key(run, "results.json")
    return run.used.get(key) if key is not None and run.results else None


def _should_differ(a: RunData, b: RunData, ignore: list[str]) -> list[str]:
    """Why two runs should report different numbers (different seeds, different config)."""
    reasons = []
    if a.seed is not None and b.seed is not None and a.seed != b.seed:
        reasons.append(f"seed {a.seed} vs {b.seed}")
    ca = {k: v for k, v in a.config.items() if not _ignored(k, ignore) and not _is_seed(k)}
    cb = {k: v for k, v in b.config.items() if not _ignored(k, ignore) and not _is_seed(k)}
    keys = sorted(k for k in set(ca) | set(cb) if ca.get(k, _ABSENT) != cb.get(k, _ABSENT))
    if keys and a.config and b.config:
        reasons.append("config " + ", ".join(keys))
    return reasons


def _pairs(runs: list[RunData]) -> Iterable[tuple[RunData, RunData]]:
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            yield a, b


def _stale_results(ctx: Context, runs: list[RunData], name: str | None, split: str) -> Finding:
    check = "stale_artifact"
    inputs = _inputs(runs, "run.json", "config.json", "results.json")
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
    for a, b in _pairs(runs):
        why = _should_differ(a, b, ctx.ignore)
        if not why or sha[a.run_id] is None or sha[b.run_id] is None:
            continue
        compared += 1
        row = {"runs": [a.run_id, b.run_id], "why": why, "value": value[a.run_id]}
        if sha[a.run_id] == sha[b.run_id]:
            same_file.append(row)
        elif value[a.run_id] is not None and value[a.run_id] == value[b.run_id]:
            same_value.append(row)
    computed.update(compared_pairs=compared, same_results=same_file, same_value=same_value)
    if same_file:
        involved = [r for r in runs if any(r.run_id in row["runs"] for row in same_file)]
        listing = "; ".join(
            f"{' and '.join(row['runs'])} ({', '.join(row['why'])}): {_fmt(row['value'])}"
            for row in same_file
        )
        return _finding(
            check,
            "bug",
            f"stale: the same number from runs that should differ "
            f"(a results file or checkpoint reused?): identical results.json in {listing}; "
            "rerun into fresh output folders and check what each run loaded",
            involved,
            computed,
            inputs,
        )
    if same_value:
        involved = [r for r in runs if any(r.run_id in row["runs"] for row in same_value)]
        listing = "; ".join(
            f"{' and '.join(row['runs'])} ({', '.join(row['why'])}): {_fmt(row['value'])}"
            for row in same_value
        )
        return _finding(
            check,
            "inconclusive",
            f"the same {name} value from runs that should "
            f"differ, though their results files differ: {listing}; a coincidence on a "
            "coarse metric or a reused checkpoint: check which checkpoint each "
            "evaluated",
            involved,
            computed,
            inputs,
        )
    if compared == 0:
        return _finding(
            check,
            "not_checked",
            "no two runs that should differ (by seed or config) "
            "both have a results.json: nothing to compare for stale numbers",
            runs,
            computed,
            inputs,
        )
    return _finding(
        check,
        "pass",
        f"{compared} pair(s) of runs that should differ report different results",
        runs,
        computed,
        inputs,
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
    for value in (run.results.get("checkpoint"), (run.metric or {}).get("checkpoint")):
        if isinstance(value, dict):
            return value
        if isinstance(value, str):
            return {"path": value}
    return None


def _last_step(run: RunData) -> int | None:
    steps = [run.results.get(k) for k in _STEP_KEYS]
    steps += [e.get("step") for e in run.evals or []]
    known = [int(s) for s in steps if isinstance(s, int | float) and not isinstance(s, bool)]
    return max(known) if known else None


def _manifest_entry(run: RunData, path: str) -> dict[str, Any] | None:
    path = path.removeprefix("./")
    for entry in run.manifest.get("files") or []:
        rel = str(entry.get("path", ""))
        if rel in (path, f"outputs/{path}") or rel.endswith("/" + path):
            return dict(entry)
    return None


def _checkpoint_problems(
    run: RunData, runs: list[RunData], declared: dict[str, Any]
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
                f"the checkpoint {run.run_id} evaluated is from step {_fmt(step)}, past "
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
    owners = [o for o in runs if o is not run and digest in _checkpoint_files(o)]
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
        found, digest, why = _checkpoint_problems(run, runs, declared)
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
            _finding(
                check,
                "bug",
                text,
                involved,
                {**computed, "problem": text},
                _inputs(_unique(involved), *rels),
            )
            for text, involved in problems
        ]
    inputs = _inputs(runs, *rels)
    if verified:
        more = f"; not checked: {', '.join(unchecked)}" if unchecked else ""
        return [
            _finding(
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
    return [_finding(check, "not_checked", text, runs, computed, inputs)]


def stale_artifact(ctx: Context) -> list[Finding]:
    """A6: numbers that are byte-identical across runs that should differ, and checkpoints that
    do not belong to the run that reports them."""
    runs = _unique(ctx.everything)
    name, _, split = resolve_metric(ctx)
    if len(runs) < 2 and not any(_declared_checkpoint(r) for r in runs):
        return [
            _finding(
                "stale_artifact",
                "not_checked",
                "one run and no checkpoint named: "
                "nothing to compare for stale numbers or checkpoints",
                runs,
                {"metric": name, "split": split},
                _inputs(runs, "results.json"),
            )
        ]
    return [_stale_results(ctx, runs, name, split), *_stale_checkpoints(ctx, runs)]
