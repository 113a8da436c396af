"""The Ray Jobs REST API, over plain HTTP: no ``ray`` import in the notebook.

The calls the ``ray`` backend makes (Ray's documented endpoints, API version 4): ``GET
/api/version``, ``POST /api/jobs/`` (submit), ``GET /api/jobs/{id}`` (a job's state),
``POST /api/jobs/{id}/stop`` and ``GET /api/jobs/{id}/logs``. The address is the dashboard's
(``http://HEAD:8265``) from the profile's ``[ray] address``, else ``RAY_API_SERVER_ADDRESS`` or
``RAY_ADDRESS`` when they hold an HTTP URL. A token for a cluster that asks for one is named,
never stored: ``token_env`` (a variable of this process) or ``token_file``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ProfileError
from ...machines.providers.errors import ProviderError
from ...machines.providers.http import HttpClient, seg

#: Ray's job states that end a job.
ENDED = ("SUCCEEDED", "FAILED", "STOPPED")
#: The error type Ray gives a job whose supervisor (on the node running the entrypoint) died.
SUPERVISOR_DIED = "JOB_SUPERVISOR_ACTOR_DIED"


@dataclass(frozen=True)
class RayJobInfo:
    """What ``GET /api/jobs/{id}`` says of one submission."""

    status: str
    message: str
    error_type: str
    driver_node_id: str
    driver_exit_code: int | None

    @property
    def node_died(self) -> bool:
        """Ray ended the job because the node running its entrypoint died."""
        text = self.message.lower()
        return self.error_type == SUPERVISOR_DIED and "node" in text and "died" in text

    @classmethod
    def parse(cls, data: Any) -> RayJobInfo:
        data = data if isinstance(data, dict) else {}
        code = data.get("driver_exit_code")
        return cls(
            status=str(data.get("status") or ""),
            message=str(data.get("message") or ""),
            error_type=str(data.get("error_type") or ""),
            driver_node_id=str(data.get("driver_node_id") or ""),
            driver_exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        )


def api_address(conf: dict[str, Any]) -> str:
    """The Jobs API's HTTP address: the profile's, else the environment's (an HTTP URL)."""
    for value in (
        conf.get("address"),
        os.environ.get("RAY_API_SERVER_ADDRESS"),
        os.environ.get("RAY_ADDRESS"),
    ):
        if value and str(value).startswith(("http://", "https://")):
            return str(value).rstrip("/")
    raise ProfileError(
        'no Ray Jobs API address: set [ray] address = "http://HEAD:8265" in a profile that '
        "extends 'ray' (the dashboard's address; forward its port with `ssh -L 8265:localhost:"
        "8265 HEAD` when it is not reachable from here), or RAY_API_SERVER_ADDRESS"
    )


def _token(conf: dict[str, Any]) -> str:
    env, path = conf.get("token_env"), conf.get("token_file")
    if env:
        value = os.environ.get(str(env), "")
        if not value:
            raise ProfileError(f"[ray] token_env names {env!r}, which is not set here")
        return value.strip()
    if path:
        file = Path(str(path)).expanduser()
        try:
            return file.read_text().strip()
        except OSError as exc:
            raise ProfileError(f"[ray] token_file {str(file)!r} cannot be read: {exc}") from exc
    return ""


class RayJobs:
    """One Ray cluster's Jobs API."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.address = api_address(conf)
        token = _token(conf)
        self.http = HttpClient(
            provider="Ray Jobs",
            base_url=self.address,
            headers={"Authorization": f"Bearer {token}"} if token else {},
            secret=token,
            timeout=float(conf.get("timeout_s", 30.0)),
            console_url=f"the Ray dashboard at {self.address}",
        )

    def version(self) -> dict[str, Any]:
        """The cluster's Jobs API and Ray versions."""
        data = self.http.get("/api/version").data
        return data if isinstance(data, dict) else {}

    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        """Submit one job; its ``submission_id`` is ours, so a lost reply can be asked about."""
        data = self.http.request("POST", "/api/jobs/", body).data
        return data if isinstance(data, dict) else {}

    def info(self, submission_id: str) -> RayJobInfo | None:
        """The job's state, or None when the cluster does not know it."""
        answer = self.http.get(f"/api/jobs/{seg(submission_id)}", allow=(404,))
        if answer.status == 404:
            return None
        return RayJobInfo.parse(answer.data)

    def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job (SIGTERM to its entrypoint's processes, SIGKILL after the
        cluster's ``RAY_JOB_STOP_WAIT_TIME_S``); False when it had already ended."""
        data = self.http.request("POST", f"/api/jobs/{seg(submission_id)}/stop").data
        return bool(isinstance(data, dict) and data.get("stopped"))

    def logs(self, submission_id: str) -> str:
        """What the entrypoint printed (Ray keeps it on the node that ran it)."""
        try:
            data = self.http.get(f"/api/jobs/{seg(submission_id)}/logs", allow=(404,)).data
        except ProviderError:
            return ""
        return str(data.get("logs") or "") if isinstance(data, dict) else ""


_CLIENTS: dict[tuple[str, ...], RayJobs] = {}


def ray_jobs(conf: dict[str, Any]) -> RayJobs:
    """One client per address and token source (polls reuse it)."""
    key = tuple(
        str(conf.get(k) or "") for k in ("address", "token_env", "token_file", "timeout_s")
    ) + (os.environ.get("RAY_API_SERVER_ADDRESS", ""), os.environ.get("RAY_ADDRESS", ""))
    if key not in _CLIENTS:
        _CLIENTS[key] = RayJobs(conf)
    return _CLIENTS[key]
