"""Provider adapters: create, read, stop the meter and list leftovers on four GPU rental platforms.

Each adapter (RunPod, vast.ai, Lambda Cloud, Paperspace) speaks the platform's documented REST
API with the standard library alone. The vendor SDKs are not used: ``runpod`` 1.12 requires
cryptography>=50 while ``vastai`` 1.9.1 pins cryptography==49.0.0, so the two cannot be
installed together, and ``runpod`` would pull fastapi, boto3 and aiohttp into the notebook kernel.

``get_provider("runpod", key)`` returns an adapter; see :class:`Provider` for what it does.
"""

from __future__ import annotations

import importlib

from ..platforms import PLATFORMS
from .base import DEFAULT_API_URLS, Instance, Orphan, Provider, api_base_url, api_env_var
from .errors import ProviderError, ProviderTimeout

#: The platforms, by the names profiles use.
PROVIDERS: tuple[str, ...] = tuple(PLATFORMS)

__all__ = [
    "DEFAULT_API_URLS",
    "PROVIDERS",
    "Instance",
    "Orphan",
    "Provider",
    "ProviderError",
    "ProviderTimeout",
    "api_base_url",
    "api_env_var",
    "get_provider",
    "provider_class",
]


def get_provider(
    name: str, api_key: str, base_url: str | None = None, timeout: float = 30.0
) -> Provider:
    """The adapter for platform ``name`` (one of :data:`PROVIDERS`).

    ``base_url`` defaults to :func:`api_base_url` (``RGT_<NAME>_API_URL``, else the documented
    root); ``timeout`` bounds every HTTP call, in seconds.
    """
    return provider_class(name)(api_key, base_url=base_url, timeout=timeout)


def provider_class(name: str) -> type[Provider]:
    """The adapter class of platform ``name`` (its :meth:`Provider.planner` needs no key)."""
    if name not in PLATFORMS:
        raise ProviderError(f"Unknown provider {name!r}: use one of {', '.join(PROVIDERS)}.")
    platform = PLATFORMS[name]
    module = importlib.import_module(f".{platform.module}", __name__)
    cls: type[Provider] = getattr(module, platform.cls)
    return cls
