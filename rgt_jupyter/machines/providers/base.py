"""The shared vocabulary of the provider adapters: instances, orphans, the base class."""

from __future__ import annotations

import abc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..platforms import PLATFORMS
from .errors import ProviderError, ProviderTimeout, scrub
from .http import HttpClient

if TYPE_CHECKING:
    from .http import Response

#: The documented REST roots; ``RGT_<NAME>_API_URL`` or a profile setting can replace them.
DEFAULT_API_URLS: dict[str, str] = {name: p.api_url for name, p in PLATFORMS.items()}

#: Normalized instance states.
STATES = ("starting", "running", "stopping", "stopped", "gone", "error", "unknown")

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True)
class Instance:
    """One rented machine as the platform last described it."""

    provider: str
    id: str
    state: str
    raw_state: str
    ssh_host: str | None = None
    ssh_port: int | None = None
    ssh_user: str | None = None
    cost_per_hour: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Orphan:
    """Something that still bills after the instance is down, with the words for what it costs."""

    kind: str
    id: str
    name: str
    bills: str


def api_env_var(name: str) -> str:
    """The environment variable that overrides a platform's API root, e.g. ``RGT_RUNPOD_API_URL``."""
    return f"RGT_{name.upper()}_API_URL"


def api_base_url(name: str, configured: str = "") -> str:
    """The API root for platform ``name``: the env var wins, then ``configured``, then the default."""
    if name not in DEFAULT_API_URLS:
        raise ProviderError(f"Unknown provider {name!r}: use one of {', '.join(DEFAULT_API_URLS)}.")
    from_env = os.environ.get(api_env_var(name), "").strip()
    return from_env or configured.strip() or DEFAULT_API_URLS[name]


def check_base_url(name: str, url: str) -> str:
    """Return ``url`` without a trailing slash, refusing anything but HTTPS (or HTTP to loopback).

    The API key travels in a header, so it must not go to a remote host in clear text.
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and host:
        return url.rstrip("/")
    if parts.scheme == "http" and host in _LOOPBACK:
        return url.rstrip("/")
    raise ProviderError(
        f"The {name} API URL {url!r} is not usable: it must be https:// (plain http:// only to "
        f"localhost). Fix {api_env_var(name)} or the profile's API URL."
    )


def as_float(value: Any) -> float | None:
    """``value`` as a float when it is a number (or a numeric string), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def as_int(value: Any) -> int | None:
    """``value`` as an int when it is an integral number (or a digit string), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


class Provider(abc.ABC):
    """One GPU rental platform: create, look at, stop the meter, list what still bills.

    Every HTTP call is bounded by ``timeout`` seconds. The API key goes in a request header
    only; it is never logged, never put in a URL, an error message or ``Instance.detail``.
    """

    name: str = ""
    meter_stop_verb: str = ""
    console_url: str = ""

    def __init__(self, api_key: str, base_url: str | None = None, timeout: float = 30.0) -> None:

        key = (api_key or "").strip()
        if not key:
            raise ProviderError(
                f"No {self.name} API key was given: set the environment variable or key file "
                "named by the profile."
            )
        if timeout <= 0:
            raise ProviderError(f"The {self.name} client timeout must be positive, not {timeout}.")
        self._api_key = key
        self.timeout = float(timeout)
        self.base_url = check_base_url(self.name, base_url or api_base_url(self.name))
        self.http = HttpClient(
            provider=self.name,
            base_url=self.base_url,
            headers=self.auth_headers(key),
            secret=key,
            timeout=self.timeout,
            console_url=self.console_url,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r}, timeout={self.timeout})"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The headers that carry the key; platforms that differ override this."""
        return {"Authorization": f"Bearer {api_key}"}

    @classmethod
    def planner(cls) -> Provider:
        """An adapter that only builds create requests (:meth:`request`, :meth:`plan_fields`)
        and makes no call: what ``rgt up`` shows before anything exists, key or no key."""
        adapter = cls.__new__(cls)
        adapter._api_key = ""
        adapter.timeout = 0.0
        adapter.base_url = ""
        adapter.http = None  # type: ignore[assignment]
        return adapter

    def request(self, params: dict[str, Any]) -> dict[str, Any]:
        """The create request :meth:`up` sends for ``params`` (the profile's create
        parameters): defaults filled in, fields checked; no call is made."""
        return dict(params)

    def quote(self, body: dict[str, Any]) -> float | None:
        """The platform's price in USD per hour for the create request ``body``, where its API
        tells it before a create (None where it does not)."""
        return None

    def plan_fields(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """The create request ``body`` as (what, value) lines of a plan: GPU and count, image,
        disks and where they are mounted."""
        return [(key, str(value)) for key, value in body.items() if value not in (None, "", {}, [])]

    # -- what each platform implements -------------------------------------------------------

    @abc.abstractmethod
    def up(self, params: dict[str, Any]) -> Instance:
        """Create an instance from the platform's create fields (defaults filled, required checked)."""

    @abc.abstractmethod
    def status(self, instance_id: str) -> Instance:
        """The instance as the platform describes it now; ``state`` is ``gone`` only on its word."""

    @abc.abstractmethod
    def down(self, instance_id: str) -> None:
        """Stop the meter with the platform's verb (``meter_stop_verb``); bounded by the timeout."""

    @abc.abstractmethod
    def orphans(self) -> list[Orphan]:
        """What still bills on the account after instances are down."""

    @abc.abstractmethod
    def delete_orphan(self, orphan: Orphan) -> None:
        """Delete one leftover listed by :meth:`orphans`."""

    # -- shared behaviour ----------------------------------------------------------------------

    def is_down(self, inst: Instance) -> bool:
        """True when the platform confirms the meter stopped (by default: the instance is gone)."""
        return inst.state == "gone"

    def wait_down(
        self,
        instance_id: str,
        timeout: float = 600.0,
        interval: float = 5.0,
        on_poll: Callable[[Instance], None] | None = None,
    ) -> Instance:
        """Poll :meth:`status` until :meth:`is_down`; raise :class:`ProviderError` on timeout.

        A poll that fails for a passing reason (no answer, connection lost, 5xx, 429) is
        retried until the deadline; an error that polling cannot cure (bad key) is raised.
        """
        deadline = time.monotonic() + timeout
        last: Instance | None = None
        last_error: ProviderError | None = None
        while True:
            try:
                last = self.status(instance_id)
                last_error = None
            except ProviderError as exc:
                if not _transient(exc):
                    raise
                last_error = exc
            else:
                if on_poll is not None:
                    on_poll(last)
                if self.is_down(last):
                    return last
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(interval, remaining))
        seen = (
            f"last seen {last.state} ({last.raw_state})"
            if last is not None
            else "its state could not be read"
        )
        if last_error is not None:
            seen += f"; the last poll failed: {last_error}"
        raise ProviderError(
            f"{self.name} instance {instance_id} is not confirmed {self.past_tense()} after "
            f"{timeout:g}s ({seen}). It may still be billing: check {self.console_url} and "
            f"{self.meter_stop_verb} it there if it is still listed."
        )

    def past_tense(self) -> str:
        """The meter-stop verb in the past tense, for messages."""
        return {"terminate": "terminated", "destroy": "destroyed", "shut down": "shut down"}.get(
            self.meter_stop_verb, f"{self.meter_stop_verb} done"
        )

    def instance(self, instance_id: str, state: str, raw_state: str, **kw: Any) -> Instance:
        """Build an :class:`Instance` of this platform, with the key scrubbed from ``detail``."""
        if state not in STATES:
            state = "unknown"
        detail = kw.pop("detail", None)
        clean = scrub(detail, self._api_key) if isinstance(detail, dict) else {}
        return Instance(
            provider=self.name,
            id=str(instance_id),
            state=state,
            raw_state=str(scrub(str(raw_state), self._api_key)),
            detail=clean,
            **kw,
        )

    def gone(self, instance_id: str, raw_state: str = "404") -> Instance:
        """The platform says this instance no longer exists."""
        return self.instance(instance_id, "gone", raw_state)

    def create_call(
        self, method: str, path: str, body: Any, label: str, allow: tuple[int, ...] = ()
    ) -> Response:
        """Send a create request once; no answer in time raises a timeout that says what to check."""
        try:
            return self.http.request(method, path, body, allow=allow)
        except ProviderTimeout as exc:
            raise ProviderTimeout(
                f"The {self.name} create request ({label}) got no answer within "
                f"{self.timeout:g}s. It may still have created an instance that bills: look on "
                f"{self.console_url} before creating again (it was sent once, never repeated)."
            ) from exc

    def stop_call(
        self,
        instance_id: str,
        method: str,
        path: str,
        body: Any = None,
        allow: tuple[int, ...] = (404,),
    ) -> Response:
        """Send the meter-stop request once; no answer in time raises a timeout saying to poll."""
        try:
            return self.http.request(method, path, body, allow=allow)
        except ProviderTimeout as exc:
            raise ProviderTimeout(
                f"The {self.name} {self.meter_stop_verb} request for instance {instance_id} got "
                f"no answer within {self.timeout:g}s. The platform may still carry it out: poll "
                f"its status (wait_down) to confirm, or check {self.console_url}."
            ) from exc

    def created(self, answer: Any, platform: str, noun: str, name: str) -> dict[str, Any]:
        """The created object of a create call's ``answer``; an answer without an id is said as
        such, with where to look before creating another (it may exist and bill)."""
        if not isinstance(answer, dict) or not answer.get("id"):
            raise ProviderError(
                f"{platform} accepted the create but returned no {noun} id; look for {noun} "
                f"{name!r} on {self.console_url} before creating another."
            )
        return answer

    def require(self, params: dict[str, Any], *names: str) -> None:
        """Raise a clear :class:`ProviderError` when a required create field is missing."""
        missing = [n for n in names if params.get(n) in (None, "", [], {})]
        if missing:
            raise ProviderError(
                f"Cannot create a {self.name} instance: missing {', '.join(missing)}. "
                "Set it in the profile's create parameters."
            )


def _transient(exc: ProviderError) -> bool:
    """Whether polling again may get a different answer."""
    if isinstance(exc, ProviderTimeout) or exc.status_code is None:
        return True
    return exc.status_code in (408, 409, 425, 429) or exc.status_code >= 500
