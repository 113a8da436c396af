"""The jupyter-server extension, in a real Jupyter server with no kernel: the server-side watcher
follows the project's jobs and the authenticated REST API reports them."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.auth import Authorizer

# The server fixtures (jp_serverapp, jp_fetch, ...), for this module only: their autouse
# fixtures (a fresh event loop, the server's cleanup) then apply to these tests alone.
from pytest_jupyter.jupyter_server import *  # noqa: F403
from tornado.httpclient import HTTPClientError

from rgt_jupyter import submit
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.watch.watcher import Watcher
from rgt_jupyter.server_ext import ServerWatch
from rgt_jupyter.store.registry import Registry

from .conftest import wait_for
from .verify_fixtures import make_run

# A handler registered without @authenticated (or marked unauthenticated) fails the load.
pytestmark = pytest.mark.filterwarnings("error::jupyter_server.utils.JupyterServerAuthWarning")
Api = Callable[..., dict[str, Any]]
SERVER_CONFIG: dict[str, Any] = {
    "ServerApp": {
        # Terminals are off: every other handler is then the server's own or this extension's.
        "jpserver_extensions": {"rgt_jupyter": True, "jupyter_server_terminals": False},
        "allow_unauthenticated_access": False,
    }
}
#: How long the server may take to notice that a job ended: a scan, then the watcher's first
#: looks (1 s, 2 s, ...), with slack for a busy machine.
NOTICE_S = 120.0

SHORT = (
    "import time, rgt_jupyter.job as job\n"
    "for i in range(1, 6):\n"
    "    job.progress(i, 5, loss=1.0 / i if i < 5 else float('nan'))\n"
    "    print('step', i, flush=True)\n"
    "    time.sleep(0.05)\n"
)
RAISES = "print('about to fail', flush=True)\nraise ValueError('boom in the job')\n"


def until_flag(flag: Path) -> str:
    """A job that reports progress until ``flag`` exists."""
    return (
        "import os, time, rgt_jupyter.job as job\n"
        "i = 0\n"
        f"while not os.path.exists({str(flag)!r}):\n"
        "    i += 1\n"
        "    job.progress(i)\n"
        "    time.sleep(0.1)\n"
    )


def strict_json(body: bytes) -> Any:
    """Parse JSON, refusing NaN and infinities (which browsers' JSON.parse refuse too)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(body, parse_constant=refuse)


class DenyRgt(Authorizer):
    """Allows everything but the ``rgt`` resource."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return resource != "rgt"


@pytest.fixture  # type: ignore[no-redef]
def jp_server_config(request: pytest.FixtureRequest) -> dict[str, Any]:
    extra = getattr(request, "param", {})
    return {"ServerApp": {**SERVER_CONFIG["ServerApp"], **extra}}


@pytest.fixture  # type: ignore[no-redef]
def jp_root_dir(request: pytest.FixtureRequest, project: Path) -> Path:
    """The server's root: the project itself, or a folder of it (``indirect`` parameter)."""
    root = project / getattr(request, "param", "")
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture
def watch(jp_serverapp: Any) -> Iterator[ServerWatch]:
    """The server's watch of the project; stopped at the end of the test."""
    value: ServerWatch = jp_serverapp.web_app.settings["rgt_server_watch"]
    yield value
    value.stop("the test ended")


@pytest.fixture
def api(jp_fetch: Any, jp_asyncio_loop: Any, watch: ServerWatch) -> Api:
    """``api(*parts)``: GET ``rgt/api/jobs/<parts>`` with the token; the parsed body."""

    def get(*parts: str) -> dict[str, Any]:
        response = jp_asyncio_loop.run_until_complete(jp_fetch("rgt", "api", "jobs", *parts))
        assert response.code == 200
        assert response.headers["Content-Type"].startswith("application/json")
        value: dict[str, Any] = strict_json(response.body)
        return value

    return get


def by_name(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {j["name"]: j for j in payload["jobs"]}


def job_state(api: Api, name: str, *states: str) -> dict[str, Any] | None:
    """The job's API object once its state is one of ``states``."""
    job = by_name(api()).get(name)
    return job if job is not None and job["state"] in states else None


def running(api: Api, name: str) -> dict[str, Any] | None:
    """The job's API object once it runs and reported progress (so it is in its loop)."""
    job = job_state(api, name, "running")
    return job if job is not None and job["progress"] and job["watcher_note"] else None


def test_jobs_are_listed_and_followed_with_no_kernel(
    project: Path, jp_serverapp: Any, api: Api
) -> None:
    assert jp_serverapp.kernel_manager.list_kernel_ids() == []
    empty = api()
    assert empty["jobs"] == [] and empty["project"] == str(project)
    assert empty["watcher"]["kind"] == "server" and empty["watcher"]["status"] == "idle"
    assert empty["watcher"]["alive"] is True

    flag = project / "release"
    long_row = submit(LaunchRequest(program=until_flag(flag), name="long"), project)
    short_row = submit(LaunchRequest(program=SHORT, name="short"), project)
    listed = api()
    assert [j["name"] for j in listed["jobs"]] == ["long", "short"]
    assert {j["id"] for j in listed["jobs"]} == {long_row.id, short_row.id}
    for job in listed["jobs"]:
        assert job["profile"] == "local" and job["host"]
        assert job["state"] in ("queued", "running", "finished")
        assert job["created_at"] <= job["updated_at"]

    first = wait_for(lambda: running(api, "long"), NOTICE_S, "long to run")
    assert first["observed"] is True and first["display_state"] == "running"
    assert first["progress"]["step"] >= 1 and first["heartbeat_age"] is not None
    assert first["watcher_note"].startswith(f"server watcher (pid {os.getpid()}): last look")
    wait_for(lambda: job_state(api, "short", "finished"), NOTICE_S, "short to finish")
    watching = api()["watcher"]
    assert watching["status"] == "watching" and watching["alive"] is True
    assert watching["following"] == [long_row.id]
    assert "server watcher: last look" in watching["liveness"]
    assert watching["last_tick"] is not None and 1.0 <= watching["interval"] <= 30.0

    flag.touch()
    wait_for(lambda: job_state(api, "long", "finished"), NOTICE_S, "long to finish")
    # With nothing left to follow, the watcher's thread ends: it is idle, not dead.
    idle = wait_for(
        lambda: (w := api()["watcher"])["status"] == "idle" and w, 10, "the watcher to idle"
    )
    assert idle["alive"] is True and idle["following"] == []
    assert jp_serverapp.kernel_manager.list_kernel_ids() == []


def test_jobs_that_ended_with_no_kernel_have_their_final_state(
    project: Path, jp_serverapp: Any, api: Api
) -> None:
    ok = submit(LaunchRequest(program=SHORT, name="ok"), project)
    bad = submit(LaunchRequest(program=RAISES, name="bad"), project)
    # The test never observes the jobs itself: only the server's watcher does.
    finished = wait_for(lambda: job_state(api, "ok", "finished"), NOTICE_S, "ok to finish")
    failed = wait_for(lambda: job_state(api, "bad", "failed"), NOTICE_S, "bad to fail")

    assert finished["progress"]["step"] == finished["progress"]["total"] == 5
    assert finished["progress"]["loss"] == "nan"  # a NaN metric, as strict JSON
    assert finished["exit_code"] == 0 and finished["log_tail"][-1] == "step 5"
    assert failed["diagnosis"] and "ValueError" in failed["diagnosis"]
    assert "boom in the job" in failed["diagnosis"]
    assert failed["error"]["type"] == "ValueError"

    registry = Registry(project)
    assert registry.get(ok.id)["state"] == "finished"
    assert registry.get(bad.id)["state"] == "failed"
    server = [w for w in registry.watchers() if w["kind"] == "server"]
    assert [w["pid"] for w in server] == [os.getpid()]  # the server's watcher (in this process)
    assert finished["watcher_note"] is None and failed["watcher_note"] is None

    detail = api(bad.name)
    assert detail["job"]["id"] == bad.id and detail["job"]["state"] == "failed"
    states = [e["state"] for e in detail["job"]["history"] if e["kind"] == "state"]
    assert detail["job"]["history"][0]["kind"] == "created" and states[-1] == "failed"
    assert api(ok.id)["job"]["progress"]["step"] == 5
    assert detail["watcher"]["kind"] == "server"


def test_unknown_job_is_a_json_404(project: Path, jp_fetch: Any, jp_asyncio_loop: Any) -> None:
    submit(LaunchRequest(program="print(1)\n", name="one"), project)
    for name in ("nope", "one-but-not"):
        with pytest.raises(HTTPClientError) as err:
            jp_asyncio_loop.run_until_complete(jp_fetch("rgt", "api", "jobs", name))
        assert err.value.code == 404
        assert err.value.response is not None
        assert f"no job {name!r}" in strict_json(err.value.response.body)["message"]


def test_each_job_names_the_notebook_and_cell_that_launched_it(
    project: Path, jp_root_dir: Path, api: Api
) -> None:
    (project / "nb").mkdir()
    notebook = project / "nb" / "paper.ipynb"
    submit(
        LaunchRequest(program="print(1)\n", name="celled", notebook=str(notebook), cell_id="c-7"),
        project,
    )
    submit(LaunchRequest(program="print(1)\n", name="outside"), project)
    submit(
        LaunchRequest(program="print(1)\n", name="elsewhere", notebook="/srv/other/x.ipynb"),
        project,
    )
    jobs = by_name(api())
    # Relative to the server's root, as the frontend opens it.
    assert jobs["celled"]["notebook"] == "nb/paper.ipynb" and jobs["celled"]["cell_id"] == "c-7"
    assert jobs["outside"]["notebook"] is None and jobs["outside"]["cell_id"] is None
    assert jobs["elsewhere"]["notebook"] == "/srv/other/x.ipynb"


def test_a_placeholder_is_answered_with_its_number_and_source(
    project: Path, jp_fetch: Any, jp_asyncio_loop: Any, watch: ServerWatch
) -> None:
    make_run(project / "runs", "r1", results={"test": {"accuracy": 0.8731}})

    def number(**query: str) -> Any:
        return jp_asyncio_loop.run_until_complete(jp_fetch("rgt", "api", "number", params=query))

    found = strict_json(number(ref="r1:test.accuracy", fmt=".1%").body)
    assert found["text"] == "87.3%" and found["ref"] == "r1:test.accuracy"
    assert found["source"]["run_id"] == "r1" and found["source"]["key"] == "test.accuracy"
    assert len(found["source"]["sha256"]) == 64
    assert strict_json(number(ref="r1:test.accuracy").body)["text"] == "0.8731"
    for query, status in (
        ({"ref": "r1:test.nope"}, 404),
        ({"ref": "nosuchrun:test.accuracy"}, 404),
        ({"ref": ""}, 400),
    ):
        with pytest.raises(HTTPClientError) as err:
            number(**query)
        assert err.value.code == status, query
        assert err.value.response is not None
        assert strict_json(err.value.response.body)["message"], query


def raw(
    loop: Any, url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """A plain HTTP request (urllib, on a worker thread while the server's loop runs)."""

    def call() -> tuple[int, bytes]:
        data = b"{}" if method in ("POST", "PUT", "PATCH") else None
        req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), bytes(exc.read())

    result: tuple[int, bytes] = loop.run_until_complete(loop.run_in_executor(None, call))
    return result


def test_the_api_refuses_requests_without_the_token(
    project: Path,
    jp_serverapp: Any,
    jp_fetch: Any,
    jp_asyncio_loop: Any,
    jp_http_port: int,
    jp_base_url: str,
) -> None:
    row = submit(LaunchRequest(program="print(1)\n", name="one"), project)
    token = jp_serverapp.identity_provider.token
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url}rgt/api/jobs"
    good = {"Authorization": f"token {token}"}
    for url in (base, f"{base}/{row.id}", f"{base}/one"):
        assert raw(jp_asyncio_loop, url)[0] == 403
        assert raw(jp_asyncio_loop, url, headers={"Authorization": "token wrong"})[0] == 403
        code, body = raw(jp_asyncio_loop, url, headers=good)
        assert code == 200 and strict_json(body)["project"] == str(project)
        assert raw(jp_asyncio_loop, f"{url}?token={token}")[0] == 200
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            assert raw(jp_asyncio_loop, url, method)[0] == 403
            assert raw(jp_asyncio_loop, url, method, headers=good)[0] == 405
    # Nothing was stopped or removed by those requests.
    assert Registry(project).get(row.id)["name"] == "one"


@pytest.mark.parametrize("jp_server_config", [{"authorizer_class": DenyRgt}], indirect=True)
def test_the_api_is_authorized_on_the_rgt_resource(
    project: Path, jp_serverapp: Any, jp_fetch: Any, jp_asyncio_loop: Any
) -> None:
    assert jp_asyncio_loop.run_until_complete(jp_fetch("api", "status")).code == 200
    for parts in (("rgt", "api", "jobs"), ("rgt", "api", "jobs", "any")):
        with pytest.raises(HTTPClientError) as err:
            jp_asyncio_loop.run_until_complete(jp_fetch(*parts))
        assert err.value.code == 403


def test_a_stopped_watcher_is_reported(project: Path, watch: ServerWatch, api: Api) -> None:
    flag = project / "release"
    row = submit(LaunchRequest(program=until_flag(flag), name="long"), project)
    wait_for(lambda: running(api, "long"), NOTICE_S, "long to run")
    watcher: Watcher = watch.watcher
    assert api()["watcher"]["status"] == "watching"

    watcher.stop()
    stopped_at = time.time()
    info = api()["watcher"]
    assert info["alive"] is False and info["status"] == "stopped"
    assert "stopped" in info["liveness"] and info["following"] == [row.id]
    # The registry scan goes on, and does not restart what was stopped.
    wait_for(lambda: (api()["watcher"]["last_scan"] or 0) > stopped_at, 10, "a later scan")
    assert api()["watcher"]["status"] == "stopped"
    flag.touch()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_watcher_that_died_is_reported_here_and_in_the_registry(
    project: Path, watch: ServerWatch, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = project / "release"
    row = submit(LaunchRequest(program=until_flag(flag), name="long"), project)
    wait_for(lambda: running(api, "long"), NOTICE_S, "long to run")

    def broken() -> bool:
        raise RuntimeError("the probe broke")

    monkeypatch.setattr(watch.watcher, "tick", broken)
    info = wait_for(
        lambda: (w := api()["watcher"])["status"] == "stopped" and w, 10, "the watcher to die"
    )
    assert info["alive"] is False and info["error"] == "RuntimeError: the probe broke"
    assert info["liveness"] == "server watcher stopped: RuntimeError: the probe broke"
    note = f"server watcher (pid {os.getpid()}) stopped: RuntimeError: the probe broke"
    # The registry is told by the dying watcher right after its status: polled, not raced.
    wait_for(lambda: api(row.id)["job"]["watcher_note"] == note, 30, "the job's watcher note")
    flag.touch()


@pytest.fixture
def launched_before(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A job launched before the server starts; the server then finds the project from its
    root dir alone (no ``RGT_PROJECT``, another working directory)."""
    row = submit(LaunchRequest(program=until_flag(project / "release"), name="early"), project)
    monkeypatch.delenv("RGT_PROJECT")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return str(row.id)


@pytest.mark.parametrize("jp_root_dir", ["notebooks"], indirect=True)
def test_a_server_in_a_project_folder_follows_jobs_launched_before_it(
    project: Path, launched_before: str, jp_root_dir: Path, api: Api
) -> None:
    payload = api()
    assert payload["project"] == str(project) and jp_root_dir.parent == project
    assert [j["id"] for j in payload["jobs"]] == [launched_before]
    wait_for(lambda: running(api, "early"), NOTICE_S, "early to run")
    (project / "release").touch()
    done = wait_for(lambda: job_state(api, "early", "finished"), NOTICE_S, "early to finish")
    assert Registry(project).get(launched_before)["state"] == "finished"
    assert done["progress"]["step"] >= 1 and done["watcher_note"] is None


def test_the_watch_stops_with_the_server(
    project: Path, jp_serverapp: Any, jp_asyncio_loop: Any, api: Api
) -> None:
    flag = project / "release"
    row = submit(LaunchRequest(program=until_flag(flag), name="long"), project)
    wait_for(lambda: running(api, "long"), NOTICE_S, "long to run")
    watch: ServerWatch = jp_serverapp.web_app.settings["rgt_server_watch"]
    assert watch.scanning and watch.watcher.alive
    jp_asyncio_loop.run_until_complete(jp_serverapp._cleanup())  # the server's shutdown
    assert not watch.scanning and not watch.watcher.alive
    assert watch.stopped == "the Jupyter server stopped"
    (stamp,) = [w for w in Registry(project).watchers() if w["id"] == watch.watcher.id]
    assert stamp["stopped"] == "the Jupyter server stopped" and stamp["jobs"] == [row.id]
    flag.touch()
