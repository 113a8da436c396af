"""An SSH box for the benchmarks, set up the way tests/test_ssh.py sets it up.

:func:`ssh_box` starts a throwaway OpenSSH server on 127.0.0.1 (``tests/sshd.py``), writes an
ssh_config with the alias ``testbox``, a known_hosts that trusts the server, and a project whose
profile ``box`` (a copy of ``profiles/ssh.toml``) keeps its remote dirs in the temp dir. While the
block runs, ``RGT_SSH_CONFIG`` and ``RGT_PROJECT`` point there; every other ``RGT_*`` variable is
hidden. Also: :func:`summarize` and :func:`machine_info` for the result files.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.sshd import Sshd, start_sshd  # noqa: E402 - needs the repo root on sys.path

ALIAS = "testbox"
PROFILE = "box"


@dataclass
class SshBox:
    """A running sshd and a project that reaches it as ``--profile box --host testbox``."""

    sshd: Sshd
    project: Path
    ssh_config: Path
    known_hosts: Path
    remote_root: Path
    alias: str = ALIAS
    profile: str = PROFILE

    def ssh_options(self) -> list[str]:
        """OpenSSH client options (``ssh``/``scp``) for the same server, key and known_hosts."""
        return [
            "-F",
            "/dev/null",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-i",
            str(self.sshd.user_key),
        ]


def _close_connections() -> None:
    from rgt_jupyter.transport import ssh

    with ssh._CONNECTIONS_LOCK:
        transports = list(ssh._CONNECTIONS.values())
        ssh._CONNECTIONS.clear()
    for transport in transports:
        transport.close()


@contextlib.contextmanager
def ssh_box(tmp: Path) -> Iterator[SshBox]:
    """Start sshd under ``tmp`` and lay out the project; undone when the block ends."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("RGT_")}
    server_root = tmp / "sshd"
    server_root.mkdir()
    with start_sshd(server_root) as server:
        known = tmp / "known_hosts"
        known.write_text(f"[127.0.0.1]:{server.port} {server.host_pub}\n")
        config = tmp / "ssh_config"
        config.write_text(
            f"Host {ALIAS}\n  HostName 127.0.0.1\n  Port {server.port}\n  User root\n"
            f"  IdentityFile {server.user_key}\n  UserKnownHostsFile {known}\n"
        )
        project = tmp / "proj"
        profiles = project / ".rgt" / "profiles"
        profiles.mkdir(parents=True)
        remote = tmp / "remote home"
        builtin = (REPO / "profiles" / "ssh.toml").read_text()
        (profiles / f"{PROFILE}.toml").write_text(
            builtin.replace('name = "ssh"', f'name = "{PROFILE}"')
            .replace("{home}/rgt", str(remote))
            .replace("smoke_default = true", "smoke_default = false")
        )
        for key in saved:
            del os.environ[key]
        os.environ["RGT_SSH_CONFIG"] = str(config)
        os.environ["RGT_PROJECT"] = str(project)
        try:
            yield SshBox(server, project, config, known, remote)
        finally:
            _close_connections()
            for key in [k for k in os.environ if k.startswith("RGT_")]:
                del os.environ[key]
            os.environ.update(saved)


def summarize(values: list[float]) -> dict[str, float]:
    """Median, p90 (nearest rank), min and max."""
    ordered = sorted(values)
    p90 = ordered[max(0, min(len(ordered) - 1, -(-len(ordered) * 9 // 10) - 1))]
    return {
        "median": statistics.median(ordered),
        "p90": p90,
        "min": ordered[0],
        "max": ordered[-1],
    }


def _first_line(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return None
    text = (proc.stdout or proc.stderr).strip()
    return text.splitlines()[0] if text else None


def machine_info() -> dict[str, Any]:
    """What the figures were measured on, and when."""
    import paramiko

    model = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        mem = int(first.split()[1]) * 1024
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "memory_bytes": mem,
        "paramiko": paramiko.__version__,
        "openssh": _first_line(["ssh", "-V"]),
        "rgt_commit": _first_line(["git", "-C", str(REPO), "rev-parse", "HEAD"]),
        "rgt_jupyter_uncommitted_changes": bool(
            _first_line(["git", "-C", str(REPO), "status", "--porcelain", "rgt_jupyter"])
        ),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
