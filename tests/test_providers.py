"""The provider adapters against local fakes of the four platforms' documented REST APIs."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from rgt_jupyter.machines.providers import (
    PROVIDERS,
    Instance,
    Provider,
    ProviderError,
    ProviderTimeout,
    api_base_url,
    get_provider,
)

from .fakeclouds import FakeCloud, LambdaFake, PaperspaceFake, RunPodFake, VastFake

TIMEOUT = 0.5  # the client timeout given to every adapter here
POLL, WAIT = 0.01, 5.0  # wait_down polling interval and limit for tests


@dataclass
class Case:
    """One platform: its fake, how to create, what the tests expect back."""

    name: str
    make_fake: Callable[[], FakeCloud]
    params: dict[str, Any]
    create: tuple[str, str]  # method, path regex (below the API root)
    ssh: tuple[str, int, str]
    cost: float
    orphan_kind: str


CASES = {
    "runpod": Case(
        "runpod",
        RunPodFake,
        {"image": "runpod/pytorch:2.4.0", "gpu": {"id": "NVIDIA A40"}},
        ("POST", "/pods"),
        ("203.0.113.10", 10341, "root"),
        0.69,
        "network_volume",
    ),
    "vastai": Case(
        "vastai",
        VastFake,
        {"offer_id": 4242, "image": "pytorch/pytorch:latest", "disk": 40},
        ("PUT", "/asks/4242/"),
        ("198.51.100.7", 41022, "root"),
        0.412,
        "volume",
    ),
    "lambda": Case(
        "lambda",
        LambdaFake,
        {"instance_type_name": "gpu_1x_a10", "ssh_key_names": ["laptop"]},
        ("POST", "/instance-operations/launch"),
        ("192.0.2.44", 22, "ubuntu"),
        0.75,
        "nfs",
    ),
    "paperspace": Case(
        "paperspace",
        PaperspaceFake,
        {"machineType": "A4000", "templateId": "t0nspur5", "region": "ny2"},
        ("POST", "/machines"),
        ("198.51.100.20", 22, "paperspace"),
        0.76,
        "static_ip",
    ),
}


def _fast(prov: Provider) -> Provider:
    prov.http.backoff = 0.01
    if hasattr(prov, "launch_interval"):
        prov.launch_interval = 0.01
    return prov


@pytest.fixture
def fake_for() -> Iterator[Callable[..., FakeCloud]]:
    """Start fakes on demand; every one is stopped at teardown."""
    started: list[FakeCloud] = []

    def start(name: str, **kw: Any) -> FakeCloud:
        cls: Any = CASES[name].make_fake
        fake: FakeCloud = cls(**kw).start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()


def adapter(
    name: str, fake: FakeCloud, key: str | None = None, timeout: float = TIMEOUT
) -> Provider:
    return _fast(get_provider(name, fake.api_key if key is None else key, fake.url, timeout))


def poll_until(prov: Provider, iid: str, state: str, limit: int = 10) -> Instance:
    for _ in range(limit):
        inst = prov.status(iid)
        if inst.state == state:
            return inst
    raise AssertionError(f"{prov.name} {iid} never reached {state}; last {inst}")


def assert_auth_everywhere(fake: FakeCloud) -> None:
    assert fake.requests
    for rec in fake.requests:
        assert rec.headers.get("Authorization") == f"Bearer {fake.api_key}", rec
        assert fake.api_key not in rec.path and fake.api_key not in json.dumps(rec.query)


# -- the whole cycle, on all four -------------------------------------------------------------


@pytest.mark.parametrize("name", PROVIDERS)
def test_lifecycle(name: str, fake_for: Callable[..., FakeCloud]) -> None:
    case = CASES[name]
    fake = fake_for(name)
    prov = adapter(name, fake)

    inst = prov.up(dict(case.params))
    assert inst.provider == name and inst.id
    # Lambda's fake has no capacity in its first region: the launch moves on to the next.
    assert len(fake.calls(*case.create)) == (2 if name == "lambda" else 1)

    running = poll_until(prov, inst.id, "running")
    assert (running.ssh_host, running.ssh_port, running.ssh_user) == case.ssh
    assert running.cost_per_hour == pytest.approx(case.cost)
    assert not prov.is_down(running)

    if name == "lambda":
        with pytest.raises(ProviderTimeout):
            prov.down(inst.id)  # the fake's terminate answers after the client timeout
    else:
        prov.down(inst.id)
    seen: list[Instance] = []
    final = prov.wait_down(inst.id, on_poll=seen.append, interval=POLL, timeout=WAIT)
    assert prov.is_down(final)
    assert seen[-1] == final
    if name == "paperspace":
        assert final.state == "stopped" and final.raw_state == "off"
    else:
        assert final.state == "gone"

    orphans = prov.orphans()
    kinds = {o.kind for o in orphans}
    assert case.orphan_kind in kinds
    for orphan in orphans:
        assert orphan.bills and orphan.id and orphan.name
    target = next(o for o in orphans if o.kind == case.orphan_kind)
    prov.delete_orphan(target)
    assert target.id not in {o.id for o in prov.orphans() if o.kind == target.kind}
    assert_auth_everywhere(fake)


# -- request shapes ----------------------------------------------------------------------------


def test_runpod_create_shape(fake_for: Callable[..., FakeCloud]) -> None:
    fake = fake_for("runpod")
    prov = adapter("runpod", fake)
    prov.up({"image": "img:1", "gpu": {"id": "NVIDIA A40"}, "mounts": {}})
    body = fake.calls("POST", "/pods")[0].body
    assert body["image"] == "img:1" and body["gpu"] == {"id": "NVIDIA A40", "count": 1}
    assert body["name"] == "rgt-jupyter" and body["cloud"] == "SECURE"
    assert body["startSsh"] is True and "22/tcp" in body["ports"]
    assert isinstance(body["disk"], int) and isinstance(body["env"], dict)
    assert "Network Volume 'ckpts' (50 GB, EU-RO-1) bills $0.07/GB/month" in prov.orphans()[0].bills
    assert fake.calls("GET", "/network-volumes")


def test_runpod_v1_names_map_to_the_v2_body(fake_for: Callable[..., FakeCloud]) -> None:
    fake = fake_for("runpod")
    prov = adapter("runpod", fake)
    prov.up(
        {
            "imageName": "img:1",
            "gpuTypeId": "NVIDIA A40",
            "gpuCount": 2,
            "cloudType": "COMMUNITY",
            "containerDiskInGb": 20,
            "volumeInGb": 50,
            "networkVolumeId": "agv6w2qcg7",
            "interruptible": False,
            "supportPublicIp": True,
            "ports": ["8888/http"],
        }
    )
    body = fake.calls("POST", "/pods")[0].body
    assert body["image"] == "img:1" and body["gpu"] == {"id": "NVIDIA A40", "count": 2}
    assert body["cloud"] == "COMMUNITY" and body["disk"] == 20
    assert body["mounts"] == {"network": [{"volumeId": "agv6w2qcg7", "path": "/workspace"}]}
    assert body["ports"] == ["8888/http", "22/tcp"]
    v1 = {"imageName", "gpuTypeId", "gpuCount", "cloudType", "containerDiskInGb", "volumeInGb"}
    assert not v1 & set(body) and "interruptible" not in body and "supportPublicIp" not in body

    prov.up({"imageName": "img", "gpuTypeIds": ["A40"], "volumeInGb": 40, "volumeMountPath": "/w"})
    body = fake.calls("POST", "/pods")[1].body
    assert body["gpu"] == {"id": "A40", "count": 1}
    assert body["mounts"] == {"persistent": {"size": 40, "path": "/w"}}


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"gpuTypeIds": ["A40", "A100"]}, "exactly one GPU type"),
        ({"interruptible": True}, "interruptible"),
        ({"imageName": "other"}, "image twice"),
        ({"minVcpuPerGpu": 8}, "no create field 'minVcpuPerGpu'"),
        ({"cloudType": "ALL"}, "SECURE, COMMUNITY"),
        ({"volumeInGb": 20, "mounts": {"persistent": {"size": 20, "path": "/w"}}}, "only mounts"),
    ],
)
def test_runpod_create_fields_v2_cannot_take_are_refused_before_any_request(
    params: dict[str, Any], words: str, fake_for: Callable[..., FakeCloud]
) -> None:
    fake = fake_for("runpod")
    with pytest.raises(ProviderError, match=words):
        adapter("runpod", fake).up({"image": "img", "gpu": "A40", **params})
    assert fake.requests == []


def test_runpod_states_ssh_and_stopped_pod(fake_for: Callable[..., FakeCloud]) -> None:
    fake = fake_for("runpod")
    prov = adapter("runpod", fake)
    inst = prov.up({"image": "img", "gpu": "A40"})
    assert (inst.state, inst.raw_state, inst.ssh_host) == ("starting", "PROVISIONING", None)
    assert inst.cost_per_hour == pytest.approx(0.69)
    assert prov.status(inst.id).raw_state == "STARTING"
    running = prov.status(inst.id)
    assert (running.state, running.ssh_host, running.ssh_port) == ("running", "203.0.113.10", 10341)
    stopped = fake.route("POST", f"/pods/{inst.id}/action", {}, {"action": "stop"})
    assert stopped.status == 200
    inst = prov.status(inst.id)
    assert (inst.state, inst.raw_state, inst.ssh_host, inst.cost_per_hour) == (
        "stopped",
        "EXITED",
        None,
        0.0,
    )
    assert not prov.is_down(inst)


def test_runpod_terminated_status_and_v2_errors(fake_for: Callable[..., FakeCloud]) -> None:
    fake = fake_for("runpod")
    prov = adapter("runpod", fake)
    inst = prov.up({"image": "img", "gpu": "A40"})
    assert isinstance(fake, RunPodFake)
    fake.pods[inst.id]["status"] = "TERMINATED"
    assert prov.is_down(prov.status(inst.id))
    with pytest.raises(ProviderError, match=r"HTTP 400: network volume nope does not exist"):
        prov.up({"image": "img", "gpu": "A40", "networkVolumeId": "nope"})


def test_vast_create_and_volume_delete_shape(fake_for: Callable[..., FakeCloud]) -> None:
    fake = fake_for("vastai")
    prov = adapter("vastai", fake)
    inst = prov.up({"offer_id": "4243", "image": "img:2", "onstart": "echo hi"})
    assert inst.state == "starting" and inst.id.isdigit()
    rec = fake.calls("PUT")[0]
    assert rec.path == "/api/v0/asks/4243/"
    assert rec.body["client_id"] == "me" and rec.body["runtype"] == "ssh_direct"
    assert rec.body["image"] == "img:2" and rec.body["onstart"] == "echo hi"
    assert "offer_id" not in rec.body
    vol = prov.orphans()[0]
    prov.delete_orphan(vol)
    assert fake.calls("DELETE", "/volumes/")[0].body == {"id": 771}


def test_lambda_launch_loops_over_regions_with_capacity(fake_for: Callable[..., FakeCloud]) -> None:
    fake = fake_for("lambda")
    prov = adapter("lambda", fake)
    inst = prov.up({"instance_type_name": "gpu_1x_a10", "ssh_key_name": "laptop"})
    launches = [r.body for r in fake.calls("POST", "/instance-operations/launch")]
    assert [b["region_name"] for b in launches] == ["us-west-1", "us-east-1"]
    assert all(b["ssh_key_names"] == ["laptop"] and b["quantity"] == 1 for b in launches)
    assert all(b["file_system_names"] == [] for b in launches)
    assert inst.cost_per_hour == pytest.approx(0.75) and inst.detail["region_name"] == "us-east-1"


def test_lambda_no_capacity_anywhere_is_bounded(fake_for: Callable[..., FakeCloud]) -> None:
    fake = fake_for("lambda", full_regions={"us-west-1", "us-east-1"})
    prov = adapter("lambda", fake)
    with pytest.raises(ProviderError, match="No Lambda capacity for gpu_1x_a10 in any region"):
        prov.up({"instance_type_name": "gpu_1x_a10", "ssh_key_names": ["k"]})
    rounds = type(prov).launch_rounds  # type: ignore[attr-defined]
    assert len(fake.calls("POST", "/instance-operations/launch")) == 2 * rounds
    assert len(fake.calls("GET", "/instance-types")) == rounds


def test_paperspace_create_shape_and_stop_verb(fake_for: Callable[..., FakeCloud]) -> None:
    fake = fake_for("paperspace")
    prov = adapter("paperspace", fake)
    inst = prov.up({"machineType": "A4000", "templateId": "t0nspur5", "region": "ny2"})
    body = fake.calls("POST", "/machines")[0].body
    assert body["diskSize"] == 50 and body["publicIpType"] == "dynamic" and body["name"]
    assert prov.meter_stop_verb == "shut down"
    prov.down(inst.id)
    assert [r.method for r in fake.calls(path=f"/machines/{inst.id}/stop")] == ["PATCH"]


@pytest.mark.parametrize(
    ("name", "params", "missing"),
    [
        ("runpod", {"imageName": "x"}, "gpu"),
        ("vastai", {"image": "x"}, "offer_id"),
        ("lambda", {"ssh_key_names": ["k"]}, "instance_type_name"),
        ("paperspace", {"machineType": "A4000", "region": "ny2"}, "templateId"),
    ],
)
def test_missing_create_fields_are_named(
    name: str, params: dict[str, Any], missing: str, fake_for: Callable[..., FakeCloud]
) -> None:
    fake = fake_for(name)
    with pytest.raises(ProviderError, match=f"missing {missing}"):
        adapter(name, fake).up(params)
    assert fake.requests == []


# -- keys ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROVIDERS)
def test_missing_key_is_refused_before_any_request(name: str) -> None:
    with pytest.raises(ProviderError, match="No .* API key was given"):
        get_provider(name, "  ", "https://example.invalid")


@pytest.mark.parametrize("name", PROVIDERS)
def test_invalid_key_says_to_check_the_profile_and_never_shows_it(
    name: str, fake_for: Callable[..., FakeCloud]
) -> None:
    fake = fake_for(name, echo_key=True)  # the fake repeats the key it got in its error
    wrong = "wrong-key-3c9d1e"
    prov = adapter(name, fake, key=wrong)
    with pytest.raises(ProviderError) as info:
        prov.status("12345")
    text = str(info.value)
    assert "401" in text and "check the API key named by the profile" in text
    assert info.value.status_code == 401
    assert wrong not in text and wrong not in repr(info.value) and wrong not in repr(prov)
    assert fake.requests[0].headers["Authorization"] == f"Bearer {wrong}"


def test_key_never_in_instance_detail(fake_for: Callable[..., FakeCloud]) -> None:
    fake = fake_for("runpod")
    prov = adapter("runpod", fake)
    inst = prov.up({"image": "img", "gpu": "A40", "env": {"RUNPOD_API_KEY": fake.api_key}})
    assert fake.calls("POST", "/pods")[0].body["env"]["RUNPOD_API_KEY"] == fake.api_key
    for got in (inst, prov.status(inst.id)):
        assert fake.api_key not in json.dumps(got.detail) and fake.api_key not in repr(got)
        assert got.detail["env"]["RUNPOD_API_KEY"] == "***"


def test_lambda_accepts_basic_auth_on_the_fake_and_adapter_sends_bearer(
    fake_for: Callable[..., FakeCloud],
) -> None:
    fake = fake_for("lambda")
    basic = base64.b64encode(f"{fake.api_key}:".encode()).decode()
    assert fake.authorized(f"Basic {basic}")
    adapter("lambda", fake).orphans()
    assert fake.requests[-1].headers["Authorization"] == f"Bearer {fake.api_key}"


# -- stopping the meter ----------------------------------------------------------------------


def test_lambda_hanging_terminate_is_bounded_then_polled_until_gone(
    fake_for: Callable[..., FakeCloud],
) -> None:
    fake = fake_for("lambda", terminate_hang=2.0)
    prov = adapter("lambda", fake)
    inst = prov.up({"instance_type_name": "gpu_1x_a10", "ssh_key_names": ["k"]})
    poll_until(prov, inst.id, "running")
    # The platform would answer (a success) after 2 s: a timeout is the client's own bound.
    with pytest.raises(ProviderTimeout) as info:
        prov.down(inst.id)
    assert "wait_down" in str(info.value) and "cloud.lambda.ai" in str(info.value)
    assert len(fake.calls("POST", "/instance-operations/terminate")) == 1  # not repeated
    states: list[str] = []
    final = prov.wait_down(
        inst.id, on_poll=lambda i: states.append(i.raw_state), interval=POLL, timeout=WAIT
    )
    assert final.state == "gone" and final.raw_state == "404"
    assert states[:2] == ["terminating", "terminating"]
    assert fake.calls("POST", "/instance-operations/terminate")[0].body == {
        "instance_ids": [inst.id]
    }


@pytest.mark.parametrize("gone_as_null", [False, True])
def test_vast_destroy_is_not_trusted_until_the_instance_is_gone(
    gone_as_null: bool, fake_for: Callable[..., FakeCloud]
) -> None:
    fake = fake_for("vastai", linger=3, gone_as_null=gone_as_null)
    prov = adapter("vastai", fake)
    inst = prov.up({"offer_id": 4242, "image": "img"})
    poll_until(prov, inst.id, "running")
    prov.down(inst.id)
    assert len(fake.calls("DELETE", r"/instances/\d+/")) == 1
    assert not prov.is_down(prov.status(inst.id))  # DELETE said success; still listed
    polls: list[Instance] = []
    final = prov.wait_down(inst.id, on_poll=polls.append, interval=POLL, timeout=WAIT)
    assert final.state == "gone"
    assert [p.state for p in polls] == ["running", "running", "gone"]
    assert final.raw_state == ("no instance" if gone_as_null else "404")


def test_lambda_unhealthy_is_not_down(fake_for: Callable[..., FakeCloud]) -> None:
    fake: Any = fake_for("lambda")
    prov = adapter("lambda", fake)
    inst = prov.up({"instance_type_name": "gpu_1x_a10", "ssh_key_names": ["k"]})
    fake.set_status(inst.id, "unhealthy")
    got = prov.status(inst.id)
    assert got.state == "error" and got.raw_state == "unhealthy"
    assert not prov.is_down(got)
    with pytest.raises(ProviderError, match="not confirmed terminated") as info:
        prov.wait_down(inst.id, timeout=0.1, interval=0.02)
    assert "unhealthy" in str(info.value) and "https://cloud.lambda.ai/instances" in str(info.value)


def test_paperspace_off_machine_disk_is_an_orphan_that_deletes_the_machine(
    fake_for: Callable[..., FakeCloud],
) -> None:
    fake = fake_for("paperspace")
    prov = adapter("paperspace", fake)
    inst = prov.up(dict(CASES["paperspace"].params))
    poll_until(prov, inst.id, "running")
    prov.down(inst.id)
    stopping = prov.status(inst.id)
    assert stopping.raw_state == "stopping" and not prov.is_down(stopping)
    prov.wait_down(inst.id, interval=POLL, timeout=WAIT)
    orphans = prov.orphans()
    assert {o.kind for o in orphans} == {"machine_disk", "static_ip", "snapshot"}
    disk = next(o for o in orphans if o.kind == "machine_disk")
    assert disk.id == inst.id and "50 GiB disk" in disk.bills
    for orphan in orphans:
        prov.delete_orphan(orphan)
    assert prov.orphans() == []
    assert prov.status(inst.id).state == "gone"
    assert len(fake.calls("GET", "/machines")) >= 2  # paged with a page size of one


# -- failures and retries --------------------------------------------------------------------


def test_get_is_retried_after_a_dropped_connection(fake_for: Callable[..., FakeCloud]) -> None:
    fake = fake_for("runpod", drop_next=2)
    prov = adapter("runpod", fake)
    assert prov.status("nope").state == "gone"
    assert len(fake.calls("GET")) == 3


def test_destroy_is_not_retried_after_a_dropped_connection(
    fake_for: Callable[..., FakeCloud],
) -> None:
    fake = fake_for("vastai", drop_next=1, drop_methods=("DELETE",))
    prov = adapter("vastai", fake)
    inst = prov.up({"offer_id": 4242, "image": "img"})
    with pytest.raises(ProviderError, match="not repeated") as info:
        prov.down(inst.id)
    assert not isinstance(info.value, ProviderTimeout)
    assert len(fake.calls("DELETE")) == 1


def test_create_that_times_out_is_sent_once_and_says_to_look(
    fake_for: Callable[..., FakeCloud],
) -> None:
    fake = fake_for("runpod", hang_create=1.5)
    prov = adapter("runpod", fake)
    with pytest.raises(ProviderTimeout, match="may still have created") as info:
        prov.up({"image": "img", "gpu": "A40"})
    assert "console.runpod.io" in str(info.value) and "never repeated" in str(info.value)
    assert len(fake.calls("POST", "/pods")) == 1


def test_http_errors_carry_status_and_platform_message(fake_for: Callable[..., FakeCloud]) -> None:
    fake = fake_for("vastai")
    prov = adapter("vastai", fake)
    with pytest.raises(ProviderError, match=r"HTTP 400: invalid_args - offer 9999 is no longer"):
        prov.up({"offer_id": 9999, "image": "img"})


def test_unreachable_api_is_a_clear_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    prov = _fast(get_provider("paperspace", "k", f"http://127.0.0.1:{port}", TIMEOUT))
    with pytest.raises(ProviderError, match="could not be completed.*Check the network"):
        prov.status("x")


# -- configuration ---------------------------------------------------------------------------


def test_api_base_url_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROVIDERS:
        monkeypatch.delenv(f"RGT_{name.upper()}_API_URL", raising=False)
    assert api_base_url("runpod") == "https://api.runpod.io/v2"
    assert api_base_url("vastai") == "https://console.vast.ai/api/v0"
    assert api_base_url("lambda") == "https://cloud.lambda.ai/api/v1"
    assert api_base_url("paperspace") == "https://api.paperspace.com/v1"
    assert api_base_url("lambda", "https://proxy.example/api/v1") == "https://proxy.example/api/v1"
    monkeypatch.setenv("RGT_LAMBDA_API_URL", "http://127.0.0.1:1/api/v1")
    assert api_base_url("lambda", "https://proxy.example/api/v1") == "http://127.0.0.1:1/api/v1"
    assert get_provider("lambda", "k").base_url == "http://127.0.0.1:1/api/v1"
    with pytest.raises(ProviderError, match="Unknown provider"):
        get_provider("aws", "k")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "http://api.example.com/v1", "ftp://x/y"])
def test_only_https_or_loopback_http(url: str) -> None:
    with pytest.raises(ProviderError, match="must be https://"):
        get_provider("runpod", "k", url)


def test_importing_rgt_jupyter_does_not_import_providers() -> None:
    code = "import sys, rgt_jupyter; print('rgt_jupyter.machines.providers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
