"""The job-side API: what a training program calls while it runs under rgt.

``import rgt_jupyter.job as job`` works inside every job with nothing installed where it runs:
the agent ships this file beside the job. It is stdlib-only (Python 3.8+); torch and numpy are
used when the job has them.

Environment the job sees: ``RGT_JOB_ID``, ``RGT_OUT`` (outputs, all of it is pulled),
``RGT_CKPT_DIR`` (durable checkpoints), ``RGT_SMOKE=1`` during the CPU smoke, ``RGT_RESUME=1``
when relaunched after an interruption, ``RGT_BUCKET`` when the checkpoints also go to an
S3-compatible bucket (uploaded by boto3 where the job's Python has it; see :func:`bucket_status`).

Checkpoints are written atomically (temporary file, fsync, a ``.sha256`` record, rename, fsync of
the directory); the last ``keep`` are kept. :func:`load_latest` returns the newest checkpoint
whose bytes match their record, loaded with ``torch.load(weights_only=True)``, and restores the
python / numpy / torch (and CUDA) RNG states saved with it.
"""

from __future__ import annotations

import atexit
import base64
import calendar
import datetime
import errno
import hashlib
import importlib
import importlib.util
import json
import math
import os
import random
import re
import signal
import struct
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from typing import Any, Dict, List, Optional, Tuple

__all__ = [
    "progress",
    "save_results",
    "save_config",
    "save_checkpoint",
    "load_latest",
    "CheckpointNotSaved",
    "preempted",
    "is_smoke",
    "smoke_mode",
    "OVERFIT_STEPS",
    "is_resume",
    "seed_everything",
    "out_dir",
    "ckpt_dir",
    "secret",
    "seal_checkpoint",
    "checkpoint_complete",
    "rng_state",
    "restore_rng",
    "bucket_status",
    "wait_for_uploads",
    "finding",
    "findings",
]

_CKPT_RE = re.compile(r"^ckpt-(\d{10})\.(pt|json)$")
_PREEMPT_SIGNALS = ("SIGTERM", "SIGUSR2")
_preempted_by: str | None = None
_lock = threading.Lock()


# ----------------------------------------------------------------------------- locations


def out_dir() -> str:
    """The job's output dir (``$RGT_OUT``); ``./rgt_out`` when run outside rgt."""
    path = os.environ.get("RGT_OUT") or os.path.abspath("rgt_out")
    os.makedirs(path, exist_ok=True)
    return path


def ckpt_dir() -> str:
    """The job's durable checkpoint dir (``$RGT_CKPT_DIR``); ``./rgt_ckpt`` outside rgt."""
    path = os.environ.get("RGT_CKPT_DIR") or os.path.abspath("rgt_ckpt")
    os.makedirs(path, exist_ok=True)
    return path


def _control_dir() -> str | None:
    return os.environ.get("RGT_CONTROL_DIR") or None


def secret(name: str) -> str:
    """A secret passed with ``--secret NAME``: read from a 0600 file, never from the
    environment or the command line (so it does not leak into ``ps``, logs or child processes)."""
    path = os.environ.get("RGT_SECRETS_FILE")
    values: Dict[str, str] = {}
    if path and os.path.exists(path):
        with open(path) as fh:
            values = json.load(fh)
    if name not in values:
        raise KeyError(
            "secret %r was not passed to this job: launch it with --secret %s" % (name, name)
        )
    return values[name]


def is_smoke() -> bool:
    """True during the CPU smoke run (``RGT_SMOKE=1``): use tiny shapes and a step or two."""
    return os.environ.get("RGT_SMOKE") == "1"


#: Steps of the ``--smoke=overfit`` smoke: its first batch, handed out this many times.
OVERFIT_STEPS = 40


def smoke_mode() -> str:
    """The smoke run's mode: ``"overfit"`` under ``--smoke=overfit``, else ``""``."""
    return os.environ.get("RGT_SMOKE_MODE", "") if is_smoke() else ""


def is_resume() -> bool:
    """True when this launch resumes an interrupted job (``RGT_RESUME=1``)."""
    return os.environ.get("RGT_RESUME") == "1"


# ----------------------------------------------------------------------------- atomic files


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _HashingWriter:
    """A file wrapper that hashes every byte written through it."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.size += len(view)
        return int(self._fh.write(view))

    def flush(self) -> None:
        self._fh.flush()


def _atomic_write(
    path: str,
    write: Callable[[Any], None],
    before_commit: Optional[Callable[[str, int], None]] = None,
) -> Tuple[str, int]:
    """Write ``path`` atomically via ``write(fileobj)``; return (sha256 hex, size).

    ``before_commit(sha256, size)`` runs after the bytes are durable and before the rename that
    makes them visible under ``path``.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, ".%s.tmp-%d" % (os.path.basename(path), os.getpid()))
    try:
        with open(tmp, "wb") as fh:
            hw = _HashingWriter(fh)
            write(hw)
            fh.flush()
            os.fsync(fh.fileno())
        if before_commit is not None:
            before_commit(hw.sha.hexdigest(), hw.size)
        os.replace(tmp, path)
        _fsync_dir(directory)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return hw.sha.hexdigest(), hw.size


def _write_json_atomic(path: str, obj: Any) -> tuple[str, int]:
    data = (json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n").encode()
    return _atomic_write(path, lambda fh: fh.write(data))


def _json_default(obj: Any) -> Any:
    """Turn tensors / numpy scalars and arrays into plain numbers and lists."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError("not JSON serializable: %r" % type(obj).__name__)


# ----------------------------------------------------------------------------- progress & results


def progress(step: int, total: int | None = None, **metrics: Any) -> None:
    """Report live progress (shown by ``%watch``) with optional scalar metrics (curves)."""
    record: dict[str, Any] = {"t": time.time(), "step": int(step)}
    if total is not None:
        record["total"] = int(total)
    for key, value in metrics.items():
        try:
            record[key] = float(value)
        except (TypeError, ValueError):
            record[key] = str(value)
    loss = next((record[k] for k in _LOSS_KEYS if isinstance(record.get(k), float)), None)
    if loss is not None and math.isfinite(loss):
        _note_loss(int(step), loss)
    control = _control_dir()
    if control is None:
        sys.stderr.write("[rgt] progress %s\n" % json.dumps(record))
        return
    line = json.dumps(record) + "\n"
    with _lock, open(os.path.join(control, "progress.jsonl"), "a") as fh:
        fh.write(line)


#: The progress metrics taken for the loss, and how many of the newest a checkpoint keeps.
_LOSS_KEYS = ("loss", "train_loss")
_KEEP_LOSSES = 16
#: Losses after a resume compared with those before the save, and by how much they may differ
#: (robust deviations of the losses before the save, and a share of their median).
RESUME_LOSS_STEPS = 3
RESUME_LOSS_Z = 8.0
RESUME_LOSS_SHARE = 0.25
_losses = []  # type: List[float]
#: After load_latest: the saved step and the losses before the save, and those since.
_resumed = {}  # type: Dict[str, Any]


def _median(values: List[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def _note_loss(step: int, loss: float) -> None:
    """Keep the newest losses (a checkpoint records them); after a resume, compare the first
    losses with those before the save."""
    _losses.append(loss)
    del _losses[:-_KEEP_LOSSES]
    if not _resumed or _resumed.get("done") or step <= int(_resumed.get("step", 0)):
        return
    after = _resumed.setdefault("after", [])
    after.append((step, loss))
    if len(after) < RESUME_LOSS_STEPS:
        return
    _resumed["done"] = True
    before = [float(v) for v in _resumed.get("losses") or [] if isinstance(v, (int, float))]
    if len(before) < 3:
        return
    med = _median(before)
    spread = 1.4826 * _median([abs(v - med) for v in before])
    now = _median([v for _, v in after])
    if now - med > max(RESUME_LOSS_Z * spread, RESUME_LOSS_SHARE * abs(med), 1e-12):
        finding(
            "resume_loss",
            "the first %d losses after the resume (median %.4g, steps %d-%d) are far above "
            "the %d before the save at step %d (median %.4g, spread %.2g)"
            % (
                len(after),
                now,
                after[0][0],
                after[-1][0],
                len(before),
                _resumed["step"],
                med,
                spread,
            ),
            "the resumed model is not the saved one: its weights (or batch-norm buffers) are "
            "not loaded, a layer is re-initialised after the load, or the loss is computed "
            "another way (train/eval mode, another data order or scaling)",
            "load model.load_state_dict(state['model']) after building the model and before "
            "the loop (strict=True), restore the optimizer after it, and call "
            "integrations.debug.audit_resume(state, model, optimizer, ...) at the resume",
            after[0][0],
        )


def save_results(results: dict[str, Any]) -> str:
    """Atomically write ``$RGT_OUT/results.json``; return its path."""
    if not isinstance(results, dict):
        raise TypeError("save_results expects a dict, e.g. {'val': {'acc': 0.93}}")
    path = os.path.join(out_dir(), "results.json")
    _write_json_atomic(path, results)
    return path


def save_config(config: dict[str, Any]) -> str:
    """Atomically write the run's config to ``$RGT_OUT/config.json`` (recorded in run.json)."""
    if not isinstance(config, dict):
        raise TypeError("save_config expects a dict")
    path = os.path.join(out_dir(), "config.json")
    _write_json_atomic(path, config)
    return path


# ----------------------------------------------------------------------------- for %verify
#
# What a job declares here lands in $RGT_OUT and, once pulled, is what %verify checks (see
# rgt_jupyter.verify.model). Anything left undeclared makes the checks that need it
# "not_checked", which %verify discloses.

_DIRECTIONS = {"max": "max", "higher_is_better": "max", "min": "min", "lower_is_better": "min"}
_FNS = ("accuracy", "error_rate", "mse", "rmse", "mae")


def declare_metric(name: str, direction: str, split: str = "test", fn: Optional[str] = None) -> str:
    """Declare the headline metric: its name in results.json, whether higher ("max") or lower
    ("min") is better, the split it is reported on, and ``fn`` (accuracy, error_rate, mse, rmse,
    mae) to re-derive it from saved predictions."""
    if direction not in _DIRECTIONS:
        raise ValueError("direction must be 'max' or 'min', not %r" % (direction,))
    if fn is not None and fn not in _FNS:
        raise ValueError("fn must be one of %s, not %r" % (", ".join(_FNS), fn))
    record = {"name": name, "direction": _DIRECTIONS[direction], "split": split, "fn": fn}
    path = os.path.join(out_dir(), "verify", "metric.json")
    _write_json_atomic(path, record)
    return path


def declare_changed(keys: List[str]) -> str:
    """Declare the config keys this run changes against its baseline (an ablation's variable)."""
    path = os.path.join(out_dir(), "verify", "changed.json")
    _write_json_atomic(path, {"keys": [str(k) for k in keys]})
    return path


def declare_checkpoint(path: str, step: int) -> str:
    """Declare which checkpoint produced the reported numbers (its path, sha256 and step), so
    %verify can tell whether those weights belong to this run."""
    full = os.path.abspath(path)
    for prefix, root in (("checkpoints", ckpt_dir()), ("outputs", out_dir())):
        root = os.path.abspath(root)
        if full.startswith(root + os.sep):
            rel = prefix + "/" + os.path.relpath(full, root).replace(os.sep, "/")
            break
    else:
        raise ValueError("%s is neither under $RGT_CKPT_DIR nor under $RGT_OUT" % path)
    record = {"path": rel, "sha256": _sha256_file(full), "step": int(step)}
    target = os.path.join(out_dir(), "verify", "checkpoint.json")
    _write_json_atomic(target, record)
    return target


def save_split(
    name: str,
    ids: Any,
    hashes: Any = None,
    items: Any = None,
    kind: Optional[str] = None,
    groups: Any = None,
    times: Any = None,
) -> str:
    """Record a split's membership: ``splits/<name>.ids`` (one id per line) and, given
    ``hashes`` (a dict id → sha256 of the item's bytes, or a list in the order of ``ids``),
    ``splits/<name>.sha256``, so a leak under another name is found too.

    ``items`` (the items themselves, a dict id → item or a list in the order of ``ids``) are
    read here, where the data lives, and only their signatures are written
    (``splits/<name>.sig``, see :data:`SIG_SCHEMA`): texts (str) as MinHash, images (arrays
    HxW, HxWxC or CxHxW; numpy needed) as dHash, table rows (tuples, lists or dicts of values)
    as rounded-row hashes; ``kind`` ("text", "image", "row") says which when guessing is not
    enough. Their content sha256 is written too when ``hashes`` is not given. ``groups`` (an
    entity key per item: patient, user, source document) and ``times`` (numbers of seconds,
    datetimes or ISO 8601 texts) let %verify find the same group in train and test, and test
    items older than train items."""
    ids = [str(i) for i in ids]
    for item in ids:
        if "\n" in item or "\r" in item:
            raise ValueError("split ids cannot contain line breaks: %r" % (item,))
    if kind not in (None, "text", "image", "row"):
        raise ValueError("kind must be 'text', 'image' or 'row', not %r" % (kind,))
    if items is not None or groups is not None or times is not None:
        lines_out = _signatures(name, ids, items, kind, groups, times)
        sig = "".join(json.dumps(r, sort_keys=True) + "\n" for r in lines_out).encode("utf-8")
        _atomic_write(os.path.join(out_dir(), "splits", "%s.sig" % name), lambda fh: fh.write(sig))
        if hashes is None and items is not None:
            values = _aligned(ids, items, "items")
            hashes = {i: _content_sha(v) for i, v in zip(ids, values) if v is not None}  # noqa: B905
    path = os.path.join(out_dir(), "splits", "%s.ids" % name)
    data = "".join(i + "\n" for i in ids).encode("utf-8")
    _atomic_write(path, lambda fh: fh.write(data))
    if hashes is not None:
        if not isinstance(hashes, dict) and len(list(hashes)) != len(ids):
            raise ValueError("hashes and ids differ in length")
        pairs = hashes.items() if isinstance(hashes, dict) else zip(ids, hashes)  # noqa: B905 - 3.8
        lines = "".join("%s  %s\n" % (str(h).lower(), i) for i, h in pairs).encode("utf-8")
        _atomic_write(
            os.path.join(out_dir(), "splits", "%s.sha256" % name), lambda fh: fh.write(lines)
        )
    return path


def save_predictions(split: str, ids: Any, preds: Any, targets: Any) -> str:
    """Save per-item predictions and targets of a split (``predictions/<split>.jsonl``), so the
    headline metric can be re-derived from them."""
    ids, preds, targets = list(ids), list(preds), list(targets)
    if not len(ids) == len(preds) == len(targets):
        raise ValueError(
            "ids, preds and targets differ in length: %d, %d, %d"
            % (len(ids), len(preds), len(targets))
        )
    rows = "".join(
        json.dumps({"id": str(i), "pred": p, "target": t}, default=_json_default) + "\n"
        for i, p, t in zip(ids, preds, targets)  # noqa: B905 - Python 3.8; lengths checked
    ).encode("utf-8")
    path = os.path.join(out_dir(), "predictions", "%s.jsonl" % split)
    _atomic_write(path, lambda fh: fh.write(rows))
    return path


def log_eval(split: str, step: int, metrics: Dict[str, Any], purpose: str = "report") -> None:
    """Record one evaluation: which split, at which step, for what ("report",
    "early_stopping", "checkpoint_selection" or "tuning"). A test split used to select is what
    %verify's test_selection check looks for."""
    record = {"split": split, "step": int(step), "purpose": purpose, "metrics": metrics}
    line = json.dumps(record, default=_json_default) + "\n"
    path = os.path.join(out_dir(), "verify", "evals.jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _lock, open(path, "a") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def save_outputs(split: str, ids: Any, vectors: Any) -> str:
    """Save model outputs (embeddings, logits) for some items of a split, for the collapse
    check (near-constant outputs)."""
    path = os.path.join(out_dir(), "verify", "outputs", "%s.json" % split)
    _write_json_atomic(path, {"ids": [str(i) for i in ids], "vectors": vectors})
    return path


def save_shuffle_score(metric: str, real: float, shuffled: float, n: Optional[int] = None) -> str:
    """Save the score on real inputs and on inputs shuffled across items: equal scores mean
    the outputs ignore the input."""
    path = os.path.join(out_dir(), "verify", "shuffle.json")
    record = {"metric": metric, "real": float(real), "shuffled": float(shuffled), "n": n}
    _write_json_atomic(path, record)
    return path


# ----------------------------------------------------------------------------- split signatures

#: ``splits/<split>.sig`` (JSON lines): a header ``{"schema": SIG_SCHEMA, "split", "n", "text",
#: "image", "row", "group", "time"}`` (each kind's parameters, or null when absent), then one
#: line per item: ``{"id"}`` plus, where declared, ``"text"`` (base64 of 64 big-endian uint16:
#: one-permutation MinHash over character 5-shingles, densified), ``"image"`` (32 hex digits:
#: dHash 8x8 of the grayscale image across, then down), ``"row"`` (16 hex digits: sha256 of the row with numbers
#: rounded to 4 significant digits and strings normalised), ``"group"`` (the group key, text) and
#: ``"time"`` (seconds since the epoch). Only these travel, never the items.
SIG_SCHEMA = "rgt-split-sig/1"
_SHINGLE, _BINS, _IMG, _DIGITS = 5, 64, 8, 4
SIG_TEXT = {"method": "oph-minhash", "shingle": _SHINGLE, "bins": _BINS, "bits": 16}
SIG_IMAGE = {"method": "dhash-hv", "size": _IMG, "bits": 128}
SIG_ROW = {"method": "rounded-sha256", "digits": _DIGITS, "bits": 64}
_M64 = (1 << 64) - 1
_VAL_BITS = 58
_VAL_MASK = (1 << _VAL_BITS) - 1
_ROLL = 0x100000001B3
_DENSIFY = 0x2545F4914F6CDD1D
_WORD_RE = re.compile(r"\w+")


def _mix64(x: int) -> int:
    """splitmix64's finaliser: spreads a 64-bit value over all bits."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _norm_text(text: str) -> str:
    """Case folded, words only, single spaces: case and punctuation edits are not new text."""
    return " ".join(_WORD_RE.findall(text.casefold()))


def _shingle_codes(norm: str) -> List[int]:
    """The code points of a normalised text (one shingle of all of it when shorter than 5)."""
    return [ord(c) for c in norm]


def _densify(mins: List[Optional[int]]) -> List[int]:
    """Fill empty bins from the next filled one to the right (rotation densification)."""
    k = len(mins)
    out = [0] * k
    for j in range(k):
        t = 0
        while mins[(j + t) % k] is None:
            t += 1
        out[j] = (mins[(j + t) % k] + t * _DENSIFY) & _VAL_MASK  # type: ignore[operator]
    return out


def _text_sig_py(text: str) -> Optional[List[int]]:
    """The 64 16-bit MinHash values of one text, in pure Python (None for an empty text)."""
    codes = _shingle_codes(_norm_text(text))
    if not codes:
        return None
    size = _SHINGLE
    width = min(size, len(codes))
    bins = _BINS
    mins: List[Optional[int]] = [None] * bins
    for start in range(len(codes) - width + 1):
        x = 0
        for c in codes[start : start + width]:
            x = (x * _ROLL + c) & _M64
        h = _mix64(x)
        b, v = h >> _VAL_BITS, h & _VAL_MASK
        cur = mins[b]
        if cur is None or v < cur:
            mins[b] = v
    return [v & 0xFFFF for v in _densify(mins)]


def _text_sigs_np(np: Any, texts: List[str]) -> List[Optional[List[int]]]:
    """:func:`_text_sig_py` for many texts at once with numpy (the same values)."""
    out: List[Optional[List[int]]] = []
    u64 = np.uint64
    size, bins, empty = _SHINGLE, _BINS, 1 << 62
    for lo in range(0, len(texts), 8192):
        norms = [_norm_text(t) for t in texts[lo : lo + 8192]]
        short = {i: _text_sig_py(n) for i, n in enumerate(norms) if len(n) < size}
        lengths = np.array([len(n) if len(n) >= size else 0 for n in norms], dtype=np.int64)
        joined = "".join(n for n in norms if len(n) >= size)
        mins = np.full(len(norms) * bins, empty, dtype=np.int64)
        if len(joined) >= size:
            codes = np.frombuffer(joined.encode("utf-32-le"), dtype="<u4").astype(u64)
            owner = np.repeat(np.arange(len(norms)), lengths)
            n = len(codes) - size + 1
            x = np.zeros(n, dtype=u64)
            with np.errstate(over="ignore"):
                for j in range(size):
                    x = x * u64(_ROLL) + codes[j : j + n]
                x = x + u64(0x9E3779B97F4A7C15)
                x = (x ^ (x >> u64(30))) * u64(0xBF58476D1CE4E5B9)
                x = (x ^ (x >> u64(27))) * u64(0x94D049BB133111EB)
                x = x ^ (x >> u64(31))
            inside = owner[:n] == owner[size - 1 :]
            x, own = x[inside], owner[:n][inside]
            key = own * bins + (x >> u64(_VAL_BITS)).astype(np.int64)
            np.minimum.at(mins, key, (x & u64(_VAL_MASK)).astype(np.int64))
        mins = np.where(mins == empty, -1, mins).reshape(len(norms), bins)
        # Densified as _densify does, in 16 bits: (v + t*C) mod 2**16 only needs v mod 2**16.
        filled = mins >= 0
        cols = np.arange(2 * bins)
        where = np.where(np.concatenate([filled, filled], axis=1), cols, 4 * bins)
        nxt = np.minimum.accumulate(where[:, ::-1], axis=1)[:, ::-1][:, :bins]
        has = filled.any(axis=1)
        nxt = np.where(has[:, None], nxt, cols[:bins])
        low = (mins & 0xFFFF).astype(np.uint64)
        donor = np.take_along_axis(low, nxt % bins, axis=1)
        dist = (nxt - cols[:bins]).astype(np.uint64)
        with np.errstate(over="ignore"):
            dense = (donor + dist * u64(_DENSIFY)) & u64(0xFFFF)
        for i, row in enumerate(dense.tolist()):
            out.append(short[i] if i in short else row if has[i] else None)
    return out


def _sig_b64(values: List[int]) -> str:
    return base64.b64encode(struct.pack(">%dH" % len(values), *values)).decode("ascii")


def _gray_np(np: Any, image: Any) -> Any:
    """A 2-D float array of an image given as HxW, HxWxC or CxHxW (C in 1, 3, 4)."""
    a = np.asarray(image, dtype=np.float64)
    if a.ndim == 3:
        if a.shape[-1] in (1, 3, 4):
            a = a[..., : min(3, a.shape[-1])].mean(axis=-1)
        elif a.shape[0] in (1, 3, 4):
            a = a[: min(3, a.shape[0])].mean(axis=0)
    if a.ndim != 2 or a.size == 0:
        raise ValueError("an image is HxW, HxWxC or CxHxW, not shape %r" % (a.shape,))
    return a


def _area_resize(np: Any, a: Any, rows: int, cols: int) -> Any:
    """Box-average ``a`` down (or nearest up) to rows x cols."""
    h, w = a.shape
    if h < rows or w < cols:
        return a[np.arange(rows) * h // rows][:, np.arange(cols) * w // cols]
    r0 = -(-np.arange(rows) * h // rows)
    c0 = -(-np.arange(cols) * w // cols)
    sums = np.add.reduceat(np.add.reduceat(a, r0, axis=0), c0, axis=1)
    rn = np.diff(np.append(r0, h))
    cn = np.diff(np.append(c0, w))
    return sums / (rn[:, None] * cn[None, :])


def _image_sig(np: Any, image: Any) -> str:
    """dHash both ways: a 9x8 box-averaged grayscale, each bit saying a cell is brighter than
    its left neighbour, then an 8x9 one, each bit saying brighter than the one above (128
    bits: one way alone leaves unrelated smooth images too close)."""
    gray = _gray_np(np, image)
    wide = _area_resize(np, gray, _IMG, _IMG + 1)
    tall = _area_resize(np, gray, _IMG + 1, _IMG)
    bits = list((wide[:, 1:] > wide[:, :-1]).reshape(-1)) + list(
        (tall[1:, :] > tall[:-1, :]).reshape(-1)
    )
    value = 0
    for bit in bits:
        value = (value << 1) | int(bit)
    return "%032x" % value


def _row_value(value: Any) -> Any:
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        if value != value:
            return "nan"
        return float("%.*g" % (_DIGITS, value))
    if isinstance(value, bytes):
        return hashlib.sha256(value).hexdigest()
    return " ".join(str(value).casefold().split())


def _row_sig(row: Any) -> str:
    """A row's values (a dict's in key order) rounded and normalised, hashed."""
    values = [row[k] for k in sorted(row)] if isinstance(row, dict) else list(row)
    text = json.dumps([_row_value(v) for v in values], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _content_sha(item: Any) -> str:
    """sha256 of an item's content: a text's UTF-8, bytes as they are, an array's dtype, shape
    and bytes, a row's canonical JSON."""
    if isinstance(item, str):
        return hashlib.sha256(item.encode("utf-8")).hexdigest()
    if isinstance(item, (bytes, bytearray)):
        return hashlib.sha256(bytes(item)).hexdigest()
    if hasattr(item, "tobytes") and hasattr(item, "dtype"):
        head = ("%s%r" % (item.dtype, tuple(item.shape))).encode()
        return hashlib.sha256(head + item.tobytes()).hexdigest()
    return hashlib.sha256(json.dumps(item, default=_json_default).encode()).hexdigest()


def _kind_of(item: Any) -> str:
    """What an item is signed as; bytes (an encoded file) get their content sha256 only."""
    if isinstance(item, str):
        return "text"
    if isinstance(item, (bytes, bytearray)):
        return "bytes"
    if isinstance(item, dict):
        return "row"
    ndim = getattr(item, "ndim", None)
    if ndim is not None:
        return "image" if ndim >= 2 else "row"
    if isinstance(item, (list, tuple)) and item and isinstance(item[0], (list, tuple)):
        return "image"
    return "row"


def _aligned(ids: List[str], values: Any, what: str) -> List[Any]:
    """``values`` given as a dict id → value or a sequence in the order of ``ids``."""
    if isinstance(values, dict):
        return [values.get(i) for i in ids]
    values = list(values)
    if len(values) != len(ids):
        raise ValueError("%s and ids differ in length: %d, %d" % (what, len(values), len(ids)))
    return values


def _as_seconds(value: Any) -> Optional[float]:
    """A time as seconds since the epoch: a number, a datetime or date (naive = UTC), an ISO
    8601 text."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.timestamp()
    if isinstance(value, datetime.date):
        return float(calendar.timegm(value.timetuple()))
    return float(value)


def _signatures(
    name: str, ids: List[str], items: Any, kind: Optional[str], groups: Any, times: Any
) -> List[Dict[str, Any]]:
    """The lines of ``splits/<name>.sig`` (the header first)."""
    rows: List[Dict[str, Any]] = [{"id": i} for i in ids]
    used = set()
    notes: Dict[str, str] = {}
    if items is not None:
        values = _aligned(ids, items, "items")
        kinds = [kind or _kind_of(v) for v in values]
        np = _maybe_import("numpy")
        pairs = enumerate(zip(values, kinds))  # noqa: B905 - 3.8; same length
        texts = [(n, v) for n, (v, k) in pairs if k == "text" and v is not None]
        if texts:
            used.add("text")
            strs = [str(v) for _, v in texts]
            sigs = _text_sigs_np(np, strs) if np is not None else [_text_sig_py(t) for t in strs]
            for (n, _), sig in zip(texts, sigs):  # noqa: B905 - 3.8; same length
                if sig is not None:
                    rows[n]["text"] = _sig_b64(sig)
        for n, (value, k) in enumerate(zip(values, kinds)):  # noqa: B905 - 3.8; same length
            if value is None or k in ("text", "bytes"):
                continue
            if k == "image":
                used.add("image")
                if np is None:
                    notes["image"] = "numpy is not importable where the job ran"
                    continue
                rows[n]["image"] = _image_sig(np, value)
            elif k == "row":
                used.add("row")
                rows[n]["row"] = _row_sig(value)
            else:
                raise ValueError("kind must be 'text', 'image' or 'row', not %r" % (k,))
    if groups is not None:
        for row, g in zip(rows, _aligned(ids, groups, "groups")):  # noqa: B905 - 3.8; checked
            if g is not None:
                row["group"] = str(g)
    if times is not None:
        for row, t in zip(rows, _aligned(ids, times, "times")):  # noqa: B905 - 3.8; checked
            sec = _as_seconds(t)
            if sec is not None:
                row["time"] = sec
    head: Dict[str, Any] = {
        "schema": SIG_SCHEMA,
        "split": name,
        "n": len(ids),
        "text": SIG_TEXT if "text" in used else None,
        "image": SIG_IMAGE if "image" in used and "image" not in notes else None,
        "row": SIG_ROW if "row" in used else None,
        "group": groups is not None,
        "time": times is not None,
        "not_signed": notes,
    }
    return [head] + rows


# ----------------------------------------------------------------------------- preemption


def _on_preempt(signum: int, frame: Any) -> None:
    """Signal handler: only set the flag and leave a marker; the loop saves at the next step."""
    global _preempted_by
    name = signal.Signals(signum).name
    if _preempted_by is None:
        _preempted_by = name
        control = _control_dir()
        if control is not None:
            try:
                with open(os.path.join(control, "preempt.json"), "w") as fh:
                    fh.write(json.dumps({"signal": name, "time": time.time(), "pid": os.getpid()}))
            except OSError as exc:  # the flag is set regardless; say why the marker is missing
                sys.stderr.write("[rgt] could not write preempt marker: %s\n" % exc)


def _install_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for name in _PREEMPT_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, _on_preempt)
    _catch_up()


def _catch_up() -> None:
    """Take in a preemption or walltime warning the agent forwarded to this job's process
    group before the handlers were set (``signals.json`` in the control dir)."""
    control = _control_dir()
    if control is None or _preempted_by is not None:
        return
    try:
        with open(os.path.join(control, "signals.json")) as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        return
    if not isinstance(record, dict) or record.get("pgid") != os.getpgrp():
        return  # an earlier attempt's, or another process group's
    for item in record.get("signals") or []:
        name = item.get("signal") if isinstance(item, dict) else None
        if name in _PREEMPT_SIGNALS:
            _on_preempt(getattr(signal, name), None)
            return


def preempted() -> bool:
    """True once SIGTERM or SIGUSR2 arrived: save a checkpoint, then return from training."""
    return _preempted_by is not None


# ----------------------------------------------------------------------------- seeds and RNG


def seed(default: int = 0) -> int:
    """This job's seed: ``RGT_SEED`` (set for each member of a ``--seeds`` group), else
    ``default``."""
    value = os.environ.get("RGT_SEED")
    return int(value) if value else default


def pg_timeout_s(default: float = 600.0) -> float:
    """The process-group timeout for ``torch.distributed.init_process_group(timeout=...)``:
    ``RGT_PG_TIMEOUT_S`` on a multi-node job, so a dead rank ends the job instead of hanging it
    for torch's default 30 minutes."""
    return float(os.environ.get("RGT_PG_TIMEOUT_S") or default)


def seed_everything(seed: int) -> None:
    """Seed python, numpy (if present) and torch (if present, CUDA included)."""
    random.seed(seed)
    np = _maybe_import("numpy")
    if np is not None:
        np.random.seed(seed % (2**32))
    torch = _maybe_import("torch")
    if torch is not None:
        torch.manual_seed(seed)


def _maybe_import(name: str) -> Any:
    if name in sys.modules:
        return sys.modules[name]
    if importlib.util.find_spec(name) is None:
        return None
    return __import__(name)


def _rng_state() -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"python": [version, list(internal), gauss]}
    np = _maybe_import("numpy")
    if np is not None:
        name, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]
    torch = _maybe_import("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore_rng(state: dict[str, Any]) -> None:
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    np = _maybe_import("numpy") if "numpy" in state else None
    if np is not None:
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch = _maybe_import("torch") if "torch" in state else None
    if torch is not None:
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


# ----------------------------------------------------------------------------- checkpoints


def _list_ckpts(directory: str) -> list[tuple[int, str]]:
    found = []
    for entry in os.listdir(directory):
        m = _CKPT_RE.match(entry)
        if m:
            found.append((int(m.group(1)), entry))
    return sorted(found)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale_tmp(directory: str) -> None:
    """Remove temporary files left by writers that died mid-write (never trusted anyway)."""
    for entry in os.listdir(directory):
        m = re.match(r"^\..*\.tmp-(\d+)$", entry)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            try:
                os.unlink(os.path.join(directory, entry))
            except FileNotFoundError:
                pass


class CheckpointNotSaved(OSError):
    """A checkpoint could not be written durably (a full disk, a disk that did not confirm the
    write): no temporary of it is left taking space, and the checkpoints saved before it are
    untouched. ``errno`` is the one the disk gave (ENOSPC, EDQUOT, EIO)."""


_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)


def _disk_error(exc: BaseException) -> Optional[OSError]:
    """The disk's own error behind ``exc``: torch reports a failed write of its zip stream as a
    RuntimeError ("unexpected pos ...") whose context holds the OSError."""
    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _DISK_ERRNOS:
            return current
        current = current.__cause__ or current.__context__
    return None


def _free_space(directory: str) -> Optional[Tuple[int, int]]:
    """(bytes, inodes) free to this user in ``directory``; None when it cannot be read."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, st.f_favail


def _not_saved(
    name: str, step: int, directory: str, cause: OSError, free: Optional[Tuple[int, int]]
) -> CheckpointNotSaved:
    """The error a job sees when checkpoint ``name`` could not be written, saying why and what
    is still there; ``free`` is the room there was before the write."""
    older = [n for _, n in _list_ckpts(directory) if n != name] if os.path.isdir(directory) else []
    kept = (
        "%s is still the latest checkpoint (load_latest() returns it)" % older[-1]
        if older
        else "there is no earlier checkpoint"
    )
    if cause.errno == errno.EIO:
        why = (
            "the disk did not confirm the write (%s): its bytes cannot be trusted and were "
            "removed" % (cause.strerror or "EIO")
        )
        todo = "The disk may be failing: check it (dmesg), or launch with --ckpt-dir elsewhere."
    else:
        room = (
            "%d bytes and %d inodes were free before it was written" % free
            if free is not None
            else "the free space could not be read"
        )
        why = "the disk holding %s is full (%s; %s); what was written of it was removed" % (
            directory,
            cause.strerror or "no space left",
            room,
        )
        todo = (
            "Free space there (keep fewer checkpoints with keep=, save a smaller state) or "
            "launch with --ckpt-dir on a bigger disk, then resume."
        )
    message = "checkpoint %s (step %d) was NOT saved: %s. %s. %s" % (name, step, why, kept, todo)
    return CheckpointNotSaved(cause.errno, message)


def save_checkpoint(state: dict[str, Any], step: int, keep: int = 3) -> str:
    """Atomically save ``state`` (plus RNG states) as checkpoint ``step``; keep the last ``keep``.

    With torch present the file is ``ckpt-<step>.pt`` (``torch.save``); without torch the state
    must be JSON-serializable and the file is ``ckpt-<step>.json``. Returns the path.

    Raises :class:`CheckpointNotSaved` when the disk is full or fails the write; the earlier
    checkpoints are then untouched (older ones are pruned only once a new one is durable).
    """
    if not isinstance(state, dict):
        raise TypeError("save_checkpoint expects a dict (model/optimizer state_dicts, step, ...)")
    if keep < 1:
        raise ValueError("keep must be >= 1")
    directory = ckpt_dir()
    began = time.monotonic()
    payload = dict(state)
    payload["_rgt"] = {
        "step": int(step),
        "rng": _rng_state(),
        "time": time.time(),
        "losses": list(_losses),
    }
    torch = _maybe_import("torch")
    if torch is not None:
        name = "ckpt-%010d.pt" % int(step)

        def write(fh: Any) -> None:
            torch.save(payload, fh)
    else:
        name = "ckpt-%010d.json" % int(step)
        data = json.dumps(payload, default=_json_default).encode()

        def write(fh: Any) -> None:
            fh.write(data)

    path = os.path.join(directory, name)

    def record(sha: str, size: int) -> None:
        # The record is durable before the checkpoint gets its name, so a file under its final
        # name always has a record to be checked against. When this step was saved before, the
        # record names both until the rename is durable: a kill in between leaves the earlier
        # checkpoint still matching its record.
        lines = ["%s  %s\n" % (sha, name)]
        if os.path.exists(path):
            lines += ["%s  %s\n" % (h, name) for h in _recorded(path) if h != sha]
        data = "".join(lines).encode()
        _atomic_write(path + ".sha256", lambda f: f.write(data))

    free = _free_space(directory)
    try:
        sha, _ = _atomic_write(path, write, before_commit=record)
        if len(_recorded(path)) > 1:  # the rename is durable: the record names this file only
            line = "%s  %s\n" % (sha, name)
            _atomic_write(path + ".sha256", lambda f: f.write(line.encode()))
    except Exception as exc:
        cause = _disk_error(exc)
        if cause is None:
            raise
        raise _not_saved(name, int(step), directory, cause, free) from exc
    _note_save(int(step), time.monotonic() - began)
    if _BUCKET_URL and not is_smoke():
        _uploads().submit(path, name, sha, int(step), keep)
    for _, old in _list_ckpts(directory)[:-keep]:
        for victim in (old, old + ".sha256"):
            try:
                os.unlink(os.path.join(directory, victim))
            except FileNotFoundError:
                pass
    _sweep_stale_tmp(directory)
    return path


#: The latest saves' (wall time, seconds the save took, step), for the cadence advice.
_SAVES: List[Tuple[float, float, int]] = []


def _note_save(step: int, seconds: float) -> None:
    """Record how long a checkpoint took to save and when (``cadence.json`` in the control
    dir: the notebook side sets the interval between saves against the Young/Daly optimum)."""
    control = _control_dir()
    if not control or is_smoke():
        return
    _SAVES.append((time.time(), seconds, step))
    del _SAVES[:-20]
    record = {
        "saves": [{"at": at, "save_s": round(took, 4), "step": s} for at, took, s in _SAVES],
    }
    try:
        _write_json_atomic(os.path.join(control, "cadence.json"), record)
    except OSError:
        pass  # the advice is a nicety; the checkpoint itself is saved


def _writer(data: bytes) -> Callable[[Any], None]:
    """What :func:`_atomic_write` calls to write ``data``."""

    def write(fh: Any) -> None:
        fh.write(data)

    return write


def _sha256_file(path: str) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def _recorded(path: str) -> List[str]:
    """The sha256 values the checkpoint's ``.sha256`` record lists (one per line; two only
    while a checkpoint of the same step is being replaced)."""
    try:
        with open(path + ".sha256") as fh:
            return [line.split()[0] for line in fh.read().splitlines() if line.split()]
    except FileNotFoundError:
        return []


def _record_matches(path: str) -> bool:
    recorded = _recorded(path)
    return bool(recorded) and _sha256_file(path) in recorded


def _load_file(path: str) -> dict[str, Any]:
    if path.endswith(".json"):
        with open(path) as fh:
            return dict(json.load(fh))
    torch = _maybe_import("torch")
    if torch is None:
        raise RuntimeError("%s is a torch checkpoint but torch is not installed" % path)
    return dict(torch.load(path, map_location="cpu", weights_only=True))


def load_latest() -> dict[str, Any] | None:
    """Return the newest complete checkpoint in ``$RGT_CKPT_DIR`` (or None) and restore its RNG.

    With a bucket (``RGT_BUCKET``), a complete checkpoint there that is newer than every one on
    this machine's disk (a new machine has none) is downloaded first, its bytes checked against
    its record.

    A checkpoint counts only when its bytes match the sha256 record written with it and it loads
    with ``weights_only=True``; others are skipped with a note on stderr. The returned dict is the
    state that was saved, with ``step`` set when the state did not carry one.
    """
    directory = ckpt_dir()
    if _BUCKET_URL and not is_smoke():
        _restore_from_bucket(directory)
    for step, name in reversed(_list_ckpts(directory)):
        path = os.path.join(directory, name)
        if not _record_matches(path):
            sys.stderr.write("[rgt] skipping %s: bytes do not match its .sha256 record\n" % name)
            continue
        try:
            payload = _load_file(path)
        except Exception as exc:  # noqa: BLE001 - a bad file is skipped, and said so
            sys.stderr.write("[rgt] skipping %s: does not load (%s)\n" % (name, exc))
            continue
        meta = payload.pop("_rgt", {})
        _restore_rng(meta.get("rng", {}))
        _resumed.clear()
        _resumed.update(step=int(meta.get("step", step)), losses=meta.get("losses") or [])
        payload.setdefault("step", meta.get("step", step))
        sys.stderr.write("[rgt] loaded %s (step %d)\n" % (name, step))
        return payload
    return None


# ----------------------------------------------------------------------------- object storage
#
# With RGT_BUCKET set, every checkpoint save_checkpoint makes durable here is then uploaded by
# one background thread (the newest waiting one; an older one not yet started is skipped): the
# object with its sha256 in its metadata, checked by a HEAD (size and sha256), and only then
# its ``.sha256`` record. A checkpoint in the bucket counts only with its record, so an upload
# cut short (a preemption, a kill) never leaves a newer checkpoint that is trusted. The state
# is in ``bucket.json`` of the control dir (the view shows it) and in the job's log.

_BUCKET_URL = os.environ.get("RGT_BUCKET", "")
_BUCKET_STATUS = "bucket.json"
_uploader = None  # type: Optional[_Uploads]


def _bucket_parts() -> Tuple[str, str]:
    rest = _BUCKET_URL[len("s3://") :].split("/", 1)
    return rest[0], (rest[1].strip("/") + "/") if len(rest) > 1 and rest[1].strip("/") else ""


def _bucket_client() -> Any:
    """boto3's S3 client for ``RGT_BUCKET``, with the credentials passed as the job's secrets."""
    boto3 = _maybe_import("boto3")
    if boto3 is None:
        raise RuntimeError("boto3 is not installed in this job's Python (pip install boto3 there)")
    kw = {
        "region_name": os.environ.get("RGT_BUCKET_REGION") or "us-east-1",
        "aws_access_key_id": secret("RGT_BUCKET_KEY_ID"),
        "aws_secret_access_key": secret("RGT_BUCKET_SECRET_KEY"),
    }  # type: Dict[str, Any]
    try:
        kw["aws_session_token"] = secret("RGT_BUCKET_TOKEN")
    except KeyError:
        pass
    if os.environ.get("RGT_BUCKET_ENDPOINT"):
        kw["endpoint_url"] = os.environ["RGT_BUCKET_ENDPOINT"]
    return boto3.client("s3", **kw)


def _s3_code(exc: BaseException) -> str:
    """The S3 error code of ``exc`` or of what it wraps (boto3's upload wraps the ClientError)."""
    seen = exc  # type: Optional[BaseException]
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code"):
            return str(response["Error"]["Code"])
        seen = seen.__cause__ or seen.__context__
    m = re.search(r"An error occurred \((\w+)\)", str(exc))
    return m.group(1) if m else ""


class _Uploads:
    """The background uploads of one job's checkpoints to its bucket."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.pending = None  # type: Optional[Tuple[str, str, str, int, int]]
        self.busy = False
        self.client = None  # type: Any
        self.state = {
            "url": _BUCKET_URL,
            "durable_step": None,
            "durable_name": None,
            "uploading": None,
            "error": None,
            "at": time.time(),
        }  # type: Dict[str, Any]
        self.thread = threading.Thread(target=self._run, name="rgt-bucket", daemon=True)
        self.thread.start()

    def submit(self, path: str, name: str, sha: str, step: int, keep: int) -> None:
        with self.cond:
            self.pending = (path, name, sha, step, keep)
            self.cond.notify_all()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until nothing is waiting or uploading; False when ``timeout`` ran out first."""
        end = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while self.pending is not None or self.busy:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.cond.wait(left if left is not None else 1.0)
        return True

    def _run(self) -> None:
        while True:
            with self.cond:
                while self.pending is None:
                    self.cond.wait()
                item, self.pending, self.busy = self.pending, None, True
            try:
                self._upload(*item)
            finally:
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()

    def _say(self, **fields: Any) -> None:
        self.state.update(fields, at=time.time())
        control = _control_dir()
        if control is not None:
            try:
                _write_json_atomic(os.path.join(control, _BUCKET_STATUS), self.state)
            except OSError as exc:
                sys.stderr.write("[rgt] could not write %s: %s\n" % (_BUCKET_STATUS, exc))

    def _upload(self, path: str, name: str, sha: str, step: int, keep: int) -> None:
        bucket, prefix = _bucket_parts()
        key = prefix + name
        self._say(uploading=name)
        try:
            if self.client is None:
                self.client = _bucket_client()
            size = os.path.getsize(path)
            # One thread: boto3's transfer threads are refused once the interpreter begins to
            # exit, which is when a job's last checkpoint is still uploading.
            transfer = importlib.import_module("boto3.s3.transfer")
            self.client.upload_file(
                path,
                bucket,
                key,
                ExtraArgs={"Metadata": {"sha256": sha}},
                Config=transfer.TransferConfig(use_threads=False),
            )
            head = self.client.head_object(Bucket=bucket, Key=key)
            stated = head.get("Metadata", {}).get("sha256")
            if int(head["ContentLength"]) != size or stated != sha:
                raise RuntimeError(
                    "the bucket holds %d bytes with sha256 %s, not the %d bytes uploaded"
                    % (int(head["ContentLength"]), stated, size)
                )
            record = ("%s  %s\n" % (sha, name)).encode()
            self.client.put_object(Bucket=bucket, Key=key + ".sha256", Body=record)
        except FileNotFoundError:
            self._say(uploading=None)  # pruned here before its turn: a newer one is coming
            return
        except Exception as exc:  # noqa: BLE001 - told to the job and shown, never raised
            code = _s3_code(exc)
            why = "the bucket refuses writes (%s)" % code if code == "AccessDenied" else str(exc)
            sys.stderr.write(
                "[rgt] checkpoint %s (step %d) was NOT uploaded to %s: %s. It is on this "
                "machine's disk only, which does not outlive the machine.\n"
                % (name, step, _BUCKET_URL, why)
            )
            self._say(uploading=None, error="%s: %s" % (name, why), error_step=step)
            return
        self._say(uploading=None, durable_step=step, durable_name=name, error=None)
        sys.stderr.write("[rgt] checkpoint %s is durable in %s\n" % (name, _BUCKET_URL))
        self._prune(bucket, prefix, keep)

    def _prune(self, bucket: str, prefix: str, keep: int) -> None:
        """Remove all but the newest ``keep`` complete checkpoints: each record before its
        object, so what is left is never a record without its object."""
        try:
            listed = self.client.list_objects_v2(Bucket=bucket, Prefix=prefix)
            keys = {o["Key"] for o in listed.get("Contents", [])}
            steps = sorted(
                (int(m.group(1)), k)
                for k in keys
                for m in [_CKPT_RE.match(k[len(prefix) :])]
                if m and k + ".sha256" in keys
            )
            for _, key in steps[:-keep]:
                self.client.delete_object(Bucket=bucket, Key=key + ".sha256")
                self.client.delete_object(Bucket=bucket, Key=key)
        except Exception as exc:  # noqa: BLE001 - an older checkpoint left behind costs space only
            sys.stderr.write(
                "[rgt] older checkpoints in %s were not pruned: %s\n" % (_BUCKET_URL, exc)
            )


def _uploads() -> _Uploads:
    global _uploader
    with _lock:
        if _uploader is None:
            _uploader = _Uploads()
            atexit.register(_uploader.wait)
        return _uploader


def bucket_status() -> Optional[Dict[str, Any]]:
    """Where this job's checkpoints stand in its bucket (None without one): ``durable_step``,
    the newest checkpoint uploaded and checked; ``uploading``; ``error``, why the last upload
    failed (it is then on this machine's disk only)."""
    if not _BUCKET_URL:
        return None
    return dict(_uploads().state)


def wait_for_uploads(timeout: Optional[float] = None) -> bool:
    """Wait until the checkpoints saved so far were uploaded (or failed, and said so); the
    job's exit waits for this too."""
    return True if _uploader is None else _uploader.wait(timeout)


def _restore_from_bucket(directory: str) -> None:
    """Download the newest complete checkpoint in the bucket that is newer than every one on
    this disk (record before the object's name, as a save does); say so on stderr."""
    local = [
        step for step, name in _list_ckpts(directory) if _recorded(os.path.join(directory, name))
    ]
    newest_here = max(local) if local else -1
    bucket, prefix = _bucket_parts()
    try:
        client = _bucket_client()
        listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
        keys = {o["Key"] for o in listed.get("Contents", [])}
    except Exception as exc:  # noqa: BLE001 - said, and the disk's checkpoints still count
        sys.stderr.write("[rgt] could not list %s: %s\n" % (_BUCKET_URL, exc))
        return
    found = []
    for key in keys:
        m = _CKPT_RE.match(key[len(prefix) :])
        if m and int(m.group(1)) > newest_here:
            found.append((int(m.group(1)), key))
    for step, key in sorted(found, reverse=True):
        name = key[len(prefix) :]
        if key + ".sha256" not in keys:
            sys.stderr.write(
                "[rgt] skipping %s in the bucket: no record (an upload cut short)\n" % name
            )
            continue
        path = os.path.join(directory, name)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, ".%s.tmp-%d" % (name, os.getpid()))
        try:
            record = client.get_object(Bucket=bucket, Key=key + ".sha256")["Body"].read()
            want = record.decode().split()[0] if record.split() else ""
            client.download_file(bucket, key, tmp)
            if _sha256_file(tmp) != want:
                sys.stderr.write(
                    "[rgt] skipping %s in the bucket: bytes do not match its record\n" % name
                )
                continue
            _atomic_write(path + ".sha256", _writer(record))
            os.replace(tmp, path)
            _fsync_dir(directory)
        except Exception as exc:  # noqa: BLE001 - said; an older one (or the disk's) is tried
            sys.stderr.write("[rgt] could not restore %s from the bucket: %s\n" % (name, exc))
            continue
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        sys.stderr.write("[rgt] restored %s (step %d) from %s\n" % (name, step, _BUCKET_URL))
        return


# ----------------------------------------------------------------------------- other writers' checkpoints
#
# Checkpoints a framework writes (a Trainer's checkpoint-N dir, a Lightning .ckpt) are judged
# complete the same way as this module's own: by a sha256 record written once they are whole.

_SEAL = "rgt-complete.sha256"
_TORCH_FILES = (".pt", ".pth", ".bin", ".ckpt")


def seal_checkpoint(path: str) -> str:
    """Record ``path`` (a checkpoint file, or a dir of them) as complete: a sha256 record,
    written atomically once its bytes are there (``PATH.sha256`` for a file,
    ``rgt-complete.sha256`` inside a dir). :func:`checkpoint_complete` checks against it."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        lines = []
        for rel in _files_under(path):
            if rel != _SEAL:
                lines.append("%s  %s\n" % (_sha256_file(os.path.join(path, rel)), rel))
        record = os.path.join(path, _SEAL)
    else:
        lines = ["%s  %s\n" % (_sha256_file(path), os.path.basename(path))]
        record = path + ".sha256"
    data = "".join(lines).encode()
    _atomic_write(record, lambda fh: fh.write(data))
    return record


def _files_under(root: str) -> List[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if not (name.startswith(".") and ".tmp-" in name):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                found.append(rel.replace(os.sep, "/"))
    return found


def checkpoint_complete(path: str) -> bool:
    """Whether a checkpoint file or dir is whole: its bytes match the record
    :func:`seal_checkpoint` wrote; without a record, every torch file in it is an intact zip
    (``torch.save``'s format, CRC-checked) and every safetensors file has its header and all
    the bytes the header names (a save cut short fails both)."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        record = os.path.join(path, _SEAL)
        if os.path.exists(record):
            return _matches(record, path)
        files = [os.path.join(path, rel) for rel in _files_under(path)]
        weights = [f for f in files if f.endswith(_TORCH_FILES + (".safetensors",))]
        return bool(weights) and all(_intact(f) for f in weights)
    if os.path.exists(path + ".sha256"):
        return _matches(path + ".sha256", os.path.dirname(path))
    return os.path.isfile(path) and _intact(path)


def _matches(record: str, root: str) -> bool:
    try:
        with open(record) as fh:
            entries = [line.split(None, 1) for line in fh.read().splitlines() if line.strip()]
        return bool(entries) and all(
            len(e) == 2 and _sha256_file(os.path.join(root, e[1].strip())) == e[0] for e in entries
        )
    except OSError:
        return False


def _intact(path: str) -> bool:
    """A torch zip whose members all pass their CRC, or a safetensors file as long as its
    header says."""
    try:
        if path.endswith(".safetensors"):
            with open(path, "rb") as fh:
                size = int.from_bytes(fh.read(8), "little")
                header = json.loads(fh.read(size))
            ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
            return os.path.getsize(path) >= 8 + size + max(ends or [0])
        with zipfile.ZipFile(path) as zf:
            return zf.testzip() is None
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile):
        return False


def rng_state() -> Dict[str, Any]:
    """The python, numpy and torch (and CUDA) RNG states, as :func:`save_checkpoint` saves them
    (plain lists and tensors, loadable with ``weights_only=True``)."""
    return _rng_state()


def restore_rng(state: Dict[str, Any]) -> None:
    """Restore RNG states taken by :func:`rng_state`."""
    _restore_rng(state)


def _record_torch() -> None:
    """At exit, if the job used torch: its version, CUDA build and the devices it saw."""
    torch = sys.modules.get("torch")
    control = _control_dir()
    if torch is None or control is None:
        return
    info = {
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": bool(torch.cuda.is_available()),
    }
    if info["cuda_available"]:
        info["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    _write_json_atomic(os.path.join(control, "torch.json"), info)


if os.environ.get("RGT_JOB_ID"):
    # Only inside a job: a notebook kernel that imports this module keeps its own handlers.
    _install_handlers()
    atexit.register(_record_torch)


# ----------------------------------------------------------------------------- training findings
# What the training-debug probes (rgt_jupyter.integrations.debug, .debug_data) saw: each finding
# once per kind and subject, in ``findings.json`` of the control dir (the view shows it) and on
# stderr. A finding is disclosed only: nothing is stopped, retried or changed.

FINDINGS_FILE = "findings.json"
_findings = []  # type: List[Dict[str, Any]]
_finding_keys = set()  # type: set
_findings_loaded = [False]


def _load_findings() -> None:
    """Findings an earlier run in this control dir wrote (a restart in place keeps them)."""
    if _findings_loaded[0]:
        return
    _findings_loaded[0] = True
    control = _control_dir()
    path = os.path.join(control, FINDINGS_FILE) if control else None
    if not path or not os.path.exists(path):
        return
    try:
        with open(path) as fh:
            old = json.load(fh).get("findings", [])
    except (OSError, ValueError, AttributeError):
        return
    for rec in old if isinstance(old, list) else []:
        if isinstance(rec, dict) and rec.get("key") not in _finding_keys:
            _finding_keys.add(rec.get("key"))
            _findings.append(rec)


def finding(
    kind: str, seen: str, cause: str, fix: str, step: Optional[int] = None, subject: str = ""
) -> Optional[Dict[str, Any]]:
    """Record a training finding: ``kind``, what was ``seen`` (with its numbers), its likely
    ``cause``, the ``fix`` to try next and the ``step``; once per ``kind`` and ``subject``.
    Returns the record, or None when it was already recorded. It is written to
    ``findings.json`` in the control dir (by rank 0) and said on stderr."""
    key = "%s:%s" % (kind, subject)
    with _lock:
        _load_findings()
        if key in _finding_keys:
            return None
        _finding_keys.add(key)
        rec = {"kind": kind, "seen": seen, "cause": cause, "fix": fix, "step": step, "key": key}
        _findings.append(rec)
        control = _control_dir()
        if control is not None and os.environ.get("RANK", "0") in ("", "0"):
            try:
                _write_json_atomic(os.path.join(control, FINDINGS_FILE), {"findings": _findings})
            except OSError as exc:
                sys.stderr.write("[rgt] could not write %s: %s\n" % (FINDINGS_FILE, exc))
    at = "" if step is None else " at step %d" % step
    sys.stderr.write("[rgt] finding %s%s: %s. Likely: %s. Try: %s\n" % (kind, at, seen, cause, fix))
    return rec


def findings() -> List[Dict[str, Any]]:
    """The training findings recorded so far (see :func:`finding`)."""
    with _lock:
        _load_findings()
        return [dict(f) for f in _findings]
