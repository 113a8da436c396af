"""One large file over several parallel streams, for links where one stream is held back by its
window (a far link: one SSH channel carries about window ÷ round trip, whatever the bandwidth).

The file is split into as many byte ranges as streams; each stream writes its range into the one
``.part`` at its offsets. Beside the part, ``<name>.part.ranges`` (JSON, written atomically, only
after an ``fdatasync`` of the part) records how far each range had landed, so a cut stream, or a
killed pull, resumes every range from what the disk confirmed: a cut re-sends nothing that had
landed, a kill at most :data:`CONFIRM_EVERY` bytes a stream. Once every range is in, the whole part
is hashed (the manifest judges), fsynced, and the record removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...remote import ship_argv
from ...store.fsutil import UnconfirmedWrite, atomic_write_bytes, fsync_file
from ...transport import Transport
from .batch import DATA, HEADER, FrameReader

#: Each stream confirms (fdatasync, then the record) every this many bytes.
CONFIRM_EVERY = 8 << 20
_BUF = 1 << 20


def record_path(part: Path) -> Path:
    """Where the ranges of ``part`` are recorded."""
    return part.with_name(part.name + ".ranges")


def plan(part: Path, size: int, streams: int) -> list[list[int]]:
    """``[start, landed, end]`` per range: resumed from the record beside ``part`` when it is
    for this size, else from a plain part's length (its bytes are a prefix), else from zero."""
    rec = record_path(part)
    try:
        saved = json.loads(rec.read_text())
        if part.exists() and saved.get("size") == size:
            ranges = [[int(a), int(b), int(c)] for a, b, c in saved["ranges"]]
            if all(0 <= a <= b <= c <= size for a, b, c in ranges):
                return ranges
    except (OSError, ValueError, TypeError, KeyError):
        pass
    rec.unlink(missing_ok=True)
    have = part.stat().st_size if part.exists() else 0
    have = have if have <= size else 0
    if not have:
        part.unlink(missing_ok=True)
    rest = size - have
    step = -(-rest // max(1, streams))
    out = []
    start = have
    while start < size:
        end = min(size, start + step)
        out.append([start, start, end])
        start = end
    if have:
        out.insert(0, [0, have, have])
    return out


def fetch_ranged(
    transport: Transport,
    python: str,
    src: str,
    dest: Path,
    size: int,
    streams: int,
    progress: Callable[[int], None] | None = None,
) -> tuple[str, int, int]:
    """Bring ``src`` to ``dest.part`` over ``streams`` parallel streams. Returns (sha256, size,
    bytes sent now). A cut stream raises :class:`TransportError` once every other stream ended
    and the record says what landed; a failed flush deletes part and record and raises
    :class:`UnconfirmedWrite`."""
    part = dest.with_name(dest.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    ranges = plan(part, size, streams)
    rec = record_path(part)
    lock = threading.Lock()

    saving = threading.Lock()  # one writer of the record at a time (one temporary name)

    def save() -> None:
        with saving:
            with lock:
                data = json.dumps({"size": size, "ranges": ranges}).encode()
            atomic_write_bytes(rec, data)

    fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
    errors: list[BaseException] = []
    sent = [0]
    base = sum(r[1] - r[0] for r in ranges)
    report = None if progress is None else (lambda now: progress(base + now))
    try:
        save()  # before the part grows holes: a part with holes never stands as a prefix
        os.ftruncate(fd, size)

        def run(r: list[int]) -> None:
            try:
                _stream_range(transport, python, src, fd, r, lock, save, sent, report)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller below
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=(r,), name="rgt-pull-range", daemon=True)
            for r in ranges
            if r[1] < r[2]
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        try:
            os.fdatasync(fd)
        except OSError as exc:
            errors.append(UnconfirmedWrite(exc.errno, f"{exc.strerror}, on fdatasync"))
        unconfirmed = [e for e in errors if isinstance(e, UnconfirmedWrite)]
        if unconfirmed:
            part.unlink(missing_ok=True)
            rec.unlink(missing_ok=True)
            raise unconfirmed[0]
        save()
        if any(isinstance(e, Changed) for e in errors):
            return "", size, sent[0]  # judged by the caller: changed during the pull
        if errors:
            raise errors[0]
        sha = hashlib.sha256()
        pos = 0
        while pos < size:
            data = os.pread(fd, 8 * _BUF, pos)
            if not data:
                break
            sha.update(data)
            pos += len(data)
        fsync_file(fd)
    finally:
        os.close(fd)
    rec.unlink(missing_ok=True)
    return sha.hexdigest(), size, sent[0]


def _stream_range(
    transport: Transport,
    python: str,
    src: str,
    fd: int,
    r: list[int],
    lock: threading.Lock,
    save: Callable[[], None],
    sent: list[int],
    progress: Callable[[int], None] | None,
) -> None:
    """One range's stream: pwrite at its offsets, confirm every :data:`CONFIRM_EVERY` bytes."""
    start, landed, end = r
    request = json.dumps({"files": [[src, landed, end - landed]]}).encode()
    stream: Any = transport.exec_stream(
        ship_argv(python, "send"), [request], f"{src} [{landed}, {end})", size_hint=end - landed
    )
    confirmed = landed
    with stream:
        reader = FrameReader(stream)
        kind, offset, length = HEADER.unpack(reader.exact(HEADER.size))
        if kind != DATA:
            raise FileNotFoundError(2, "vanished at the source", src)
        if offset != landed or length != end - landed:
            raise Changed(src)
        pos = landed
        try:
            for view in reader.chunks(length):
                while view:
                    n = os.pwrite(fd, view, pos)
                    view = view[n:]
                    pos += n
                    with lock:
                        sent[0] += n
                if pos - confirmed >= CONFIRM_EVERY:
                    _datasync(fd)
                    with lock:
                        r[1] = pos
                    confirmed = pos
                    save()
                if progress is not None:
                    progress(sent[0])
            reader.exact(1)
        finally:
            _datasync(fd)  # what was written is confirmed before the record says so
            with lock:
                r[1] = pos
            save()


class Changed(Exception):
    """The file at the source is no longer the size it was listed with."""


def _datasync(fd: int) -> None:
    try:
        os.fdatasync(fd)
    except OSError as exc:
        raise UnconfirmedWrite(exc.errno, f"{exc.strerror}, on fdatasync") from exc
