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
Each object is written under a temporary name, hashed, fsynced, and given its name (its sha256)
only when the hash matches, with a stamp beside it (``<sha256>.ok``: its size, mtime, ctime and
inode then); one that does not match is deleted and reported. A stream cut short leaves
the objects that came whole and nothing else. The answer on stdout is JSON
``{"stored": [...], "bad": [...]}``; exit 3 when the stream ended early.
"""

import hashlib
import json
import os
import struct
import sys
from typing import Any, Dict, List, Optional

HEADER = struct.Struct(">BQQ")
DATA, MISSING, ERROR, END = 0, 1, 2, 255
CHUNK = 8 << 20


def _write_all(fd: int, data: bytes) -> None:
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


def recv(objdir: str) -> int:
    fd = sys.stdin.fileno()
    head = _read_exact(fd, 4)
    if head is None:
        return 3
    listed = _read_exact(fd, struct.unpack(">I", head)[0])
    if listed is None:
        return 3
    stored: List[str] = []
    bad: List[str] = []
    made = set()
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
        with open(tmp, "wb") as fh:
            while left:
                data = os.read(fd, min(left, CHUNK))
                if not data:
                    fh.close()
                    os.unlink(tmp)
                    sys.stdout.write(json.dumps({"stored": stored, "bad": bad, "cut": sha}))
                    return 3
                digest.update(data)
                fh.write(data)
                left -= len(data)
            fh.flush()
            os.fsync(fh.fileno())
        if digest.hexdigest() != sha:
            os.unlink(tmp)
            bad.append(sha)
            continue
        final = os.path.join(folder, sha)
        os.replace(tmp, final)
        _stamp(final)
        stored.append(sha)
    sys.stdout.write(json.dumps({"stored": stored, "bad": bad}))
    return 0


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
