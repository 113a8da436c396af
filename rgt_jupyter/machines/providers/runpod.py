"""RunPod pods through REST API v2 (``https://api.runpod.io/v2``); the meter stops on terminate.

REST v1 (``https://rest.runpod.io/v1``) is retired; v2 moved the paths (network volumes are
``/network-volumes``), nested the create body and wraps lists in an object.
"""

from __future__ import annotations

from typing import Any

from .base import Instance, Orphan, Provider, as_float, as_int
from .errors import ProviderError
from .http import seg

#: What a network volume costs while it exists (USD per GB per month), by storage tier.
NETWORK_VOLUME_USD_PER_GB_MONTH = 0.07
NETWORK_VOLUME_HP_USD_PER_GB_MONTH = 0.14

_CLOUDS = ("SECURE", "COMMUNITY")

#: The top-level fields of the v2 ``CreatePodRequest`` (the API refuses any other by name).
_V2_FIELDS = frozenset(
    {
        "name",
        "image",
        "args",
        "disk",
        "ports",
        "env",
        "registry",
        "mounts",
        "gpu",
        "cpu",
        "cloud",
        "dataCenterIds",
        "globalNetworking",
        "startJupyter",
        "startSsh",
        "templateId",
    }
)

#: v1 create fields renamed one-to-one in v2.
_V1_RENAMED = {
    "imageName": "image",
    "containerDiskInGb": "disk",
    "cloudType": "cloud",
    "containerRegistryAuthId": "registry",
}

#: v1 create fields that v2 spells as a nested part of the body (handled in ``_from_v1``).
_V1_NESTED = frozenset(
    {
        "gpuTypeId",
        "gpuTypeIds",
        "gpuCount",
        "allowedCudaVersions",
        "volumeInGb",
        "volumeMountPath",
        "networkVolumeId",
    }
)

_GPU_STATES = {
    "PROVISIONING": "starting",
    "STARTING": "starting",
    "EXITED": "stopped",
    "ERROR": "error",
    "TERMINATED": "gone",
}


class RunPod(Provider):
    """Pods are created with ``POST /pods``, read with ``GET /pods/{id}``, terminated with
    ``DELETE /pods/{id}`` (after which the pod is unknown: 404). Network volumes outlive pods
    and are listed and deleted under ``/network-volumes``. Paths are below the API root
    ``https://api.runpod.io/v2``; the key goes in ``Authorization: Bearer <key>``.
    """

    name = "runpod"
    meter_stop_verb = "terminate"
    console_url = "https://console.runpod.io/pods"

    def up(self, params: dict[str, Any]) -> Instance:
        """Create a pod from v2 create fields; ``image`` and ``gpu`` (a GPU type) are required.

        The body is the v2 ``CreatePodRequest``: ``name``, ``image``, ``args``, ``disk``
        (container disk, GB), ``ports``, ``env``, ``registry``, ``mounts``
        (``{"persistent": {"size", "path"}}`` or ``{"network": [{"volumeId", "path"}]}``),
        ``gpu`` (``{"id", "count", "allowedCudaVersions"|"minCudaVersion"}``; a bare string is
        taken as the id) or ``cpu``, ``cloud``, ``dataCenterIds``, ``globalNetworking``,
        ``startJupyter``, ``startSsh``, ``templateId``. Defaults: name ``rgt-jupyter``, one
        GPU, cloud ``SECURE``, a 50 GB container disk, ``22/tcp`` always exposed (full SSH),
        ``startSsh`` on (v2 puts the account's SSH keys in ``PUBLIC_KEY`` only when asked).

        The v1 field names are still accepted where v2 has exactly one meaning for them:

        - ``imageName`` → ``image``; ``containerDiskInGb`` → ``disk``; ``cloudType`` →
          ``cloud``; ``containerRegistryAuthId`` → ``registry``.
        - ``gpuTypeId``, or ``gpuTypeIds`` holding one type → ``gpu.id``; ``gpuCount`` →
          ``gpu.count``; ``allowedCudaVersions`` → ``gpu.allowedCudaVersions``. Several
          types are refused: v2 places exactly the type asked for, with no fallback.
        - ``volumeInGb`` (when above 0) with ``volumeMountPath`` (default ``/workspace``) →
          ``mounts.persistent`` ``{size, path}``.
        - ``networkVolumeId`` → ``mounts.network`` ``[{volumeId, path}]`` at
          ``volumeMountPath`` (default ``/workspace``); as in v1 it replaces the pod's own
          volume disk, so a ``volumeInGb`` or ``mounts.persistent`` beside it is dropped.
        - ``supportPublicIp`` and ``interruptible = false`` are dropped (v2 has no such
          field; the public SSH port comes from exposing ``22/tcp``).

        Refused before any request: ``interruptible = true`` (v2 cannot create spot pods),
        a v1 name given together with its v2 name with a different value, and any other
        field v2 does not know (v2 would answer 422 naming it).
        """
        body = self.request(params)
        pod = self.create_call("POST", "/pods", body, f"pod {body['name']!r}").data
        return self._instance(self.created(pod, "RunPod", "pod", body["name"]))

    def request(self, params: dict[str, Any]) -> dict[str, Any]:
        """The v2 ``CreatePodRequest`` :meth:`up` sends (see there for the fields)."""
        body = self._from_v1(dict(params))
        gpu = body.get("gpu")
        if isinstance(gpu, str):
            gpu = {"id": gpu}
        if gpu is not None and not isinstance(gpu, dict):
            raise ProviderError(
                f"RunPod gpu must be a GPU type id or a table with id and count, not {gpu!r}: "
                "fix the profile's create parameters."
            )
        if gpu is not None:
            gpu = dict(gpu)
            gpu.setdefault("count", 1)
            body["gpu"] = gpu
        required = ["image"] if not body.get("templateId") else []
        if "cpu" not in body:
            required.append("gpu")
        if required:
            self.require({**body, "gpu": (gpu or {}).get("id")}, *required)
        body.setdefault("name", "rgt-jupyter")
        body.setdefault("cloud", "SECURE")
        body.setdefault("disk", 50)
        body.setdefault("ports", ["22/tcp"])
        body.setdefault("env", {})
        body.setdefault("startSsh", True)
        if body["cloud"] not in _CLOUDS:
            raise ProviderError(
                f"RunPod cloud must be one of {', '.join(_CLOUDS)}, not {body['cloud']!r}: "
                "fix the profile's create parameters."
            )
        if isinstance(body["ports"], str):
            body["ports"] = [p.strip() for p in body["ports"].split(",") if p.strip()]
        if not any(str(p).startswith("22/") for p in body["ports"]):
            body["ports"] = [*body["ports"], "22/tcp"]
        return body

    def plan_fields(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """GPU × count, image, cloud, the container disk and the volume (the pod's own, or a
        Network Volume by id), each with where it is mounted."""
        gpu = body.get("gpu") or {}
        out = [
            (
                "GPU",
                f"{gpu.get('id')} x {gpu.get('count', 1)}" if gpu else f"CPU {body.get('cpu')}",
            ),
            ("image", str(body.get("image") or f"template {body.get('templateId')}")),
            ("cloud", str(body.get("cloud"))),
            ("container disk", f"{body.get('disk')} GB at / (lost on stop and on terminate)"),
        ]
        mounts = body.get("mounts") or {}
        persistent = mounts.get("persistent") if isinstance(mounts, dict) else None
        network = mounts.get("network") if isinstance(mounts, dict) else None
        if isinstance(persistent, dict):
            out.append(
                (
                    "volume disk",
                    f"{persistent.get('size')} GB at {persistent.get('path')} (the pod's own: "
                    "kept by stop, lost on terminate)",
                )
            )
        for vol in network if isinstance(network, list) else []:
            if isinstance(vol, dict):
                out.append(
                    (
                        "network volume",
                        f"{vol.get('volumeId')} at {vol.get('path')} (outlives the pod)",
                    )
                )
        return out

    def status(self, instance_id: str) -> Instance:
        """``GET /pods/{id}``; 404 (or status TERMINATED) means gone."""
        answer = self.http.get(f"/pods/{seg(instance_id)}", allow=(404,))
        if answer.status == 404:
            return self.gone(instance_id)
        if not isinstance(answer.data, dict):
            return self.instance(instance_id, "unknown", answer.text[:80])
        return self._instance(answer.data, instance_id)

    def down(self, instance_id: str) -> None:
        """Terminate: ``DELETE /pods/{id}`` (204). A pod already unknown to RunPod is fine."""
        self.stop_call(instance_id, "DELETE", f"/pods/{seg(instance_id)}")

    def orphans(self) -> list[Orphan]:
        """Network volumes (they bill until deleted, with or without a pod)."""
        data = self.http.get("/network-volumes").data
        if isinstance(data, dict):
            data = data.get("networkVolumes")
        items = data if isinstance(data, list) else []
        out = []
        for vol in items:
            if not isinstance(vol, dict) or not vol.get("id"):
                continue
            size = as_float(vol.get("size"))
            name = str(vol.get("name") or vol["id"])
            fast = vol.get("type") == "HIGH_PERFORMANCE"
            facts = [f"{size:g} GB"] if size is not None else []
            if vol.get("dataCenter"):
                facts.append(str(vol["dataCenter"]))
            if fast:
                facts.append("high-performance")
            what = f"Network Volume '{name}'" + (f" ({', '.join(facts)})" if facts else "")
            per_gb = NETWORK_VOLUME_HP_USD_PER_GB_MONTH if fast else NETWORK_VOLUME_USD_PER_GB_MONTH
            rate = f"${per_gb:.2f}/GB/month"
            if size is not None:
                cost = f"bills {rate} (about ${size * per_gb:.2f}/month) until deleted"
            else:
                cost = f"bills {rate} until deleted"
            out.append(Orphan("network_volume", str(vol["id"]), name, f"{what} {cost}"))
        return out

    def delete_orphan(self, orphan: Orphan) -> None:
        """``DELETE /network-volumes/{id}`` (204; already unknown is fine)."""
        if orphan.kind != "network_volume":
            raise ProviderError(f"RunPod has no {orphan.kind!r} leftovers to delete.")
        self.http.request("DELETE", f"/network-volumes/{seg(orphan.id)}", allow=(404,))

    # -- helpers -------------------------------------------------------------------------------

    def _from_v1(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with the v1 field names moved to their v2 places (see :meth:`up`)."""
        for old, new in _V1_RENAMED.items():
            if old in body:
                self._put(body, new, body.pop(old), old)
        if body.pop("interruptible", False) not in (False, None):
            raise ProviderError(
                "RunPod REST v2 cannot create interruptible (spot) pods: remove interruptible "
                "from the profile's create parameters, or create the pod in the console."
            )
        body.pop("supportPublicIp", None)
        unknown = sorted(k for k in body if k not in _V2_FIELDS and k not in _V1_NESTED)
        if unknown:
            raise ProviderError(
                f"RunPod REST v2 has no create field {', '.join(map(repr, unknown))}: remove "
                "it from the profile's create parameters (v2 fields: "
                f"{', '.join(sorted(_V2_FIELDS))})."
            )
        gpu = self._gpu_from_v1(body)
        if gpu:
            given = body.get("gpu")
            if isinstance(given, str):
                given = {"id": given}
            if given is not None and not isinstance(given, dict):
                raise ProviderError(f"RunPod gpu must be a table with id and count, not {given!r}.")
            merged = dict(given or {})
            v1_name = {"id": "gpuTypeIds", "count": "gpuCount"}
            for key, value in gpu.items():
                if key in merged and merged[key] != value:
                    raise ProviderError(
                        f"RunPod create parameters give gpu.{key} twice "
                        f"({v1_name.get(key, key)} = {value!r} and gpu.{key} = "
                        f"{merged[key]!r}): keep only gpu.{key}."
                    )
                merged[key] = value
            body["gpu"] = merged
        path = body.pop("volumeMountPath", None)
        size = body.pop("volumeInGb", None)
        volume_id = body.pop("networkVolumeId", None)
        mounts = body.get("mounts")
        if mounts is not None and not isinstance(mounts, dict):
            raise ProviderError(f"RunPod mounts must be a table, not {mounts!r}.")
        if volume_id:
            network = (mounts or {}).get("network") or []
            if network and any(
                not isinstance(m, dict) or m.get("volumeId") != volume_id for m in network
            ):
                raise ProviderError(
                    f"RunPod networkVolumeId {volume_id!r} differs from mounts.network: give "
                    "the network volume once."
                )
            persistent = (mounts or {}).get("persistent")
            old_path = persistent.get("path") if isinstance(persistent, dict) else None
            where = path or old_path or "/workspace"
            body["mounts"] = {"network": [{"volumeId": volume_id, "path": where}]}
        elif size not in (None, 0):
            if mounts:
                raise ProviderError(
                    "RunPod volumeInGb and mounts both describe the pod's volume: give only "
                    "mounts (persistent = {size, path})."
                )
            body["mounts"] = {"persistent": {"size": size, "path": path or "/workspace"}}
        elif path and mounts is None:
            raise ProviderError(
                "RunPod volumeMountPath needs volumeInGb or networkVolumeId (or use mounts)."
            )
        return body

    def _gpu_from_v1(self, body: dict[str, Any]) -> dict[str, Any]:
        gpu: dict[str, Any] = {}
        one = body.pop("gpuTypeId", None)
        many = body.pop("gpuTypeIds", None)
        if isinstance(many, str):
            many = [many]
        if many is not None and (
            not isinstance(many, list) or not all(isinstance(g, str) for g in many)
        ):
            raise ProviderError(f"RunPod gpuTypeIds must be a list of GPU type ids, not {many!r}.")
        types = list(dict.fromkeys([*([one] if one else []), *(many or [])]))
        if len(types) > 1:
            raise ProviderError(
                f"RunPod REST v2 places exactly one GPU type, with no fallback; gpuTypeIds "
                f"names {len(types)} ({', '.join(types)}): keep one, as gpu = {{ id = ... }}."
            )
        if types:
            gpu["id"] = types[0]
        if "gpuCount" in body:
            gpu["count"] = body.pop("gpuCount")
        if "allowedCudaVersions" in body:
            gpu["allowedCudaVersions"] = body.pop("allowedCudaVersions")
        return gpu

    @staticmethod
    def _put(body: dict[str, Any], key: str, value: Any, old: str) -> None:
        if key in body and body[key] != value:
            raise ProviderError(
                f"RunPod create parameters give {key} twice ({old} = {value!r} and {key} = "
                f"{body[key]!r}): keep only {key}."
            )
        body[key] = value

    def _instance(self, pod: dict[str, Any], fallback_id: str = "") -> Instance:
        raw = str(pod.get("status") or "")
        host, port, user = _direct_ssh(pod)
        if raw == "RUNNING":
            state = "running" if host and port else "starting"
        else:
            state = _GPU_STATES.get(raw, "unknown")
        return self.instance(
            str(pod.get("id") or fallback_id),
            state,
            raw or "unknown",
            ssh_host=host,
            ssh_port=port,
            ssh_user=user or "root",
            cost_per_hour=as_float(pod.get("cost")),
            detail=pod,
        )


def _direct_ssh(pod: dict[str, Any]) -> tuple[str | None, int | None, str | None]:
    """Host, port and user of full SSH: ``ssh.direct``, else the public mapping of 22/tcp."""
    ssh = pod.get("ssh")
    direct = ssh.get("direct") if isinstance(ssh, dict) else None
    if isinstance(direct, dict) and direct.get("host") and as_int(direct.get("port")):
        user = direct.get("username")
        return str(direct["host"]), as_int(direct["port"]), str(user) if user else None
    runtime = pod.get("runtime")
    ports = runtime.get("ports") if isinstance(runtime, dict) else None
    for entry in ports if isinstance(ports, list) else []:
        if (
            isinstance(entry, dict)
            and as_int(entry.get("private")) == 22
            and entry.get("type", "tcp") == "tcp"
            and entry.get("ip")
            and as_int(entry.get("public"))
        ):
            return str(entry["ip"]), as_int(entry["public"]), None
    return None, None, None
