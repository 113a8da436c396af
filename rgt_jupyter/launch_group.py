"""Seed groups: one job per seed, checked to differ only in the seed, one experiment."""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

from .bundle import bundle_members, ship, zip_bundle
from .errors import LaunchError
from .launch import (
    LaunchRequest,
    Prepared,
    default_name,
    launch,
    prepare,
    resolve_target,
    scheduler_spec,
    slurm_script,
    stamp,
    submit_prepared,
)
from .names import check_job_name


def launch_seeds(req: LaunchRequest, project: Path) -> list[dict[str, Any]]:
    """One job per seed of ``req.seeds``, named ``<name>-s<seed>``, each with ``RGT_SEED``, grouped
    (``spec["group"]``) so pull and verify treat them as one experiment. The members' specs are
    checked to differ only in the seed. On Slurm they are one job array (one ``sbatch``); the
    smoke runs once, for the first seed."""
    if not req.seeds:
        return [launch(req, project)]
    tgt = resolve_target(req, project)
    base = check_job_name(req.name if req.name is not None else default_name(req.program))
    check_job_name(f"{base}-s{max(req.seeds)}")
    group = {"id": f"{base}-{stamp()}-{secrets.token_hex(2)}", "name": base, "seeds": req.seeds}
    array = tgt.profile.launcher == "sbatch"
    tgt.home = tgt.transport.home()
    group_dir = f"{tgt.profile.expand(tgt.profile.workdir, project, tgt.home)}/{group['id']}"
    members: list[Prepared] = []
    for i, seed in enumerate(req.seeds):
        member = replace(req, name=f"{base}-s{seed}", env={**req.env, "RGT_SEED": str(seed)})
        member.seeds = []
        extra = {**scheduler_spec(tgt.profile, req), "group": {**group, "seed": seed}}
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
    if not array:
        rows = []
        for prepared in members:
            bundle = ship(prepared.files, prepared.spec, prepared.secrets)
            rows += submit_prepared(tgt, [prepared], bundle, prepared.spec["control_dir"])
        return rows
    files: dict[str, bytes] = {
        "job.sbatch": slurm_script(tgt.profile, req, base, tuple(req.seeds)).encode()
    }
    for prepared in members:
        for rel, data in bundle_members(prepared.files, prepared.spec, prepared.secrets).items():
            files[f"{prepared.spec['array_task']}/{rel}"] = data
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


def group_differences(specs: list[dict[str, Any]]) -> list[str]:
    """The fields (besides the seed) in which the members of a group differ."""
    first = specs[0]
    out = []
    for key in _GROUP_SAME:
        if any(s.get(key) != first.get(key) for s in specs[1:]):
            out.append(key)
    env0 = {k: v for k, v in first.get("env", {}).items() if k != "RGT_SEED"}
    for s in specs[1:]:
        if {k: v for k, v in s.get("env", {}).items() if k != "RGT_SEED"} != env0:
            out.append("env")
            break
    return out
