"""What travels to the job's machine, and runs there on its own.

- ``agent.py``: supervises the job (heartbeat, records, signals, checkpoints' hashes);
- ``bundle_main.py``: the launch bundle's ``__main__.py`` (unpacks the bundle, starts the agent);
- ``probe.py``: the watcher's one look at many jobs of a machine (sent as ``python3 -c``);
- ``job.py``: the job-side API, which a job imports as ``rgt_jupyter.job``;
- ``ship.py``: many files over one stream, both ways (pulls and pushes; sent as ``python3 -c``).

Each file runs on the job machine's own Python (3.8+), with nothing installed there: standard
library only, no syntax newer than 3.8, and **no import of rgt_jupyter, not even of each other**
(each travels alone). A test holds every file of this folder to that. The rest of the package
ships them through :func:`source` and :func:`path`, never through a path of its own, so a move
cannot ship the wrong file.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

#: The files of this folder that travel.
SHIPPED = ("agent.py", "bundle_main.py", "probe.py", "job.py", "ship.py")


def path(name: str) -> Path:
    """Where the shipped file ``name`` lies in this installation (to run it here, or send it)."""
    if name not in SHIPPED:
        raise ValueError(f"{name!r} is not one of the shipped files {SHIPPED}")
    return Path(str(resources.files(__name__).joinpath(name)))


def source(name: str) -> bytes:
    """The bytes of the shipped file ``name``, as they travel."""
    return path(name).read_bytes()


def ship_argv(python: str, *args: str) -> list[str]:
    """The remote command that runs the shipped framing (``ship.py``, as ``python -c``: whatever a
    job's control dir holds, the framing is this version's). ``-S``: it is stdlib only, and
    site's start (every ``.pth`` file of the environment) is not paid on each transfer."""
    return [python, "-S", "-c", source("ship.py").decode(), *args]
