"""The CPU smoke run: the job's program on this machine with ``RGT_SMOKE=1`` under a time
budget, before anything is launched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .. import remote
from ..errors import SmokeFailed
from ..jobs.bundle import job_paths, member_mode
from ..jobs.tracebacks import traceback_lines
from ..store.fsutil import atomic_write_bytes

if TYPE_CHECKING:
    from ..jobs.request import LaunchRequest


def _write_locally(
    root: str, files: dict[str, bytes], pushed: list[tuple[Path, str]], secrets: dict[str, str]
) -> None:
    """Lay out a job's files under ``root`` on this machine (the smoke run's control dir)."""

    for name, data in files.items():
        atomic_write_bytes(f"{root}/{name}", data, member_mode(name))
    for local, rel in pushed:
        dest = Path(root, "code", rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, dest)
    if secrets:
        atomic_write_bytes(f"{root}/secrets.json", json.dumps(secrets).encode(), 0o600)


def run_smoke(
    req: LaunchRequest,
    files: dict[str, bytes],
    pushed: list[tuple[Path, str]],
    env: dict[str, str],
    secrets: dict[str, str],
) -> None:
    """Run the program on this machine with ``RGT_SMOKE=1`` under a time budget.

    Raises :class:`SmokeFailed` (with the traceback, in the cell's line numbers) when it fails.
    """
    with tempfile.TemporaryDirectory(prefix="rgt-smoke-") as tmp:
        paths = job_paths(tmp, req.program_name)
        _write_locally(tmp, files, pushed, secrets)
        run_env = dict(os.environ)
        run_env.update(env)
        for name in secrets:
            run_env.pop(name, None)
        run_env["RGT_SECRETS_FILE"] = f"{tmp}/secrets.json"
        run_env.update(
            {
                "RGT_SMOKE": "1",
                "RGT_JOB_ID": "smoke",
                "RGT_OUT": f"{tmp}/out",
                "RGT_CKPT_DIR": f"{tmp}/ckpt",
                "RGT_CONTROL_DIR": tmp,
                "RGT_INPUTS_DIR": paths["inputs_dir"],
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": paths["lib_dir"],
            }
        )
        run_env.pop("RGT_RESUME", None)
        if req.smoke == "overfit":
            run_env["RGT_SMOKE_MODE"] = "overfit"
        argv = [sys.executable, str(remote.path("agent.py")), "cell", paths["program"]]
        try:
            proc = subprocess.run(
                argv,
                cwd=paths["code_dir"],
                env=run_env,
                capture_output=True,
                timeout=req.smoke_timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SmokeFailed(
                f"the smoke run exceeded its {req.smoke_timeout:g} s budget, so the launch was "
                "blocked",
                [
                    "Make the cell take a short path when rgt_jupyter.job.is_smoke() (RGT_SMOKE=1): "
                    "tiny shapes, one or two steps.",
                    "Or: --smoke-timeout S, or --no-smoke.",
                ],
            ) from exc
        if proc.returncode != 0:
            error_path = Path(tmp) / "error.json"
            if error_path.exists():
                error = json.loads(error_path.read_text())
                lines = traceback_lines(
                    error, paths["program"], req.line_offset, req.label, "smoke", "this machine"
                )
            else:
                lines = proc.stdout.decode(errors="replace").splitlines()[-30:]
            raise SmokeFailed(
                f"the CPU smoke run failed (exit {proc.returncode}); nothing was launched",
                [*lines, "(--no-smoke skips the smoke run)"],
            )
        if req.smoke == "overfit":
            _check_overfit(Path(tmp))


def _check_overfit(control: Path) -> None:
    """The verdict of ``--smoke=overfit``: the loss the loop reported on its first batch, fed
    again and again, fell as far as it must; refused when no verdict was reached."""
    try:
        verdict = json.loads((control / "overfit.json").read_text())
    except (OSError, ValueError):
        raise SmokeFailed(
            "--smoke=overfit reached no verdict, so the launch was blocked",
            [
                "Take the batches through rgt_jupyter.integrations.debug_data.timed_data(loader)"
                " (in this smoke it hands out the first batch again and again) and report each "
                "loss with watch_model(model, optimizer).loss(loss).",
                "Or: --smoke without =overfit.",
            ],
        ) from None
    if not verdict.get("passed"):
        raise SmokeFailed(
            "the model cannot overfit one batch, so the launch was blocked",
            [str(verdict.get("seen", "")), "(--smoke without =overfit skips this check)"],
        )
