"""Where profiles are found: the built-ins, the user's config dir (platformdirs, so
``$XDG_CONFIG_HOME`` is honoured) and the project's ``.rgt/profiles``."""

from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path

import platformdirs


def builtin_dirs() -> list[Path]:
    """Where built-in profile files live: in the wheel, or ``profiles/`` of a source checkout."""
    package = Path(str(resources.files("rgt_jupyter")))
    return [p for p in (package / "_profiles", package.parent / "profiles") if p.is_dir()]


def user_dir() -> Path:
    """The user's own profiles: ``profiles/`` of the user config dir (platformdirs: on Linux
    ``$XDG_CONFIG_HOME/rgt``, by default ``~/.config/rgt``)."""
    return Path(platformdirs.user_config_dir("rgt", appauthor=False)) / "profiles"


def search_dirs(project: Path | None) -> list[Path]:
    """Built-ins first, then the user's (:func:`user_dir`; on macOS and Windows also
    ``~/.config/rgt/profiles``), then ``<project>/.rgt/profiles``."""
    dirs = builtin_dirs()
    legacy = Path(os.path.expanduser("~/.config/rgt/profiles"))
    user = user_dir()
    if legacy != user and sys.platform != "linux":
        dirs.append(legacy)
    dirs.append(user)
    if project is not None:
        dirs.append(project / ".rgt" / "profiles")
    return dirs


def profile_files(project: Path | None) -> dict[str, list[Path]]:
    """Profile name -> its files in :func:`search_dirs` order (the last one wins)."""
    found: dict[str, list[Path]] = {}
    for directory in search_dirs(project):
        if directory.is_dir():
            for path in sorted(directory.glob("*.toml")):
                found.setdefault(path.stem, []).append(path)
    return found
