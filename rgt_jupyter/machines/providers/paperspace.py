"""Paperspace machines through the REST API (``https://api.paperspace.com/v1``); the meter
stops on shut down."""

from __future__ import annotations

from typing import Any

from .base import Instance, Orphan, Provider, as_float
from .errors import ProviderError
from .http import seg

_STATES = {
    "provisioning": "starting",
    "starting": "starting",
    "restarting": "starting",
    "upgrading": "starting",
    "ready": "running",
    "serviceready": "running",
    "stopping": "stopping",
    "off": "stopped",
}

_PAGE = 120


class Paperspace(Provider):
    """Machines are created with ``POST /machines``, read with ``GET /machines/{id}`` and shut
    down with ``PATCH /machines/{id}/stop``: compute billing stops once the state is ``off``.

    The shut-down machine's disk, a static public IP and snapshots keep billing; they are
    listed by :meth:`orphans` (the disk as ``machine_disk``: deleting it deletes the machine).
    """

    name = "paperspace"
    meter_stop_verb = "shut down"
    console_url = "https://console.paperspace.com/machines"

    def up(self, params: dict[str, Any]) -> Instance:
        """Create a machine: ``machineType``, ``templateId`` and ``region`` are required."""
        body = self.request(params)
        answer = self.create_call("POST", "/machines", body, f"machine {body['name']!r}")
        data = answer.data if isinstance(answer.data, dict) else {}
        machine = data.get("data", data)
        return self._instance(self.created(machine, "Paperspace", "machine", body["name"]))

    def request(self, params: dict[str, Any]) -> dict[str, Any]:
        """The create request :meth:`up` sends."""
        body = dict(params)
        self.require(body, "machineType", "templateId", "region")
        body.setdefault("name", "rgt-jupyter")
        body.setdefault("diskSize", 50)
        body.setdefault("publicIpType", "dynamic")
        body.setdefault("startOnCreate", True)
        if body["publicIpType"] not in ("static", "dynamic", "none"):
            raise ProviderError(
                f"Paperspace publicIpType must be static, dynamic or none, not "
                f"{body['publicIpType']!r}."
            )
        return body

    def plan_fields(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """Machine type (GPU and count are the type's), template, region, disk, address."""
        return [
            ("machine type", f"{body.get('machineType')} (its GPUs are the type's)"),
            ("template", str(body.get("templateId"))),
            ("region", str(body.get("region"))),
            ("disk", f"{body.get('diskSize')} GB boot disk (kept by stop, lost on delete)"),
            ("public IP", str(body.get("publicIpType"))),
        ]

    def status(self, instance_id: str) -> Instance:
        """``GET /machines/{id}``; gone on 404."""
        answer = self.http.get(f"/machines/{seg(instance_id)}", allow=(404,))
        if answer.status == 404:
            return self.gone(instance_id)
        if not isinstance(answer.data, dict):
            return self.instance(instance_id, "unknown", answer.text[:80])
        machine = answer.data.get("data", answer.data)
        if not isinstance(machine, dict):
            return self.instance(instance_id, "unknown", answer.text[:80])
        return self._instance(machine, instance_id)

    def down(self, instance_id: str) -> None:
        """Shut down: ``PATCH /machines/{id}/stop``."""
        self.stop_call(instance_id, "PATCH", f"/machines/{seg(instance_id)}/stop")

    def is_down(self, inst: Instance) -> bool:
        """Compute billing has stopped once the machine is off (or gone)."""
        return inst.state in ("stopped", "gone")

    def orphans(self) -> list[Orphan]:
        """Disks of machines that are off, static public IPs, snapshots."""
        out = []
        for m in self._pages("/machines"):
            if m.get("state") != "off" or not m.get("id"):
                continue
            name = str(m.get("name") or m["id"])
            size = as_float(m.get("storageTotal"))
            disk = f"{size / 2**30:.0f} GiB disk" if size else "disk"
            out.append(
                Orphan(
                    "machine_disk",
                    str(m["id"]),
                    name,
                    f"Machine '{name}' is off; its {disk} bills until the machine is deleted",
                )
            )
        for ip in self._pages("/public-ips"):
            if not ip.get("ip"):
                continue
            addr = str(ip["ip"])
            where = f" ({ip['region']})" if ip.get("region") else ""
            user = (
                f", assigned to machine {ip['assignedMachineId']}"
                if ip.get("assignedMachineId")
                else ""
            )
            out.append(
                Orphan(
                    "static_ip",
                    addr,
                    addr,
                    f"Static public IP {addr}{where}{user} bills monthly until released",
                )
            )
        for snap in self._pages("/snapshots"):
            if not snap.get("id"):
                continue
            name = str(snap.get("name") or snap["id"])
            of = f" of machine {snap['machineId']}" if snap.get("machineId") else ""
            out.append(
                Orphan(
                    "snapshot",
                    str(snap["id"]),
                    name,
                    f"Snapshot '{name}'{of} bills storage until deleted",
                )
            )
        return out

    def delete_orphan(self, orphan: Orphan) -> None:
        """Delete the machine (``machine_disk``), release the IP, or delete the snapshot."""
        paths = {
            "machine_disk": f"/machines/{seg(orphan.id)}",
            "static_ip": f"/public-ips/{seg(orphan.id)}",
            "snapshot": f"/snapshots/{seg(orphan.id)}",
        }
        if orphan.kind not in paths:
            raise ProviderError(f"Paperspace has no {orphan.kind!r} leftovers to delete.")
        self.http.request("DELETE", paths[orphan.kind], allow=(404,))

    def _pages(self, path: str) -> list[dict[str, Any]]:
        """Every item of a paginated list (``items``, ``hasMore``, ``nextPage``)."""
        items: list[dict[str, Any]] = []
        after: str | None = None
        for _ in range(1000):
            data = self.http.get(path, query={"limit": _PAGE, "after": after}).data
            if not isinstance(data, dict):
                break
            page = data.get("items")
            items += [x for x in page if isinstance(x, dict)] if isinstance(page, list) else []
            after = data.get("nextPage") if data.get("hasMore") else None
            if not after:
                break
        return items

    def _instance(self, machine: dict[str, Any], fallback_id: str = "") -> Instance:
        raw = str(machine.get("state") or "unknown")
        ip = machine.get("publicIp") or None
        return self.instance(
            str(machine.get("id") or fallback_id),
            _STATES.get(raw, "unknown"),
            raw,
            ssh_host=str(ip) if ip else None,
            ssh_port=22 if ip else None,
            ssh_user="paperspace",
            cost_per_hour=as_float(machine.get("usageRate")),
            detail=machine,
        )
