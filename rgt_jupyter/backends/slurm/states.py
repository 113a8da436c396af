"""What Slurm's job states mean in the job states of the contract."""

from __future__ import annotations

#: Slurm states in which the job has not started (again) yet.
WAITING = frozenset(
    {
        "PENDING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESV_DEL_HOLD",
        "CONFIGURING",
        "SPECIAL_EXIT",
        "SUSPENDED",
        "STOPPED",
        "RESIZING",
        "SIGNALING",
    }
)
ALIVE = frozenset({"RUNNING", "COMPLETING", "STAGE_OUT"})
#: Terminal states that say why on their own (the agent's record adds the checkpoint part).
VERDICTS: dict[str, tuple[str, str]] = {
    "TIMEOUT": ("failed", "walltime (TIMEOUT): the job ran past its --time limit"),
    "OUT_OF_MEMORY": (
        "failed",
        "out of memory (OUT_OF_MEMORY): the job used more RAM than it asked Slurm for; ask "
        "for more with --mem (a profile directive) or lower the batch size / num_workers",
    ),
    "NODE_FAIL": (
        "failed",
        "node failure (NODE_FAIL): the compute node went down under the job; re-run the cell "
        "to resume from its latest checkpoint",
    ),
    "BOOT_FAIL": ("failed", "the node failed to boot (BOOT_FAIL); re-run the cell"),
    "DEADLINE": ("failed", "the job's --deadline passed (DEADLINE)"),
    "PREEMPTED": (
        "preempted",
        "preempted (PREEMPTED): a higher-priority job took the node; re-run the cell to "
        "resume from its latest checkpoint",
    ),
}


def waiting_diagnosis(raw: str, reason: str) -> str:
    """Why a job that has not started is waiting, in Slurm's words and ours."""
    why = {
        "Resources": "waiting for free resources",
        "Priority": "waiting behind higher-priority jobs",
        "BeginTime": "held until its begin time (Slurm delays a requeued job briefly)",
        "JobHeldUser": "held by the user (scontrol release to let it run)",
        "JobHeldAdmin": "held by an administrator",
        "PartitionTimeLimit": "its --time exceeds the partition's limit: it will never start",
        "ReqNodeNotAvail": "the nodes it needs are not available",
        "QOSMaxJobsPerUserLimit": "your QOS job limit is reached",
    }.get(reason, "")
    words = f"{raw.lower()} ({reason})" if reason and reason != "None" else raw.lower()
    return f"Slurm: {words}" + (f": {why}" if why else "")
