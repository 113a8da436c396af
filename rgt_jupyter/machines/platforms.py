"""The rental platforms with an API adapter: the one table every list of them is taken from.

Adding a platform is one adapter module in :mod:`.providers` and one row here.
"""

from __future__ import annotations

from typing import NamedTuple


class Platform(NamedTuple):
    """A rental platform: its adapter (module of :mod:`.providers`, class) and documented API."""

    module: str
    cls: str
    api_url: str


#: By the names profiles use (``provider = "runpod"``).
PLATFORMS: dict[str, Platform] = {
    "runpod": Platform("runpod", "RunPod", "https://api.runpod.io/v2"),
    "vastai": Platform("vastai", "VastAI", "https://console.vast.ai/api/v0"),
    "lambda": Platform("lambda_", "LambdaCloud", "https://cloud.lambda.ai/api/v1"),
    "paperspace": Platform("paperspace", "Paperspace", "https://api.paperspace.com/v1"),
}
