"""A real OpenSSH server on 127.0.0.1 for the tests: throwaway host and user keys, its own
authorized_keys, a random port. Installed by scripts/setup.sh (openssh-server).

:meth:`Sshd.restart` (or the :meth:`Sshd.down` block) stops the server with every connection it
holds (the listener and each per-connection ``sshd``, SIGTERM), as when the service is stopped
or killed, and starts it again on the same port with the same host key. What the sessions
started is left alone, as sshd leaves it (no terminal, nothing hangs up); a service manager that
kills the service's whole control group would take detached jobs with it, which this does not
model.

``start_sshd(root, boot_id=FILE)`` runs the server in a mount namespace of its own where
``/proc/sys/kernel/random/boot_id`` reads FILE: everything reached through that server (the
agent, the job, the watcher's probe) sees FILE's content as the machine's boot id, and writing
a new id there (in place) is what a reboot looks like from the outside.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"
BOOT_ID = "/proc/sys/kernel/random/boot_id"


@dataclass
class Sshd:
    """A running sshd."""

    port: int
    root: Path
    user_key: Path
    host_pub: str
    log: Path
    argv: list[str] = field(default_factory=list, repr=False)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    restarts: int = 0

    def accepted(self) -> int:
        """How many logins sshd accepted so far."""
        return self.log.read_text(errors="replace").count("Accepted publickey")

    def running(self) -> bool:
        """True while the listener runs."""
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the listener (again) and wait until it accepts connections."""
        assert not self.running(), "sshd is already running"
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(self.argv, stdout=fh, stderr=fh)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None, f"sshd exited: {self.log.read_text()}"
                assert time.monotonic() < deadline, f"sshd did not listen: {self.log.read_text()}"
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop the listener and every connection it holds (see the module docstring)."""
        if self.proc is None:
            return
        sessions = [p for p in _descendants(self.proc.pid) if _comm(p) == "sshd"]
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        for pid in sessions:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while any(_comm(p) == "sshd" for p in sessions) and time.monotonic() < deadline:
            time.sleep(0.02)
        for pid in sessions:
            if _comm(pid) == "sshd":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """Stopped for the block, running again after it (also when the block raises)."""
        self.stop()
        try:
            yield
        finally:
            if not self.running():
                self.start()
                self.restarts += 1

    def restart(self, down_s: float = 0.0) -> None:
        """Stop (with every connection), wait ``down_s``, start on the same port and key."""
        with self.down():
            time.sleep(down_s)


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (from /proc), nearest first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                data = fh.read()
        except OSError:
            continue
        ppid = int(data[data.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def _comm(pid: int) -> str | None:
    """The process's name, or None once it is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            data = fh.read()
    except OSError:
        return None
    if data[data.rindex(")") + 2] in "ZX":
        return None
    return data[data.index("(") + 1 : data.rindex(")")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@contextlib.contextmanager
def start_sshd(root: Path, boot_id: Path | None = None) -> Iterator[Sshd]:
    """Run sshd with throwaway keys kept in ``root`` (an empty, existing folder) until the block
    ends; ``boot_id``: see the module docstring. Raises AssertionError when sshd is not
    installed or does not come up."""
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
    argv = [SSHD, "-D", "-e", "-f", str(config)]
    if boot_id is not None:
        assert shutil.which("unshare"), "unshare (util-linux) is missing"
        argv = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            f'mount --bind "$0" {BOOT_ID} && exec "$@"',
            str(boot_id),
            *argv,
        ]
    host_pub = (root / "host_ed25519.pub").read_text().split()
    server = Sshd(
        port, root, root / "id_ed25519", f"{host_pub[0]} {host_pub[1]}", root / "sshd.log"
    )
    server.argv = argv
    server.log.write_bytes(b"")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """Start sshd once for the session (fails loudly when it is not installed)."""
    with start_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server
