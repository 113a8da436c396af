"""The allowlist for names that become parts of paths and command lines.

Job names (``--name``), environment keys (``--env K=V``) and input variable names are checked
here before anything runs. A name that fails is refused with the rule spelled out; nothing is
created for it. Paths the user gives (``--push``, ``--to``, the project dir) are not restricted:
they are passed as argv items or quoted, never interpolated into a shell line unquoted.
"""

from __future__ import annotations

import re

from ..errors import UsageError

#: A job name: starts with a letter or digit; then letters, digits, ``.``, ``_``, ``-``; at most 64.
JOB_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
JOB_NAME_RULE = (
    "a job name starts with a letter or digit, then up to 63 letters, digits, '.', '_' or '-' "
    "(no spaces, quotes, '/', ';', '$', newlines, '..' or a leading '-')"
)


def check_job_name(name: str) -> str:
    """Return ``name`` if it is an allowed job name, else raise :class:`UsageError`."""
    if not isinstance(name, str) or not JOB_NAME_RE.fullmatch(name) or ".." in name:
        raise UsageError(f"job name {name!r} is not allowed: {JOB_NAME_RULE}. Pick another --name.")
    return name


def check_env_key(key: str) -> str:
    """Return ``key`` if it is a valid environment variable name, else raise."""
    if not ENV_KEY_RE.fullmatch(key):
        raise UsageError(
            f"environment key {key!r} is not allowed: use letters, digits and '_', "
            "not starting with a digit (e.g. --env LR=0.1)"
        )
    if key.startswith("RGT_"):
        raise UsageError(f"--env {key}: the RGT_ prefix is reserved for what rgt sets itself")
    return key


def parse_env_pairs(pairs: list[str]) -> dict[str, str]:
    """Parse ``K=V`` items from ``--env`` into a dict, refusing malformed ones."""
    out: dict[str, str] = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--env {item!r}: expected KEY=VALUE, e.g. --env LR=0.1")
        out[check_env_key(key)] = value
    return out


def check_identifier(name: str, what: str) -> str:
    """Return ``name`` if it is a Python identifier (for ``--inputs``), else raise."""
    if not name.isidentifier():
        raise UsageError(f"{what} {name!r} is not a Python variable name")
    return name


def parse_seeds(text: str) -> list[int]:
    """``0-4`` / ``0,3,7`` / ``1-3,9`` as a sorted list of distinct seeds (at most 1000)."""
    seeds: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise UsageError(f"--seeds {text!r}: use a range like 0-4, a list like 0,3,7, or both")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first or last - first >= 1000:
            raise UsageError(f"--seeds {text!r}: {part} is not an increasing range of <= 1000")
        seeds.update(range(first, last + 1))
    if len(seeds) > 1000:
        raise UsageError(f"--seeds {text!r}: at most 1000 seeds in one group")
    return sorted(seeds)
