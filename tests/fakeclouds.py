"""Local HTTP servers that speak the documented REST APIs of four GPU rental platforms.

Each fake checks the auth header (401 without the right key), records every request (method,
path, query, parsed JSON body, headers), keeps instance state, and moves instances through the
documented states by counting reads, not by wall time, so tests are fast and deterministic.
Each one also holds a billing leftover (network volume, volume, file system, IP, snapshot).
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .httpfake import Recorded, ServedFake


@dataclass
class Reply:
    """What to answer: status, JSON body (``None``: empty), and seconds to wait first."""

    status: int
    body: Any = None
    hang: float = 0.0


@dataclass
class FakeCloud(ServedFake):
    """Base of the fakes: threaded server on 127.0.0.1, auth check, request log, routing."""

    api_key: str = "test-key-5f0c9a7e41"
    prefix: str = ""
    #: Include the presented key in 401 messages (to check that clients scrub it).
    echo_key: bool = False
    #: Drop this many of the next requests with a method in ``drop_methods`` (no answer at all).
    drop_next: int = 0
    drop_methods: tuple[str, ...] = ("GET",)
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self._ids = itertools.count(1)
        self._server = None

    @property
    def url(self) -> str:
        """The API root to give the adapter."""
        return self.origin + self.prefix

    def next_id(self) -> int:
        return next(self._ids)

    # -- what each platform defines ----------------------------------------------------------

    def authorized(self, auth: str) -> bool:
        return auth == f"Bearer {self.api_key}"

    def unauthorized(self, presented: str) -> Reply:
        raise NotImplementedError

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Reply:
        raise NotImplementedError

    def not_found(self, what: str) -> Reply:
        raise NotImplementedError

    def bad_request(self, message: str) -> Reply:
        raise NotImplementedError

    # -- plumbing ----------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        path, query, body, bad_json = self.read_request(h)
        rec = Recorded(h.command, path, query, body, dict(h.headers.items()))
        with self.lock:
            self.requests.append(rec)
            drop = self.drop_next > 0 and h.command in self.drop_methods
            if drop:
                self.drop_next -= 1
        if drop:
            h.close_connection = True
            return
        auth = h.headers.get("Authorization", "")
        if not self.authorized(auth):
            presented = auth.split(" ", 1)[-1] if auth else ""
            reply = self.unauthorized(presented)
        elif bad_json:
            reply = self.bad_request("request body is not JSON")
        elif not path.startswith(self.prefix + "/"):
            reply = self.not_found(path)
        else:
            with self.lock:
                reply = self.route(h.command, path[len(self.prefix) :], rec.query, body)
        if reply.hang:
            time.sleep(reply.hang)
        payload = b"" if reply.body is None else json.dumps(reply.body).encode()
        try:
            h.send_response(reply.status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def key_words(self, presented: str) -> str:
        return f" (got {presented!r})" if self.echo_key and presented else ""


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ------------------------------------------------------------------------------------------------
# RunPod REST v2
# ------------------------------------------------------------------------------------------------


@dataclass
class RunPodFake(FakeCloud):
    """``https://api.runpod.io/v2``: pods and network volumes.

    ``POST /pods`` validates the nested v2 body (unknown fields: 422 naming them; ``gpu`` and
    ``cpu`` together, or both mount kinds: 400) and answers 201 with a PROVISIONING pod that
    already carries its ``cost``; each ``GET /pods/{id}`` moves it one step, through STARTING
    to RUNNING with ``ssh.direct`` and the ``runtime.ports`` mapping of 22/tcp. ``POST
    /pods/{id}/action`` takes ``{"action": "start|stop|restart|terminate"}`` (409 when not in
    the pod's ``actions``). After ``DELETE /pods/{id}`` (204) the pod is unknown (404). Lists
    are wrapped: ``{"pods": [...]}``, ``{"networkVolumes": [...]}``; errors are RFC 9457
    objects (``title``, ``status``, ``detail``, ``errors``). ``hang_create`` makes ``POST
    /pods`` answer only after that many seconds.
    """

    #: The top-level fields of v2's CreatePodRequest; any other is refused by name (422).
    create_fields = frozenset(
        "name image args disk ports env registry mounts gpu cpu cloud dataCenterIds "
        "globalNetworking startJupyter startSsh templateId".split()
    )
    gpu_fields = frozenset({"id", "count", "allowedCudaVersions", "minCudaVersion"})

    prefix: str = "/v2"
    hang_create: float = 0.0
    #: The SSH endpoints (host, port) the pods created get, in order (a test's loopback sshd
    #: boxes); beyond them, the documented example address.
    boxes: list[tuple[str, int]] = field(default_factory=list)
    #: Pods (by creation order, from 1) that never get past STARTING: a machine that fails to boot.
    never_boot: set[int] = field(default_factory=set)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: USD per hour of one GPU (RTX 4090, Secure cloud).
    gpu_rate: float = 0.69
    #: Each pod's place in the order of creation (from 1).
    order: dict[str, int] = field(default_factory=dict)
    #: USD per hour of each pod while it runs (a pod's ``cost`` is 0.0 while EXITED).
    rates: dict[str, float] = field(default_factory=dict)
    volumes: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "agv6w2qcg7": {
                "id": "agv6w2qcg7",
                "name": "ckpts",
                "size": 50,
                "dataCenter": "EU-RO-1",
                "type": "STANDARD",
            }
        }
    )

    def _problem(
        self, status: int, title: str, detail: str, errors: list[str] | None = None
    ) -> Reply:
        body: dict[str, Any] = {"title": title, "status": status, "detail": detail}
        if errors:
            body["errors"] = errors
        return Reply(status, body)

    def unauthorized(self, presented: str) -> Reply:
        return self._problem(
            401, "Unauthorized", "invalid bearer token" + self.key_words(presented)
        )

    def not_found(self, what: str) -> Reply:
        return self._problem(404, "Not Found", f"{what} not found")

    def bad_request(self, message: str) -> Reply:
        return self._problem(400, "Bad Request", message)

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Reply:
        if path == "/pods":
            if method == "POST":
                return self._create(body)
            if method == "GET":
                return Reply(200, {"pods": list(self.pods.values())})
        m = re.fullmatch(r"/pods/([^/]+)(/action)?", path)
        if m:
            pod = self.pods.get(m.group(1))
            if not pod:
                return self.not_found("pod")
            if m.group(2) and method == "POST":
                return self._action(pod, body)
            if not m.group(2) and method == "GET":
                self._advance(pod)
                return Reply(200, pod)
            if not m.group(2) and method == "DELETE":
                del self.pods[pod["id"]]
                return Reply(204)
        if path == "/network-volumes" and method == "GET":
            return Reply(200, {"networkVolumes": list(self.volumes.values())})
        m = re.fullmatch(r"/network-volumes/([^/]+)", path)
        if m and method == "DELETE":
            gone = self.volumes.pop(m.group(1), None)
            return Reply(204) if gone else self.not_found("network volume")
        return self.not_found(path)

    def preempt(self, pod_id: str) -> None:
        """The platform reclaims a pod (a spot interruption, a host failure): from now on it is
        unknown (404), as after a terminate."""
        with self.lock:
            del self.pods[pod_id]

    def _advance(self, pod: dict[str, Any]) -> None:
        if pod["status"] == "PROVISIONING":
            pod["status"] = "STARTING"
        elif pod["status"] == "STARTING" and self.order[pod["id"]] not in self.never_boot:
            self._run(pod)

    def _run(self, pod: dict[str, Any]) -> None:
        pod.update(
            status="RUNNING", actions=["stop", "restart", "terminate"], cost=self.rates[pod["id"]]
        )
        proxy = {"host": "ssh.runpod.io", "port": 22, "username": f"{pod['id']}-64411eb2"}
        proxy["command"] = f"ssh {proxy['username']}@ssh.runpod.io"
        direct = None
        order = self.order[pod["id"]]
        host, port = self.boxes[order - 1] if order <= len(self.boxes) else ("203.0.113.10", 10341)
        if "22/tcp" in pod["ports"]:
            direct = {"host": host, "port": port, "username": "root"}
            direct["command"] = f"ssh root@{host} -p {port}"
        pod["ssh"] = {"proxy": proxy, "direct": direct}
        mapped = [{"private": 22, "public": port, "type": "tcp", "ip": host}]
        pod["runtime"] = {"uptime": 0, "ports": mapped if direct else []}
        pod["startedAt"] = "2026-11-30T12:00:00Z"

    def _action(self, pod: dict[str, Any], body: Any) -> Reply:
        action = body.get("action") if isinstance(body, dict) else None
        if action not in ("start", "stop", "restart", "terminate"):
            return self._problem(
                422,
                "Unprocessable Entity",
                "Request validation failed.",
                ["action must be one of start, stop, restart, terminate"],
            )
        if action not in pod["actions"]:
            return self._problem(409, "Conflict", f"cannot {action} a pod that is {pod['status']}")
        if action == "terminate":
            del self.pods[pod["id"]]
            return Reply(204)
        if action == "stop":
            pod.update(status="EXITED", actions=["start", "terminate"], cost=0.0, runtime=None)
            pod["ssh"] = {"proxy": pod["ssh"]["proxy"], "direct": None}
        else:
            self._run(pod)
        return Reply(200, pod)

    def _create(self, body: Any) -> Reply:
        if not isinstance(body, dict):
            return self.bad_request("body must be a JSON object")
        unknown = sorted(set(body) - self.create_fields)
        problems = [f"unknown field {k!r}" for k in unknown]
        if not isinstance(body.get("name"), str) or not body["name"]:
            problems.append("name is required")
        if not body.get("templateId") and (
            not isinstance(body.get("image"), str) or not body["image"]
        ):
            problems.append("image is required unless templateId is set")
        gpu = body.get("gpu")
        if gpu is not None:
            if not isinstance(gpu, dict) or not isinstance(gpu.get("id"), str) or not gpu["id"]:
                problems.append("gpu.id must be a GPU type id")
            elif set(gpu) - self.gpu_fields:
                problems.append(f"unknown gpu field(s) {sorted(set(gpu) - self.gpu_fields)}")
            elif not _int(gpu.get("count", 1)) or gpu.get("count", 1) < 1:
                problems.append("gpu.count must be a positive integer")
        if body.get("cloud", "SECURE") not in ("SECURE", "COMMUNITY"):
            problems.append("cloud must be SECURE or COMMUNITY")
        if "disk" in body and (not _int(body["disk"]) or body["disk"] < 1):
            problems.append("disk must be an integer >= 1")
        ports = body.get("ports", [])
        if not isinstance(ports, list) or not all(
            isinstance(p, str) and re.fullmatch(r"\d+/(tcp|http)", p) for p in ports
        ):
            problems.append("ports must be a list like ['22/tcp']")
        env = body.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            problems.append("env must be an object of strings")
        for flag in ("startSsh", "startJupyter", "globalNetworking"):
            if not isinstance(body.get(flag, False), bool):
                problems.append(f"{flag} must be a boolean")
        mounts = body.get("mounts", {})
        if not isinstance(mounts, dict) or set(mounts) - {"persistent", "network"}:
            problems.append("mounts may hold only persistent and network")
            mounts = {}
        persistent = mounts.get("persistent")
        if persistent is not None and (
            not isinstance(persistent, dict)
            or set(persistent) != {"size", "path"}
            or not _int(persistent["size"])
            or persistent["size"] < 10
            or not isinstance(persistent["path"], str)
        ):
            problems.append("mounts.persistent must be {size >= 10, path}")
        network = mounts.get("network")
        if network is not None and (
            not isinstance(network, list)
            or len(network) != 1
            or not isinstance(network[0], dict)
            or set(network[0]) != {"volumeId", "path"}
        ):
            problems.append("mounts.network must be [{volumeId, path}]")
        if problems:
            return self._problem(
                422, "Unprocessable Entity", "Request validation failed.", problems
            )
        if (gpu is None) == (body.get("cpu") is None):
            return self.bad_request("exactly one of gpu or cpu must be set")
        if persistent is not None and network is not None:
            return self.bad_request("mounts.persistent and mounts.network are mutually exclusive")
        if network and network[0]["volumeId"] not in self.volumes:
            return self.bad_request(f"network volume {network[0]['volumeId']} does not exist")
        order = self.next_id()
        pod_id = f"pod{order:04d}xyz"
        count = gpu.get("count", 1) if gpu else 0
        rate = round(self.gpu_rate * count, 2) if gpu else 0.08
        pod: dict[str, Any] = {
            "id": pod_id,
            "name": body["name"],
            "status": "PROVISIONING",
            "actions": ["stop", "terminate"],
            "image": body.get("image", ""),
            "args": body.get("args", ""),
            "disk": body.get("disk", 50),
            "mounts": mounts,
            "ports": ports,
            "env": env,
            "registry": body.get("registry"),
            "cloud": body.get("cloud", "SECURE"),
            "dataCenterId": "EU-RO-1",
            "cudaVersion": "12.8" if gpu else None,
            "ssh": {"proxy": None, "direct": None},
            "template": body.get("templateId"),
            "cost": rate,
            "locked": False,
            "globalNetworking": {"enabled": bool(body.get("globalNetworking", False))},
            "runtime": None,
            "createdAt": "2026-11-30T12:00:00Z",
            "startedAt": None,
        }
        if gpu:
            pod["gpu"] = {"id": gpu["id"], "count": count}
        else:
            pod["cpu"] = body["cpu"]
        self.pods[pod_id] = pod
        self.rates[pod_id] = rate
        self.order[pod_id] = order
        return Reply(201, pod, hang=self.hang_create)


# ------------------------------------------------------------------------------------------------
# vast.ai REST v0
# ------------------------------------------------------------------------------------------------


@dataclass
class VastFake(FakeCloud):
    """``https://console.vast.ai/api/v0``: asks, instances and volumes.

    A rented instance reads as provisioning (actual_status null), then loading, then running.
    A destroy succeeds at once, but the instance stays listed for ``linger`` more reads, then is
    gone: 404, or ``{"instances": null}`` when ``gone_as_null``.
    """

    prefix: str = "/api/v0"
    offers: set[int] = field(default_factory=lambda: {4242, 4243})
    linger: int = 3
    gone_as_null: bool = False
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    reads: dict[str, int] = field(default_factory=dict)
    destroyed: dict[str, int] = field(default_factory=dict)
    volumes: dict[int, dict[str, Any]] = field(
        default_factory=lambda: {
            771: {"id": 771, "disk_space": 100, "status": "active", "machine_id": 88}
        }
    )

    def unauthorized(self, presented: str) -> Reply:
        msg = "Invalid or missing API key" + self.key_words(presented)
        return Reply(401, {"success": False, "error": "invalid_api_key", "msg": msg})

    def not_found(self, what: str) -> Reply:
        return Reply(404, {"success": False, "error": "not_found", "msg": f"{what} not found"})

    def bad_request(self, message: str) -> Reply:
        return Reply(400, {"success": False, "error": "invalid_args", "msg": message})

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Reply:
        m = re.fullmatch(r"/asks/(\d+)/", path)
        if m and method == "PUT":
            return self._rent(int(m.group(1)), body)
        m = re.fullmatch(r"/instances/(\d+)/", path)
        if m and method == "GET":
            return self._show(m.group(1))
        if m and method == "DELETE":
            iid = m.group(1)
            if iid not in self.instances or iid in self.destroyed:
                return self.not_found("instance")
            self.destroyed[iid] = self.linger
            return Reply(200, {"success": True, "msg": f"destroying instance {iid}."})
        if path == "/volumes/" and method == "GET":
            return Reply(200, {"volumes": list(self.volumes.values())})
        if path == "/volumes/" and method == "DELETE":
            if not isinstance(body, dict) or not _int(body.get("id")):
                return self.bad_request("id (integer) is required")
            if self.volumes.pop(body["id"], None) is None:
                return self.not_found("volume")
            return Reply(200, {"success": True})
        return self.not_found(path)

    def _rent(self, offer: int, body: Any) -> Reply:
        if not isinstance(body, dict):
            return self.bad_request("body must be a JSON object")
        problems = []
        if body.get("client_id") != "me":
            problems.append("client_id must be 'me'")
        if not isinstance(body.get("image"), str) or not body["image"]:
            problems.append("image is required")
        runtypes = (
            "ssh",
            "jupyter",
            "args",
            "ssh_proxy",
            "ssh_direct",
            "jupyter_proxy",
            "jupyter_direct",
        )
        if body.get("runtype", "ssh") not in runtypes:
            problems.append("invalid runtype")
        if "disk" in body and not isinstance(body["disk"], (int, float)):
            problems.append("disk must be a number")
        if not isinstance(body.get("env", {}), dict):
            problems.append("env must be an object")
        if problems:
            return self.bad_request("; ".join(problems))
        if offer not in self.offers:
            return self.bad_request(f"offer {offer} is no longer available")
        self.offers.discard(offer)
        iid = str(1_000_000 + self.next_id())
        self.instances[iid] = {
            "id": int(iid),
            "actual_status": None,
            "intended_status": "running",
            "cur_state": "running",
            "status_msg": None,
            "label": body.get("label"),
            "image_uuid": body["image"],
            "image_runtype": body.get("runtype", "ssh"),
            "ssh_host": "ssh5.vast.ai",
            "ssh_port": 20022,
            "public_ipaddr": "198.51.100.7",
            "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41022"}]},
            "dph_total": 0.412,
            "disk_space": body.get("disk", 8),
        }
        self.reads[iid] = 0
        return Reply(200, {"success": True, "new_contract": int(iid)})

    def _show(self, iid: str) -> Reply:
        inst = self.instances.get(iid)
        if inst is None:
            return (
                Reply(200, {"instances": None}) if self.gone_as_null else self.not_found("instance")
            )
        if iid in self.destroyed:
            if self.destroyed[iid] <= 0:
                del self.instances[iid]
                return self._show(iid)
            self.destroyed[iid] -= 1
            return Reply(200, {"instances": inst})
        n = self.reads[iid] = self.reads[iid] + 1
        inst["actual_status"] = None if n == 1 else "loading" if n == 2 else "running"
        return Reply(200, {"instances": inst})


# ------------------------------------------------------------------------------------------------
# Lambda Cloud REST v1
# ------------------------------------------------------------------------------------------------


@dataclass
class LambdaFake(FakeCloud):
    """``https://cloud.lambda.ai/api/v1``: instance types, instances, file systems.

    Launches fail with insufficient capacity in ``full_regions``. An instance boots for one
    read, then is active. Terminate marks it terminating at once but answers only after
    ``terminate_hang`` seconds; the instance reads as terminating twice more, then 404.
    """

    prefix: str = "/api/v1"
    terminate_hang: float = 2.0
    full_regions: set[str] = field(default_factory=lambda: {"us-west-1"})
    types: dict[str, Any] = field(
        default_factory=lambda: {
            "gpu_1x_a10": {
                "instance_type": {
                    "name": "gpu_1x_a10",
                    "description": "1x A10 (24 GB PCIe)",
                    "gpu_description": "A10 (24 GB PCIe)",
                    "price_cents_per_hour": 75,
                    "specs": {"vcpus": 30, "memory_gib": 200, "storage_gib": 1400, "gpus": 1},
                },
                "regions_with_capacity_available": [
                    {"name": "us-west-1", "description": "California, USA"},
                    {"name": "us-east-1", "description": "Virginia, USA"},
                ],
            }
        }
    )
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    reads: dict[str, int] = field(default_factory=dict)
    terminating: dict[str, int] = field(default_factory=dict)
    file_systems: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "398578a2336b49079e74043f0bd2cfe8": {
                "id": "398578a2336b49079e74043f0bd2cfe8",
                "name": "ckpts",
                "mount_point": "/lambda/nfs/ckpts",
                "created": "2024-11-15T10:00:00+00:00",
                "created_by": {"id": "u1", "email": "user@example.com", "status": "active"},
                "is_in_use": False,
                "region": {"name": "us-east-1", "description": "Virginia, USA"},
                "bytes_used": 12 * 2**30,
            }
        }
    )

    def authorized(self, auth: str) -> bool:
        basic = base64.b64encode(f"{self.api_key}:".encode()).decode()
        return auth in (f"Bearer {self.api_key}", f"Basic {basic}", f"Basic {self.api_key}")

    def _error(self, status: int, code: str, message: str, suggestion: str = "") -> Reply:
        err = {"code": code, "message": message}
        if suggestion:
            err["suggestion"] = suggestion
        return Reply(status, {"error": err})

    def unauthorized(self, presented: str) -> Reply:
        return self._error(
            401,
            "global/invalid-api-key",
            "API key was invalid, expired, or deleted." + self.key_words(presented),
            "Check your API key or create a new one, then try again.",
        )

    def not_found(self, what: str) -> Reply:
        return self._error(404, "global/object-does-not-exist", f"Specified {what} does not exist.")

    def bad_request(self, message: str) -> Reply:
        return self._error(400, "global/invalid-parameters", message)

    def set_status(self, iid: str, status: str) -> None:
        """Put an instance in a state (e.g. ``unhealthy``: shut down from inside the OS)."""
        with self.lock:
            self.instances[iid]["status"] = status
            self.reads[iid] = 10**6

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Reply:
        if method == "GET" and path == "/instance-types":
            return Reply(200, {"data": self.types})
        if method == "POST" and path == "/instance-operations/launch":
            return self._launch(body)
        if method == "POST" and path == "/instance-operations/terminate":
            return self._terminate(body)
        m = re.fullmatch(r"/instances/([0-9a-f]+)", path)
        if m and method == "GET":
            return self._show(m.group(1))
        if method == "GET" and path == "/file-systems":
            return Reply(200, {"data": list(self.file_systems.values())})
        m = re.fullmatch(r"/filesystems/([^/]+)", path)
        if m and method == "DELETE":
            if self.file_systems.pop(m.group(1), None) is None:
                return self.not_found("filesystem")
            return Reply(200, {"data": {"deleted_ids": [m.group(1)]}})
        return self.not_found(path)

    def _launch(self, body: Any) -> Reply:
        if not isinstance(body, dict):
            return self.bad_request("body must be a JSON object")
        keys = body.get("ssh_key_names")
        if not isinstance(body.get("region_name"), str):
            return self.bad_request("region_name is required")
        if body.get("instance_type_name") not in self.types:
            return self.bad_request("instance_type_name is not a valid instance type")
        if not isinstance(keys, list) or len(keys) != 1 or not isinstance(keys[0], str):
            return self.bad_request("Currently, exactly one SSH key must be specified.")
        if not isinstance(body.get("file_system_names", []), list):
            return self.bad_request("file_system_names must be a list")
        if len(str(body.get("name", ""))) > 64:
            return self.bad_request("name must be 64 characters or fewer")
        if body["region_name"] in self.full_regions:
            return self._error(
                400,
                "instance-operations/launch/insufficient-capacity",
                "Not enough capacity to fulfill launch request.",
                "Choose an instance type with more availability, or try again later.",
            )
        iid = f"{self.next_id():032x}"
        itype = self.types[body["instance_type_name"]]["instance_type"]
        self.instances[iid] = {
            "id": iid,
            "name": body.get("name"),
            "ip": "192.0.2.44",
            "private_ip": "10.0.2.100",
            "status": "booting",
            "ssh_key_names": keys,
            "file_system_names": body.get("file_system_names", []),
            "region": {"name": body["region_name"], "description": ""},
            "instance_type": {k: itype[k] for k in ("name", "description", "price_cents_per_hour")},
            "hostname": "192-0-2-44",
            "actions": {},
        }
        self.reads[iid] = 0
        return Reply(200, {"data": {"instance_ids": [iid]}})

    def _terminate(self, body: Any) -> Reply:
        ids = body.get("instance_ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not ids:
            return self.bad_request("instance_ids is required")
        done = []
        for iid in ids:
            inst = self.instances.get(iid)
            if inst is None:
                return self.not_found("instance")
            inst["status"] = "terminating"
            self.terminating[iid] = 2
            done.append(dict(inst))
        return Reply(200, {"data": {"terminated_instances": done}}, hang=self.terminate_hang)

    def _show(self, iid: str) -> Reply:
        inst = self.instances.get(iid)
        if inst is None:
            return self.not_found("instance")
        if iid in self.terminating:
            if self.terminating[iid] <= 0:
                del self.instances[iid]
                return self.not_found("instance")
            self.terminating[iid] -= 1
        else:
            self.reads[iid] += 1
            if inst["status"] == "booting" and self.reads[iid] > 1:
                inst["status"] = "active"
        return Reply(200, {"data": inst})


# ------------------------------------------------------------------------------------------------
# Paperspace REST v1
# ------------------------------------------------------------------------------------------------


@dataclass
class PaperspaceFake(FakeCloud):
    """``https://api.paperspace.com/v1``: machines, public IPs, snapshots.

    A new machine is provisioning for one read, then ready. Stop makes it stopping for two
    reads, then off. Only an off machine can be deleted; after that it is 404.
    """

    prefix: str = "/v1"
    page_size: int = 1
    machines: dict[str, dict[str, Any]] = field(default_factory=dict)
    reads: dict[str, int] = field(default_factory=dict)
    stopping: dict[str, int] = field(default_factory=dict)
    public_ips: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "203.0.113.50": {
                "ip": "203.0.113.50",
                "region": "ny2",
                "dtCreated": "2024-05-01T00:00:00Z",
            }
        }
    )
    snapshots: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "s0a1b2c3": {
                "id": "s0a1b2c3",
                "name": "before-upgrade",
                "machineId": "psold1",
                "isAutoSnapshot": False,
            }
        }
    )

    def unauthorized(self, presented: str) -> Reply:
        return Reply(
            401, {"code": "UNAUTHORIZED", "message": "Invalid API key" + self.key_words(presented)}
        )

    def not_found(self, what: str) -> Reply:
        return Reply(404, {"code": "NOT_FOUND", "message": f"{what} not found"})

    def bad_request(self, message: str) -> Reply:
        return Reply(400, {"code": "BAD_REQUEST", "message": message})

    def _event(self, name: str, mid: str) -> dict[str, Any]:
        return {
            "id": f"ev{self.next_id()}",
            "name": name,
            "state": "new",
            "machineId": mid,
            "error": None,
            "dtCreated": "2024-05-01T00:00:00Z",
            "dtStarted": None,
            "dtFinished": None,
        }

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Reply:
        if path == "/machines" and method == "POST":
            return self._create(body)
        if path == "/machines" and method == "GET":
            return self._page(list(self.machines.values()), query)
        m = re.fullmatch(r"/machines/([^/]+)(/stop)?", path)
        if m and method == "GET" and not m.group(2):
            return self._show(m.group(1))
        if m and method == "PATCH" and m.group(2):
            mach = self.machines.get(m.group(1))
            if mach is None:
                return self.not_found("machine")
            if mach["state"] != "off":
                mach["state"] = "stopping"
                self.stopping[m.group(1)] = 2
            return Reply(200, {"data": mach, "event": self._event("stop", m.group(1))})
        if m and method == "DELETE" and not m.group(2):
            mach = self.machines.get(m.group(1))
            if mach is None:
                return self.not_found("machine")
            if mach["state"] != "off":
                return self.bad_request("The machine must be off before it can be deleted.")
            del self.machines[m.group(1)]
            return Reply(200, {"data": mach, "event": self._event("deactivate", m.group(1))})
        if path == "/public-ips" and method == "GET":
            return self._page(list(self.public_ips.values()), query)
        m = re.fullmatch(r"/public-ips/([^/]+)", path)
        if m and method == "DELETE":
            if self.public_ips.pop(m.group(1), None) is None:
                return self.not_found("public IP")
            return Reply(200, {"ip": m.group(1)})
        if path == "/snapshots" and method == "GET":
            return self._page(list(self.snapshots.values()), query)
        m = re.fullmatch(r"/snapshots/([^/]+)", path)
        if m and method == "DELETE":
            snap = self.snapshots.pop(m.group(1), None)
            if snap is None:
                return self.not_found("snapshot")
            return Reply(
                200, {"data": snap, "event": self._event("snapshot-delete", snap["machineId"])}
            )
        return self.not_found(path)

    def _page(self, items: list[dict[str, Any]], query: dict[str, list[str]]) -> Reply:
        start = int(query.get("after", ["0"])[0])
        size = min(self.page_size, int(query.get("limit", ["120"])[0]))
        page = items[start : start + size]
        more = start + size < len(items)
        return Reply(
            200, {"items": page, "hasMore": more, "nextPage": str(start + size) if more else None}
        )

    def _create(self, body: Any) -> Reply:
        if not isinstance(body, dict):
            return self.bad_request("body must be a JSON object")
        for key in ("name", "machineType", "templateId", "region"):
            if not isinstance(body.get(key), str) or not body[key]:
                return self.bad_request(f"{key} is required")
        if not isinstance(body.get("diskSize"), (int, float)):
            return self.bad_request("diskSize is required")
        if body.get("publicIpType", "dynamic") not in ("static", "dynamic", "none"):
            return self.bad_request("publicIpType must be static, dynamic or none")
        mid = f"ps{self.next_id():06d}"
        mach = {
            "id": mid,
            "name": body["name"],
            "state": "provisioning",
            "machineType": body["machineType"],
            "region": body["region"],
            "os": "Ubuntu 22.04",
            "publicIp": None,
            "publicIpType": body.get("publicIpType", "dynamic"),
            "privateIp": "10.64.0.5",
            "usageRate": 0.76,
            "storageRate": 7.0,
            "storageTotal": int(body["diskSize"]) * 2**30,
            "storageUsed": 0,
        }
        self.machines[mid] = mach
        self.reads[mid] = 0
        return Reply(200, {"data": mach, "event": self._event("create", mid)})

    def _show(self, mid: str) -> Reply:
        mach = self.machines.get(mid)
        if mach is None:
            return self.not_found("machine")
        if mid in self.stopping:
            if self.stopping[mid] <= 0:
                del self.stopping[mid]
                mach["state"] = "off"
                if mach["publicIpType"] == "dynamic":
                    mach["publicIp"] = None
            else:
                self.stopping[mid] -= 1
        elif mach["state"] == "provisioning":
            self.reads[mid] += 1
            if self.reads[mid] > 1:
                mach.update(state="ready", publicIp="198.51.100.20")
        return Reply(200, mach)
