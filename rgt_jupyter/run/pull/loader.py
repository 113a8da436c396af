"""Checkpoints loaded in one warm, separate process, each under its own time limit.

The loader (``python -m rgt_jupyter.run.safe_load --serve``) imports torch once and then takes
one request per line on its stdin, answering each with one JSON line (:func:`safe_load.check`).
Each file is loaded in a child it forks for that file alone (:func:`safe_load.isolated`), killed
past the file's limit: a hostile or broken file ends with its own process, reported ``failed``,
and the next file starts from a process that has loaded nothing. Nothing is ever loaded in this
process.

One loader serves the whole process (:func:`shared_loader`): a pull, a gate over many jobs, and
the next pull in the same notebook pay one interpreter start and one torch import between them,
not one per checkpoint or per pull. It exits on its own after :data:`safe_load.IDLE_S` seconds
without a file (its memory is given back), and a fresh one is started when needed again.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import IO, Any

from ..safe_load import IDLE_S

#: Seconds a fresh loader may take to start (the interpreter and its torch import), on top of
#: its first file's own limit.
START_S = 120.0
#: A file's limit: this many seconds, plus one per this many bytes.
BASE_S = 60.0
BYTES_PER_S = 20e6

#: Seconds the caller allows on top of a file's limit, which the loader itself enforces.
MARGIN_S = 30.0


def limit_for(path: Path) -> float:
    """Seconds ``path`` may take to load."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    return BASE_S + size / BYTES_PER_S


class Loader:
    """One loader process, started on first use and again after a file that ran past its limit."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._fresh = False
        self._last = 0.0
        self._lock = threading.Lock()
        self.started = 0  # processes started (a test reads it)

    def _start(self) -> subprocess.Popen[bytes]:
        package_root = str(Path(str(resources.files("rgt_jupyter"))).parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "rgt_jupyter.run.safe_load", "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self.started += 1
        self._fresh = True
        return self._proc

    def _live(self) -> subprocess.Popen[bytes] | None:
        """The process when it is running and not about to exit for idleness."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return None
        if not self._fresh and time.monotonic() - self._last > IDLE_S - MARGIN_S:
            self.close()  # it is about to leave on its own: do not race it
            return None
        return proc

    def warm(self) -> None:
        """Start the process now unless it runs (it imports torch while the caller goes on)."""
        with self._lock:
            if self._live() is None:
                self._start()
                self._last = time.monotonic()

    def check(self, path: Path, limit: float | None = None) -> dict[str, Any]:
        """The load result of ``path`` (``verdict``: loaded, pickled, refused or failed)."""
        with self._lock:
            try:
                return self._check(path, limit_for(path) if limit is None else limit)
            finally:
                self._last = time.monotonic()

    def _check(self, path: Path, limit: float) -> dict[str, Any]:
        proc = self._live() or self._start()
        allowed = limit + MARGIN_S + (START_S if self._fresh else 0.0)
        self._fresh = False
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"path": str(path), "limit": limit}).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            return self._crashed()
        line = self._answer(proc, allowed)
        if line is None:  # the loader itself stopped answering: a fresh one for the next file
            self.close()
            return {
                "ok": False,
                "verdict": "failed",
                "detail": f"loading took longer than {limit:.0f} s",
            }
        if not line:
            return self._crashed()
        try:
            result: dict[str, Any] = json.loads(line)
        except ValueError:
            return self._crashed()
        return result

    def _answer(self, proc: subprocess.Popen[bytes], allowed: float) -> bytes | None:
        """The loader's next line; b"" when it died, None when it ran past ``allowed``."""
        assert proc.stdout is not None
        deadline = time.monotonic() + allowed
        fd = proc.stdout.fileno()
        buf = b""
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not select.select([fd], [], [], min(left, 1.0))[0]:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b""
            buf += chunk
        return buf

    def _crashed(self) -> dict[str, Any]:
        detail = ""
        if self._stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                self._stderr.seek(0)
                detail = self._stderr.read().decode(errors="replace")[-500:]
        self.close()
        return {"ok": False, "verdict": "failed", "detail": f"loader crashed: {detail}"}

    def close(self) -> None:
        """Stop the process (it exits on its own at the end of its input)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


_SHARED: Loader | None = None
_SHARED_LOCK = threading.Lock()


def shared_loader() -> Loader:
    """The process's one loader (started on first use, stopped when the process exits)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = Loader()
            atexit.register(_SHARED.close)
        return _SHARED


@contextlib.contextmanager
def warm_loader() -> Iterator[Loader]:
    """The shared loader for a block (a pull, a gate's checks across jobs)."""
    yield shared_loader()


def load_checkpoints(paths: list[Path], timeout: float | None = None) -> dict[str, dict[str, Any]]:
    """Load each checkpoint in the warm loader (see the module docstring), each under its own
    limit (``timeout`` seconds when given, else by its size: :func:`limit_for`)."""
    if not paths:
        return {}
    loader = shared_loader()
    return {str(p): loader.check(p, timeout) for p in paths}
