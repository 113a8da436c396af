"""A real OpenSSH server on 127.0.0.1 for the tests: throwaway host and user keys, its own
authorized_keys, a random port. Installed by scripts/setup.sh (openssh-server)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    """A running sshd."""

    port: int
    root: Path
    user_key: Path
    host_pub: str
    log: Path

    def accepted(self) -> int:
        """How many logins sshd accepted so far."""
        return self.log.read_text(errors="replace").count("Accepted publickey")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@contextlib.contextmanager
def start_sshd(root: Path) -> Iterator[Sshd]:
    """Run sshd with throwaway keys kept in ``root`` (an empty, existing folder) until the block
    ends; raises AssertionError when sshd is not installed or does not come up."""
    assert os.path.exists(SSHD), (
        f"{SSHD} is missing: scripts/setup.sh installs openssh-server; run it first"
    )
    assert shutil.which("ssh-keygen"), "ssh-keygen is missing (openssh-client)"
    _keygen(root / "host_ed25519")
    _keygen(root / "id_ed25519")
    (root / "authorized_keys").write_text((root / "id_ed25519.pub").read_text())
    os.chmod(root / "authorized_keys", 0o600)
    port = _free_port()
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root}/host_ed25519\n"
        f"PidFile {root}/sshd.pid\nAuthorizedKeysFile {root}/authorized_keys\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
        "Subsystem sftp internal-sftp\nAllowTcpForwarding yes\nLogLevel VERBOSE\n"
        "MaxStartups 100\nMaxSessions 100\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    log = root / "sshd.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=fh, stderr=fh)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, f"sshd exited: {log.read_text()}"
                assert time.monotonic() < deadline, f"sshd did not listen: {log.read_text()}"
                time.sleep(0.1)
        host_pub = (root / "host_ed25519.pub").read_text().split()
        yield Sshd(port, root, root / "id_ed25519", f"{host_pub[0]} {host_pub[1]}", log)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """Start sshd once for the session (fails loudly when it is not installed)."""
    with start_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server
