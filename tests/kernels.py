"""Real ipykernels for tests: a kernel spec running this interpreter, start, execute, shut down."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

KERNEL_NAME = "rgt-test-venv"


def _kernel_spec_manager(root: Path) -> KernelSpecManager:
    """A kernel spec that runs this test's own interpreter (the project's venv)."""
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "rgt test kernel",
                "language": "python",
            }
        )
    )
    return KernelSpecManager(kernel_dirs=[str(root / "kernels")], ensure_native_kernel=False)


def _kernel_env(project: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGT_")}
    env.update(extra or {})
    env["RGT_PROJECT"] = str(project)
    env["IPYTHONDIR"] = str(project / ".ipython")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _start_kernel(
    project: Path, ksm: KernelSpecManager, env: dict[str, str] | None = None
) -> tuple[KernelManager, Any]:
    km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm)
    km.connection_file = str(project / f".kernel-{time.monotonic_ns()}.json")
    km.start_kernel(env=_kernel_env(project, env), cwd=str(project))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def _execute(kc: Any, code: str, timeout: float = 60) -> str:
    """Run ``code`` in the kernel; return everything it printed or displayed as text."""
    chunks: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        kind = msg["header"]["msg_type"]
        content = msg["content"]
        if kind == "stream":
            chunks.append(content["text"])
        elif kind in ("execute_result", "display_data", "update_display_data"):
            chunks.append(content["data"].get("text/plain", "") + "\n")
        elif kind == "error":
            chunks.append("\n".join(content["traceback"]) + "\n")

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    out = "".join(chunks)
    assert reply["content"]["status"] == "ok", f"kernel cell failed:\n{code}\n---\n{out}"
    return out


def _shutdown(km: KernelManager | None, kc: Any) -> None:
    if kc is not None:
        kc.stop_channels()
    if km is not None:
        try:
            km.shutdown_kernel(now=True)
        except Exception:
            pass
        km.cleanup_resources()


def send(kc: Any, code: str, cell_id: str | None = None) -> str:
    """Send an execute request as a notebook frontend does (with the cell's id in the request's
    metadata, like JupyterLab and Notebook 7); returns its message id."""
    msg = kc.session.msg(
        "execute_request",
        {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
    )
    if cell_id is not None:
        msg["metadata"]["cellId"] = cell_id
    kc.shell_channel.send(msg)
    return str(msg["header"]["msg_id"])


class Outputs:
    """What the kernel sent on iopub for one request: stream text, displays, errors."""

    def __init__(self) -> None:
        self.stream = ""
        self.displays: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.idle = False
        self.changed_at = time.monotonic()

    @property
    def text(self) -> str:
        """Everything shown, as text."""
        shown = "".join(str(d["data"].get("text/plain", "")) + "\n" for d in self.displays)
        return self.stream + shown + "\n".join(self.errors)


def collect(
    kc: Any,
    msg_id: str,
    out: Outputs | None = None,
    until: Any = None,
    timeout: float = 60,
) -> Outputs:
    """Read iopub messages of request ``msg_id`` until the kernel is idle again (or ``until``,
    given the outputs so far, returns True)."""
    out = out or Outputs()
    deadline = time.monotonic() + timeout
    while not out.idle:
        if until is not None and until(out):
            return out
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout} s; outputs so far:\n{out.text}")
        try:
            msg = kc.get_iopub_msg(timeout=min(left, 0.5))
        except Exception:  # queue.Empty
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, content = msg["header"]["msg_type"], msg["content"]
        out.changed_at = time.monotonic()
        if kind == "stream":
            out.stream += content["text"]
        elif kind in ("execute_result", "display_data", "update_display_data"):
            out.displays.append(content)
        elif kind == "error":
            out.errors.append("\n".join(content["traceback"]))
        elif kind == "status" and content["execution_state"] == "idle":
            out.idle = True
    return out
