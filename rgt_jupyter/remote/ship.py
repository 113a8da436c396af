"""Many files over one stream, both ways (stdlib only, Python 3.8+): run with ``python3 -c``.

``send``: the request on stdin is JSON, ``{"files": [[path, offset, length], ...]}`` (``length``
``-1``: to the end). Each file is written to stdout, in the order asked, as one frame::

    kind:u8  offset:u64  length:u64  <length bytes>  status:u8      (kind 0: data)
    kind:u8  0           length:u64  <length bytes of an error text> (kind 1: missing, 2: error)

and the stream ends with one byte ``255``. A data frame's ``length`` is what the file held when
it was opened (from ``offset``, at most the ``length`` asked); when the file shrank meanwhile the
rest is zeros and ``status`` is 1, so the receiver discards it. Bytes go by ``sendfile`` where the
kernel allows it. The receiver hashes what came: the sha256 manifest judges, never this framing.

``look``: many small reads in one answer, for the start of a pull. The request on stdin is JSON
``{"files": [path, ...], "stats": [path, ...], "limit": N, "limits": {path: N}, "listing":
{"when": path, "argv": [...]}}``; the answer on stdout is JSON ``{"files": {path: base64 or
null}, "stats": {path: [size, mtime, is_dir] or null}, "listing": stdout of argv or null}``: a
file longer than its limit (``limits`` for that path, else ``limit``) is left out (read the
usual way), and ``argv`` (the agent's listing with its hashes) runs only
when ``when`` exists (the job ended), never while a job still writes.

``recv OBJDIR``: the reverse, for pushes into a content-addressed store. It first writes one
byte, ``+`` (it started: the sender may send). stdin holds a 4-byte length, that many bytes of
JSON ``{"objects": [[sha256, size], ...], "place": null or {"agent": path, "dest": dir,
"entries": {rel: sha256}}}``, then each object's bytes in that order. Each object is hashed as
it arrives while a thread of its own writes it under a temporary name (O_DIRECT where the
filesystem takes it, for objects from ``DIRECT_MIN`` bytes on: straight to the disk, so its
fsync has little left to do) and, once it matched, fsyncs it and gives it its name (its sha256)
and a stamp beside it (``<sha256>.ok``: its size, mtime, ctime and inode then), in order, so the
disk overlaps the network. One that does not match is deleted and reported; a failed write or
fsync names nothing from there on and fails the run. A stream cut short leaves the objects that
came whole and nothing else. Then, when asked, the agent's ``place`` of the entries runs here.
The answer on stdout (after the ``+``) is JSON ``{"stored": [...], "bad": [...], "missing":
[...]}`` (``missing``: what ``place`` could not place; ``"cut": sha256`` of the object the
stream broke in instead); exit 3 when the stream ended early.
"""

import hashlib
import json
import os
import queue
import struct
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple, Union

HEADER = struct.Struct(">BQQ")
DATA, MISSING, ERROR, END = 0, 1, 2, 255
CHUNK = 8 << 20
#: The pipe buffer ``recv`` asks for on its input (the most an unprivileged process may).
PIPE_BYTES = 1 << 20
#: Work queued for the disk thread, at most (objects opened, buffers written, objects done).
PENDING = 256
#: What ``recv`` writes first, before it reads: it started (the sender may send).
HELLO = b"+"
#: Objects from this size on are written O_DIRECT (where the filesystem takes it), from
#: :data:`BUFFERS` aligned buffers of :data:`RECV_CHUNK` bytes.
DIRECT_MIN = 512 << 10
BUFFERS = 4
RECV_CHUNK = 4 << 20
ALIGN = 4096
_O_DIRECT = getattr(os, "O_DIRECT", 0)


def _write_all(fd: int, data: Union[bytes, memoryview]) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _send_file(out: int, path: str, offset: int, length: int) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError as exc:
        text = str(exc).encode("utf-8", "replace")
        _write_all(out, HEADER.pack(MISSING, 0, len(text)) + text)
        return
    except OSError as exc:
        text = str(exc).encode("utf-8", "replace")
        _write_all(out, HEADER.pack(ERROR, 0, len(text)) + text)
        return
    try:
        size = os.fstat(fd).st_size
        offset = min(max(0, offset), size)
        count = size - offset if length < 0 else min(length, size - offset)
        _write_all(out, HEADER.pack(DATA, offset, count))
        sent, pos, status = 0, offset, 0
        use_sendfile = hasattr(os, "sendfile")
        while sent < count:
            want = min(CHUNK, count - sent)
            n = 0
            if use_sendfile:
                try:
                    n = os.sendfile(out, fd, pos, want)
                except OSError:
                    use_sendfile = False
                    continue
            else:
                data = os.pread(fd, want, pos)
                _write_all(out, data)
                n = len(data)
            if n == 0:  # the file shrank: pad, and say the bytes are not the file's
                status = 1
                pad = bytes(min(CHUNK, count - sent))
                _write_all(out, pad)
                n = len(pad)
            sent += n
            pos += n
        _write_all(out, bytes([status]))
    finally:
        os.close(fd)


def send() -> int:
    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    out = sys.stdout.fileno()
    for path, offset, length in request["files"]:
        _send_file(out, path, int(offset), int(length))
    _write_all(out, bytes([END]))
    return 0


def _read_exact(fd: int, n: int) -> Optional[bytes]:
    chunks = []
    while n:
        data = os.read(fd, min(n, CHUNK))
        if not data:
            return None
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def _stamp(obj: str) -> None:
    """Record that ``obj`` was hashed and matched its name, as of its size, mtime, ctime and
    inode now (the agent's ``place`` copies it unread while they hold)."""
    st = os.stat(obj)
    tmp = "%s.ok.tmp-%d" % (obj, os.getpid())
    with open(tmp, "w") as fh:
        json.dump([st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino], fh)
    os.replace(tmp, obj + ".ok")


class _Disk:
    """Writes and confirms objects from a thread of its own while the next ones arrive, in the
    order handed over: each object's bytes are written (O_DIRECT from aligned buffers where the
    filesystem takes it, a tail that is not a whole block through the page cache), then it is
    fsynced, given its name and its stamp. The first failure (a write, an fsync) stops it: that
    object and every one after it stay unnamed (removed), and :meth:`close` raises it."""

    def __init__(self, buffers: "queue.Queue[Any]") -> None:
        self.stored: List[str] = []
        self.error: Optional[OSError] = None
        self.buffers = buffers
        self._queue: Any = queue.Queue(maxsize=PENDING)
        self._fd = -1
        self._pos = 0
        self._direct = False
        self._thread = threading.Thread(target=self._run, name="rgt-recv-disk")
        self._thread.daemon = True
        self._thread.start()

    def open(self, tmp: str, size: int) -> None:
        self._queue.put(("open", tmp, size))

    def write(self, buf: Any, count: int) -> None:
        """``count`` bytes of the aligned buffer ``buf`` (given back to :attr:`buffers`)."""
        self._queue.put(("data", buf, count))

    def done(self, tmp: str, final: str, sha: str) -> None:
        self._queue.put(("done", tmp, final, sha))

    def drop(self, tmp: str) -> None:
        self._queue.put(("drop", tmp))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._do(item)
            except OSError as exc:  # the queue is drained to its end whatever fails
                self.error = self.error or exc
            finally:
                if item[0] == "data":
                    self.buffers.put(item[1])

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _do(self, item: Any) -> None:
        kind = item[0]
        if kind == "open":
            self._close_fd()
            if self.error is not None:
                return
            _, tmp, size = item
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            self._direct = bool(_O_DIRECT) and size >= DIRECT_MIN
            if self._direct:
                try:
                    self._fd = os.open(tmp, flags | _O_DIRECT, 0o644)
                except OSError as exc:
                    if exc.errno != 22:  # EINVAL: no O_DIRECT on this filesystem
                        raise
                    self._direct = False
            if self._fd < 0:
                self._fd = os.open(tmp, flags, 0o644)
            self._pos = 0
        elif kind == "data":
            if self.error is None and self._fd >= 0:
                with memoryview(item[1]) as whole:
                    self._write(whole[: item[2]])
        elif kind == "drop":
            self._close_fd()
            _unlink(item[1])
        elif kind == "done":
            _, tmp, final, sha = item
            try:
                if self.error is None:
                    os.fsync(self._fd)
            finally:
                self._close_fd()
                if self.error is not None:
                    _unlink(tmp)
            if self.error is None:
                os.replace(tmp, final)
                _stamp(final)
                self.stored.append(sha)

    def _write(self, view: memoryview) -> None:
        self._pos, self._direct = write_direct(self._fd, view, self._pos, self._direct)

    def close(self) -> List[str]:
        """Wait for every object handed over; the names given (or the first error raised)."""
        self._queue.put(None)
        self._thread.join()
        self._close_fd()
        if self.error is not None:
            raise self.error
        return self.stored


def write_direct(fd: int, view: memoryview, pos: int, direct: bool) -> Tuple[int, bool]:
    """Write ``view`` at ``pos``: its whole blocks O_DIRECT while ``direct``, the rest (a tail
    that is not a whole block, and all of it once O_DIRECT refused an alignment) through the
    page cache, clearing the flag on ``fd``. Returns the position after it and whether ``fd`` is
    still O_DIRECT."""
    while view:
        take = len(view) - len(view) % ALIGN if direct else len(view)
        if take:
            try:
                n = os.pwrite(fd, view[:take], pos)
            except OSError as exc:
                if exc.errno != 22 or not direct:  # EINVAL: an alignment O_DIRECT refused
                    raise
                take = 0
        if not take:
            import fcntl  # deferred: POSIX only, and this module is also imported where it is absent

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_O_DIRECT)
            direct = False
            continue
        pos += n
        view = view[n:]
    return pos, direct


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _grow_pipe(fd: int) -> None:
    """A larger pipe buffer on ``fd`` where it is a pipe (fewer, larger reads); else nothing."""
    try:
        import fcntl  # deferred: POSIX only, and this module is also imported where it is absent

        fcntl.fcntl(fd, 1031, PIPE_BYTES)  # F_SETPIPE_SZ
    except (ImportError, OSError):
        pass


def _fill(fd: int, view: memoryview) -> int:
    """Read into all of ``view`` (less only where the input ends); how much came."""
    got = 0
    while got < len(view):
        n = os.readv(fd, [view[got:]])
        if not n:
            break
        got += n
    return got


def _place(request: Dict[str, Any], objdir: str) -> List[str]:
    """The agent's ``place`` of the request's entries, in this process (the agent's file loaded
    as a module): the sha256s it could not place."""
    import importlib.util  # deferred: only a push that places needs it

    spec = importlib.util.spec_from_file_location("rgt_agent", request["agent"])
    if spec is None or spec.loader is None:
        raise OSError("cannot load the agent at %s" % request["agent"])
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    missing: List[str] = agent.place_entries(objdir, request["dest"], request["entries"])
    return missing


def recv(objdir: str) -> int:
    import mmap  # deferred: only a push needs aligned buffers

    fd = sys.stdin.fileno()
    os.write(sys.stdout.fileno(), HELLO)  # started: the sender may now send
    head = _read_exact(fd, 4)
    if head is None:
        return 3
    listed = _read_exact(fd, struct.unpack(">I", head)[0])
    if listed is None:
        return 3
    _grow_pipe(fd)
    request = json.loads(listed.decode("utf-8"))
    bad: List[str] = []
    made = set()
    buffers: Any = queue.Queue()
    for _ in range(BUFFERS):
        buffers.put(mmap.mmap(-1, RECV_CHUNK))
    disk = _Disk(buffers)
    cut = None
    try:
        for sha, size in request["objects"]:
            if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
                raise ValueError("not a sha256: %r" % sha)
            folder = os.path.join(objdir, sha[:2])
            if folder not in made:
                os.makedirs(folder, exist_ok=True)
                made.add(folder)
            tmp = os.path.join(folder, ".%s.tmp-%d" % (sha, os.getpid()))
            digest = hashlib.sha256()
            left = int(size)
            disk.open(tmp, left)
            while left:
                if disk.error is not None:
                    raise disk.error
                buf = buffers.get()
                with memoryview(buf) as whole:
                    n = _fill(fd, whole[: min(left, RECV_CHUNK)])
                    digest.update(whole[:n])
                disk.write(buf, n)
                left -= n
                if not n:
                    break
            if left:
                disk.drop(tmp)
                cut = sha
                break
            if digest.hexdigest() != sha:
                disk.drop(tmp)
                bad.append(sha)
                continue
            disk.done(tmp, os.path.join(folder, sha), sha)
    finally:
        stored = disk.close()  # what came whole is kept, also when the stream was cut
    answer: Dict[str, Any] = {"stored": stored, "bad": bad}
    if cut is not None:
        answer["cut"] = cut
    elif request.get("place"):
        answer["missing"] = _place(request["place"], objdir)
    sys.stdout.write(json.dumps(answer))
    return 3 if cut is not None else 0


def _pids(data: bytes) -> List[int]:
    try:
        record = json.loads(data.decode("utf-8"))
    except ValueError:
        return []
    if not isinstance(record, dict):
        return []
    return [
        v
        for k, v in sorted(record.items())
        if k.endswith("pid") and isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 22
    ]


def look() -> int:
    import base64
    import stat as stat_mod
    import subprocess

    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    default = int(request.get("limit", 1 << 20))
    limits = request.get("limits") or {}
    files: Dict[str, Optional[str]] = {}
    for path in request.get("files", []):
        limit = int(limits.get(path, default))
        try:
            with open(path, "rb") as fh:
                data = fh.read(limit + 1)
        except OSError:
            files[path] = None
            continue
        if len(data) <= limit:
            files[path] = base64.b64encode(data).decode("ascii")
        if path.endswith("/status.json"):  # the processes it names: are they alive?
            for pid in _pids(data):
                proc = "/proc/%d/stat" % pid
                try:
                    with open(proc, "rb") as fh:
                        files[proc] = base64.b64encode(fh.read(4096)).decode("ascii")
                except OSError:
                    files[proc] = None
    stats: Dict[str, Optional[List[Any]]] = {}
    for path in request.get("stats", []):
        try:
            st = os.stat(path)
        except OSError:
            stats[path] = None
            continue
        stats[path] = [st.st_size, st.st_mtime, stat_mod.S_ISDIR(st.st_mode)]
    listing = None
    ask = request.get("listing")
    if ask and os.path.exists(ask["when"]):
        done = subprocess.run(ask["argv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if done.returncode == 0:
            listing = done.stdout.decode("utf-8")
    sys.stdout.write(json.dumps({"files": files, "stats": stats, "listing": listing}))
    return 0


def main(argv: List[str]) -> int:
    if argv[:1] == ["send"]:
        return send()
    if argv[:1] == ["look"]:
        return look()
    if len(argv) == 2 and argv[0] == "recv":
        return recv(argv[1])
    sys.stderr.write("usage: ship send | ship look | ship recv OBJDIR\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
