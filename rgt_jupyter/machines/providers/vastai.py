"""vast.ai instances through the REST API (``https://console.vast.ai/api/v0``); the meter stops on destroy."""

from __future__ import annotations

from typing import Any

from .base import Instance, Orphan, Provider, as_float, as_int
from .errors import ProviderError
from .http import Response, seg

_RUNTYPES = ("ssh", "jupyter", "args", "ssh_proxy", "ssh_direct", "jupyter_proxy", "jupyter_direct")

#: ``actual_status`` (container state) to normalized state.
_STATES = {
    "created": "starting",
    "loading": "starting",
    "scheduling": "starting",
    "rebooting": "starting",
    "running": "running",
    "stopped": "stopped",
    "frozen": "stopped",
    "exited": "error",
    "unknown": "unknown",
    "offline": "unknown",
    "destroyed": "gone",
}


class VastAI(Provider):
    """Instances are rented from an offer with ``PUT /asks/{offer_id}/``, read with
    ``GET /instances/{id}/`` and destroyed with ``DELETE /instances/{id}/``.

    A destroy is eventually consistent: the instance can stay listed for a while after the
    DELETE succeeded, so only a later read saying it is gone confirms the meter stopped.
    """

    name = "vastai"
    meter_stop_verb = "destroy"
    console_url = "https://cloud.vast.ai/instances/"

    def up(self, params: dict[str, Any]) -> Instance:
        """Rent offer ``offer_id`` (also ``ask_id``/``id``) with ``image``; defaults ssh_direct."""
        body = self.request(params)
        offer = body.pop("offer_id")
        answer = self.create_call("PUT", f"/asks/{seg(offer)}/", body, f"offer {offer}")
        data = answer.data if isinstance(answer.data, dict) else {}
        new_id = data.get("new_contract")
        if not data.get("success", True) or new_id is None:
            said = self.http.clean(str(data.get("msg") or answer.text[:200]))
            raise ProviderError(
                f"vast.ai did not rent offer {offer}: {said}. Pick another offer (offers go "
                f"quickly), and check {self.console_url}."
            )
        return self.instance(str(new_id), "starting", "created", ssh_user="root", detail=dict(data))

    def request(self, params: dict[str, Any]) -> dict[str, Any]:
        """The rent request :meth:`up` sends, with the offer it rents as ``offer_id``."""
        body = dict(params)
        offer = body.pop("offer_id", None) or body.pop("ask_id", None) or body.pop("id", None)
        body["offer_id"] = offer
        self.require(body, "offer_id", "image")
        if as_int(offer) is None:
            raise ProviderError(
                f"vast.ai offer_id must be the numeric id of an offer, not {offer!r}: pick one "
                "from a search on the console and put it in the profile's create parameters."
            )
        body.setdefault("client_id", "me")
        body.setdefault("disk", 32)
        body.setdefault("runtype", "ssh_direct")
        body.setdefault("label", "rgt-jupyter")
        body.setdefault("env", {})
        if body["runtype"] not in _RUNTYPES:
            raise ProviderError(
                f"vast.ai runtype must be one of {', '.join(_RUNTYPES)}, not {body['runtype']!r}."
            )
        return body

    def plan_fields(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """The offer (which fixes GPU, count and price), image, disk and how it is reached."""
        return [
            ("offer", f"{body.get('offer_id')} (its GPU, count and price are the offer's)"),
            ("image", str(body.get("image"))),
            ("disk", f"{body.get('disk')} GB container disk (kept by stop, lost on destroy)"),
            ("access", str(body.get("runtype"))),
        ]

    def status(self, instance_id: str) -> Instance:
        """``GET /instances/{id}/``; gone on 404, or when the platform returns no instance."""
        answer = self.http.get(f"/instances/{seg(instance_id)}/", allow=(404,))
        if answer.status == 404:
            return self.gone(instance_id)
        data = answer.data if isinstance(answer.data, dict) else {}
        if "instances" in data and not data["instances"]:
            return self.gone(instance_id, "no instance")
        inst = data.get("instances")
        if not isinstance(inst, dict):
            return self.instance(instance_id, "unknown", answer.text[:80])
        return self._instance(inst, instance_id)

    def down(self, instance_id: str) -> None:
        """Destroy: ``DELETE /instances/{id}/``. Success here is not yet confirmation: poll."""
        answer = self.stop_call(instance_id, "DELETE", f"/instances/{seg(instance_id)}/")
        self._check_success(answer, f"destroy instance {instance_id}")

    def orphans(self) -> list[Orphan]:
        """Volumes: they keep billing storage after the instances that used them are destroyed."""
        data = self.http.get("/volumes/").data
        vols = data.get("volumes") if isinstance(data, dict) else None
        out = []
        for vol in vols if isinstance(vols, list) else []:
            if not isinstance(vol, dict) or vol.get("id") is None:
                continue
            vid = str(vol["id"])
            name = str(vol.get("label") or vol.get("name") or vol.get("volume_name") or f"V.{vid}")
            size = as_float(vol.get("disk_space"))
            facts = f" ({size:g} GB)" if size is not None else ""
            out.append(
                Orphan("volume", vid, name, f"Volume '{name}'{facts} bills storage until deleted")
            )
        return out

    def delete_orphan(self, orphan: Orphan) -> None:
        """``DELETE /volumes/`` with body ``{"id": <volume id>}``."""
        if orphan.kind != "volume":
            raise ProviderError(f"vast.ai has no {orphan.kind!r} leftovers to delete.")
        vid = as_int(orphan.id)
        answer = self.http.request(
            "DELETE", "/volumes/", {"id": vid if vid is not None else orphan.id}
        )
        self._check_success(answer, f"delete volume {orphan.id}")

    def _check_success(self, answer: Response, what: str) -> None:
        data = answer.data
        if isinstance(data, dict) and data.get("success") is False:
            said = self.http.clean(str(data.get("msg") or data.get("error") or "no reason"))
            raise ProviderError(f"vast.ai refused to {what}: {said}. Check {self.console_url}.")

    def _instance(self, inst: dict[str, Any], fallback_id: str) -> Instance:
        actual = inst.get("actual_status")
        intended = inst.get("intended_status")
        raw = str(actual) if actual else "provisioning"
        state = _STATES.get(str(actual), "unknown") if actual else "starting"
        if state == "running" and intended in ("stopped", "frozen"):
            state = "stopping"
        host, port = self._ssh(inst)
        return self.instance(
            str(inst.get("id") or fallback_id),
            state,
            raw,
            ssh_host=host,
            ssh_port=port,
            ssh_user="root",
            cost_per_hour=as_float(inst.get("dph_total")),
            detail=inst,
        )

    @staticmethod
    def _ssh(inst: dict[str, Any]) -> tuple[str | None, int | None]:
        """Direct SSH (public IP and the host port mapped to 22) when offered, else the proxy."""
        ports = inst.get("ports")
        ip = inst.get("public_ipaddr")
        if isinstance(ports, dict) and ip:
            mapped = ports.get("22/tcp")
            if isinstance(mapped, list) and mapped and isinstance(mapped[0], dict):
                port = as_int(mapped[0].get("HostPort"))
                if port:
                    return str(ip).strip(), port
        host = inst.get("ssh_host")
        return (str(host) if host else None), as_int(inst.get("ssh_port"))
