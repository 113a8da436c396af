"""Where a batched pull's bytes go to disk, behind the stream (:mod:`.batch`).

The stream is read and hashed on the caller's thread; a thread of its own (:class:`Writer`)
opens each file's part and writes it, and a third confirms the written files in groups
(:func:`confirm_group`: one filesystem-wide flush, then each file's own fsync, which reports
that file's write error). A file's bytes go to disk while the next ones arrive.

A file of :data:`DIRECT_MIN` bytes or more is written with ``O_DIRECT`` where the filesystem
takes it: from aligned buffers straight to the disk, past the page cache, so its fsync has only
the metadata left to write and a large pull never piles up dirty pages that the kernel then
throttles the writer on. A write that ``O_DIRECT`` refuses (``EINVAL``: a file's tail that is
not a whole block, or a filesystem that takes the flag but not this alignment) is written through
the page cache instead, and so is every file where the flag is refused at ``open``.
"""

from __future__ import annotations

import errno
import mmap
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ...remote.ship import ALIGN, write_direct
from ...store.fsutil import SyncBehind, UnconfirmedWrite, fsync_file, sync_filesystem

#: Files from this size on are written O_DIRECT (where the filesystem takes it), from buffers of
#: :data:`CHUNK` bytes aligned to :data:`ALIGN` (the block the receiver's writes keep to).
DIRECT_MIN = 512 << 10
CHUNK = 2 << 20
#: Aligned buffers in flight between the reader and the writer (their memory is held for the
#: whole pull: ``BUFFERS * CHUNK`` bytes).
BUFFERS = 4
#: Smaller files' bytes queued for the writer, at most (each at most DIRECT_MIN bytes).
QUEUED_SMALL = 64
#: Files written through the page cache from this size on are flushed behind the writer as they
#: arrive (:class:`SyncBehind`).
SYNC_BEHIND_MIN = 64 << 20
#: Files are confirmed on disk in groups of this many (or of this many bytes).
GROUP_FILES = 128
GROUP_BYTES = 64 << 20
_O_DIRECT = getattr(os, "O_DIRECT", 0)


@dataclass
class Written:
    """The file the writer is writing: its descriptor, whether it is O_DIRECT, where the next
    bytes go, and its background flush (for a large file through the page cache)."""

    fd: int
    direct: bool
    pos: int
    behind: SyncBehind | None = None


Group = list[tuple[Any, int | None, SyncBehind | None]]


def confirm_group(items: Group) -> dict[int, BaseException]:
    """Confirm a group of written files: one filesystem-wide flush, then each file's own fsync
    (cheap now, and the one that reports that file's write error). Returns the errors by ``id``
    of the item's first member; every descriptor is closed."""
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


class Buffers:
    """A fixed pool of page-aligned buffers (anonymous maps), taken and given back."""

    def __init__(self, count: int = BUFFERS, size: int = CHUNK) -> None:
        self.size = size
        self._free: queue.Queue[mmap.mmap] = queue.Queue()
        self._all = [mmap.mmap(-1, size) for _ in range(count)]
        for buf in self._all:
            self._free.put(buf)

    def take(self) -> mmap.mmap:
        return self._free.get()

    def give(self, buf: mmap.mmap) -> None:
        self._free.put(buf)

    def close(self) -> None:
        for buf in self._all:
            try:
                buf.close()
            except BufferError:  # a view still refers to it: the map goes with the process
                pass


def _open_part(part: str, have: int, direct: bool) -> tuple[int, bool]:
    """The part's descriptor, O_DIRECT when asked and the filesystem takes it (else plain)."""
    flags = os.O_WRONLY | os.O_CREAT | (0 if have else os.O_TRUNC)
    if direct and _O_DIRECT:
        try:
            return os.open(part, flags | _O_DIRECT, 0o644), True
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # this filesystem has no O_DIRECT
                raise
    return os.open(part, flags, 0o644), False


def _pwrite_all(file: Written, view: memoryview) -> None:
    """Write ``view`` at the file's position (:func:`~rgt_jupyter.remote.ship.write_direct`)."""
    file.pos, file.direct = write_direct(file.fd, view, file.pos, file.direct)
    if file.behind is not None:
        file.behind.wrote(len(view))


class Writer:
    """Writes the files of one stream from a thread of its own, in the order handed over, and
    confirms them in groups from another; ``done`` is the queue of ``(item, future)`` pairs of
    confirmed groups, in order (the future gives each item's fsync error by ``id``).

    The first error (an ``open`` or ``write`` that failed, a full disk) stops the writing: the
    file it hit keeps what reached its part (resumed from by the next pull), later files are not
    written, and :attr:`error` holds it for the reader to raise."""

    def __init__(self, buffers: Buffers) -> None:
        self.buffers = buffers
        self.error: OSError | None = None
        self.done: deque[tuple[Any, Future[dict[int, BaseException]]]] = deque()
        self._ops: queue.Queue[tuple[Any, ...] | None] = queue.Queue(maxsize=QUEUED_SMALL)
        self._confirm = ThreadPoolExecutor(1, thread_name_prefix="rgt-pull-fsync")
        self._group: Group = []
        self._group_bytes = 0
        self._file: Written | None = None
        self._thread = threading.Thread(target=self._run, name="rgt-pull-write", daemon=True)
        self._thread.start()

    # -- the reader's side -------------------------------------------------------------------

    def begin(self, part: str, have: int, length: int) -> None:
        """A file's bytes come next (``length`` of them, after the ``have`` its part holds);
        from :data:`DIRECT_MIN` on they come in aligned buffers (:meth:`write_buffer`)."""
        direct = bool(_O_DIRECT) and length >= DIRECT_MIN and have % ALIGN == 0
        self._ops.put(("begin", part, have, direct, length))

    def write(self, data: bytes) -> None:
        """The current file's next bytes."""
        self._ops.put(("data", data, None))

    def write_buffer(self, buf: mmap.mmap, count: int) -> None:
        """The current file's next ``count`` bytes, in a buffer of :attr:`buffers` (given back
        once written)."""
        self._ops.put(("data", buf, count))

    def end(self, item: Any, nbytes: int) -> None:
        """The current file ended: ``item`` is confirmed with its group."""
        self._ops.put(("end", item, nbytes))

    def skip(self, item: Any) -> None:
        """``item`` has no bytes to write (missing, or discarded): handed back in order."""
        self._ops.put(("skip", item))

    def abandon(self) -> None:
        """The current file will get no more bytes: close it, keep what reached its part."""
        self._ops.put(("abandon",))

    def close(self) -> None:
        """Write and confirm everything handed over (the last group too), then stop."""
        if self._thread.is_alive():
            self._ops.put(None)
            self._thread.join()
        self._confirm.shutdown(wait=True)

    # -- the writer's side -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            op = self._ops.get()
            if op is None:
                self._drop_file()
                self._flush()
                return
            try:
                self._do(op)
            except OSError as exc:
                self.error = self.error or exc
                self._drop_file()
            finally:
                if op[0] == "data" and op[2] is not None:
                    self.buffers.give(op[1])

    def _do(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "skip":
            self._group.append((op[1], None, None))
            return
        if kind == "abandon":
            self._drop_file()
            return
        if self.error is not None:
            return  # nothing is written past the first error
        if kind == "begin":
            _, part, have, direct, length = op
            fd, direct = _open_part(part, have, direct)
            behind = SyncBehind(fd) if not direct and length >= SYNC_BEHIND_MIN else None
            self._file = Written(fd, direct, have, behind)
        elif kind == "data":
            assert self._file is not None
            data, count = op[1], op[2]
            with memoryview(data) as whole:
                _pwrite_all(self._file, whole if count is None else whole[:count])
        elif kind == "end":
            file, self._file = self._file, None
            assert file is not None
            self._group.append((op[1], file.fd, file.behind))
            self._group_bytes += op[2]
            if len(self._group) >= GROUP_FILES or self._group_bytes >= GROUP_BYTES:
                self._flush()

    def _drop_file(self) -> None:
        file, self._file = self._file, None
        if file is None:
            return
        if file.behind is not None:
            try:
                file.behind.close()
            except OSError:
                pass
        os.close(file.fd)

    def _flush(self) -> None:
        group, self._group, self._group_bytes = self._group, [], 0
        if group:
            future = self._confirm.submit(confirm_group, group)
            self.done.extend((item, future) for item, _, _ in group)


def read_into(
    fill: Callable[[memoryview], int], buf: mmap.mmap, count: int
) -> tuple[int, BaseException | None]:
    """Fill the first ``count`` bytes of ``buf`` with ``fill`` (which reads at most the view it
    is given and returns how much, 0 at the end). Returns how many bytes came and what stopped
    them short (an EOFError where the bytes ran out), so the bytes that did come are kept."""
    got = 0
    with memoryview(buf) as whole:
        view = whole[:count]
        try:
            while got < count:
                n = fill(view[got:])
                if not n:
                    return got, EOFError(f"the stream ended early ({count - got} bytes short)")
                got += n
        except BaseException as exc:  # noqa: BLE001 - handed back with the bytes that came
            return got, exc
        finally:
            view.release()
    return got, None
