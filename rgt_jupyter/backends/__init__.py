"""The backends, found by name: the one place that knows them all.

A profile's ``launcher`` names its backend. Each lives in a folder of its own behind the
:class:`~.base.Backend` interface and is imported the first time a job needs it, so a project
that never uses Slurm never imports the Slurm backend. Adding a backend is a folder and one row
of :data:`BACKENDS` (see "Adding a backend" in the README).
"""

from __future__ import annotations

import importlib
from functools import cache

from ..errors import ProfileError
from ..jobs.snapshot import Snapshot
from ..jobs.spec import JobSpec
from ..transport import Transport
from .base import Backend, Recovered, Stopped

#: Backend name -> ``module:Class``, imported on first use.
BACKENDS: dict[str, str] = {
    "detached": "rgt_jupyter.backends.detached:DetachedBackend",
    "tmux": "rgt_jupyter.backends.detached:TmuxBackend",
    "sbatch": "rgt_jupyter.backends.slurm:SlurmBackend",
    "k8s-job": "rgt_jupyter.backends.k8s:K8sBackend",
    "ray": "rgt_jupyter.backends.ray:RayBackend",
}

__all__ = ["BACKENDS", "Backend", "Recovered", "Stopped", "get_backend", "observe"]


@cache
def get_backend(name: str) -> Backend:
    """The backend a profile's ``launcher`` names (one instance per process)."""
    where = BACKENDS.get(name)
    if where is None:
        raise ProfileError(
            f"launcher {name!r} is not available: use one of {', '.join(sorted(BACKENDS))}"
        )
    module, _, cls = where.partition(":")
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend


def observe(transport: Transport, spec: JobSpec, log_lines: int = 12) -> Snapshot:
    """One look at a job, by the backend that launched it."""
    return get_backend(spec.launcher).observe(transport, spec, log_lines)
