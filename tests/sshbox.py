"""SSH fixtures on the real loopback sshd: ``box`` (an ssh_config alias ``testbox`` and a project
profile ``box``) and :func:`cutbox` (the same server behind a :class:`FaultProxy`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .faultproxy import FaultProxy
from .sshd import Sshd


@pytest.fixture
def box(
    sshd: Sshd, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """An ssh_config with alias ``testbox`` (and ``jumpbox`` through it), a known_hosts that
    trusts the server, and a project profile ``box`` whose remote dirs live under tmp."""
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {sshd.host_pub}\n")
    common = (
        f"  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
        f"  IdentityFile {sshd.user_key}\n  UserKnownHostsFile {known}\n"
    )
    config = tmp_path / "ssh_config"
    config.write_text(f"Host testbox\n{common}\nHost jumpbox\n{common}  ProxyJump testbox\n")
    monkeypatch.setenv("RGT_SSH_CONFIG", str(config))
    remote = tmp_path / "remote home"
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True)
    builtin = (Path(__file__).parent.parent / "profiles" / "ssh.toml").read_text()
    (profiles / "box.toml").write_text(
        builtin.replace('name = "ssh"', 'name = "box"')
        .replace("{home}/rgt", str(remote))
        .replace("smoke_default = true", "smoke_default = false")
    )
    yield known
    close_connections(project)


def close_connections(project: Path) -> None:
    """Close this process's SSH connections made for ``project`` (each holds a socket and its
    threads, which would otherwise outlive the test)."""
    from rgt_jupyter.transport import ssh

    with ssh._CONNECTIONS_LOCK:
        keys = [key for key in ssh._CONNECTIONS if key[1] == str(project)]
        transports = [ssh._CONNECTIONS.pop(key) for key in keys]
    for transport in transports:
        transport.close()


@contextmanager
def cutbox(sshd: Sshd, known: Path) -> Iterator[FaultProxy]:
    """Alias ``cutbox``: the same server behind a proxy that cuts connections on demand; and
    ``hopped``: the server reached directly, through ``cutbox`` as its ProxyJump hop."""
    config = Path(os.environ["RGT_SSH_CONFIG"])
    with FaultProxy(sshd.port) as proxy:
        known.write_text(known.read_text() + f"[127.0.0.1]:{proxy.port} {sshd.host_pub}\n")
        login = f"  User root\n  IdentityFile {sshd.user_key}\n  UserKnownHostsFile {known}\n"
        config.write_text(
            config.read_text()
            + f"\nHost cutbox\n  HostName 127.0.0.1\n  Port {proxy.port}\n{login}"
            + f"\nHost hopped\n  HostName 127.0.0.1\n  Port {sshd.port}\n{login}"
            + "  ProxyJump cutbox\n"
        )
        yield proxy
