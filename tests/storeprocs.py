"""The push store's background processes on this machine (the loopback sshd's remote side is
this machine): the spare makers, ``agent.py refill OBJDIR`` (see ``rgt_jupyter/remote/agent.py``).
A test or a benchmark waits for them before it removes a store or takes its next sample."""

from __future__ import annotations

from pathlib import Path


def refills(objects: Path | str | None = None) -> list[int]:
    """Pids of the spare makers still running (of the store ``objects`` only, when given)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"refill" not in argv or not any(a.endswith(b"agent.py") for a in argv):
            continue
        if objects is None or str(objects).encode() in argv:
            found.append(int(entry.name))
    return found
