"""What a Slurm job is doing: Slurm's state first, then the agent's records.

The batch job may run on another node than the login node the transport reaches, so liveness
comes from the scheduler (one batched ``squeue`` per poll, :mod:`.queue`), never from a
process table. While Slurm says the job waits, it is ``queued``; while it runs, ``running``. Once
it has ended, the agent's ``exit.json`` decides (finished, failed, preempted), except where Slurm's
own verdict says more: TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED. A job Slurm no longer knows
and that left no exit record is ``lost``.
"""

from __future__ import annotations

from ...jobs.observe import agent_never_reported, check_stall, explain, fill_from_records
from ...jobs.records import ExitRecord, StatusRecord, read_exit, read_record
from ...jobs.snapshot import TERMINAL, Snapshot, new_snapshot
from ...jobs.spec import JobSpec
from ...transport import Transport
from .queue import slurm_queue
from .states import ALIVE, VERDICTS, WAITING, waiting_diagnosis


def walltime_text(exit_rec: ExitRecord | None, ckpt_dir: str) -> str:
    """The walltime diagnosis, with what the warning let the job do."""
    text = "walltime (TIMEOUT): the job reached its --time limit"
    if exit_rec is None:
        return text + "; it left no exit record (killed before the agent could write one)"
    warned = [s for s in exit_rec.agent_signals if s.get("signal") == "SIGUSR2"]
    saved = exit_rec.checkpoints
    if warned:
        text += "; SIGUSR2 warned it before the end"
    text += (
        f", and {saved} checkpoint file(s) are in {ckpt_dir}. Re-run the cell with a longer "
        "--time (or `rgt resume NAME`) to continue from the latest"
        if saved
        else ", and it saved no checkpoint: save when job.preempted() turns True"
    )
    return text


def observe_slurm(transport: Transport, spec: JobSpec, log_lines: int = 12) -> Snapshot:
    """Observe a Slurm job; see the module docstring for the rules."""
    control = spec.control_dir
    slurm_id = spec.slurm_job_id
    snap = new_snapshot(spec, transport.host)
    sched = slurm_queue().state(transport, slurm_id) if slurm_id else None
    raw = sched.raw if sched else ""
    # Slurm, not a process table, says whether the job runs: any status record the agent
    # wrote means it reported, whatever process it names.
    reported, _ = read_record(transport, f"{control}/status.json")
    status = StatusRecord.parse(reported) if reported is not None else None
    exit_rec, _ = read_exit(transport, control)
    if sched is not None:
        snap.scheduler = f"Slurm {slurm_id}: {raw}" + (
            f" ({sched.reason})" if sched.reason not in ("", "None") else ""
        )
    if raw in WAITING or (raw == "" and (slurm_id is None or exit_rec is None)):
        fill_from_records(transport, snap, control, status, None, log_lines)
        snap.state = "queued"
        snap.diagnosis = waiting_diagnosis(raw or "PENDING", sched.reason if sched else "")
        if raw == "" and slurm_id is not None:
            snap.state = "lost"
            snap.diagnosis = (
                f"Slurm no longer knows job {slurm_id} (it keeps ended jobs MinJobAge seconds "
                "and has no accounting here) and the agent left no exit record"
            )
        return snap
    if raw in ALIVE:
        fill_from_records(transport, snap, control, status, None, log_lines)
        snap.state = "running" if status is not None else "queued"
        if status is None:
            snap.diagnosis = "Slurm started the job; the agent has not reported yet"
        check_stall(transport, spec, snap)
        return snap
    fill_from_records(transport, snap, control, status, exit_rec, log_lines)
    verdict = VERDICTS.get(raw)
    if raw == "TIMEOUT" or (exit_rec is not None and exit_rec.reason == "walltime"):
        snap.state, snap.diagnosis = "failed", walltime_text(exit_rec, spec.ckpt_dir)
    elif verdict is not None:
        snap.state, snap.diagnosis = verdict
    elif exit_rec is None:
        snap.state = "failed"
        snap.diagnosis = (
            f"Slurm ended the job {raw or 'unknown'}"
            + (" (scancel)" if raw == "CANCELLED" else "")
            + " before the agent wrote its exit record; "
            + agent_never_reported(transport, control)
        )
    elif raw == "CANCELLED" and snap.state == "preempted":
        snap.diagnosis = (
            "stopped by scancel: the job saved at a step boundary. Re-run the cell (or "
            f"`rgt resume {snap.name}`) to continue from its latest checkpoint."
        )
    if snap.state in TERMINAL and slurm_id:
        slurm_queue().forget(transport, slurm_id)
    return explain(snap)
