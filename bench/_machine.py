"""What a benchmark's figures were measured on: :func:`_ssh_env.machine_info` (CPU, memory,
versions, the commit and whether the tree was clean), or the platform's own facts where that
module cannot be imported (no paramiko)."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def machine() -> dict[str, Any]:
    """The machine and tree the figures come from."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    try:
        from _ssh_env import machine_info  # deferred: it needs paramiko and the tests' sshd

        return machine_info()
    except ImportError:
        return {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
        }
