"""The next attempt of a job: one request builder for every way a job is relaunched (``rgt
resume``, a new machine, a retry after a lost node), and the retry itself.

A relaunch reuses the attempt's stored program, pushed files and inputs byte for byte, its
environment, secrets (by name), interpreter, grace and checkpoint root; ``RGT_RESUME=1`` makes
it go on from the lineage's newest checkpoint.

A retry after a lost node is automatic only where the profile asks for it (``[ray] retries =
N``: up to N attempts after the first) and only when the scheduler itself said that the node
died (:attr:`Snapshot.failure` ``node_lost``): a job that cannot be observed is never
relaunched, and a job that has a newer attempt is never relaunched again.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..errors import RgtError
from ..jobs.request import LaunchRequest
from ..jobs.snapshot import Snapshot
from ..jobs.spec import JobSpec
from .billing import job_budget
from .launch import launch

log = logging.getLogger(__name__)


def relaunch_request(
    spec: JobSpec,
    *,
    fresh: bool = False,
    host: str | None = None,
    budget: float | None = None,
    resend_code: bool = False,
) -> LaunchRequest:
    """The request that launches ``spec``'s next attempt (``host``: another machine's alias;
    ``resend_code``: send the code kept at launch again, for a machine that never had it)."""
    return LaunchRequest(
        program="",
        name=spec.name,
        profile=spec.profile,
        label=spec.label,
        line_offset=spec.line_offset,
        env=dict(spec.env),
        smoke=False,
        host=host if host is not None else spec.host_alias,
        secrets=list(spec.secret_names),
        python=spec.python,
        fresh=fresh,
        grace_s=spec.grace_s,
        ckpt_dir=spec.ckpt_root,
        allow_ephemeral_ckpt=bool(spec.durability.get("overridden")),
        reuse_code_of=None if resend_code else spec,
        resend_code_of=spec if resend_code else None,
        budget=budget if budget is not None else job_budget(spec),
    )


def retries_left(spec: JobSpec) -> int:
    """How many more automatic attempts the job's profile allows after a lost node."""
    allowed = spec.ray.get("retries", 0)
    if isinstance(allowed, bool) or not isinstance(allowed, int):
        return 0
    return max(0, allowed - (int(spec.attempt) - 1))


def retry_after_node_loss(spec: JobSpec, snap: Snapshot, project: Path) -> dict[str, Any] | None:
    """Launch the next attempt of a job its scheduler ended by losing its node, when its
    profile allows a retry; return its registry row (None when no retry is due). A launch that
    is refused (a newer attempt exists, a check fails) is logged and not repeated."""
    if snap.state != "failed" or snap.failure != "node_lost" or retries_left(spec) <= 0:
        return None
    try:
        row = launch(relaunch_request(spec), project)
    except RgtError as exc:
        log.warning("no automatic retry of %s after its node was lost: %s", spec.job_id, exc)
        return None
    log.warning(
        "%s lost its node; attempt %s launched from its newest checkpoint (%s)",
        spec.job_id,
        row.get("attempt", int(spec.attempt) + 1),
        row["id"],
    )
    return row
