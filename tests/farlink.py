"""A far link in userspace: a TCP proxy that delays every byte by a fixed one-way time and caps
the bandwidth, each way (kernel ``netem`` is not available here).

Each direction of each connection is a queue: a byte read at ``t`` leaves the link's far end at
``departure + delay``, where departures are paced at ``rate`` bytes a second across every
connection sharing the link (one bottleneck, as a real path has). The queue holds at most
``delay × rate`` bytes in flight plus ``buffer`` bytes waiting at the bottleneck; past that the
proxy stops reading, so the sender's windows (TCP's and SSH's) meet the same bandwidth-delay
product a real path of that length has. Round trip: twice ``delay``.

    with FarLink(target_port, delay_s=0.040, rate=125e6) as link:
        ...connect to 127.0.0.1:link.port...
"""

from __future__ import annotations

import collections
import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

_CHUNK = 64 << 10


class _Pacer:
    """The shared bottleneck of one direction: when the next chunk may depart."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self._next = 0.0
        self._lock = threading.Lock()

    def depart(self, nbytes: int) -> float:
        now = time.monotonic()
        if self.rate is None:
            return now
        with self._lock:
            start = max(now, self._next)
            self._next = start + nbytes / self.rate
            return self._next


class _Direction:
    """One direction of one connection: read, queue with departure times, deliver when due."""

    def __init__(
        self, src: socket.socket, dst: socket.socket, link: FarLink, pacer: _Pacer
    ) -> None:
        self.src, self.dst, self.link, self.pacer = src, dst, link, pacer
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.queued = 0
        self.cond = threading.Condition()
        self.eof = False
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self) -> None:
        cap = self.link.capacity()
        try:
            while True:
                with self.cond:
                    while self.queued >= cap and not self.link.closed:
                        self.cond.wait(0.05)
                data = self.src.recv(_CHUNK)
                if not data:
                    break
                due = self.pacer.depart(len(data)) + self.link.delay_s
                with self.cond:
                    self.queue.append((due, data))
                    self.queued += len(data)
                    self.cond.notify_all()
        except OSError:
            pass
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def _write(self) -> None:
        try:
            while True:
                with self.cond:
                    while not self.queue and not self.eof:
                        self.cond.wait(0.05)
                    if not self.queue:
                        break
                    due, data = self.queue[0]
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.dst.sendall(data)
                with self.cond:
                    self.queue.popleft()
                    self.queued -= len(data)
                    self.cond.notify_all()
        except OSError:
            pass
        try:
            self.dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class FarLink:
    """Forwards 127.0.0.1:<port> to ``target_port`` over an emulated long path (see the module
    docstring): ``delay_s`` one way, ``rate`` bytes a second each way (None: no cap), and
    ``buffer`` bytes of queue at the bottleneck (default: one bandwidth-delay product)."""

    def __init__(
        self,
        target_port: int,
        delay_s: float = 0.040,
        rate: float | None = 125e6,
        buffer: int | None = None,
    ) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.rate = rate
        self.buffer = buffer
        self.closed = False
        self.accepted = 0
        self._down = _Pacer(rate)
        self._up = _Pacer(rate)
        self._socks: list[socket.socket] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def capacity(self) -> int:
        """Bytes one direction holds at most: in flight on the path, plus the bottleneck queue."""
        if self.rate is None:
            return 64 << 20
        bdp = int(self.rate * self.delay_s)
        return max(1 << 20, bdp + (bdp if self.buffer is None else self.buffer))

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks += [client, upstream]
            self.accepted += 1

            def start(c: socket.socket = client, u: socket.socket = upstream) -> None:
                time.sleep(self.delay_s)  # the SYN's way there: connecting costs a round trip
                _Direction(u, c, self, self._down)
                _Direction(c, u, self, self._up)

            threading.Thread(target=start, daemon=True).start()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self.closed = True
        self.server.close()
        for sock in self._socks:
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> FarLink:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@contextlib.contextmanager
def far_link_process(
    target_port: int, delay_s: float = 0.040, rate: float | None = 125e6
) -> Iterator[int]:
    """A :class:`FarLink` in a process of its own (so its threads never share an interpreter
    with what is measured through it); yields its port, stopped when the block ends."""
    argv = [sys.executable, "-m", "tests.farlink", str(target_port), str(delay_s), str(rate or 0)]
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        argv, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield port
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str]) -> int:
    """``python -m tests.farlink TARGET_PORT DELAY_S RATE``: serve until stdin closes."""
    target, delay, rate = int(argv[0]), float(argv[1]), float(argv[2])
    with FarLink(target, delay, rate or None) as link:
        print(link.port, flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
