"""The serving part shared by the local fakes of remote HTTP APIs (clouds, Kubernetes)."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

T = TypeVar("T", bound="ServedFake")


@dataclass
class Recorded:
    """One request as the fake received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: dict[str, str]


class ServedFake:
    """Serves :meth:`_handle` on a free port of 127.0.0.1 from a daemon thread."""

    _server: ThreadingHTTPServer | None = None
    #: Paths are matched below this prefix by :meth:`calls`.
    prefix: str = ""
    requests: list[Recorded]
    lock: threading.RLock

    def calls(self, method: str | None = None, path: str | None = None) -> list[Recorded]:
        """Recorded requests, filtered by method and by a regex matched against the whole path
        below :attr:`prefix`."""
        with self.lock:
            found = list(self.requests)
        return [
            r
            for r in found
            if (method is None or r.method == method)
            and (path is None or re.fullmatch(path, r.path[len(self.prefix) :]))
        ]

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def start(self: T) -> T:
        """Bind to a free port and serve in a daemon thread."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: without this, Nagle and delayed ACKs
            # add 40 ms to every kept-alive request.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._handle(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        return self

    @staticmethod
    def read_request(h: BaseHTTPRequestHandler) -> tuple[str, dict[str, list[str]], Any, bool]:
        """Path, query, body (parsed JSON, else the text) and whether the body was bad JSON."""
        parts = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            return parts.path, parse_qs(parts.query), json.loads(raw) if raw else None, False
        except ValueError:
            return parts.path, parse_qs(parts.query), raw.decode(errors="replace"), True

    def stop(self) -> None:
        """Stop serving (requests still hanging finish on their own daemon threads)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``."""
        assert self._server is not None, "start() the fake first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self: T) -> T:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
