"""JupyterLab in a real browser: a private ``jupyter lab`` server and headless Chromium.

The server is started by the test on a free 127.0.0.1 port with a random token, with its own
config, data, runtime and IPython dirs (the lab extensions installed in the environment, such as
the ipywidgets manager, still load from ``<sys.prefix>/share/jupyter``). Chromium is Debian's
``/usr/bin/chromium``, driven by Playwright's sync API.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
SETUP_HINT = "`bash scripts/setup.sh` installs both (the chromium Debian package and playwright)"
# Flags for a root user on a machine without network: no sandbox (root), no GPU, and none of the
# background fetches that would otherwise retry refused connections all the time.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# User settings of the private lab: no news or update checks (there is no network), and no
# notification toasts over the notebook.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
        "doNotDisturbMode": True,
    },
}


# Read once at import: the ``project`` fixture clears every RGT_* variable while a test runs.
_ARTIFACTS = os.environ.get("RGT_TEST_ARTIFACTS")


def artifacts_dir() -> Path:
    """Where screenshots and logs of the browser tests go: ``$RGT_TEST_ARTIFACTS`` (as set when
    the tests started), else ``<repo>/test-artifacts``; created on first use."""
    path = Path(_ARTIFACTS or REPO / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LabServer:
    """A running ``jupyter lab`` process and how to reach it."""

    proc: subprocess.Popen[bytes]
    port: int
    token: str
    root: Path
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """``path`` (e.g. ``/lab/tree/x.ipynb``) on this server, with the token."""
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}{path}{sep}token={self.token}"

    def api(self, path: str, timeout: float = 5.0) -> Any:
        """GET a REST endpoint (e.g. ``/api/sessions``) and decode its JSON answer."""
        request = urllib.request.Request(
            self.base_url + path, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - loopback
            return json.loads(resp.read().decode())

    def log(self) -> str:
        """Everything the server wrote to stdout and stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no server log: {exc})"


def _isolated_env(home: Path, project: Path) -> dict[str, str]:
    """The server's environment: private Jupyter and IPython dirs, the project in RGT_PROJECT."""
    env = dict(os.environ)
    for name in ("config", "data", "runtime", "ipython"):
        (home / name).mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "JUPYTER_CONFIG_DIR": str(home / "config"),
            "JUPYTER_DATA_DIR": str(home / "data"),
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
            "IPYTHONDIR": str(home / "ipython"),
            "RGT_PROJECT": str(project),
            "PYTHONUNBUFFERED": "1",
        }
    )
    # A JUPYTER_PATH or JUPYTER_CONFIG_PATH from outside would add foreign extensions or
    # settings; the environment's own share/ and etc/ dirs are on the default paths anyway.
    for name in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "JUPYTER_PREFER_ENV_PATH", "JUPYTER_TOKEN"):
        env.pop(name, None)
    for rel, values in LAB_SETTINGS.items():
        path = home / "config" / "lab" / "user-settings" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values, indent=2))
    return env


def _lab_command(port: int, token: str, root: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        "--ServerApp.log_level=INFO",
    ]


def _descendants(pid: int) -> dict[int, bytes]:
    """Processes below ``pid`` (any depth), with their command lines."""
    children: dict[int, list[int]] = {}
    cmdlines: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdlines[int(entry.name)] = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: dict[int, bytes] = {}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found[child] = cmdlines.get(child, b"")
                todo.append(child)
    return found


def _kill_if_same(pid: int, cmdline: bytes) -> None:
    try:
        if Path(f"/proc/{pid}/cmdline").read_bytes() != cmdline:
            return
        os.kill(pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass


def stop_lab(server: LabServer) -> None:
    """Stop the server's whole process group (kernels included); SIGKILL what outlives it."""
    proc = server.proc
    below = _descendants(proc.pid)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)
    # Kernels run in sessions of their own, outside the server's process group.
    for pid, cmdline in below.items():
        _kill_if_same(pid, cmdline)


def start_lab(root: Path, home: Path, timeout: float = 120.0) -> LabServer:
    """Start ``jupyter lab`` serving ``root``; return once ``/api/status`` answers."""
    port = free_port()
    token = secrets.token_hex(24)
    env = _isolated_env(home, root)
    log_path = home / "jupyter-lab.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            _lab_command(port, token, root),
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = LabServer(proc=proc, port=port, token=token, root=root, log_path=log_path)
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stop_lab(server)
            raise AssertionError(
                f"jupyter lab exited with {proc.returncode} before answering; its log:\n"
                + server.log()
            )
        try:
            server.api(f"/api/status?token={token}", timeout=2)
            return server
        except (OSError, urllib.error.URLError, ValueError) as exc:
            last = exc
            time.sleep(0.2)
    stop_lab(server)
    raise AssertionError(
        f"jupyter lab did not answer /api/status within {timeout} s ({last}); its log:\n"
        + server.log()
    )


@pytest.fixture(name="lab")
def lab_fixture(
    project: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[LabServer]:
    """JupyterLab serving the ``project`` fixture's dir (the kernels' cwd and RGT_PROJECT).

    When the test failed, the server log is printed (pytest shows it with the failure) and
    copied to the artifacts dir.
    """
    failed_before = request.session.testsfailed
    server = start_lab(project, tmp_path / "jupyter-home")
    try:
        yield server
    finally:
        stop_lab(server)
        if request.session.testsfailed > failed_before:
            log = server.log()
            dest = artifacts_dir() / f"{request.node.name}-jupyter-lab.log"
            dest.write_text(log)
            print(f"---- jupyter lab log (also in {dest}) ----\n{log[-20000:]}")


def launch_chromium(playwright: Any) -> Browser:
    """Debian's Chromium, headless, through Playwright."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: {SETUP_HINT}", pytrace=False)
    browser: Browser = playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
    )
    return browser


@pytest.fixture(name="browser")
def browser_fixture() -> Iterator[Browser]:
    """A headless Chromium; the test fails (never skips) when Chromium or Playwright is
    missing."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: {SETUP_HINT}", pytrace=False)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.fail(f"playwright does not import ({exc}): {SETUP_HINT}", pytrace=False)
    with sync_playwright() as pw:
        chromium = launch_chromium(pw)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(name="page")
def page_fixture(browser: Browser) -> Iterator[Page]:
    """A fresh browser page; console errors and page errors are printed (shown on failure)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    tab.on("pageerror", lambda exc: print(f"[page error] {exc}"))
    tab.on(
        "console",
        lambda msg: print(f"[console {msg.type}] {msg.text}") if msg.type == "error" else None,
    )
    try:
        yield tab
    finally:
        context.close()


def screenshot(tab: Page, name: str) -> Path:
    """Save a full-page screenshot as ``<artifacts>/<name>.png``; return its path."""
    path = artifacts_dir() / f"{name}.png"
    tab.screenshot(path=str(path), full_page=True)
    return path


def copy_notebook(name: str, dest: Path) -> Path:
    """Copy ``example_notebooks/<name>`` into ``dest``; return the copy."""
    target = dest / name
    shutil.copyfile(REPO / "example_notebooks" / name, target)
    return target
