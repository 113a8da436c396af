"""What a fault case measures: bytes of evidence lost, corrupt checkpoints trusted, teardowns
reachable without the gate.

*Evidence* is every file that held the job's work before the fault: outputs, checkpoints, logs,
a sentinel beside the destination. :meth:`Evidence.keep` takes their sha256 before the fault;
:meth:`Evidence.account` looks, after the fault and the recovery, for each of them (by content)
among the places where it should be (the job's dirs, a verified run); the sizes of those found
nowhere are the bytes lost.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from rgt_jupyter.remote.agent import sha256_file


def _files(root: Path) -> list[Path]:
    """Plain files under ``root``; inside a folder, hidden names (the temporaries of atomic
    writes in flight, such as ``.ckpt-….pt.tmp-PID``) are not evidence."""
    if root.is_symlink() or root.is_file():
        return [root] if root.is_file() and not root.is_symlink() else []
    found: list[Path] = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                found.append(path)
    return found


def sha256(path: Path) -> str:
    """The sha256 of one file (as the agent computes it for its manifests)."""
    return sha256_file(str(path))[0]


def _starts_with(path: Path, size: int, sha: str) -> bool:
    if path.stat().st_size < size:
        return False
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read(size)).hexdigest() == sha


class Evidence:
    """The measurements of one case (filled by the test, written to ``faults.json``)."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[int, str]] = {}
        self.prefixes: dict[str, tuple[int, str]] = {}
        self.bytes_lost: int | None = None
        self.lost_files: list[str] = []
        self.corrupt_trusted: int | None = None
        self.ungated_teardowns: int | None = None

    def keep(self, *paths: Path | str) -> int:
        """Record every file under ``paths`` as evidence (by content); return how many."""
        count = 0
        for root in map(Path, paths):
            for path in _files(root):
                self.kept[sha256(path)] = (path.stat().st_size, str(path))
                count += 1
        if not count:
            raise AssertionError(f"no evidence to keep under {[str(p) for p in paths]}")
        return count

    def sentinel(self, folder: Path | str) -> Path:
        """Write a sentinel file in ``folder`` (outside every destination) and keep it."""
        path = Path(folder) / "SENTINEL-do-not-touch.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"the user's own work, outside every destination\n" + os.urandom(64))
        self.keep(path)
        return path

    def keep_prefix(self, *paths: Path | str) -> None:
        """Record files that may grow (a log): their bytes now must stay the start of a file."""
        for root in map(Path, paths):
            for path in _files(root):
                data = path.read_bytes()
                self.prefixes[hashlib.sha256(data).hexdigest()] = (len(data), str(path))

    def keep_bytes(self, data: bytes, label: str) -> None:
        """Record content that must survive somewhere (a file the job is about to write)."""
        self.kept[hashlib.sha256(data).hexdigest()] = (len(data), label)

    def account(self, *places: Path | str) -> int:
        """Bytes of kept evidence found in none of ``places`` (added to the case's figure)."""
        found = [path for root in map(Path, places) for path in _files(root)]
        present = {sha256(path) for path in found}
        lost = [(size, where) for sha, (size, where) in self.kept.items() if sha not in present]
        for sha, (size, where) in self.prefixes.items():
            if not any(_starts_with(path, size, sha) for path in found):
                lost.append((size, where))
        nbytes = sum(size for size, _ in lost)
        self.bytes_lost = (self.bytes_lost or 0) + nbytes
        self.lost_files += [where for _, where in lost]
        return nbytes

    def lost(self, nbytes: int, what: str) -> int:
        """Record bytes of evidence counted lost by the test itself (e.g. log lines never shown)."""
        self.bytes_lost = (self.bytes_lost or 0) + nbytes
        if nbytes:
            self.lost_files.append(what)
        return nbytes

    def trusted(
        self, run_dir: Path | str | None, corrupt: set[str], bytes_differ: bool = True
    ) -> int:
        """How many of the ``corrupt`` checkpoints (paths relative to the run) the pull into
        ``run_dir`` trusted (added to the figure). With ``bytes_differ`` (their bytes are not
        what the job wrote) landing under their name is trusting them; otherwise (the job's own
        bytes, but no safe checkpoint) only a good load is. A verified run trusts them all."""
        count = 0
        if run_dir is not None and Path(run_dir).is_dir():
            run = Path(run_dir)
            manifest = json.loads((run / "manifest.json").read_text())
            verification = json.loads((run / "verification.json").read_text())
            landed = {f["path"] for f in manifest["files"]} if bytes_differ else set()
            loaded = {r["path"] for r in verification["checkpoint_loads"] if r.get("ok")}
            count = len(corrupt & (landed | loaded))
            if verification["verified"] and corrupt:
                count = max(count, len(corrupt))
        self.corrupt_trusted = (self.corrupt_trusted or 0) + count
        return count

    def teardown(self, reachable: bool, gate_should_pass: bool) -> bool:
        """Record one teardown check: ``reachable`` without the gate's passing is counted."""
        bypass = int(reachable and not gate_should_pass)
        self.ungated_teardowns = (self.ungated_teardowns or 0) + bypass
        return bool(bypass)

    def record(self) -> dict[str, Any]:
        """The figures for ``faults.json`` (None: not measured by this case)."""
        return {
            "bytes_lost": self.bytes_lost,
            "evidence_files": len(self.kept) + len(self.prefixes),
            "lost_files": self.lost_files[:20],
            "corrupt_checkpoints_trusted": self.corrupt_trusted,
            "teardowns_without_gate": self.ungated_teardowns,
        }
