"""Prepare, ship and start a job: every check, the job's spec, the registry, the backend.

:func:`launch` resolves where the job goes (:func:`resolve_target`), prepares it
(:func:`prepare`: name, flags, paths, durability, smoke, host audit, staged files, spec) and
submits it (:func:`submit_prepared`) through its backend (:mod:`rgt_jupyter.backends`), which
adds its own checks, spec fields and bundle files. Nothing is created before every check passed.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import remote
from ..backends import Backend, Recovered, get_backend
from ..errors import JobNotFound, LaunchError, TransportError, UsageError
from ..jobs.bundle import code_hash, job_files, ship
from ..jobs.request import LaunchRequest, Prepared, Target
from ..jobs.spec import AuditRecord, JobSpec, check_fields
from ..machines.durability import check as check_durability
from ..machines.durability import refusal_advice
from ..machines.profiles import Profile, load_profile
from ..store.codecopy import keep_code, kept_code
from ..store.locks import held, lock_path
from ..store.names import check_job_name
from ..store.registry import Registry
from ..transport import Transport, get_transport
from ..transport.bucket import SECRET_NAMES as BUCKET_SECRETS
from ..transport.bucket import BucketConfig, config_of
from ..transport.bucket import check as check_bucket
from ..transport.bucket import credentials as bucket_credentials
from .audit import audit_cache, audit_host, resolved_python
from .billing import budgets_for
from .cadence import launch_note
from .phases import phase
from .secrets import drop_leftover_secrets
from .smoke import run_smoke
from .stage import gpus_env, push_entries, read_secrets, serialize_inputs, stage


def default_name(program: str) -> str:
    """A stable name for an unnamed cell: re-running the same cell finds the same job."""
    return "job-" + hashlib.sha256(program.encode()).hexdigest()[:8]


def stamp() -> str:
    """The UTC time as it appears in job ids and lineages (``20261130T095513``)."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime())


def _previous(registry: Registry, transport: Transport, name: str) -> dict[str, Any] | None:
    """The job's previous row (its state refreshed), or None; refused while it still runs."""
    try:
        previous = registry.get(name)
    except JobNotFound:
        return None
    spec = JobSpec.from_row(previous)
    if previous["state"] == "failed" and spec.not_started:
        return previous  # its launch established that nothing of it started
    prev = get_backend(spec.launcher).observe(transport, spec)
    drop_leftover_secrets(transport, spec, prev, registry)  # before a new attempt sends them
    prev_state = prev.state
    registry.set_state(previous["id"], prev_state)
    if prev_state in ("queued", "running"):
        raise UsageError(
            f"job {name!r} is still {prev_state} ({previous['id']}): `%watch {name}` to follow "
            "it, or pick another --name"
        )
    previous["state"] = prev_state
    return previous


def _check_python(python: str) -> str:
    if not python or python.startswith("-"):
        raise UsageError(f"--python {python!r}: give the interpreter's name or path")
    return python


def load_checked_profile(name: str, project: Path) -> tuple[Profile, Backend]:
    """The profile ``name`` and its backend, checked against each other."""
    profile: Profile = load_profile(name, project)
    backend = get_backend(profile.launcher)
    backend.check_profile(profile)
    return profile, backend


def resolve_target(req: LaunchRequest, project: Path) -> Target:
    """The profile, host, interpreter, transport and registry a launch goes to."""
    profile, backend = load_checked_profile(req.profile, project)
    backend.check_request(profile, req)
    host_alias = backend.host_alias(profile, req.host)
    if profile.transport == "local":
        if host_alias not in (None, "localhost", "127.0.0.1"):
            raise UsageError(
                f"--host {host_alias!r}: profile {profile.name!r} runs on this machine; "
                "use an ssh profile (--profile ssh) to run elsewhere"
            )
        host_alias = None
    python = _check_python(req.python or profile.interpreter())
    transport = get_transport(profile.transport, host_alias, project)
    return Target(profile, project, host_alias, python, transport, Registry(project), "")


def prepare(
    req: LaunchRequest,
    tgt: Target,
    *,
    control: str | None = None,
    smoke: bool | None = None,
    extra_spec: dict[str, Any] | None = None,
) -> Prepared:
    """Every check (name, flags, paths, durability, smoke) and the job's spec and files; nothing
    is registered or started here. ``extra_spec``: fields besides the backend's own."""
    profile, project, transport, registry = tgt.profile, tgt.project, tgt.transport, tgt.registry
    backend = get_backend(profile.launcher)
    name = job_name(req)
    env = {**req.env, **({} if backend.schedules_gpus else gpus_env(req.gpus))}
    reuse = req.reuse_code_of
    kept = None
    if req.resend_code_of is not None:
        was = req.resend_code_of
        kept = kept_code(project, was.code_hash, was.program, was.deployed)
        req = replace(req, program=kept.program, program_name=kept.program_name)
    pushed = kept.pushed if kept else push_entries(req.push) if reuse is None else []
    inputs = kept.inputs if kept else serialize_inputs(req.inputs) if reuse is None else {}
    # A resume names its bucket's credentials among its secrets: they are read afresh below.
    secret_values = read_secrets([n for n in req.secrets if n not in BUCKET_SECRETS])

    previous = _previous(registry, transport, name)
    if reuse is not None and previous is not None and previous["id"] != reuse.job_id:
        raise UsageError(
            f"job {name!r} has a newer attempt than {reuse.job_id}: {previous['id']} "
            f"({previous['state']}). `rgt resume {name}` resumes the newest."
        )
    prev_spec = JobSpec.from_row(previous) if previous is not None else None
    resume = (
        previous is not None
        and previous["state"] in ("preempted", "failed", "lost")
        and not req.fresh
    )
    lineage = previous["lineage"] if resume and previous else f"{stamp()}-{secrets.token_hex(3)}"
    home = tgt.home or transport.home()
    tgt.home = home
    durable = f"{profile.expand(profile.durable_dir, project, home)}/{name}/{lineage}"
    ckpt_root = req.ckpt_dir or (prev_spec.ckpt_root if resume and prev_spec else None)
    if ckpt_root is not None and not ckpt_root.startswith("/"):
        raise UsageError(f"--ckpt-dir {ckpt_root!r}: give an absolute path on the machine")
    ckpt_dir = f"{ckpt_root}/{name}/{lineage}/ckpt" if ckpt_root else f"{durable}/ckpt"
    durability = check_durability(profile, ckpt_dir, project, home)
    bucket = bucket_for(profile, req, prev_spec if resume else None)
    bucket_record: dict[str, Any] | None = None
    if bucket is not None:
        with phase(f"checking the bucket {bucket.url} with its credentials"):
            check_bucket(bucket)
        secret_values.update(bucket_credentials(bucket))
        url = bucket.lineage_url(name, lineage)
        bucket_record = {**bucket.as_dict(), "lineage_url": url}
        env.update(bucket_env(bucket, url))
        if not durability.ok:  # the bucket is the tier that outlives the machine
            durability = replace(
                durability,
                ok=True,
                reason=f"{durability.reason}; each checkpoint is also uploaded to {url}, "
                "which outlives the machine (it counts once its upload is verified)",
            )
    allow = req.allow_ephemeral_ckpt or bool(
        resume and prev_spec and prev_spec.durability.get("overridden")
    )
    if not durability.ok and not allow:
        raise UsageError(refusal_advice(profile, durability, project, home))
    if not durability.ok:
        durability = replace(durability, overridden=True)

    instance_id = instance_for(registry, profile.name, tgt.host_alias)
    budgets = budgets_for(
        registry,
        [r["id"] for r in registry.jobs() if r["lineage"] == lineage],
        req.budget,
        profile.cost_per_hour,
        registry.instance(instance_id) if instance_id else None,
    )
    smoke_run = profile.smoke_default if req.smoke is None else req.smoke
    if smoke is not None:
        smoke_run = smoke_run and smoke
    if smoke_run:
        files = job_files(req, inputs) if reuse is None else {}
        with phase("smoke run here first (RGT_SMOKE=1; --no-smoke skips it)", "passed"):
            run_smoke(req, files, pushed, env, secret_values)

    attempt = previous["attempt"] + 1 if resume and previous else 1
    job_id = f"{name}-{stamp()}-{secrets.token_hex(2)}"
    workdir = profile.expand(profile.workdir, project, home)
    control = control or f"{workdir}/{job_id}"
    if backend.audits_host:
        cached = audit_cache(profile, transport, project, ckpt_root).exists()
        if pushed or not cached:
            transport.put(remote.path("agent.py"), f"{control}/agent.py")  # for the audit, the push
        auditing = phase(f"auditing {transport.host} (once per host: Python, GPU, disks)")
        with contextlib.nullcontext() if cached else auditing:
            report = audit_host(transport, tgt.python, control, profile, project, home, ckpt_root)
    else:
        report = {"findings": [], "facts": {"python": None}, "at": time.time()}
    sending = phase(f"sending the code and {len(pushed)} pushed path(s) to {transport.host}")
    with sending if pushed else contextlib.nullcontext():
        objects, resolved = f"{workdir}/.objects", resolved_python(report)
        staged = stage(transport, req, control, tgt.python, objects, pushed, inputs, resolved)
    hash_ = code_hash(staged.deployed)
    if kept is not None and req.resend_code_of and hash_ != req.resend_code_of.code_hash:
        raise LaunchError(f"the code sent again from {kept.root} is not the code the job ran")
    if reuse is None and kept is None and profile.metered:  # for a resume on a new machine
        keep_code(project, hash_, staged.files, pushed)
    fields: dict[str, Any] = {**backend.spec_extra(profile, req), **(extra_spec or {})}
    spec = JobSpec(
        job_id=job_id,
        name=name,
        lineage=lineage,
        attempt=attempt,
        profile=profile.name,
        host=transport.host,
        host_alias=tgt.host_alias,
        transport=profile.transport,
        launcher=profile.launcher,
        project=str(project),
        control_dir=control,
        out_dir=f"{durable}/out",
        ckpt_dir=ckpt_dir,
        ckpt_root=ckpt_root,
        durability=durability.record(),
        bucket=bucket_record,
        instance_id=instance_id,
        budgets=budgets,
        spot=_spot(profile),
        cost_per_hour=float(profile.cost_per_hour) if profile.cost_per_hour else None,
        python=tgt.python,
        cwd=staged.paths["code_dir"],
        code_dir=staged.paths["code_dir"],
        lib_dir=staged.paths["lib_dir"],
        inputs_dir=staged.paths["inputs_dir"],
        program=staged.paths["program"],
        env=env,
        resume=resume,
        grace_s=req.grace_s if req.grace_s is not None else profile.grace_s,
        heartbeat_s=profile.heartbeat_s,
        line_offset=req.line_offset,
        label=req.label,
        code_hash=hash_,
        deployed=staged.deployed,
        secret_names=sorted(secret_values),
        audit=AuditRecord(
            findings=report["findings"], python=report["facts"]["python"], at=report["at"]
        ),
        pushed=staged.pushed,
        inputs=staged.inputs,
        smoke=bool(smoke_run),
        created_at=time.time(),
        previous_job=previous["id"] if previous else None,
        code_changed=bool(resume and prev_spec and prev_spec.code_hash != hash_),
        notebook=req.notebook,
        cell_id=req.cell_id,
        cell_digest=req.cell_digest,
    ).replace(**fields)
    return Prepared(spec, staged.files, secret_values, durability.ok)


def _register(tgt: Target, prepared: Prepared) -> None:
    spec = prepared.spec
    tgt.registry.add_job(
        spec.job_id,
        spec.name,
        spec.lineage,
        spec.attempt,
        tgt.profile.name,
        tgt.transport.host,
        spec.to_dict(),
    )
    if not prepared.durability_ok:
        tgt.registry.event(spec.job_id, "durability_overridden", **spec.durability)


def _spot(profile: Profile) -> dict[str, Any]:
    """The spot facts a job's cadence advice needs, where the machine may be reclaimed."""
    spot = profile.spot
    if not spot.get("available"):
        return {}
    return {k: spot[k] for k in ("grace_s", "reclaims_per_day") if spot.get(k) is not None}


def job_name(req: LaunchRequest) -> str:
    """The name a launch gives its job (checked): ``--name``, else one from the program."""
    return check_job_name(req.name if req.name is not None else default_name(req.program))


@contextlib.contextmanager
def names_claimed(project: Path, names: list[str]) -> Iterator[None]:
    """Hold the names of the jobs being launched, across processes and kernels of this machine:
    from the check that no job of that name still runs to the registration of the new one, no
    other launch of the same name can pass the check. A second launch waits, then sees the
    first one's job (queued or running) and is refused."""
    with contextlib.ExitStack() as stack:
        for name in sorted(set(names)):
            stack.enter_context(
                held(lock_path(project, "name", name), f"the launch of job {name!r}")
            )
        yield


def register(tgt: Target, members: list[Prepared]) -> None:
    """Record the prepared jobs in the registry (``queued``): from here on, a launch of the
    same name finds them."""
    for prepared in members:
        _register(tgt, prepared)


def submit_prepared(
    tgt: Target, members: list[Prepared], bundle: bytes, control: str
) -> list[dict[str, Any]]:
    """Send the bundle and start the registered jobs in one command; return their rows.

    A connection that drops after the command was sent may have taken the reply with it while
    the job started: the host is asked (:meth:`~rgt_jupyter.backends.base.Backend.recover`)
    before anything is called failed, and a job that started is returned as launched, with a
    notice."""
    backend = get_backend(tgt.profile.launcher)
    ids = [p.spec.job_id for p in members]
    notices: list[str] = []
    try:
        secret_names = sorted({n for p in members for n in p.spec.secret_names})
        record = backend.submit(tgt.transport, tgt.python, control, bundle, unset=secret_names)
    except Exception as exc:
        # Only a connection that broke (an SSH error says whether the command was sent) leaves
        # the outcome open; any other failure is the host's or the scheduler's own answer.
        if not isinstance(exc, TransportError) or exc.maybe_ran is None:
            for job_id in ids:
                tgt.registry.set_state(job_id, "failed", reason=str(exc))
            raise
        record = _reply_lost(tgt, backend, members, control, len(bundle), exc)
        notices.append(
            f"The connection to {tgt.transport.host} dropped before the launch's reply came "
            f"back ({exc}); the job had started there (its agent reported), so it was not "
            "launched again."
        )
    line = backend.launch_line(tgt.python, control)
    rows = []
    for prepared in members:
        job_id = prepared.spec.job_id
        mine = backend.member_record(record, prepared.spec)
        update_spec(tgt.registry, job_id, launched_at=time.time(), **mine)
        tgt.registry.event(
            job_id,
            "launched",
            resume=prepared.spec.resume,
            attempt=prepared.spec.attempt,
            launch_line=line,
            **mine,
        )
        rows.append(tgt.registry.get(job_id))
    rows[0]["notices"] = notices + first_contact_notices(tgt.registry, tgt.profile)
    note = launch_note(members[0].spec.spot)
    if note:
        rows[0]["notices"].append(note)
    return rows


def _reply_lost(
    tgt: Target,
    backend: Backend,
    members: list[Prepared],
    control: str,
    bundle_size: int,
    exc: TransportError,
) -> dict[str, Any]:
    """The launch record of jobs whose launch command lost its connection: found on the host
    when they started; otherwise a :class:`LaunchError` that says whether they did not start
    (they are ``failed``) or whether that cannot be told (they stay ``queued`` until a look at
    the host decides: running, or lost once the start grace has passed)."""
    ids = [p.spec.job_id for p in members]
    host = tgt.transport.host
    names = ", ".join(p.spec.name for p in members)

    def failed(why: str, certain: bool = True) -> LaunchError:
        for job_id in ids:
            if certain:  # nothing of it runs: a launch again need not wait for a look
                update_spec(tgt.registry, job_id, not_started=why)
            tgt.registry.set_state(job_id, "failed", reason=why)
        return LaunchError(why)

    if not exc.maybe_ran:
        raise failed(
            f"the launch of {names} never reached {host} ({exc}); nothing was started there. "
            "Launch again once the host answers."
        ) from exc
    single = len(members) == 1 and members[0].spec.control_dir == control
    found = (
        backend.recover(tgt.transport, control, bundle_size)
        if single
        else Recovered(None, f"{len(members)} jobs were started by one command")
    )
    for job_id in ids:
        tgt.registry.event(job_id, "launch_reply_lost", error=str(exc), found=found.detail)
    if found.started:
        return found.record
    if found.started is False:
        raise failed(
            f"the connection to {host} dropped during the launch of {names} ({exc}), and the "
            f"job did not start: {found.detail}. Nothing runs there: launch it again."
        ) from exc
    if not backend.recovers or not single:
        raise failed(
            f"the connection to {host} dropped during the launch of {names} ({exc}); whether "
            f"the {backend.name} launch was taken cannot be told from here ({found.detail}). "
            "Check the scheduler's queue there before launching again.",
            certain=False,
        ) from exc
    raise LaunchError(
        f"the connection to {host} dropped during the launch of {names} ({exc}), and whether "
        f"the job started could not be told ({found.detail}): it may be running. "
        f"`%watch {members[0].spec.name}` tells within a minute (`lost` if it never "
        "started); launching it again is refused until then."
    ) from exc


def bundle_of(tgt: Target, prepared: Prepared, req: LaunchRequest) -> bytes:
    """The launch bundle of one job: its files, the backend's own, its spec and secrets."""
    backend = get_backend(tgt.profile.launcher)
    files = {**prepared.files, **backend.bundle_files(tgt.profile, req, prepared.spec.name)}
    return ship(files, prepared.spec, prepared.secrets)


def launch(req: LaunchRequest, project: Path) -> dict[str, Any]:
    """Launch (or resume) a job; return its registry row. Nothing is created before every check
    (name, profile, flags, paths, smoke) has passed.

    Without ``--push`` (and once the host's audit is cached) the remote sees one command: the
    launch bundle on its stdin, the agent started detached (or the batch script submitted), no
    wait for the remote Python.
    """
    if req.seeds:
        raise UsageError("a launch with --seeds gives several jobs: use seeds.launch_seeds")
    tgt = resolve_target(req, project)
    with names_claimed(project, [job_name(req)]):
        prepared = prepare(req, tgt)
        register(tgt, [prepared])
    bundle = bundle_of(tgt, prepared, req)
    return submit_prepared(tgt, [prepared], bundle, prepared.spec.control_dir)[0]


def bucket_for(
    profile: Profile, req: LaunchRequest, prev: JobSpec | None = None
) -> BucketConfig | None:
    """The bucket a job's checkpoints also go to: ``--bucket``, else a resumed lineage's own
    (its checkpoints are there), else the profile's ``[bucket]``; None without one. A resumed
    lineage's bucket is reached as the profile now says when it names the same URL (an endpoint
    or credentials the user fixed since), else as it was recorded."""
    if req.bucket:
        return config_of(profile.bucket, req.bucket)
    if prev is not None and prev.bucket:
        same = profile.bucket.get("url") == prev.bucket.get("url")
        return config_of(profile.bucket if same else prev.bucket)
    return config_of(profile.bucket)


def bucket_env(bucket: BucketConfig, lineage_url: str) -> dict[str, str]:
    """What the job is told of its bucket (the credentials go as secrets, never here)."""
    env = {"RGT_BUCKET": lineage_url}
    if bucket.endpoint:
        env["RGT_BUCKET_ENDPOINT"] = bucket.endpoint
    if bucket.region:
        env["RGT_BUCKET_REGION"] = bucket.region
    return env


def instance_for(registry: Registry, profile: str, host_alias: str | None) -> str | None:
    """The live machine (from ``rgt up``) a job on this profile and host runs on, if any."""
    for inst in reversed(registry.instances(live_only=True)):
        if inst["profile"] == profile and inst["host_alias"] in ("", host_alias or ""):
            return str(inst["id"])
    return None


def first_contact_notices(registry: Registry, profile: Profile) -> list[str]:
    """The profile's danger clocks and billing traps, shown on its first launch in this project
    only (the acknowledgement is recorded); later launches return nothing."""
    if not (profile.danger_clocks or profile.billing_traps):
        return []
    lines = [f"First launch on {profile.platform or profile.name}: what can cost data or money"]
    lines += [f"  clock: {n.text}" for n in profile.danger_clocks]
    lines += [f"  billing: {n.text}" for n in profile.billing_traps]
    lines.append(f"  (shown once; `rgt profiles show {profile.name}` shows them again)")
    if not registry.ack(profile.name, "danger_clocks", how="shown at first launch", text=lines):
        return []
    return lines


def update_spec(registry: Registry, job_id: str, **fields: Any) -> None:
    """Record ``fields`` in a job's spec; names that are not spec fields are refused."""
    check_fields(fields)
    registry.update_spec(job_id, **fields)
