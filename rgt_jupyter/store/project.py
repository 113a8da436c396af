"""Where a project's local state lives: ``<project>/.rgt/`` (registry, partials) and ``runs/``,
and how what a killed pull left among the runs is put in order before the next one."""

from __future__ import annotations

import os
from pathlib import Path


def project_dir(start: str | os.PathLike[str] | None = None) -> Path:
    """The project root: ``$RGT_PROJECT``, else the nearest ancestor of ``start`` (default: the
    current directory) holding a ``.rgt/`` folder, else ``start`` itself."""
    env = os.environ.get("RGT_PROJECT")
    if env and start is None:
        return Path(env).expanduser().resolve()
    here = Path(start if start is not None else os.getcwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".rgt").is_dir():
            return candidate
    return here


def state_dir(project: Path) -> Path:
    """``<project>/.rgt``, created on first use."""
    path = project / ".rgt"
    path.mkdir(parents=True, exist_ok=True)
    return path


def runs_dir(project: Path) -> Path:
    """``<project>/runs``: the immutable, append-only evidence store."""
    return project / "runs"
