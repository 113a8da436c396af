"""Many files of a pull over one stream: the remote frames them (:mod:`rgt_jupyter.remote.ship`),
this side writes each into its ``.part``, hashes it as it arrives and confirms it on disk from a
thread of its own while the next files arrive, in groups (one filesystem-wide flush, then each
file's own fsync, which reports that file's write error). A file is handed back only once its fsync confirmed it, so
the caller may judge and rename it; a stream cut short still hands back every file that came
whole (and confirmed) before it raises, and the file it was cut in stays a ``.part`` that the
next pull resumes from its end.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import PullError, TransportError
from ...remote import ship_argv
from ...store.fsutil import SyncBehind, UnconfirmedWrite, fsync_file, sync_filesystem
from ...transport import Transport

HEADER = struct.Struct(">BQQ")
DATA, MISSING, ERROR, END = 0, 1, 2, 255
#: Files from this size on are flushed behind the writer as they arrive (:class:`SyncBehind`).
SYNC_BEHIND_MIN = 64 << 20
#: Files are confirmed on disk in groups of this many (or of this many bytes): one
#: filesystem-wide flush for the group, then each file's own fsync, which then costs little.
GROUP_FILES = 128
GROUP_BYTES = 64 << 20
#: Files received but not yet confirmed, at most: past it the receiver waits for the disk.
MAX_PENDING = 384
_BUF = 1 << 20


@dataclass
class Wanted:
    """One file to bring: where it is, where its part goes, how much of it is here already."""

    rel: str
    src: str
    dest: Path
    size: int
    have: int = 0
    sha: Any = None  # hashlib object over the part's first ``have`` bytes
    part: Path = field(init=False)
    #: The part as a string (a pull of 100,000 files makes no Path per use).
    part_name: str = field(init=False)

    def __post_init__(self) -> None:
        self.part = self.dest.with_name(self.dest.name + ".part")
        self.part_name = str(self.part)


@dataclass
class Fetched:
    """A file that came (its part confirmed on disk), or that was missing at the source."""

    want: Wanted
    sha256: str = ""
    size: int = 0
    sent: int = 0
    missing: bool = False
    shrank: bool = False


def prepare(want: Wanted) -> Wanted:
    """Hash what an interrupted pull left of ``want``'s part (discarding a part that is longer
    than the file) so the stream asks for the rest only."""
    part = want.part
    want.sha = hashlib.sha256()
    want.have = 0
    try:
        st = part.stat()
    except FileNotFoundError:
        return want
    if st.st_size > want.size:
        part.unlink()
        return want
    with open(part, "rb") as fh:
        for chunk in iter(lambda: fh.read(_BUF), b""):
            want.sha.update(chunk)
            want.have += len(chunk)
    return want


class FrameReader:
    """Exact reads over a stream, buffered."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._buf = bytearray(_BUF)
        self._view = memoryview(self._buf)
        self._start = self._end = 0

    def _fill(self) -> bool:
        if self._start:
            rest = self._end - self._start
            self._buf[:rest] = self._buf[self._start : self._end]
            self._start, self._end = 0, rest
        count = self._stream.readinto(self._view[self._end :])
        self._end += count
        return count > 0

    def exact(self, n: int) -> bytes:
        while self._end - self._start < n:
            if not self._fill():
                raise TransportError(
                    f"the stream ended early ({self._end - self._start} of {n} bytes)"
                )
        out = bytes(self._view[self._start : self._start + n])
        self._start += n
        return out

    def chunks(self, n: int) -> Iterator[memoryview]:
        """The next ``n`` bytes as views (valid until the next read)."""
        while n:
            if self._start == self._end:
                self._start = self._end = 0
                count = self._stream.readinto(self._view[: min(_BUF, max(n, 1 << 16))])
                if not count:
                    raise TransportError(f"the stream ended early ({n} bytes short)")
                self._end = count
            take = min(n, self._end - self._start)
            yield self._view[self._start : self._start + take]
            self._start += take
            n -= take


def _confirm_group(
    items: list[tuple[Fetched, int | None, SyncBehind | None]],
) -> dict[int, BaseException]:
    """Confirm a group of written files: one filesystem-wide flush, then each file's own fsync
    (cheap now, and the one that reports that file's write error). Returns the errors by
    ``id`` of the file's :class:`Fetched`; every descriptor is closed."""
    fds = [fd for _, fd, _ in items if fd is not None]
    if fds:
        sync_filesystem(fds[0])
    errors: dict[int, BaseException] = {}
    for fetched, fd, behind in items:
        if fd is None:
            continue
        try:
            if behind is not None:
                behind.close()
            fsync_file(fd)
        except UnconfirmedWrite as exc:
            errors[id(fetched)] = exc
        finally:
            os.close(fd)
    return errors


def fetch_batch(
    transport: Transport,
    python: str,
    wanted: list[Wanted],
    progress: Callable[[Wanted, int], None] | None = None,
) -> Iterator[Fetched]:
    """Bring every file of ``wanted`` (each :func:`prepare`\\ d) over one stream; yield each as it
    is confirmed, in order. A cut stream raises :class:`TransportError` after the files that came
    whole were yielded; a failed fsync raises :class:`UnconfirmedWrite` (that part deleted)."""
    request = {"files": [[w.src, w.have, -1] for w in wanted]}
    source = [json.dumps(request).encode()]
    pending: deque[tuple[Fetched, Future[dict[int, BaseException]]]] = deque()
    group: list[tuple[Fetched, int | None, SyncBehind | None]] = []
    made: set[str] = set()
    failure: BaseException | None = None
    with ThreadPoolExecutor(1, thread_name_prefix="rgt-pull-fsync") as pool:

        def confirm(items: list[tuple[Fetched, int | None, SyncBehind | None]]) -> None:
            if items:
                future = pool.submit(_confirm_group, items)
                pending.extend((fetched, future) for fetched, _, _ in items)

        try:
            size = sum(w.size - w.have for w in wanted)
            stream = transport.exec_stream(
                ship_argv(python, "send"), source, "a batched pull", size_hint=size
            )
            group_bytes = 0
            with stream:
                reader = FrameReader(stream)
                for want in wanted:
                    kind, offset, length = HEADER.unpack(reader.exact(HEADER.size))
                    if kind in (MISSING, ERROR):
                        text = reader.exact(length).decode(errors="replace")
                        if kind == ERROR:
                            raise PullError(
                                f"{want.rel} cannot be read on the host ({text}): nothing of it "
                                "was trusted. Fix its permissions there and pull again; what "
                                "landed before it is kept and resumed."
                            )
                        group.append((Fetched(want, missing=True), None, None))
                        continue
                    if kind != DATA:
                        raise TransportError(f"the stream is out of step at {want.rel}")
                    if offset != want.have:  # shorter now than the part here: it changed
                        for _ in reader.chunks(length):
                            pass
                        reader.exact(1)
                        want.part.unlink(missing_ok=True)
                        gone = Fetched(want, "", offset + length, length, shrank=True)
                        group.append((gone, None, None))
                        continue
                    parent = os.path.dirname(want.part_name)
                    if parent not in made:
                        os.makedirs(parent, exist_ok=True)
                        made.add(parent)
                    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if want.have else os.O_TRUNC)
                    fd = os.open(want.part_name, flags, 0o644)
                    behind = SyncBehind(fd) if length >= SYNC_BEHIND_MIN else None
                    got = 0
                    try:
                        for view in reader.chunks(length):
                            want.sha.update(view)
                            _write_all(fd, view)
                            got += len(view)
                            if behind is not None:
                                behind.wrote(len(view))
                            if progress is not None and length >= _BUF:
                                progress(want, want.have + got)
                        status = reader.exact(1)[0]
                    except BaseException:
                        if behind is not None:
                            behind.close()
                        os.close(fd)
                        raise
                    fetched = Fetched(
                        want, want.sha.hexdigest(), want.have + got, got, shrank=status != 0
                    )
                    group.append((fetched, fd, behind))
                    group_bytes += got
                    if len(group) >= GROUP_FILES or group_bytes >= GROUP_BYTES:
                        confirm(group)
                        group, group_bytes = [], 0
                    while pending and (len(pending) > MAX_PENDING or pending[0][1].done()):
                        yield _settle(*pending.popleft())
                if reader.exact(1)[0] != END:
                    raise TransportError("the stream did not end where it should")
        except (TransportError, OSError, PullError) as exc:
            failure = exc
        confirm(group)  # what came whole before a cut is kept too
        while pending:
            item = pending.popleft()
            try:
                yield _settle(*item)
            except UnconfirmedWrite:
                for _, future in pending:
                    future.exception()
                raise
    if failure is not None:
        raise failure


def split(wanted: list[Wanted], streams: int) -> list[list[Wanted]]:
    """``wanted`` in up to ``streams`` groups of about equal bytes, each in the order given
    (``.sha256`` records first, as the caller ordered them)."""
    if streams <= 1 or len(wanted) < 2:
        return [wanted]
    order = {id(w): i for i, w in enumerate(wanted)}
    groups: list[list[Wanted]] = [[] for _ in range(streams)]
    loads = [0] * streams
    for want in sorted(wanted, key=lambda w: w.size - w.have, reverse=True):
        i = loads.index(min(loads))
        groups[i].append(want)
        loads[i] += want.size - want.have + 4096  # a file costs something however small
    return [sorted(g, key=lambda w: order[id(w)]) for g in groups if g]


def fetch_groups(
    transport: Transport,
    python: str,
    groups: list[list[Wanted]],
    handle: Callable[[Fetched], None],
    progress: Callable[[Wanted, int], None] | None = None,
) -> None:
    """:func:`fetch_batch` of each group, the groups over parallel streams (a far link);
    ``handle`` hears every file (one at a time). When streams failed, the others still end
    first; then a failed flush is raised before any cut."""
    if len(groups) == 1:
        for fetched in fetch_batch(transport, python, groups[0], progress):
            handle(fetched)
        return
    lock = threading.Lock()
    errors: list[BaseException] = []

    def told(want: Wanted, in_file: int) -> None:
        if progress is not None:
            with lock:
                progress(want, in_file)

    def run(group: list[Wanted]) -> None:
        try:
            for fetched in fetch_batch(transport, python, group, told):
                with lock:
                    handle(fetched)
        except BaseException as exc:  # noqa: BLE001 - raised below, once every stream ended
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(g,), name="rgt-pull-batch") for g in groups]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise next((e for e in errors if isinstance(e, UnconfirmedWrite)), errors[0])


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


def _settle(fetched: Fetched, confirmed: Future[dict[int, BaseException]]) -> Fetched:
    error = confirmed.result().get(id(fetched))
    if isinstance(error, UnconfirmedWrite):
        fetched.want.part.unlink(missing_ok=True)
        error.rel = fetched.want.rel  # type: ignore[attr-defined]
        raise error
    return fetched
