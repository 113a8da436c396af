"""Build and use ``shim/faultshim.c``: faults injected at the C library boundary by LD_PRELOAD
(fsync failing with EIO for chosen paths, a wall clock off by N seconds).

The shim is compiled once per session with the system C compiler (``scripts/setup.sh`` installs
it); a missing compiler is a loud failure, never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("shim") / "faultshim.c"


def build(out_dir: Path) -> Path:
    """Compile the shim into ``out_dir`` and return the shared object's path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise AssertionError("no C compiler: run scripts/setup.sh (it installs gcc)")
    out = out_dir / "faultshim.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(SOURCE), "-ldl"],
        check=True,
        capture_output=True,
    )
    return out


def env_with(shim: Path, base: dict[str, str] | None = None, **faults: str) -> dict[str, str]:
    """An environment that preloads the shim with ``faults`` (``RGT_FAULT_FSYNC_EIO=...``,
    ``RGT_FAULT_CLOCK_OFFSET_S=...``)."""
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = str(shim)
    env.update(faults)
    return env
