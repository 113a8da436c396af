"""Many files of a pull over one stream: the remote frames them (:mod:`rgt_jupyter.remote.ship`),
this side hashes each as it arrives while threads of their own write it into its ``.part`` and
confirm it on disk (:mod:`.sink`), as the next files arrive. A file is handed back only once its
fsync confirmed it, so the caller may judge and rename it; a stream cut short still hands back every file that came
whole (and confirmed) before it raises, and the file it was cut in stays a ``.part`` that the
next pull resumes from its end.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import PullError, TransportError
from ...remote import ship_argv
from ...store.fsutil import UnconfirmedWrite
from ...transport import Transport
from .sink import BUFFERS, DIRECT_MIN, Buffers, Writer, read_into

HEADER = struct.Struct(">BQQ")
DATA, MISSING, ERROR, END = 0, 1, 2, 255
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

    def fill(self, view: memoryview) -> int:
        """Read into ``view``: what is buffered first, else straight from the stream (at most
        ``len(view)`` bytes; 0 at the end)."""
        if self._start < self._end:
            take = min(len(view), self._end - self._start)
            view[:take] = self._view[self._start : self._start + take]
            self._start += take
            return take
        count: int = self._stream.readinto(view)
        return count

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


def fetch_batch(
    transport: Transport,
    python: str,
    wanted: list[Wanted],
    progress: Callable[[Wanted, int], None] | None = None,
    buffers: int = BUFFERS,
) -> Iterator[Fetched]:
    """Bring every file of ``wanted`` (each :func:`prepare`\\ d) over one stream; yield each as it
    is confirmed, in order. The stream is read and hashed here, the files written and confirmed
    behind it (:class:`~.sink.Writer`). A cut stream raises :class:`TransportError` after the
    files that came whole were yielded; a failed fsync raises :class:`UnconfirmedWrite` (that
    part deleted)."""
    request = {"files": [[w.src, w.have, -1] for w in wanted]}
    source = [json.dumps(request).encode()]
    failure: BaseException | None = None
    made: set[str] = set()
    pool = Buffers(buffers)
    writer = Writer(pool)
    pending = writer.done
    try:
        try:
            size = sum(w.size - w.have for w in wanted)
            stream = transport.exec_stream(
                ship_argv(python, "send"), source, "a batched pull", size_hint=size
            )
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
                        writer.skip(Fetched(want, missing=True))
                        continue
                    if kind != DATA:
                        raise TransportError(f"the stream is out of step at {want.rel}")
                    if offset != want.have:  # shorter now than the part here: it changed
                        for _ in reader.chunks(length):
                            pass
                        reader.exact(1)
                        want.part.unlink(missing_ok=True)
                        writer.skip(Fetched(want, "", offset + length, length, shrank=True))
                        continue
                    _receive(reader, writer, want, length, progress, made)
                    status = reader.exact(1)[0]
                    fetched = Fetched(
                        want, want.sha.hexdigest(), want.have + length, length, shrank=status != 0
                    )
                    writer.end(fetched, length)
                    while pending and (len(pending) > MAX_PENDING or pending[0][1].done()):
                        yield _settle(*pending.popleft())
                if reader.exact(1)[0] != END:
                    raise TransportError("the stream did not end where it should")
        except (TransportError, OSError, PullError) as exc:
            failure = exc
            writer.abandon()  # the file it was cut in keeps what landed, to resume from
        writer.close()  # what came whole before a cut is confirmed too
        if writer.error is not None and not isinstance(failure, PullError):
            failure = writer.error
        while pending:
            item = pending.popleft()
            try:
                yield _settle(*item)
            except UnconfirmedWrite:
                for _, future in pending:
                    future.exception()
                raise
    finally:
        writer.close()
        pool.close()
    if failure is not None:
        raise failure


def _receive(
    reader: FrameReader,
    writer: Writer,
    want: Wanted,
    length: int,
    progress: Callable[[Wanted, int], None] | None,
    made: set[str],
) -> None:
    """One file's ``length`` bytes from the stream, hashed here and handed to the writer: a
    large file in aligned buffers, read into them straight from the stream."""
    if writer.error is not None:
        raise writer.error
    parent = os.path.dirname(want.part_name)
    if parent not in made:
        os.makedirs(parent, exist_ok=True)
        made.add(parent)
    writer.begin(want.part_name, want.have, length)
    if length < DIRECT_MIN:
        data = reader.exact(length)
        want.sha.update(data)
        writer.write(data)
        return
    buffers = writer.buffers
    got = 0
    while got < length:
        buf = buffers.take()
        count, stopped = read_into(reader.fill, buf, min(buffers.size, length - got))
        if count:  # what came is written, also when the stream broke off after it
            with memoryview(buf) as view:
                want.sha.update(view[:count])
            writer.write_buffer(buf, count)
            got += count
        else:
            buffers.give(buf)
        if isinstance(stopped, EOFError):
            raise TransportError(str(stopped)) from stopped
        if stopped is not None:
            raise stopped
        if writer.error is not None:
            raise writer.error
        if progress is not None:
            progress(want, want.have + got)


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
            # The streams share the buffers one stream would have (at least two each).
            share = max(2, BUFFERS // len(groups))
            for fetched in fetch_batch(transport, python, group, told, share):
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
