"""Training-debug probes of the data: a loader's first batches and its data wait.

::

    from rgt_jupyter.integrations.debug_data import check_loader, timed_data

    check_loader(loader)                  # the first batches of each worker; watches the sampler
    for epoch in range(epochs):
        for x, y in timed_data(loader):   # data wait against compute
            ...

Findings go to ``job.finding`` (``findings.json`` in the control dir, and stderr), disclosed
only. Stdlib only at import (Python 3.8+); torch is imported where a probe is used.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator
from typing import Any

from .. import job

__all__ = ["check_loader", "timed_data", "data_seconds"]

report = job.finding

# ----------------------------------------------------------------------------- the data


def _first_tensor(batch: Any) -> Any:
    if hasattr(batch, "shape") and hasattr(batch, "dtype"):
        return batch
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _rng_fingerprints(dataset: Any) -> dict[str, str]:
    """A digest of each random state a worker holds: python, numpy, torch, and the dataset's
    own generators."""

    out = {"random": repr(random.getstate())}
    np = sys.modules.get("numpy")
    if np is not None:
        out["numpy"] = repr(np.random.get_state()[1].tolist())
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = repr(torch.get_rng_state().tolist())
    for name, value in sorted(vars(dataset).items()) if hasattr(dataset, "__dict__") else []:
        if isinstance(value, random.Random):
            out["dataset." + name] = repr(value.getstate())
        elif np is not None and isinstance(value, np.random.Generator):
            out["dataset." + name] = repr(value.bit_generator.state)
        elif np is not None and isinstance(value, np.random.RandomState):
            out["dataset." + name] = repr(value.get_state()[1].tolist())
        elif torch is not None and isinstance(value, torch.Generator):
            out["dataset." + name] = repr(value.get_state().tolist())
    return {k: hashlib.sha256(v.encode()).hexdigest()[:16] for k, v in out.items()}


class _WorkerProbe:
    """A loader's ``worker_init_fn`` that runs the job's own first, then notes the worker's
    random states in a file."""

    def __init__(self, inner: Any, folder: str) -> None:
        self.inner = inner
        self.folder = folder

    def __call__(self, worker_id: int) -> None:
        if self.inner is not None:
            self.inner(worker_id)
        import torch.utils.data as tud  # deferred: only inside a loader's worker

        info = tud.get_worker_info()
        prints = _rng_fingerprints(info.dataset if info is not None else None)
        with open(os.path.join(self.folder, f"worker-{worker_id}.json"), "w") as fh:
            json.dump(prints, fh)


def _sampler_class(base: type) -> type:
    def __iter__(self: Any) -> Any:
        epoch = getattr(self, "epoch", None)
        if not getattr(self, "_rgt_probing", False):
            starts = self._rgt_starts = getattr(self, "_rgt_starts", 0) + 1
            if starts > 1 and epoch == getattr(self, "_rgt_epoch", None):
                report(
                    "sampler_epoch",
                    f"{base.__name__} began pass {starts} with epoch={epoch}, as the one before: "
                    "the same order again",
                    "sampler.set_epoch(epoch) is not called before each epoch, so every epoch "
                    "shuffles alike",
                    "call loader.sampler.set_epoch(epoch) at the start of each epoch",
                )
            self._rgt_epoch = epoch
        return base.__iter__(self)  # type: ignore[attr-defined]

    return type("Watched" + base.__name__, (base,), {"__iter__": __iter__})


def _watch_sampler(sampler: Any) -> None:
    if sampler is None or not hasattr(sampler, "set_epoch") or not getattr(sampler, "shuffle", 1):
        return
    if not type(sampler).__name__.startswith("Watched"):
        sampler.__class__ = _sampler_class(type(sampler))


def _world_size() -> int:
    """The processes of a distributed job: its process group's, else ``WORLD_SIZE``."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    try:
        return int(os.environ.get("WORLD_SIZE") or 1)
    except ValueError:
        return 1


#: Images needed before the channel order is judged, and the least difference of the red and
#: blue channels' means (in 0-1 units, or robust deviations once normalised) that says BGR.
CHANNEL_MIN_IMAGES = 16
CHANNEL_GAP = 0.04
CHANNEL_GAP_NORMALISED = 0.15


def _channel_means(x: Any) -> tuple[list[float], int] | None:
    """Per-channel sums of a batch of 3-channel images (NCHW or NHWC) and their pixel count."""
    if x.dim() != 4:
        return None
    if x.shape[1] == 3:
        per = x.double().transpose(0, 1).reshape(3, -1)
    elif x.shape[-1] == 3:
        per = x.double().reshape(-1, 3).t()
    else:
        return None
    return [float(v) for v in per.sum(1)], int(per.shape[1])


def _channel_order(sums: list[float], n: int, images: int, lo: float, hi: float) -> str | None:
    """Why the channels look like BGR where RGB is expected, or None: in natural photos the red
    channel is brighter on average than the blue (ImageNet's means are 0.485 and 0.406); BGR
    (OpenCV's order) turns that round, in raw pixels and after Normalize with RGB statistics."""
    if images < CHANNEL_MIN_IMAGES or n == 0:
        return None
    red, _, blue = (v / n for v in sums)
    if lo >= 0:  # raw values: 0-1, or 0-255
        scale = 255.0 if hi > 1.5 else 1.0
        gap = (blue - red) / scale
        if gap > CHANNEL_GAP:
            return f"channel 2 is brighter than channel 0 by {gap:.3f} (0-1 units)"
        return None
    if red < -CHANNEL_GAP_NORMALISED and blue > CHANNEL_GAP_NORMALISED:
        return f"after normalisation channel 0 averages {red:.2f} and channel 2 {blue:.2f}"
    return None


def _gather_rows(rows: list[str]) -> list[list[str]] | None:
    """Every rank's sample hashes, in a distributed job (a collective: all ranks call it)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    if dist.get_world_size() < 2:
        return None
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, rows)
    return [list(g or []) for g in gathered]


def check_loader(
    loader: Any,
    batches: int | None = None,
    expect: tuple[float, float] | None = None,
    channels: str | None = "rgb",
) -> dict[str, Any]:
    """Sample the first ``batches`` batches of a ``DataLoader`` (default: two per worker, at
    least 4) and watch its sampler. Findings: the same random state in every worker (the
    augmentation repeats across workers), the same samples from several workers (an
    ``IterableDataset`` not sharded), a distributed job whose sampler is not distributed, a
    sampler with ``set_epoch`` whose epoch does not advance (seen when the next epoch begins),
    float inputs outside ``expect`` (default: a range that looks like 0-255 pixels or unscaled
    features), 3-channel images whose channel means look like BGR where ``channels`` says RGB
    (or the other way; None: not judged), and, in a job whose process group is initialised,
    samples that other ranks draw too (a collective then: call it on every rank). The torch RNG
    is restored after the sampling, so the training draws what it would have drawn. Returns
    what was measured."""
    import torch  # deferred: torch only where a probe is used

    workers = int(getattr(loader, "num_workers", 0) or 0)
    want = batches or max(4, 2 * workers)
    sampler = getattr(loader, "sampler", None)
    _watch_sampler(sampler)
    rng = torch.get_rng_state()
    folder = tempfile.mkdtemp(prefix="rgt-loader-")
    inner = getattr(loader, "worker_init_fn", None)
    if workers:
        loader.worker_init_fn = _WorkerProbe(inner, folder)
    if sampler is not None:
        sampler._rgt_probing = True
    rows: list[str] = []
    stats = {"min": math.inf, "max": -math.inf, "sum": 0.0, "sq": 0.0, "n": 0}
    is_float = False
    chan_sums, chan_n, images = [0.0, 0.0, 0.0], 0, 0
    try:
        iterator = iter(loader)
        for _ in range(want):
            try:
                batch = next(iterator)
            except StopIteration:
                break
            x = _first_tensor(batch)
            if x is None:
                continue
            x = x.detach().cpu()
            is_float = is_float or x.is_floating_point()
            flat = x.reshape(x.shape[0], -1) if x.dim() > 0 else x.reshape(1, 1)
            rows.extend(hashlib.sha256(r.numpy().tobytes()).hexdigest() for r in flat)
            xf = x.double()
            stats["min"] = min(stats["min"], float(xf.min()))
            stats["max"] = max(stats["max"], float(xf.max()))
            stats["sum"] += float(xf.sum())
            stats["sq"] += float((xf * xf).sum())
            stats["n"] += xf.numel()
            per = _channel_means(x)
            if per is not None:
                chan_sums = [chan_sums[i] + per[0][i] for i in range(3)]
                chan_n += per[1]
                images += int(x.shape[0])
        del iterator
    finally:
        if workers:
            loader.worker_init_fn = inner
        if sampler is not None:
            sampler._rgt_probing = False
        torch.set_rng_state(rng)
        prints = []
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name)) as fh:
                prints.append(json.load(fh))
        shutil.rmtree(folder, ignore_errors=True)
    same = (
        sorted(k for k in prints[0] if all(p.get(k) == prints[0][k] for p in prints))
        if len(prints) > 1
        else []
    )
    if same:
        report(
            "worker_rng",
            f"all {len(prints)} dataloader workers start from the same random state "
            f"({', '.join(same)}): each worker draws the same augmentations",
            "a worker_init_fn that seeds every worker alike, or a random generator made in the "
            "dataset's __init__ (copied into each worker)",
            "seed per worker from torch.initial_seed() in worker_init_fn, or create the "
            "generator in the worker (torch.utils.data.get_worker_info())",
            subject=",".join(same),
        )
    n = stats["n"]
    mean = stats["sum"] / n if n else 0.0
    std = math.sqrt(max(0.0, stats["sq"] / n - mean * mean)) if n else 0.0
    dupes = len(rows) - len(set(rows))
    iterable = type(getattr(loader, "dataset", None)).__mro__
    iterable_ds = any(c.__name__ == "IterableDataset" for c in iterable)
    if dupes and workers > 1 and iterable_ds:
        report(
            "unsharded_iterable",
            f"{dupes} of the first {len(rows)} samples repeat across {workers} workers of an "
            "IterableDataset",
            "the IterableDataset is not sharded: every worker yields the whole stream",
            "split the stream by torch.utils.data.get_worker_info() (id, num_workers) in "
            "__iter__, and by rank under DDP",
        )
    world = _world_size()
    batches_by = getattr(loader, "batch_sampler", None)
    sharded = any(
        hasattr(x, "num_replicas") or "Shard" in type(x).__name__
        for x in (sampler, batches_by, loader)
    )
    if world > 1 and not iterable_ds and not sharded:
        report(
            "sampler_not_distributed",
            f"{world} processes train, but the loader's sampler is a "
            f"{type(sampler).__name__}: every rank reads the whole dataset",
            "no DistributedSampler: each rank draws the same samples (or all of them), so an "
            "epoch is world-size times longer and the batches repeat across ranks",
            "DataLoader(dataset, sampler=DistributedSampler(dataset), ...) and "
            "sampler.set_epoch(epoch) each epoch",
        )
    if is_float and n:
        lo, hi = expect if expect is not None else (-20.0, 20.0)
        if stats["min"] < lo or stats["max"] > hi:
            pixels = stats["min"] >= 0 and stats["max"] > 20 and stats["max"] <= 255.0
            report(
                "input_range",
                "the inputs range {:.3g} to {:.3g} (mean {:.3g}, std {:.3g}), outside {} to {}".format(
                    stats["min"], stats["max"], mean, std, lo, hi
                ),
                "0-255 pixel values where 0-1 (or standardized) inputs are expected"
                if pixels
                else "inputs not normalised (raw units) for the model's first layer",
                "divide by 255 / use ToTensor(), then Normalize(mean, std)"
                if pixels
                else "standardize the inputs (subtract the mean, divide by the std)",
            )
    if channels in ("rgb", "bgr") and n:
        order = chan_sums if channels == "rgb" else chan_sums[::-1]
        odd = _channel_order(order, chan_n, images, stats["min"], stats["max"])
        if odd is not None:
            want_order, other = ("RGB", "BGR") if channels == "rgb" else ("BGR", "RGB")
            report(
                "channel_order",
                f"over {images} images {odd}: natural photos are {want_order[0]}-heavy in "
                f"{want_order} order, so these look like {other} where {want_order} is expected",
                f"images decoded in {other} order (OpenCV's cv2.imread gives BGR) fed to a model "
                f"trained on {want_order} (torchvision and timm weights are RGB)",
                "convert once where the image is read (cv2.cvtColor(img, cv2.COLOR_BGR2RGB), or "
                "img[..., ::-1]); if these are not natural photos, pass "
                "check_loader(..., channels=None)",
            )
    everyone = _gather_rows(rows)
    shared = 0
    if everyone is not None:
        rank = sys.modules["torch.distributed"].get_rank()
        others = {h for i, g in enumerate(everyone) if i != rank for h in g}
        shared = sum(1 for h in set(rows) if h in others)
        if shared:
            report(
                "rank_duplicates",
                f"{shared} of this rank's first {len(set(rows))} distinct samples are drawn by "
                f"another of the {len(everyone)} ranks too",
                "the ranks are not given disjoint shards: a sampler without the rank (a plain "
                "or random sampler, a DistributedSampler given a fixed rank or num_replicas), "
                "or an IterableDataset that ignores the rank",
                "DistributedSampler(dataset) with the process group's rank and world size "
                "(its defaults), and in an IterableDataset skip by rank and by worker",
            )
    return {
        "batches": want,
        "rank_duplicates": shared,
        "images": images,
        "samples": len(rows),
        "duplicates": dupes,
        "workers_same_rng": same,
        "min": stats["min"] if n else None,
        "max": stats["max"] if n else None,
        "mean": mean if n else None,
        "std": std if n else None,
    }


#: Per loader: seconds waiting for batches, seconds between them, batches timed, and the
#: newest batch's wait (by the loader while it lives; by its id where it takes no weak ref).
_TIMES: weakref.WeakKeyDictionary[Any, list[float]] = weakref.WeakKeyDictionary()
_TIMES_BY_ID: dict[int, list[float]] = {}
#: Batches of each pass that are not timed (the workers start up).
WARMUP = 2
#: Batches timed before the data-bound finding is decided.
WINDOW = 10
#: A loader that hands over a batch in less than this is not what limits a step.
DATA_FLOOR_S = 0.001


def _times(loader: Any) -> list[float]:
    try:
        return _TIMES.setdefault(loader, [0.0, 0.0, 0.0, 0.0])
    except TypeError:
        return _TIMES_BY_ID.setdefault(id(loader), [0.0, 0.0, 0.0, 0.0])


def data_seconds(loader: Any) -> float:
    """Seconds the loop waited for the newest batch of ``loader`` under :func:`timed_data` (0
    before the first): report it as ``job.progress(step, data_s=...)`` and the view shows a
    data-bound loop too."""
    return _times(loader)[3]


def timed_data(loader: Any) -> Iterator[Any]:
    """Iterate ``loader``, timing the wait for each batch against the time the loop spends on
    it (on a GPU that includes the kernels only where the loop syncs, e.g. ``loss.item()``).
    A loop that waits for data most of the time is a finding (data-bound). Under
    ``--smoke=overfit`` it hands out the first batch ``job.OVERFIT_STEPS`` times instead."""
    if job.smoke_mode() == "overfit":
        for batch in iter(loader):
            for _ in range(job.OVERFIT_STEPS):
                yield batch
            return
        return
    times = _times(loader)
    it = iter(loader)
    index = 0
    handed: float | None = None
    while True:
        start = time.perf_counter()
        if handed is not None and index > WARMUP:
            times[1] += start - handed
            times[2] += 1
            if times[2] == WINDOW:
                _decide_data(times)
        try:
            batch = next(it)
        except StopIteration:
            return
        index += 1
        handed = time.perf_counter()
        times[3] = handed - start
        if index > WARMUP:
            times[0] += handed - start
        yield batch


def _decide_data(times: list[float]) -> None:
    data, compute, n = times[:3]
    share = data / (data + compute) if data + compute > 0 else 0.0
    if share > 0.5 and data / n > DATA_FLOOR_S:
        report(
            "data_bound",
            f"the loop waited {1e3 * data / n:.1f} ms a batch for data and computed "
            f"{1e3 * compute / n:.1f} ms ({100 * share:.0f}% of each step waiting) over "
            f"{n:.0f} batches",
            "the DataLoader is slower than the step: too few workers, heavy decoding or "
            "augmentation in __getitem__, slow storage",
            "raise num_workers, set persistent_workers=True and pin_memory=True, raise "
            "prefetch_factor, cache decoded data or move augmentation to the GPU",
        )
