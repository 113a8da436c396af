"""Load pulled checkpoints safely, in a separate process: ``python -m rgt_jupyter.run.safe_load F...``.

Nothing pickled ever runs here. ``.safetensors`` files are read tensor by tensor with the
``safetensors`` library (a header parse where it is not installed); ``.json`` with :mod:`json`;
torch files (``.pt .pth .bin .ckpt .pkl``) with ``torch.load(weights_only=True)`` and, through
``torch.serialization.safe_globals``, the plain data types frameworks save (:func:`allowed`):
numpy arrays, dtypes and scalars (``np.random.get_state()``), ``argparse.Namespace``,
``types.SimpleNamespace``, ``collections`` containers, paths and dates, and Lightning's
``AttributeDict``. That class and ``collections.defaultdict`` are allowlisted by name and read
back as plain dicts: neither Lightning nor a default factory is imported or called.

A file the loader refuses is then read as pickle opcodes (``pickletools.genops``, never
``pickle.load``) to tell why (:func:`verdict_of`):

- ``refused``: it names something that acts when unpickled: anything of the standard library but
  its plain data types (``os.system``, ``subprocess.Popen``, ``builtins.eval``,
  ``functools.partial``...), a function of any module (a pickle calls the functions it names),
  an attribute path (``Foo.__init__``), a name only computed at load time. A failure.
- ``pickled``: it names only classes outside the allowlist (a ``TrainingArguments`` dataclass, a
  class of the job's own code, a plain ``pickle.dump`` file): loading it would run that class's
  code, so it is not loaded and stands verified by sha256 only, disclosed as such.
- ``failed``: anything else (cut short, damaged, not a checkpoint).

Prints one JSON object: ``{path: {"ok", "verdict", "detail", ["why"]}}``; ``ok`` only for
``loaded``. The caller runs this under a time limit.
"""

from __future__ import annotations

import _compat_pickle
import argparse
import collections
import contextlib
import datetime
import json
import os
import pathlib
import pickletools
import re
import select
import signal
import struct
import sys
import time
import types
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

#: Where Lightning has kept ``AttributeDict`` (a dict with attribute access).
ATTRIBUTE_DICTS = (
    "lightning.fabric.utilities.data.AttributeDict",
    "lightning_fabric.utilities.data.AttributeDict",
    "lightning.pytorch.utilities.parsing.AttributeDict",
    "pytorch_lightning.utilities.parsing.AttributeDict",
)
#: Classes of the standard library that only hold data: named in a pickle, they are data.
STDLIB_DATA_MODULES = {"collections", "datetime", "decimal", "fractions", "pathlib", "uuid"}
#: What a pickle of a plain object names to build it (protocols 0 to 2): never code of its own.
BUILDERS = {("copyreg", "_reconstructor"), ("copy_reg", "_reconstructor")}
BUILDERS |= {("copyreg", "__newobj__"), ("copyreg", "__newobj_ex__"), ("builtins", "object")}
#: The keys of a saved set of RNG states: HF Trainer's ``rng_state.pth``, Accelerate's
#: ``random_states_N.pkl``, a hand-written loop's.
RNG_KEYS = {"python", "numpy", "cpu", "cuda", "torch", "xla", "mps", "npu", "hpu", "step"}
RNG_KEYS |= {"random_state", "numpy_random_seed", "torch_manual_seed", "torch_cuda_manual_seed"}
RNG_KEYS |= {"torch_xla_manual_seed"}
#: The first bytes of a torch file of the legacy (non-zip) format: its magic number, pickled.
LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
#: The loader's words when it refused a name that is not allowlisted (not damage).
_REFUSED = re.compile(
    r"Unsupported global|unsupported GLOBAL|call reduce for unrecognized|Can only create new "
    r"object|Can only build|Unsupported operand"
)


class PlainDict:
    """Stands in for a dict subclass (``AttributeDict``, ``defaultdict``): called or built by
    the loader, it gives a plain dict, which is all a load check needs."""

    def __new__(cls, *args: object, **kwargs: object) -> dict[Any, Any]:  # type: ignore[misc]
        return {}


def _numpy_globals() -> list[Any]:
    try:
        import numpy as np  # deferred: numpy, only in the loading process and where installed
    except ImportError:
        return []
    core = getattr(np, "_core", None) or np.core  # numpy 2 keeps it in _core
    out: list[Any] = [(np.ndarray, "numpy.ndarray"), (np.dtype, "numpy.dtype")]
    for prefix in ("numpy.core.multiarray", "numpy._core.multiarray"):
        out += [
            (core.multiarray._reconstruct, f"{prefix}._reconstruct"),
            (core.multiarray.scalar, f"{prefix}.scalar"),
        ]
    dtypes = getattr(np, "dtypes", None)  # the concrete dtype classes (numpy >= 1.25)
    for name in dir(dtypes) if dtypes is not None else []:
        cls = getattr(dtypes, name)
        if isinstance(cls, type) and issubclass(cls, np.dtype):
            out.append((cls, f"numpy.dtypes.{name}"))
    return out


def allowed() -> list[Any]:
    """The globals added to torch's own for a ``weights_only`` load: plain data types only, each
    unable to run code of the checkpoint's choosing."""
    # The builtins a defaultdict names as its factory (bytes come through torch's _codecs).
    plain: list[Any] = [list, dict, tuple, int, float, str, bool, frozenset]
    plain += [argparse.Namespace, types.SimpleNamespace]
    plain += [collections.OrderedDict, collections.Counter, collections.deque]
    plain += [datetime.datetime, datetime.date, datetime.time, datetime.timedelta]
    plain += [datetime.timezone, pathlib.PurePosixPath, pathlib.PosixPath]
    plain += [(pathlib.PureWindowsPath, "pathlib.PureWindowsPath")]
    plain += [(pathlib.PureWindowsPath, "pathlib.WindowsPath")]
    plain += [(PlainDict, name) for name in ("collections.defaultdict", *ATTRIBUTE_DICTS)]
    return plain + _numpy_globals()


# -- the loaders --------------------------------------------------------------------------


def _safetensors_header(path: Path) -> str:
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError("shorter than a safetensors header")
        (n,) = struct.unpack("<Q", raw)
        if n > 100_000_000:
            raise ValueError(f"header length {n} is implausible")
        header = json.loads(fh.read(n))
    size = path.stat().st_size
    end = max(
        (int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0
    )
    if 8 + n + end != size:
        raise ValueError(f"tensor data ends at {8 + n + end} but the file has {size} bytes")
    return f"safetensors, {len(header) - ('__metadata__' in header)} tensors (header read)"


def _safetensors(path: Path) -> str:
    try:
        from safetensors import safe_open  # deferred: safetensors, only in the loading process
    except ImportError:
        return _safetensors_header(path)
    try:
        import torch  # deferred: torch, only in the loading process  # noqa: F401

        framework = "pt"
    except ImportError:
        framework = "numpy"
    count = 0
    with safe_open(str(path), framework=framework) as fh:
        for key in fh.keys():  # one tensor at a time: memory stays at the largest tensor
            fh.get_tensor(key)
            count += 1
    return f"safetensors, {count} tensors"


def describe(obj: Any) -> str:
    """What a loaded checkpoint is, in a few words."""
    if isinstance(obj, dict):
        keys = set(obj)
        if "pytorch-lightning_version" in keys:
            return (
                f"Lightning checkpoint: epoch {obj.get('epoch')}, global step "
                f"{obj.get('global_step')}, {len(obj)} keys"
            )
        if {"state", "param_groups"} <= keys:
            return f"optimizer state, {len(obj['param_groups'])} parameter group(s)"
        if keys - {"step"} and keys <= RNG_KEYS:
            return "random number generator states (" + ", ".join(sorted(keys)) + ")"
        return f"dict with {len(obj)} keys"
    return type(obj).__name__


def _torch(path: Path) -> str:
    import torch  # deferred: torch, only in the loading process

    listed = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
    with listed(allowed()) if listed is not None else contextlib.nullcontext():
        obj = torch.load(path, map_location="cpu", weights_only=True)
    return describe(obj)


# -- what a refused pickle names ----------------------------------------------------------


@dataclass
class Scan:
    """The globals a pickle names, read from its opcodes."""

    names: list[tuple[str, str]] = field(default_factory=list)
    unresolved: int = 0
    complete: bool = False


_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING"}
_STRINGS |= {"BINSTRING", "STRING"}
_QUIET = {"FRAME", "PROTO", "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"}


def py3_name(module: str, qual: str) -> tuple[str, str]:
    """A name as Python 3 unpickles it: protocols 0 to 2 (torch.save's) write Python 2's
    names (``__builtin__``, ``commands.Popen`` for ``subprocess.Popen``)."""
    if (module, qual) in _compat_pickle.NAME_MAPPING:
        found: tuple[str, str] = _compat_pickle.NAME_MAPPING[(module, qual)]
        return found
    return _compat_pickle.IMPORT_MAPPING.get(module, module), qual


def _read_ops(stream: IO[bytes], scan: Scan) -> None:
    """Add the names of one pickle in ``stream`` to ``scan``. A ``STACK_GLOBAL`` names what the
    two pushes before it left; when they were not both strings it is counted unresolved."""
    memo: dict[int, Any] = {}
    pushed: list[Any] = []  # what each stack-changing opcode left on top (None: not a string)
    for op, arg, _pos in pickletools.genops(stream):
        name, index = op.name, arg if isinstance(arg, int) else -1
        if name in ("GLOBAL", "INST"):
            module, _, qual = str(arg).partition(" ")
            scan.names.append(py3_name(module, qual))
            pushed.append(None)
        elif name == "STACK_GLOBAL":
            pair = pushed[-2:]
            if len(pair) == 2 and all(isinstance(p, str) for p in pair):
                scan.names.append(py3_name(pair[0], pair[1]))
            else:
                scan.unresolved += 1
            pushed.append(None)
        elif name in ("EXT1", "EXT2", "EXT4"):
            scan.unresolved += 1  # a name from the copyreg extension registry
            pushed.append(None)
        elif name in _STRINGS:
            pushed.append(arg if isinstance(arg, str) else None)
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[index] = pushed[-1] if pushed else None
        elif name == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            pushed.append(memo.get(index))
        elif name not in _QUIET:
            pushed.append(None)
        del pushed[:-2]


def scan_pickle(path: Path) -> Scan:
    """Every global that ``path`` names: the ``data.pkl`` of a torch zip, else the pickles at
    the start of the file (a legacy torch file is several, then raw bytes)."""
    scan = Scan()
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            members = [i for i in zf.infolist() if i.filename.endswith("data.pkl")]
            for info in members:
                with zf.open(info) as fh:
                    _read_ops(fh, scan)
            scan.complete = bool(members)
        return scan
    with open(path, "rb") as fh:
        _read_ops(fh, scan)
        scan.complete = True
        for _ in range(4):  # the rest of a legacy file; raw storage bytes end the walk
            try:
                _read_ops(fh, scan)
            except Exception:  # noqa: BLE001 - not a pickle: the data after them
                break
    return scan


def _class_like(part: str) -> bool:
    bare = part.lstrip("_")
    return bool(bare) and not part.startswith("__") and bare[0].isupper()


def acts(module: str, qual: str) -> bool:
    """Whether a global a pickle names (not allowlisted) acts when unpickled: see the module
    docstring for the rule."""
    if (module, qual) in BUILDERS:
        return False
    parts = module.split(".")
    if module != "__main__" and any(p.startswith("__") for p in parts):
        return True
    if parts[0] in ("builtins", "__builtin__"):
        return True
    if parts[0] in getattr(sys, "stdlib_module_names", ()) and parts[0] not in STDLIB_DATA_MODULES:
        return True
    return not all(_class_like(p) for p in qual.split("."))


def _allowed_names() -> set[str]:
    try:
        import torch  # deferred: torch, only in the loading process
    except ImportError:
        return set()
    unpickler = getattr(torch, "_weights_only_unpickler", None)
    if unpickler is None:  # unknown torch: every name is judged, torch's own too (refused)
        return set()
    with contextlib.suppress(Exception):
        listed = getattr(torch.serialization, "safe_globals", None)
        with listed(allowed()) if listed is not None else contextlib.nullcontext():
            return set(unpickler._get_allowed_globals()) | set(
                unpickler._get_user_allowed_globals()
            )
    return set()


def verdict_of(path: Path, detail: str) -> tuple[str, list[str]]:
    """``(verdict, names)`` for a file the loader refused with ``detail``: ``refused`` and the
    names that act, ``pickled`` and the classes outside the allowlist, or ``failed``."""
    try:
        scan = scan_pickle(path)
    except Exception:  # noqa: BLE001 - not a readable pickle: damaged, cut short
        return "failed", []
    if not scan.complete:
        return "failed", []
    known = _allowed_names()
    named = [f"{m}.{q}" for m, q in dict.fromkeys(scan.names) if f"{m}.{q}" not in known]
    acting = [
        f"{m}.{q}" for m, q in dict.fromkeys(scan.names) if f"{m}.{q}" in named and acts(m, q)
    ]
    if scan.unresolved:
        acting.append(f"{scan.unresolved} name(s) computed while unpickling")
    if acting:
        return "refused", acting
    with open(path, "rb") as fh:
        head = fh.read(len(LEGACY_MAGIC))
    plain_pickle = not zipfile.is_zipfile(path) and head != LEGACY_MAGIC
    if (named and _REFUSED.search(detail)) or plain_pickle:
        return "pickled", named
    return "failed", []


# -- what to tell the user ----------------------------------------------------------------

_GLOBAL = re.compile(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)")
#: The line a file that is only hashed because it is pickled is shown with.
PICKLED = "pickled: not loaded, it would run code"


def explain(detail: str, verdict: str = "failed", names: list[str] | None = None) -> str:
    """Why a checkpoint did not load, in one line, with what to do (the loader's own words stay
    in ``detail``): a pickle of classes outside the allowlist, one that would run code, a file
    cut short, a format not recognised."""
    names = names or []
    if verdict == "refused":
        return (
            f"refused: unpickled, it would call {', '.join(names[:3])}: it was not loaded and "
            "must not be (never with weights_only=False); check what wrote it"
        )
    if verdict == "pickled":
        if not names:
            held = "it is a plain pickle (pickle.dump), which only pickle.load reads"
            advice = "save it with torch.save, or as json"
        elif names[0].startswith("__main__."):
            held = (
                f"it holds a whole {names[0].split('.', 1)[1]} object (a class of the job's code)"
            )
            advice = "save model.state_dict() instead"
        else:
            held = f"it holds a {names[0]} object (a class outside the allowlist)"
            advice = "save plain data (dataclasses.asdict(args), state_dict())"
        return f"{PICKLED}: {held}: verified by sha256 only; to load-check it, {advice}"
    found = _GLOBAL.search(detail)
    if found:
        return (
            f"it holds a {found.group(1)} object, which a safe load does not run: save plain "
            "dicts of tensors and numbers (state_dict())"
        )
    lowered = detail.lower()
    if any(
        word in lowered
        for word in (
            "central directory",
            "unexpected eof",
            "ran out of input",
            "truncated",
            "incomplete metadata",
            "shorter than",
        )
    ):
        return (
            "the file is cut short (a save that did not finish): trust the checkpoint before it, "
            "and save to a temporary name then rename (job.save_checkpoint does)"
        )
    if "invalid load key" in lowered or "not a zip" in lowered:
        return "it is not a torch checkpoint (or it is damaged): check what wrote it"
    return "it did not load safely: " + detail.split("\n", 1)[0][:200]


def _load(path: Path) -> str:
    if path.suffix == ".safetensors":
        return _safetensors(path)
    if path.suffix == ".json":
        return f"{type(json.loads(path.read_text())).__name__} (json)"
    return _torch(path)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _words(exc: Exception) -> str:
    """The loader's error in short: its first line and, from torch's long refusal, the line
    that names what was refused."""
    text = _ANSI.sub("", f"{type(exc).__name__}: {exc}")
    first, _, rest = text.partition("\n")
    said = [line.strip() for line in rest.splitlines() if "WeightsUnpickler error" in line]
    return " ".join([first.strip(), *said[:1]])


def check(path: Path) -> dict[str, Any]:
    """Try to load one checkpoint; never raises. ``verdict``: ``loaded``, ``pickled``,
    ``refused`` or ``failed``."""
    try:
        return {"ok": True, "verdict": "loaded", "detail": _load(path)}
    except Exception as exc:  # noqa: BLE001 - the result is the report
        detail = _words(exc)
        verdict, names = "failed", list[str]()
        if path.suffix not in (".safetensors", ".json"):
            verdict, names = verdict_of(path, detail)
        out = {"ok": False, "verdict": verdict, "detail": detail[:500]}
        out["why"] = explain(detail, verdict, names)
        if names:
            out["names"] = names[:10]
        return out


#: Seconds the warm loader waits for its next file before it exits (the caller starts a new
#: one when it needs one again).
IDLE_S = 600.0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _signal_name(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(number).name}"
        return f"killed by signal {number}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


def isolated(path: Path, limit: float) -> dict[str, Any]:
    """:func:`check` of ``path`` in a child forked for it alone, killed past ``limit`` seconds:
    whatever the file does to the process that loads it (a hang, a crash, memory it fills)
    ends with that process; this one never loads anything and goes on to the next file."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: load, answer, exit without running this process's exit handlers
        try:
            os.close(read_end)
            os.dup2(2, 1)  # a print while loading must not reach the caller's answers
            _write_all(write_end, json.dumps(check(path)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    chunks: list[bytes] = []
    deadline = time.monotonic() + limit
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {
                    "ok": False,
                    "verdict": "failed",
                    "detail": f"loading took longer than {limit:.0f} s",
                }
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
    status = os.waitpid(pid, 0)[1]
    with contextlib.suppress(ValueError):
        answer: dict[str, Any] = json.loads(b"".join(chunks))
        return answer
    return {
        "ok": False,
        "verdict": "failed",
        "detail": f"the process loading it died ({_signal_name(status)})",
    }


def serve(idle_s: float = IDLE_S) -> int:
    """The warm loader of :mod:`rgt_jupyter.run.pull.loader`: one request per line of stdin
    (``{"path": ..., "limit": seconds}``, or a JSON path alone: no limit), one JSON result line
    each. torch is imported once, first; each file is then loaded in a child forked for it
    (:func:`isolated`), so every load starts from a process that has loaded nothing. Exits at
    the end of stdin, or after ``idle_s`` seconds without a request."""
    with contextlib.suppress(ImportError):
        import torch  # noqa: F401  # deferred: imported once, before the first file, for all
    fd = sys.stdin.fileno()
    pending = b""
    while True:
        if b"\n" not in pending:
            if not select.select([fd], [], [], idle_s)[0]:
                return 0
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return 0
            pending += chunk
            continue
        line, pending = pending.split(b"\n", 1)
        request = json.loads(line)
        if isinstance(request, str):
            path, limit = Path(request), None
        else:
            path, limit = Path(request["path"]), request.get("limit")
        if limit is None or not hasattr(os, "fork"):
            result = check(path)  # the caller's own limit stops this process
        else:
            result = isolated(path, float(limit))
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


def main(argv: list[str]) -> int:
    """``--serve`` (see :func:`serve`), or check every path in ``argv`` and print the results
    as one JSON object."""
    if argv == ["--serve"]:
        return serve()
    sys.stdout.write(json.dumps({p: check(Path(p)) for p in argv}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
