"""Local file durability: atomic writes (temporary name in the same dir, fsync, rename, fsync of
the dir), flushing a long write as it goes (:class:`SyncBehind`), and telling a write the disk
did not confirm (:class:`UnconfirmedWrite`) from one that merely ran out of room."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any


class UnconfirmedWrite(OSError):
    """fsync or fdatasync of a file failed (``errno`` as the disk gave it: EIO, ENOSPC, ...).

    After such a failure the kernel may already have dropped the pages it could not write (they
    no longer count as dirty, so a later fsync succeeds and a read returns what is cached, or
    not), so none of the file's bytes can be trusted: the file is to be discarded, never resumed.
    """


def fsync_file(fd: int) -> None:
    """fsync ``fd``; a failure is raised as :class:`UnconfirmedWrite`."""
    try:
        os.fsync(fd)
    except OSError as exc:
        raise UnconfirmedWrite(exc.errno, f"{exc.strerror}, on fsync") from exc


def _syncfs() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return getattr(libc, "syncfs", None)
    except OSError:
        return None


_SYNCFS = _syncfs()


def sync_filesystem(fd: int) -> None:
    """Write out the dirty data of the whole filesystem ``fd`` lies on, in one journal commit
    (``syncfs``), best effort: many files' own fsyncs that follow then find little left to do,
    and they, not this, report each file's write errors. Where there is no ``syncfs``, nothing."""
    if _SYNCFS is not None:
        _SYNCFS(fd)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so a rename inside it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: str | os.PathLike[str]) -> tuple[str, int]:
    """The file's sha256 (hex) and size, read in 1 MiB blocks. (The files that travel to the
    job keep their own copy, held to the same results by a test.)"""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(target.parent)


class SyncBehind:
    """fdatasync a file being written, from a thread of its own, every ``every`` bytes: its data
    reaches the disk while the writer goes on, and the final fsync has little left to do (and
    a large write never piles up gigabytes of dirty pages)."""

    def __init__(self, fd: int, every: int = 64 << 20) -> None:
        self.fd = fd
        self.every = every
        self._pending = 0
        self._wake = threading.Event()
        self._done = False
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="rgt-sync-behind", daemon=True)
        self._thread.start()

    def wrote(self, count: int) -> None:
        """Count ``count`` more bytes written; past ``every``, a flush is started."""
        self._pending += count
        if self._pending >= self.every:
            self._pending = 0
            self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._done:
                return
            try:
                os.fdatasync(self.fd)
            except OSError as exc:
                # Reported by close(). It must be: the final fsync of the same open file may
                # succeed after this one failed, since the kernel reports a writeback error once.
                self._error = UnconfirmedWrite(
                    exc.errno, f"{exc.strerror}, on fdatasync while it was being written"
                )
                return

    def close(self) -> None:
        """Stop the thread (the caller fsyncs last); raise what a flush hit as
        :class:`UnconfirmedWrite`."""
        self._done = True
        self._wake.set()
        self._thread.join()
        if self._error is not None:
            raise self._error


def jsonl_records(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines text, in order; lines that are not whole objects (a
    line still being written, a stray value) are skipped."""
    out = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # a torn line, or one nested past any sense
            continue
        if isinstance(value, dict):
            out.append(value)
    return out
