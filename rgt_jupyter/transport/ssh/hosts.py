"""The SSH transport (paramiko): hosts from ``~/.ssh/config``, keys checked against known_hosts.

Host keys: the user's ``~/.ssh/known_hosts``, any ``UserKnownHostsFile`` the config names and the
project's ``.rgt/known_hosts`` are honoured. An unknown host is refused with its fingerprint and
the command that trusts it (``rgt trust-host ALIAS``); a changed key is refused loudly. Nothing is
sent past key exchange to a host that was not verified.

One connection per host per process (:func:`connect`); a dropped connection is re-opened on the
next call, and a connection that cannot be made raises :class:`SSHError` with a ``kind``
(``auth_failed``, ``host_key_unknown``, ``host_key_mismatch``, ``connection_refused``,
``timeout``, ``no_sftp``, ``transport_unavailable``) and a message that says what to do.

Dead peers: a host (or a network path) can go silent without closing anything, no FIN, no RST,
and a read would then wait forever. Each connection is watched: once the server has sent nothing
for ``RGT_SSH_ALIVE_S`` seconds (default 15) it is sent a keepalive it must answer (a global
request with want-reply), and once it has sent nothing for 4 such intervals the connection is
closed, so every call waiting on it ends with an :class:`SSHError` of kind ``timeout`` ("connection
lost ..."); the next call connects again. The SSH handshake is held to the same limit (at most
15 s), and the OpenSSH client that carries large reads gets the same ``ServerAliveInterval`` and
``ServerAliveCountMax`` (:mod:`.stream`).
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from ...errors import SSHError, UsageError
from ...store.fsutil import atomic_write_bytes


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint of a host key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def ssh_config_path() -> Path:
    """``$RGT_SSH_CONFIG``, else ``~/.ssh/config``."""
    return Path(os.environ.get("RGT_SSH_CONFIG") or os.path.expanduser("~/.ssh/config"))


@dataclass
class HostSpec:
    """A host alias resolved through the SSH config."""

    alias: str
    hostname: str
    port: int
    user: str | None
    identity_files: list[str] = field(default_factory=list)
    known_hosts: list[Path] = field(default_factory=list)
    proxy_jump: str | None = None

    @property
    def key_name(self) -> str:
        """How known_hosts names this host (``[host]:port`` unless the port is 22)."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def parse_destination(text: str) -> tuple[str | None, str, int | None] | None:
    """``[user@]host[:port]`` or ``ssh://[user@]host[:port]`` (a ProxyJump hop written out, as
    OpenSSH takes it) as (user, host, port); None for a plain alias."""
    rest = text.strip()
    uri = rest.startswith("ssh://")
    if uri:
        rest = rest[len("ssh://") :].rstrip("/")
    if not uri and "@" not in rest and ":" not in rest:
        return None
    user, at, rest = rest.rpartition("@")
    port_text = ""
    if rest.startswith("["):  # [v6 address]:port
        host, _, after = rest[1:].partition("]")
        port_text = after[1:] if after.startswith(":") else ""
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    else:
        host = rest
    if not host or (port_text and not port_text.isdigit()) or (at and not user):
        raise SSHError(
            "usage", f"cannot read the SSH destination {text!r}: write [user@]host[:port]"
        )
    port = int(port_text) if port_text else None
    if port is not None and not 0 < port < 65536:
        raise SSHError("usage", f"the SSH destination {text!r} names port {port}")
    return (user or None), host, port


def resolve(alias: str, project: Path | None = None) -> HostSpec:
    """Resolve ``alias`` through the SSH config (HostName, Port, User, IdentityFile, ProxyJump).
    A destination written out (``user@host:port``, as a ProxyJump hop may be) is looked up by its
    host, with its own user and port taking precedence."""
    config = paramiko.SSHConfig()
    path = ssh_config_path()
    if path.exists():
        config = paramiko.SSHConfig.from_path(str(path))
    written = parse_destination(alias)
    found = config.lookup(written[1] if written else alias)
    known = [Path(os.path.expanduser("~/.ssh/known_hosts"))]
    for entry in str(found.get("userknownhostsfile", "")).split():
        known.append(Path(os.path.expanduser(entry)))
    if project is not None:
        known.append(project / ".rgt" / "known_hosts")
    jump = found.get("proxyjump")
    user, port = found.get("user"), int(found.get("port", 22))
    if written:
        user = written[0] or user
        port = written[2] or port
    return HostSpec(
        alias=alias,
        hostname=str(found.get("hostname", written[1] if written else alias)),
        port=port,
        user=user,
        identity_files=[os.path.expanduser(p) for p in found.get("identityfile", [])],
        known_hosts=known,
        proxy_jump=None if not jump or str(jump).strip().lower() == "none" else str(jump),
    )


def jump_hops(proxy_jump: str) -> list[str]:
    """The hops of a ProxyJump value, first to last (``a,user@b:2222``)."""
    hops = [hop.strip() for hop in proxy_jump.split(",")]
    if not all(hops):
        raise SSHError("usage", f"ProxyJump {proxy_jump!r} has an empty hop")
    return hops


class RefuseUnknown(paramiko.MissingHostKeyPolicy):
    """Refuse an unknown host, naming its fingerprint and the command that trusts it."""

    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        raise SSHError(
            "host_key_unknown",
            f"{self.spec.alias} ({hostname}) is not a known host: it presents a "
            f"{key.get_name()} key {fingerprint(key)}. Check that fingerprint with the machine's "
            f"owner or console, then run `rgt trust-host {self.spec.alias}`.",
        )


def load_host_keys(spec: HostSpec) -> paramiko.HostKeys:
    """Every known host key from the user's, the config's and the project's known_hosts."""
    keys = paramiko.HostKeys()
    for path in spec.known_hosts:
        if path.exists():
            keys.load(str(path))
    return keys


def add_host_block(path: Path, alias: str, block: str) -> None:
    """Append ``block`` to the SSH config at ``path`` (atomically; the file kept private),
    refusing when a ``Host`` line already names ``alias``."""
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines():
        words = line.split()
        if len(words) > 1 and words[0].lower() == "host" and alias in words[1:]:
            raise UsageError(
                f"{path} already has a Host {alias}: pick another --host, or edit that block"
            )
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    atomic_write_bytes(path, (text + sep + block).encode(), mode=mode)
