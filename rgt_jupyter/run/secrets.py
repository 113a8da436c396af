"""A job's secrets file, removed once no attempt needs it.

The agent removes ``secrets.json`` when its job ends (keeping it only while a scheduler may run
the same control dir again: a preempted Slurm job with ``--requeue``). An agent killed from
outside cannot; the next look at the job, its pull, its resume or the teardown gate then removes
the leftover, and says so.
"""

from __future__ import annotations

from ..backends import get_backend
from ..errors import TransportError
from ..jobs.snapshot import Snapshot
from ..jobs.spec import JobSpec
from ..store.registry import Registry
from ..transport import Transport


def drop_leftover_secrets(
    transport: Transport, spec: JobSpec, snap: Snapshot, registry: Registry | None = None
) -> str | None:
    """Remove the secrets file of a job that ended (its agent gone) and that nothing will run
    again; return what is said of it, or None when there was none to remove."""
    backend = get_backend(spec.launcher)
    if not spec.secret_names or not snap.terminal or not backend.probed:
        return None
    if backend.may_run_again(spec, snap):
        return None
    path = f"{spec.control_dir}/secrets.json"
    try:
        if transport.stat(path) is None:
            return None
        transport.exec(["rm", "-f", "--", path], timeout=60).check()
    except (TransportError, OSError) as exc:
        return f"its leftover secrets file {path} could not be removed ({exc}): remove it by hand"
    if registry is not None:
        registry.event(spec.job_id, "secrets_removed", path=path)
    return f"removed its leftover secrets file {path} (its agent ended without removing it)"
