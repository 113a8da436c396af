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

import getpass
import json
import time
from pathlib import Path
from typing import Any

import paramiko

from ...errors import SSHError, UsageError
from ...store.fsutil import atomic_write_bytes
from . import connect
from .hops import open_socket
from .hosts import HostSpec, fingerprint, load_host_keys, resolve
from .liveness import CONNECT_TIMEOUT_S


def fetch_host_key(alias: str, project: Path | None = None) -> tuple[HostSpec, paramiko.PKey]:
    """Run key exchange only (no authentication) and return the key the host presents."""
    spec = resolve(alias, project)
    sock = open_socket(spec, project, connect)
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=CONNECT_TIMEOUT_S)
        return spec, transport.get_remote_server_key()
    except paramiko.SSHException as exc:
        raise SSHError("transport_unavailable", f"{alias}: key exchange failed ({exc})") from exc
    finally:
        transport.close()


def trust_host(
    alias: str, project: Path, confirm: Any, pinned: str | None = None
) -> dict[str, Any]:
    """Show the key ``alias`` presents and, if ``confirm(message)`` says yes, record it in
    ``<project>/.rgt/known_hosts`` with who trusted it and when (``.rgt/trusted_hosts.jsonl``).
    ``pinned``: an OpenSSH public key line (``TYPE BASE64 [comment]``) the host must present,
    decided without asking (a key baked into the machine's image); any other key is refused.

    A key that differs from a known one is refused: that is never settled here.
    """

    spec, key = fetch_host_key(alias, project)
    fp = fingerprint(key)
    known = load_host_keys(spec).lookup(spec.key_name)
    if known is not None and key.get_name() in known:
        if known[key.get_name()] == key:
            return {"alias": alias, "fingerprint": fp, "status": "already trusted"}
        raise SSHError(
            "host_key_mismatch",
            f"{alias} ({spec.key_name}) now presents {fp}, which differs from the key on record. "
            "Verify it with the machine's console before removing the old entry "
            f"(ssh-keygen -R '{spec.key_name}').",
        )
    message = (
        f"{alias} ({spec.key_name}) presents a {key.get_name()} key\n  {fp}\n"
        "Compare it with the fingerprint the provider's console or the machine's owner shows."
    )
    if pinned is not None:
        parts = pinned.split()
        if parts[:2] != [key.get_name(), key.get_base64()]:
            raise SSHError(
                "host_key_mismatch",
                f"{alias} ({spec.key_name}) presents {key.get_name()} {fp}, not the pinned host "
                "key the profile names: it is not trusted, and nothing was written",
            )
    elif not confirm(message):
        raise UsageError(f"{alias} was not trusted; nothing was written")
    state = project / ".rgt"
    state.mkdir(parents=True, exist_ok=True)
    path = state / "known_hosts"
    old = path.read_bytes() if path.exists() else b""
    line = f"{spec.key_name} {key.get_name()} {key.get_base64()}\n".encode()
    atomic_write_bytes(path, old + line, mode=0o600)
    record = {
        "alias": alias,
        "host": spec.hostname,
        "port": spec.port,
        "key_type": key.get_name(),
        "fingerprint": fp,
        "trusted_by": "the profile's pinned host key" if pinned else getpass.getuser(),
        "at": time.time(),
        "first_contact_mitm_unavailable": True,
    }
    with open(state / "trusted_hosts.jsonl", "a") as fh:
        fh.write(json.dumps(record) + "\n")
    return {**record, "status": "trusted", "known_hosts": str(path)}
