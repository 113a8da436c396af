"""A TCP proxy in front of sshd that breaks connections for real, on demand.

* :meth:`FaultProxy.arm`: cut every connection (or, with ``one=True``, only the one they came
  on) once N more bytes came from the server (or, with ``up=True``, from the client); :meth:`FaultProxy.cut` cuts now. A cut closes with FIN, or with
  RST (``reset=True``, :meth:`FaultProxy.reset`: ``SO_LINGER`` on with a zero timeout);
  ``refuse`` then closes every new connection at once until :meth:`FaultProxy.admit`.
* :meth:`FaultProxy.stall`: nothing is forwarded either way, and nothing is closed (a peer gone
  silent: no FIN, no RST), at once or once N more bytes came from the server; new connections
  are taken and stall too. :meth:`FaultProxy.hold`
  stalls the server-to-client direction only (at once, or once N more bytes came from the
  client). :meth:`FaultProxy.release` forwards again, held bytes first.
* :meth:`FaultProxy.forget`: the open connections are forgotten as a NAT or a rebooted
  middlebox forgets them: nothing is sent to either end until one of them sends, and that is
  answered with RST.
* :meth:`FaultProxy.throttle`: at most so many bytes a second each way.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from types import TracebackType

_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, not FIN


class _Pair:
    """One proxied connection: the client's socket and the one to the server."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.closed = False
        self.forgotten = False

    def close(self, rst: bool) -> None:
        self.closed = True
        for sock in (self.client, self.upstream):
            try:
                if rst:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
                    # A recv blocked on another thread would hold the socket open past close():
                    # SHUT_RD wakes it and sends nothing, so the close is what goes out: RST.
                    sock.shutdown(socket.SHUT_RD)
                else:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class FaultProxy:
    """Forwards 127.0.0.1:<port> to ``target_port``; see the module docstring."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self.bytes_down = 0
        self.bytes_up = 0
        self._cut_at: int | None = None
        self._cut_up_at: int | None = None
        self._cut_rst = False
        self._cut_refuse = False
        self._cut_one = False
        self._hold_at_up: int | None = None
        self._stall_at: int | None = None
        self._lock = threading.Lock()
        self._pairs: list[_Pair] = []
        self._flow = {True: threading.Event(), False: threading.Event()}  # down, up
        for event in self._flow.values():
            event.set()
        self._rate: float | None = None
        self._closed = False
        self.cuts = 0
        self.resets = 0
        self.accepted = 0
        self.refusing = False
        threading.Thread(target=self._accept, daemon=True).start()

    # -- cuts

    def arm(
        self,
        after_bytes: int,
        *,
        up: bool = False,
        reset: bool = False,
        refuse: bool = False,
        one: bool = False,
    ) -> None:
        """Cut every open connection once ``after_bytes`` more bytes came from the server (from
        the client with ``up``); ``reset``: with RST; ``refuse``: as :meth:`cut`; ``one``: cut
        only the connection whose bytes crossed the mark (one of several parallel ones)."""
        with self._lock:
            self._cut_one = one
            if up:
                self._cut_up_at = self.bytes_up + after_bytes
            else:
                self._cut_at = self.bytes_down + after_bytes
            self._cut_rst = reset
            self._cut_refuse = refuse

    def cut(self, refuse: bool = False) -> None:
        """Cut every open connection now (FIN); ``refuse``: close new ones at once until
        :meth:`admit` (the host is unreachable)."""
        with self._lock:
            self.refusing = refuse
            self._cut_all(rst=False)

    def reset(self, refuse: bool = False) -> None:
        """Cut every open connection now with RST (as a crashed middlebox or host does)."""
        with self._lock:
            self.refusing = refuse
            self._cut_all(rst=True)

    def forget(self) -> None:
        """Forget every open connection: the next byte either end sends is answered with RST
        (the connection was dead on the path while both ends thought it open)."""
        with self._lock:
            for pair in self._pairs:
                pair.forgotten = True

    def admit(self) -> None:
        """Forward new connections again."""
        with self._lock:
            self.refusing = False

    def disarm(self) -> None:
        """No more cuts or holds armed."""
        with self._lock:
            self._cut_at = None
            self._cut_up_at = None
            self._hold_at_up = None
            self._stall_at = None

    # -- stalls and pace

    def stall(self, after_bytes: int = 0) -> None:
        """Forward nothing either way and close nothing, at once or once ``after_bytes`` more
        bytes came from the server, until :meth:`release`."""
        with self._lock:
            if after_bytes > 0:
                self._stall_at = self.bytes_down + after_bytes
                return
            self._stall_at = None
        self._flow[True].clear()
        self._flow[False].clear()

    def hold(self, after_up: int = 0) -> None:
        """Hold every server-to-client byte (sockets stay open), at once or once ``after_up``
        more bytes came from the client, until :meth:`release` or a cut."""
        with self._lock:
            if after_up <= 0:
                self._hold_at_up = None
                self._flow[True].clear()
            else:
                self._hold_at_up = self.bytes_up + after_up

    def release(self) -> None:
        """Forward again (what was held goes first)."""
        with self._lock:
            self._hold_at_up = None
            self._stall_at = None
        self._flow[True].set()
        self._flow[False].set()

    @property
    def holding(self) -> bool:
        """True while server-to-client bytes are held."""
        return not self._flow[True].is_set()

    def throttle(self, bytes_per_s: float | None) -> None:
        """Forward at most ``bytes_per_s`` each way (None: as fast as it goes)."""
        self._rate = bytes_per_s

    # -- the plumbing

    def _cut_all(self, rst: bool) -> None:
        """Close every connection (the caller holds the lock); holds end with them."""
        self.cuts += 1
        self.resets += int(rst)
        self._cut_at = None
        self._cut_up_at = None
        self._hold_at_up = None
        self._stall_at = None
        pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.close(rst)
        self._flow[True].set()
        self._flow[False].set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()  # the server is down: the client sees the connection closed
                continue
            pair = _Pair(client, upstream)
            with self._lock:
                self._pairs.append(pair)
                self.accepted += 1
            threading.Thread(target=self._pipe, args=(pair, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(pair, True), daemon=True).start()

    def _wait_flow(self, pair: _Pair, down: bool) -> bool:
        """Wait while this direction is held; False once the connection is gone."""
        flow = self._flow[down]
        while not flow.wait(0.05):
            if pair.closed or self._closed:
                return False
        return not pair.closed

    def _pipe(self, pair: _Pair, down: bool) -> None:
        src, dst = (pair.upstream, pair.client) if down else (pair.client, pair.upstream)
        while True:
            try:
                rate = self._rate
                size = 65536 if rate is None else int(max(1024, min(65536, rate / 20)))
                data = src.recv(size)
                if not data:
                    if not self._wait_flow(pair, down):
                        return  # an end closed while held: the other end never learns it
                    break
                if not self._wait_flow(pair, down):
                    return
                if self._forward(pair, dst, data, down):
                    return
                if rate is not None:
                    time.sleep(len(data) / rate)
            except OSError:
                break
        if pair.closed:
            return  # cut: closed (with FIN or RST) by the cut itself
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _forward(self, pair: _Pair, dst: socket.socket, data: bytes, down: bool) -> bool:
        """Send ``data`` on, counting it; True when an armed cut fell inside it (done)."""
        with self._lock:
            if pair.closed:
                return True
            if pair.forgotten:
                self.resets += 1
                self._pairs.remove(pair)
                pair.close(rst=True)
                return True
            sent = self.bytes_down if down else self.bytes_up
            limit = self._cut_at if down else self._cut_up_at
            if limit is not None and sent + len(data) >= limit:
                keep = max(0, limit - sent)
                dst.sendall(data[:keep])
                if down:
                    self.bytes_down += keep
                else:
                    self.bytes_up += keep
                self.refusing = self.refusing or self._cut_refuse
                if self._cut_one:
                    self.cuts += 1
                    self._cut_at = self._cut_up_at = None
                    self._cut_one = False
                    if pair in self._pairs:
                        self._pairs.remove(pair)
                    pair.close(self._cut_rst)
                    return True
                self._cut_all(self._cut_rst)
                return True
            if down:
                self.bytes_down += len(data)
                if self._stall_at is not None and self.bytes_down >= self._stall_at:
                    self._stall_at = None
                    self._flow[True].clear()
                    self._flow[False].clear()
            else:
                self.bytes_up += len(data)
                if self._hold_at_up is not None and self.bytes_up >= self._hold_at_up:
                    self._hold_at_up = None
                    self._flow[True].clear()
        dst.sendall(data)
        return False

    def close(self) -> None:
        """Stop accepting and drop every connection."""
        self._closed = True
        self.server.close()
        with self._lock:
            self._cut_all(rst=False)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
