"""Findings from a job's progress stream: of its loss curve, a spike, a divergence, a plateau
from the first steps; of its pace, a loop that waits for data most of each step (``data_s``
reported with ``job.progress``), and with the GPUs' utilisation what bounds the step. Robust statistics only (medians, the median absolute
deviation, the noise of successive differences), so the same rules hold for a loss of 1e-3 or
of 1e3."""

from __future__ import annotations

import math
from typing import Any

#: Fewer points than this say nothing about the curve's shape.
MIN_POINTS = 12
#: The preceding points a spike is measured against.
WINDOW = 10
#: A point this many robust deviations above the window's median is a spike; a median of the
#: last points this many deviations above the curve's lowest is a divergence.
SPIKE_Z = 10.0
DIVERGE_Z = 10.0
#: The median of the last points within this many deviations of the first points': a plateau.
PLATEAU_Z = 3.0
#: The points whose median stands for the start / the end of the curve.
EDGE = 5


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def _mad(values: list[float]) -> float:
    med = _median(values)
    return 1.4826 * _median([abs(v - med) for v in values])


def loss_series(records: list[dict[str, Any]]) -> tuple[str, list[tuple[float, float]]] | None:
    """The loss key (``loss``, else the first key naming a loss) and its finite (step, value)
    points in step order; None without one."""
    keys: list[str] = []
    for rec in records:
        for key in rec:
            if "loss" in str(key).lower() and key not in keys:
                keys.append(key)
    if not keys:
        return None
    key = "loss" if "loss" in keys else keys[0]
    points = []
    for rec in records:
        value, step = rec.get(key), rec.get("step")
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if isinstance(step, int | float) and math.isfinite(value):
            points.append((float(step), float(value)))
    points.sort()
    return key, points


def _finding(kind: str, seen: str, cause: str, fix: str, step: float | None) -> dict[str, Any]:
    return {
        "kind": kind,
        "seen": seen,
        "cause": cause,
        "fix": fix,
        "step": None if step is None else int(step),
        "source": "curve",
    }


def _pace(records: list[dict[str, Any]]) -> tuple[float, float, float] | None:
    """The median seconds a step takes between the records, the median ``data_s`` (seconds a
    step waited for its batch) and the first step, when enough records report ``data_s``."""
    rows = []
    for rec in records:
        values = [rec.get(k) for k in ("step", "t", "data_s")]
        numbers = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
        if len(numbers) == 3:
            rows.append((numbers[0], numbers[1], numbers[2]))
    rows.sort()
    pace = [
        (t1 - t0) / (s1 - s0)
        for (s0, t0, _), (s1, t1, _) in zip(rows, rows[1:], strict=False)
        if s1 > s0 and t1 >= t0
    ]
    if len(pace) < MIN_POINTS - 1:
        return None
    return _median(pace), _median([r[2] for r in rows]), rows[0][0]


def data_findings(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ``data_bound`` finding when the median ``data_s`` (seconds a step waited for its batch)
    is more than half the median time a step takes between the records."""
    pace = _pace(records)
    if pace is None:
        return []
    step_s, wait_s, first = pace
    if step_s <= 0 or wait_s <= 0.5 * step_s:
        return []
    n = sum(1 for r in records if isinstance(r.get("data_s"), int | float))
    return [
        _finding(
            "data_bound",
            f"a step takes {1e3 * step_s:.1f} ms and waits {1e3 * wait_s:.1f} ms of it for "
            f"data ({100 * min(1.0, wait_s / step_s):.0f}%, medians over {n} records)",
            "the DataLoader is slower than the step: too few workers, heavy decoding or "
            "augmentation, slow storage",
            "raise num_workers, set persistent_workers=True and pin_memory=True, raise "
            "prefetch_factor, cache decoded data or move augmentation to the GPU",
            first,
        )
    ]


#: GPU utilisation samples needed before the throughput is judged, and its bounds (percent).
MIN_UTIL_SAMPLES = 6
BUSY_UTIL = 85.0
IDLE_UTIL = 50.0


def _data_share(records: list[dict[str, Any]]) -> float | None:
    """The median share of a step spent waiting for data, when ``data_s`` is reported."""
    pace = _pace(records)
    if pace is None or pace[0] <= 0:
        return None
    return min(1.0, pace[1] / pace[0])


def throughput_findings(
    records: list[dict[str, Any]], resources: dict[str, Any] | None, processes: int = 1
) -> list[dict[str, Any]]:
    """What bounds the step, from the GPUs' utilisation over the last samples (the agent's
    ``resources.json``: ``gpu_util_recent``) and the data wait (``data_s``): ``gpu_bound`` (the
    GPUs are the limit: the knobs that make each step cheaper), ``comm_bound`` (several
    processes whose GPUs idle while the data is there: the gradient exchange), ``host_bound``
    (one process whose GPU idles while the data is there: Python and launch overhead), or
    ``gpu_idle`` when the data wait is not reported and cannot be ruled out. A data-bound loop
    is :func:`data_findings`'s."""
    util = (resources or {}).get("gpu_util_recent")
    if not isinstance(util, list):
        return []
    values = [float(u) for u in util if isinstance(u, int | float) and math.isfinite(u)]
    if len(values) < MIN_UTIL_SAMPLES:
        return []
    busy = _median(values)
    share = _data_share(records)
    steps = [int(r["step"]) for r in records if isinstance(r.get("step"), int)]
    step = max(steps) if steps else None
    seen = f"the GPUs were {busy:.0f}% busy (median of the last {len(values)} samples)"
    if share is not None:
        seen += f" and a step waited {100 * share:.0f}% of its time for data"
    if share is not None and share > 0.5:
        return []  # data_bound says it
    if busy >= BUSY_UTIL:
        return [
            _finding(
                "gpu_bound",
                seen,
                "the GPU's arithmetic bounds each step (the healthy case): it runs faster only "
                "if each step asks less of it",
                "bf16 autocast (or fp16 with a GradScaler), torch.compile, a larger batch while "
                "memory allows (the LR scaled with it), channels_last for convolutions, fused "
                "optimizers (fused=True)",
                step,
            )
        ]
    if busy >= IDLE_UTIL:
        return []
    if share is None:
        return [
            _finding(
                "gpu_idle",
                seen + "; the data wait is not reported",
                "the GPUs wait most of each step: for data, for the host (Python overhead, "
                "per-step .item() syncs) or, with several processes, for the gradient exchange",
                "iterate through timed_data(loader) (or report data_s with job.progress) so the "
                "view can tell which",
                step,
            )
        ]
    if processes > 1:
        return [
            _finding(
                "comm_bound",
                f"{seen}, with {processes} processes",
                "the GPUs wait for the gradient all-reduce between the processes: a slow "
                "interconnect (NCCL over TCP/PCIe instead of NVLink/InfiniBand), small buckets, "
                "or an exchange on every micro-batch",
                "gradient accumulation with model.no_sync() on the micro-batches, a larger "
                "DDP bucket_cap_mb, a larger batch per GPU; check NCCL_DEBUG=INFO for the "
                "transport it picked (NCCL_IB_DISABLE, NCCL_P2P_DISABLE left unset)",
                step,
            )
        ]
    return [
        _finding(
            "host_bound",
            seen,
            "the GPU waits for the host: Python and kernel-launch overhead of many small "
            "operations, or a host sync every step (loss.item(), .cpu(), printing tensors)",
            "a larger batch, torch.compile (mode='reduce-overhead' for CUDA graphs), fewer "
            "host syncs (log every N steps), pin_memory=True with non_blocking copies",
            step,
        )
    ]


def processes(spec: Any, resources: dict[str, Any] | None) -> int:
    """How many processes train: a multi-node launch's, else the GPUs holding memory in the
    agent's newest sample (a process holds some on each GPU it uses), else one."""
    dist = getattr(spec, "distributed", None) or {}
    if dist.get("nodes"):
        return int(dist["nodes"]) * int(dist.get("nproc_per_node") or 1)
    gpus = (resources or {}).get("gpus") or []
    used = [g for g in gpus if isinstance(g, dict) and float(g.get("mem_used_mib") or 0) > 256]
    return max(1, len(used))


def curve_findings(
    records: list[dict[str, Any]], resources: dict[str, Any] | None = None, processes: int = 1
) -> list[dict[str, Any]]:
    """What the progress ``records`` (``job.progress`` records) show: ``loss_spike``,
    ``loss_divergence`` and ``loss_plateau`` findings of the loss curve, ``data_bound`` of
    the pace, and with the agent's ``resources`` what bounds the step
    (:func:`throughput_findings`), each with what was seen, the likely causes and the next
    thing to try."""
    return (
        _loss_findings(records)
        + data_findings(records)
        + throughput_findings(records, resources, processes)
    )


def _loss_findings(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    series = loss_series(records)
    if series is None or len(series[1]) < MIN_POINTS:
        return []
    key, points = series
    steps = [p[0] for p in points]
    values = [p[1] for p in points]
    diffs = [b - a for a, b in zip(values, values[1:], strict=False)]
    noise = _mad(diffs) / math.sqrt(2.0)
    scale = max(noise, 1e-4 * max(abs(v) for v in values), 1e-12)
    out = []
    rolling = [_median(values[max(0, i - 2) : i + 3]) for i in range(len(values))]
    lowest = min(rolling)
    first, last = _median(values[:EDGE]), _median(values[-EDGE:])
    diverged = last > max(first, lowest + DIVERGE_Z * scale) and last - lowest > 0.5 * abs(
        first - lowest
    )
    if diverged:
        at = rolling.index(lowest)
        out.append(
            _finding(
                "loss_divergence",
                f"{key} fell to {lowest:.4g} near step {steps[at]:.0f}, then rose to "
                f"{last:.4g} at step {steps[-1]:.0f}, above its start ({first:.4g})",
                "the learning rate is too high for this stage (no warmup, a schedule that "
                "rises), fp16 overflow, or exploding gradients",
                "lower the LR or add warmup, clip gradients (clip_grad_norm_), use bf16 or a "
                "GradScaler; resume from the checkpoint before the rise",
                steps[at],
            )
        )
    spikes = []
    for i in range(WINDOW, len(values) - 1):
        window = values[i - WINDOW : i]
        med = _median(window)
        spread = max(_mad(window), scale)
        after = _median(values[i + 1 : i + 4])
        if (values[i] - med) / spread > SPIKE_Z and (after - med) / spread < SPIKE_Z / 2:
            spikes.append(i)
    if spikes and not diverged:
        i = max(spikes, key=lambda j: values[j])
        out.append(
            _finding(
                "loss_spike",
                f"{key} jumped to {values[i]:.4g} at step {steps[i]:.0f} from a median of "
                f"{_median(values[i - WINDOW : i]):.4g}, then came back"
                + (f" ({len(spikes)} such spikes)" if len(spikes) > 1 else ""),
                "a bad batch (corrupt sample, outlier labels), an LR too high at that point, "
                "or a short fp16 overflow",
                "log the batch ids at that step and look at them; clip gradients; lower the "
                "peak LR",
                steps[i],
            )
        )
    if len(values) >= 2 * EDGE + 10 and not diverged:
        fell = first - last
        if fell <= max(PLATEAU_Z * scale, 1e-3 * abs(first)):
            out.append(
                _finding(
                    "loss_plateau",
                    f"{key} stayed at {first:.4g} from step {steps[0]:.0f} to "
                    f"{steps[-1]:.0f} (now {last:.4g})",
                    "the model does not learn: an LR too low or 0, frozen or never-updated "
                    "parameters, zero_grad() misplaced, model.eval() left on, or a loss that "
                    "does not match the targets",
                    "overfit one batch first; print the LR and the grad norm; check "
                    "requires_grad and the loss's inputs",
                    steps[0],
                )
            )
    return out
