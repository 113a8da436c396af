"""A small JSON-over-HTTPS client on ``urllib``: bounded calls, careful retries, clear errors."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from .errors import ProviderError, ProviderTimeout, scrub

#: Statuses a GET is asked again for (after a short backoff): the platform was briefly unable.
_RETRY_STATUSES = (429, 502, 503, 504)


@dataclass(frozen=True)
class Response:
    """A platform's answer: HTTP status, parsed JSON (``None`` when the body was not JSON), text."""

    status: int
    data: Any
    text: str


def seg(value: object) -> str:
    """One URL path segment, escaped so an id can never add path parts."""
    return quote(str(value), safe="")


class HttpClient:
    """Sends JSON requests to one platform's API root with the key in a header.

    GETs are tried again (``retries`` times, with doubling backoff) when the connection fails
    or the platform is briefly unavailable. Creates and destroys are never repeated: their
    failures are reported with what the caller should check.
    """

    retries = 2
    backoff = 0.5

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        headers: dict[str, str],
        secret: str,
        timeout: float,
        console_url: str,
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self._headers = dict(headers)
        self._secret = secret
        self.timeout = timeout
        self.console_url = console_url

    def __repr__(self) -> str:
        return f"HttpClient(provider={self.provider!r}, base_url={self.base_url!r})"

    def get(
        self, path: str, query: dict[str, Any] | None = None, allow: tuple[int, ...] = ()
    ) -> Response:
        """GET ``path`` (retried on connection errors); statuses in ``allow`` are returned, not raised."""
        return self.request("GET", path, query=query, allow=allow)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        allow: tuple[int, ...] = (),
        timeout: float | None = None,
    ) -> Response:
        """Send one request and return the answer; errors become :class:`ProviderError`.

        Only GETs are retried. A call with no answer within the timeout raises
        :class:`ProviderTimeout`.
        """
        url = self.base_url + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "User-Agent": "rgt-jupyter", **self._headers}
        if data is not None:
            headers["Content-Type"] = "application/json"
        limit = self.timeout if timeout is None else timeout
        attempts = 1 + (self.retries if method == "GET" else 0)
        what = f"{method} {path}"
        for attempt in range(attempts):
            last = attempt == attempts - 1
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=limit) as resp:  # scheme checked at init
                    return self._response(resp.status, resp.read())
            except urllib.error.HTTPError as exc:
                raw = _read_error_body(exc)
                if exc.code in _RETRY_STATUSES and not last:
                    self._sleep(attempt)
                    continue
                answer = self._response(exc.code, raw)
                if exc.code in allow:
                    return answer
                raise self.error_for(what, answer) from None
            except TimeoutError as exc:
                raise self._timeout(what, method, limit) from exc
            except urllib.error.URLError as exc:
                if isinstance(exc.reason, TimeoutError):
                    raise self._timeout(what, method, limit) from exc
                if not last:
                    self._sleep(attempt)
                    continue
                raise self._unreachable(what, method, exc.reason) from exc
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                if not last:
                    self._sleep(attempt)
                    continue
                raise self._unreachable(what, method, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # -- helpers -------------------------------------------------------------------------------

    def _sleep(self, attempt: int) -> None:
        time.sleep(self.backoff * (2**attempt))

    def _response(self, status: int, raw: bytes) -> Response:
        text = raw.decode("utf-8", errors="replace")
        try:
            parsed = json.loads(text) if text.strip() else None
        except ValueError:
            parsed = None
        return Response(status=status, data=parsed, text=text)

    def clean(self, text: str) -> str:
        """``text`` with the key replaced by ``***`` (for messages built from platform answers)."""
        return str(scrub(text, self._secret))

    def error_for(self, what: str, answer: Response) -> ProviderError:
        """The :class:`ProviderError` for an unwelcome answer, with the platform's own words."""
        said = platform_message(answer.data) or answer.text.strip()[:300] or "no message"
        said = self.clean(said)
        if answer.status in (401, 403):
            hint = (
                "The key was refused: check the API key named by the profile (is it set, "
                "current, and allowed to do this?)."
            )
        elif answer.status == 404:
            hint = "The platform does not know that resource."
        elif answer.status == 429:
            hint = "The platform is rate limiting: wait a little and try again."
        elif answer.status >= 500:
            hint = (
                f"The platform had an internal error: try again later or check {self.console_url}."
            )
        else:
            hint = "Check the request parameters in the profile."
        return ProviderError(
            f"{self.provider} API {what} answered HTTP {answer.status}: {said}. {hint}",
            status_code=answer.status,
        )

    def _timeout(self, what: str, method: str, limit: float) -> ProviderTimeout:
        if method == "GET":
            tail = (
                f"The platform may be slow or unreachable: try again, or check {self.console_url}."
            )
        else:
            tail = f"It was not repeated, and it may still take effect: check {self.console_url}."
        return ProviderTimeout(
            f"{self.provider} API {what} gave no answer within {limit:g}s. {tail}"
        )

    def _unreachable(self, what: str, method: str, reason: object) -> ProviderError:
        why = self.clean(str(reason)) or type(reason).__name__
        if method == "GET":
            tail = "Check the network (and the API URL in the profile), then try again."
        else:
            tail = (
                "It was not repeated, since repeating it blindly could act twice: check "
                f"{self.console_url} for its effect before trying again."
            )
        return ProviderError(f"{self.provider} API {what} could not be completed ({why}). {tail}")


def _read_error_body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except (OSError, http.client.HTTPException):
        return b""


def platform_message(data: Any) -> str:
    """The human part of a platform's error body (the shapes of the four platforms, and more)."""
    if isinstance(data, str):
        return data.strip()[:300]
    if not isinstance(data, dict):
        return ""
    parts: list[str] = []
    err = data.get("error")
    if isinstance(err, dict):
        for key in ("code", "message", "suggestion"):
            if isinstance(err.get(key), str) and err[key]:
                parts.append(err[key])
    elif isinstance(err, str) and err:
        parts.append(err)
    for key in ("message", "msg", "detail", "code"):
        val = data.get(key)
        if isinstance(val, str) and val and val not in parts:
            parts.append(val)
    return " - ".join(parts)[:300]
