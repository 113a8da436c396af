"""Seed groups: one job per seed, checked to differ only in the seed, one experiment."""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..backends import get_backend
from ..errors import LaunchError
from ..jobs.bundle import bundle_members, zip_bundle
from ..jobs.request import LaunchRequest, Prepared
from ..jobs.spec import GroupRecord, JobSpec
from ..store.names import check_job_name
from .launch import (
    bundle_of,
    default_name,
    launch,
    names_claimed,
    prepare,
    register,
    resolve_target,
    stamp,
    submit_prepared,
)


def launch_seeds(req: LaunchRequest, project: Path) -> list[dict[str, Any]]:
    """One job per seed of ``req.seeds``, named ``<name>-s<seed>``, each with ``RGT_SEED``, grouped
    (``spec.group``) so pull and verify treat them as one experiment. The members' specs are
    checked to differ only in the seed. On a backend with job arrays (Slurm) they are one array
    (one submission); the smoke runs once, for the first seed."""
    if not req.seeds:
        return [launch(req, project)]
    tgt = resolve_target(req, project)
    base = check_job_name(req.name if req.name is not None else default_name(req.program))
    check_job_name(f"{base}-s{max(req.seeds)}")
    group = GroupRecord(
        id=f"{base}-{stamp()}-{secrets.token_hex(2)}", name=base, seeds=list(req.seeds)
    )
    backend = get_backend(tgt.profile.launcher)
    array = backend.arrays
    tgt.home = tgt.transport.home()
    group_dir = f"{tgt.profile.expand(tgt.profile.workdir, project, tgt.home)}/{group['id']}"
    members: list[Prepared] = []
    with names_claimed(project, [f"{base}-s{seed}" for seed in req.seeds]):
        for i, seed in enumerate(req.seeds):
            member = replace(req, name=f"{base}-s{seed}", env={**req.env, "RGT_SEED": str(seed)})
            member.seeds = []
            extra: dict[str, Any] = {"group": GroupRecord(**group, seed=seed)}
            if array:
                extra["array_task"] = seed
            control = f"{group_dir}/{seed}" if array else None
            members.append(prepare(member, tgt, control=control, smoke=i == 0, extra_spec=extra))
        differences = group_differences([m.spec for m in members])
        if differences:
            raise LaunchError(
                "the members of seed group "
                f"{base!r} differ in more than the seed ({', '.join(differences)}); nothing was "
                "launched. Re-run with --fresh to start every member over."
            )
        register(tgt, members)
    if not array:
        rows = []
        for prepared in members:
            bundle = bundle_of(tgt, prepared, req)
            rows += submit_prepared(tgt, [prepared], bundle, prepared.spec.control_dir)
        return rows
    files = backend.bundle_files(tgt.profile, req, base, tuple(req.seeds))
    for prepared in members:
        for rel, data in bundle_members(prepared.files, prepared.spec, prepared.secrets).items():
            files[f"{prepared.spec.array_task}/{rel}"] = data
    return submit_prepared(tgt, members, zip_bundle(files), group_dir)


#: What the members of a seed group must share: everything that decides the result but the seed.
_GROUP_SAME = (
    "profile",
    "host",
    "python",
    "code_hash",
    "deployed",
    "pushed",
    "inputs",
    "grace_s",
    "ckpt_root",
    "slurm",
    "requeue",
    "distributed",
    "secret_names",
)


def group_differences(specs: list[JobSpec]) -> list[str]:
    """The fields (besides the seed) in which the members of a group differ."""
    first = specs[0]
    out = []
    for key in _GROUP_SAME:
        if any(getattr(s, key) != getattr(first, key) for s in specs[1:]):
            out.append(key)
    env0 = {k: v for k, v in first.env.items() if k != "RGT_SEED"}
    for s in specs[1:]:
        if {k: v for k, v in s.env.items() if k != "RGT_SEED"} != env0:
            out.append("env")
            break
    return out
