"""Lambda Cloud instances through the REST API (``https://cloud.lambda.ai/api/v1``); the meter
stops on terminate."""

from __future__ import annotations

import time
from typing import Any

from .base import Instance, Orphan, Provider, as_float
from .errors import ProviderError
from .http import seg

#: What a persistent file system costs while it exists (USD per GB per month).
FILE_SYSTEM_USD_PER_GB_MONTH = 0.20

_CAPACITY_CODE = "instance-operations/launch/insufficient-capacity"

_STATES = {
    "booting": "starting",
    "active": "running",
    "unhealthy": "error",
    "terminating": "stopping",
    "terminated": "gone",
    "preempted": "gone",
}


class LambdaCloud(Provider):
    """Instances are launched with ``POST /instance-operations/launch`` into a region that has
    capacity, read with ``GET /instances/{id}`` and terminated with
    ``POST /instance-operations/terminate``. The terminate call can take long to answer; it is
    bounded by the client timeout and the instance is then polled until it is gone.

    An instance shut down from inside its OS shows ``unhealthy`` and still bills: not down.
    """

    name = "lambda"
    meter_stop_verb = "terminate"
    console_url = "https://cloud.lambda.ai/instances"

    #: Seconds between launch requests (the API accepts one launch per 12 seconds).
    launch_interval = 12.0
    #: Passes over the regions with capacity before giving up; each later pass waits longer.
    launch_rounds = 3

    def up(self, params: dict[str, Any]) -> Instance:
        """Launch ``instance_type_name`` with one SSH key, in ``region_name`` or else in each
        region that reports capacity, in a bounded, paced loop."""
        body = self.request(params)
        wanted = body.pop("region_name", None)
        itype = str(body["instance_type_name"])
        last_launch: float | None = None
        tried: list[str] = []
        for round_no in range(self.launch_rounds):
            if round_no:
                time.sleep(self.launch_interval * 2 ** (round_no - 1))
            price, regions = self._capacity(itype)
            if wanted:
                regions = [r for r in regions if r == wanted]
            for region in regions:
                if last_launch is not None:
                    time.sleep(max(0.0, self.launch_interval - (time.monotonic() - last_launch)))
                last_launch = time.monotonic()
                tried.append(region)
                launch = {**body, "region_name": region}
                answer = self.create_call(
                    "POST",
                    "/instance-operations/launch",
                    launch,
                    f"{itype} in {region}",
                    allow=(400,),
                )
                if answer.status == 400:
                    err = answer.data.get("error") if isinstance(answer.data, dict) else None
                    if isinstance(err, dict) and err.get("code") == _CAPACITY_CODE:
                        continue
                    raise self.http.error_for("POST /instance-operations/launch", answer)
                data = answer.data.get("data") if isinstance(answer.data, dict) else None
                ids = data.get("instance_ids") if isinstance(data, dict) else None
                if not isinstance(ids, list) or not ids:
                    raise ProviderError(
                        f"Lambda accepted the launch of {itype} in {region} but returned no "
                        f"instance id; look on {self.console_url} before launching again."
                    )
                return self.instance(
                    str(ids[0]),
                    "starting",
                    "launched",
                    ssh_user="ubuntu",
                    cost_per_hour=price,
                    detail={
                        "instance_ids": ids,
                        "region_name": region,
                        "instance_type_name": itype,
                    },
                )
        where = f"in {wanted}" if wanted else "in any region"
        tried_txt = f" (tried {', '.join(tried)})" if tried else " (none reported capacity)"
        raise ProviderError(
            f"No Lambda capacity for {itype} {where} after {self.launch_rounds} passes"
            f"{tried_txt}. Try another instance type or region, or try again later."
        )

    def request(self, params: dict[str, Any]) -> dict[str, Any]:
        """The launch request :meth:`up` sends (``region_name`` None: the first region that
        reports capacity)."""
        body = dict(params)
        key = body.pop("ssh_key_name", None)
        if key and not body.get("ssh_key_names"):
            body["ssh_key_names"] = [key]
        if isinstance(body.get("ssh_key_names"), str):
            body["ssh_key_names"] = [body["ssh_key_names"]]
        self.require(body, "instance_type_name", "ssh_key_names")
        if body.setdefault("quantity", 1) != 1:
            raise ProviderError("Lambda quantity must be 1: one launch makes one instance here.")
        body.setdefault("name", "rgt-jupyter")
        body.setdefault("file_system_names", [])
        body.setdefault("region_name", None)
        return body

    def quote(self, body: dict[str, Any]) -> float | None:
        """The instance type's price, from ``GET /instance-types``."""
        return self._capacity(str(body["instance_type_name"]))[0]

    def plan_fields(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """Instance type (GPU and count are the type's), region, SSH key, file systems."""
        systems = ", ".join(body.get("file_system_names") or []) or "none"
        return [
            ("instance type", f"{body.get('instance_type_name')} (its GPUs are the type's)"),
            ("region", str(body.get("region_name") or "the first that reports capacity")),
            ("ssh key", ", ".join(body.get("ssh_key_names") or [])),
            ("local disk", "the type's NVMe (lost on terminate)"),
            ("file systems", f"{systems} (outlive the instance)"),
        ]

    def status(self, instance_id: str) -> Instance:
        """``GET /instances/{id}``; gone on 404 (the platform forgets terminated instances)."""
        answer = self.http.get(f"/instances/{seg(instance_id)}", allow=(404,))
        if answer.status == 404:
            return self.gone(instance_id)
        data = answer.data.get("data") if isinstance(answer.data, dict) else None
        if not isinstance(data, dict):
            return self.instance(instance_id, "unknown", answer.text[:80])
        raw = str(data.get("status") or "unknown")
        itype = data.get("instance_type")
        cents = as_float(itype.get("price_cents_per_hour")) if isinstance(itype, dict) else None
        ip = data.get("ip") or None
        return self.instance(
            str(data.get("id") or instance_id),
            _STATES.get(raw, "unknown"),
            raw,
            ssh_host=str(ip) if ip else None,
            ssh_port=22 if ip else None,
            ssh_user="ubuntu",
            cost_per_hour=cents / 100 if cents is not None else None,
            detail=data,
        )

    def down(self, instance_id: str) -> None:
        """Terminate: ``POST /instance-operations/terminate``, bounded by the client timeout."""
        self.stop_call(
            instance_id, "POST", "/instance-operations/terminate", {"instance_ids": [instance_id]}
        )

    def orphans(self) -> list[Orphan]:
        """Persistent file systems: they bill until deleted."""
        data = self.http.get("/file-systems").data
        items = data.get("data") if isinstance(data, dict) else None
        out = []
        for fs in items if isinstance(items, list) else []:
            if not isinstance(fs, dict) or not fs.get("id"):
                continue
            name = str(fs.get("name") or fs["id"])
            facts = []
            region = fs.get("region")
            if isinstance(region, dict) and region.get("name"):
                facts.append(str(region["name"]))
            used = as_float(fs.get("bytes_used"))
            if used is not None:
                facts.append(f"{used / 2**30:.1f} GiB used")
            what = f"File system '{name}'" + (f" ({', '.join(facts)})" if facts else "")
            rate = f"${FILE_SYSTEM_USD_PER_GB_MONTH:.2f}/GB/month"
            out.append(Orphan("nfs", str(fs["id"]), name, f"{what} bills {rate} until deleted"))
        return out

    def delete_orphan(self, orphan: Orphan) -> None:
        """``DELETE /filesystems/{id}`` (refused while an instance still mounts it)."""
        if orphan.kind != "nfs":
            raise ProviderError(f"Lambda has no {orphan.kind!r} leftovers to delete.")
        self.http.request("DELETE", f"/filesystems/{seg(orphan.id)}", allow=(404,))

    def _capacity(self, itype: str) -> tuple[float | None, list[str]]:
        """The hourly price of ``itype`` and the regions that report capacity for it now."""
        data = self.http.get("/instance-types").data
        types = data.get("data") if isinstance(data, dict) else None
        entry = types.get(itype) if isinstance(types, dict) else None
        if not isinstance(entry, dict):
            known = ", ".join(sorted(types)) if isinstance(types, dict) else "none listed"
            raise ProviderError(
                f"Lambda offers no instance type {itype!r} (offered: {known}): fix "
                "instance_type_name in the profile."
            )
        spec = entry.get("instance_type")
        cents = as_float(spec.get("price_cents_per_hour")) if isinstance(spec, dict) else None
        regions = entry.get("regions_with_capacity_available")
        names = [
            str(r["name"])
            for r in (regions if isinstance(regions, list) else [])
            if isinstance(r, dict) and r.get("name")
        ]
        return (cents / 100 if cents is not None else None), names
