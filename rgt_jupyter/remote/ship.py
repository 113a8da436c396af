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

``recv OBJDIR``: the reverse, for pushes into a content-addressed store. stdin holds a 4-byte
length, that many bytes of JSON ``[[sha256, size], ...]``, then each object's bytes in that order.
Each object is written under a temporary name and hashed as it arrives; one whose hash matches
is then fsynced, given its name (its sha256) and a stamp beside it (``<sha256>.ok``: its size,
mtime, ctime and inode then) by a thread of its own, in order, while the next objects arrive, so
the disk's flushes overlap the network. One that does not match is deleted and reported; a
failed fsync names nothing from there on and fails the run. A stream cut short leaves the objects
that came whole and nothing else. The answer on stdout is JSON ``{"stored": [...], "bad": [...]}``
(and ``"cut": sha256`` of the object the stream broke in); exit 3 when the stream ended early.
"""

import hashlib
import json
import os
import queue
import struct
import sys
import threading
from typing import Any, Dict, List, Optional, Union

HEADER = struct.Struct(">BQQ")
DATA, MISSING, ERROR, END = 0, 1, 2, 255
CHUNK = 8 << 20
#: The pipe buffer ``recv`` asks for on its input (the most an unprivileged process may).
PIPE_BYTES = 1 << 20
#: Objects received whole but not yet confirmed on disk, at most (each holds a descriptor).
PENDING = 64


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


class _Confirmer:
    """Confirms whole objects on disk from a thread of its own while the next ones arrive: each
    is fsynced, then given its name and its stamp, in order. The first failed fsync stops it:
    that object and every one after it stay unnamed (removed), and :meth:`close` raises it."""

    def __init__(self) -> None:
        self.stored: List[str] = []
        self.error: Optional[OSError] = None
        self._queue: Any = queue.Queue(maxsize=PENDING)
        self._thread = threading.Thread(target=self._run, name="rgt-recv-fsync")
        self._thread.daemon = True
        self._thread.start()

    def put(self, fd: int, tmp: str, final: str, sha: str) -> None:
        self._queue.put((fd, tmp, final, sha))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fd, tmp, final, sha = item
            try:
                if self.error is None:
                    os.fsync(fd)
            except OSError as exc:
                self.error = exc
            finally:
                os.close(fd)
            try:
                if self.error is not None:
                    os.unlink(tmp)
                    continue
                os.replace(tmp, final)
                _stamp(final)
                self.stored.append(sha)
            except OSError as exc:  # the queue is drained to its end whatever fails
                self.error = self.error or exc

    def close(self) -> List[str]:
        """Wait for every object handed over; the names given (or the fsync's error raised)."""
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.stored


def _grow_pipe(fd: int) -> None:
    """A larger pipe buffer on ``fd`` where it is a pipe (fewer, larger reads); else nothing."""
    try:
        import fcntl  # deferred: POSIX only, and this module is also imported where it is absent

        fcntl.fcntl(fd, 1031, PIPE_BYTES)  # F_SETPIPE_SZ
    except (ImportError, OSError):
        pass


def recv(objdir: str) -> int:
    fd = sys.stdin.fileno()
    head = _read_exact(fd, 4)
    if head is None:
        return 3
    listed = _read_exact(fd, struct.unpack(">I", head)[0])
    if listed is None:
        return 3
    _grow_pipe(fd)
    bad: List[str] = []
    made = set()
    buf = bytearray(PIPE_BYTES)
    view = memoryview(buf)
    confirm = _Confirmer()
    cut = None
    try:
        for sha, size in json.loads(listed.decode("utf-8")):
            if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
                raise ValueError("not a sha256: %r" % sha)
            folder = os.path.join(objdir, sha[:2])
            if folder not in made:
                os.makedirs(folder, exist_ok=True)
                made.add(folder)
            tmp = os.path.join(folder, ".%s.tmp-%d" % (sha, os.getpid()))
            digest = hashlib.sha256()
            left = int(size)
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                while left:
                    n = os.readv(fd, [view[: min(left, PIPE_BYTES)]])
                    if not n:
                        break
                    digest.update(view[:n])
                    _write_all(out, view[:n])
                    left -= n
            except BaseException:
                os.close(out)
                os.unlink(tmp)
                raise
            if left:
                os.close(out)
                os.unlink(tmp)
                cut = sha
                break
            if digest.hexdigest() != sha:
                os.close(out)
                os.unlink(tmp)
                bad.append(sha)
                continue
            confirm.put(out, tmp, os.path.join(folder, sha), sha)
    finally:
        stored = confirm.close()  # what came whole is kept, also when the stream was cut
    answer: Dict[str, Any] = {"stored": stored, "bad": bad}
    if cut is not None:
        answer["cut"] = cut
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
