"""A TCP proxy in front of sshd that cuts every connection on demand (after N more bytes from the
server), so transfers can be interrupted for real."""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class FaultProxy:
    """Forwards 127.0.0.1:<port> to ``target_port``; :meth:`arm` schedules a cut."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self.bytes_down = 0
        self.bytes_up = 0
        self._cut_at: int | None = None
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self.cuts = 0
        self.accepted = 0
        self.refusing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, after_bytes: int) -> None:
        """Cut every open connection once ``after_bytes`` more bytes came from the server."""
        with self._lock:
            self._cut_at = self.bytes_down + after_bytes

    def cut(self, refuse: bool = False) -> None:
        """Cut every open connection now; ``refuse``: close new ones at once until
        :meth:`admit` (the host is unreachable)."""
        with self._lock:
            self.refusing = refuse
            self._cut_all()

    def admit(self) -> None:
        """Forward new connections again."""
        with self._lock:
            self.refusing = False

    def disarm(self) -> None:
        """No more cuts."""
        with self._lock:
            self._cut_at = None

    def _cut_all(self) -> None:
        self.cuts += 1
        self._cut_at = None
        for sock in self._conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._conns.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._conns += [client, upstream]
                self.accepted += 1
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
                if not data:
                    break
                if down:
                    with self._lock:
                        if self._cut_at is not None and self.bytes_down + len(data) >= self._cut_at:
                            keep = self._cut_at - self.bytes_down
                            dst.sendall(data[:keep])
                            self.bytes_down += keep
                            self._cut_all()
                            return
                        self.bytes_down += len(data)
                else:
                    with self._lock:
                        self.bytes_up += len(data)
                dst.sendall(data)
            except OSError:
                break
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Stop accepting and drop every connection."""
        self.server.close()
        with self._lock:
            self._cut_all()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
