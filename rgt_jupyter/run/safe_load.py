"""Load pulled checkpoints safely, in a separate process: ``python -m rgt_jupyter.run.safe_load F...``.

``.pt``/``.pth``/``.bin`` files are read with ``torch.load(weights_only=True)`` (no pickled code
runs), ``.safetensors`` by parsing the header, ``.json`` checkpoints with :mod:`json`. Prints one
JSON object: ``{path: {"ok": bool, "detail": str}}``. The caller runs this under a time limit.
"""

from __future__ import annotations

import json
import re
import struct
import sys
from pathlib import Path
from typing import Any


def _safetensors(path: Path) -> str:
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
    return f"{len(header) - ('__metadata__' in header)} tensors"


def _torch(path: Path) -> str:
    import torch  # deferred: torch, only in the loading process

    obj = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(obj, dict):
        return f"dict with {len(obj)} keys"
    return type(obj).__name__


_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")


def explain(detail: str) -> str:
    """Why a checkpoint did not load, in one line, with what to do (the loader's own words stay
    in ``detail``): a type ``weights_only`` refuses, a file cut short, a format not recognised."""
    found = _GLOBAL.search(detail)
    if found:
        name = found.group(1)
        if name.startswith(("numpy.", "numpy")):
            return (
                "it holds numpy objects, which a safe load does not run: save tensors or plain "
                "numbers instead (torch.from_numpy(a), a.tolist())"
            )
        if name == "argparse.Namespace":
            return (
                "it holds an argparse.Namespace, which a safe load does not run: save vars(args), "
                "a plain dict"
            )
        if name.startswith("__main__."):
            return (
                f"it holds a whole {name.split('.', 1)[1]} object (a class of the job's own "
                "code), which a safe load does not run: save model.state_dict() instead"
            )
        return (
            f"it holds a {name} object, which a safe load does not run: save plain dicts of "
            "tensors and numbers (state_dict())"
        )
    lowered = detail.lower()
    if any(
        word in lowered
        for word in ("central directory", "unexpected eof", "ran out of input", "truncated")
    ):
        return (
            "the file is cut short (a save that did not finish): trust the checkpoint before it, "
            "and save to a temporary name then rename (job.save_checkpoint does)"
        )
    if "invalid load key" in lowered or "not a zip" in lowered:
        return "it is not a torch checkpoint (or it is damaged): check what wrote it"
    return "it did not load safely: " + detail.split("\n", 1)[0][:200]


def check(path: Path) -> dict[str, Any]:
    """Try to load one checkpoint; never raises."""
    try:
        if path.suffix == ".safetensors":
            detail = _safetensors(path)
        elif path.suffix == ".json":
            detail = f"{type(json.loads(path.read_text())).__name__} (json)"
        else:
            detail = _torch(path)
        return {"ok": True, "detail": detail}
    except Exception as exc:  # noqa: BLE001 - the result is the report
        detail = f"{type(exc).__name__}: {exc}"
        return {"ok": False, "detail": detail[:500], "why": explain(detail)}


def main(argv: list[str]) -> int:
    """Check every path in ``argv`` and print the results as JSON."""
    results = {p: check(Path(p)) for p in argv}
    sys.stdout.write(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
