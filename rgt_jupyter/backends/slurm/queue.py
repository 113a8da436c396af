"""One batched scheduler call per poll for every Slurm job this process follows on a host.

Views and ``Job.wait`` ask for one job's Slurm state; the queue answers from a cache that is
refreshed by a single ``squeue`` for *all* followed jobs of that login node, at most once per
interval. The interval doubles (up to ``max_interval``) while nothing changes and drops back when
something does, so a notebook following 50 jobs costs one scheduler call per poll, not 50.
Jobs that ``squeue`` no longer lists (past ``MinJobAge``) are asked of ``sacct`` once, in one
call, where accounting exists; where it does not, the agent's own records decide.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ...errors import TransportError
from ...transport import Transport
from .states import ALIVE, WAITING

SQUEUE_FORMAT = "%i|%T|%r"
#: States after which Slurm may still run the job again (with --requeue, a preempted job or one
#: whose node failed is requeued), besides those of a job that waits or runs.
_MAY_CHANGE = WAITING | ALIVE | {"PREEMPTED", "NODE_FAIL"}


@dataclass(frozen=True)
class SchedState:
    """What Slurm says about one job: its state and the reason Slurm gives."""

    raw: str
    reason: str = ""
    source: str = "squeue"


@dataclass
class _Host:
    followed: set[str]
    states: dict[str, SchedState]
    #: The ids the last refresh asked about: a followed id not among them needs one.
    asked: set[str] = field(default_factory=set)
    fetched_at: float = 0.0
    interval: float = 1.0
    sacct_missing: bool = False


def parse_squeue(text: str) -> dict[str, SchedState]:
    """``%i|%T|%r`` lines as {job id: state}."""
    out: dict[str, SchedState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            out[parts[0]] = SchedState(parts[1].strip(), parts[2].strip() if len(parts) > 2 else "")
    return out


def parse_sacct(text: str) -> dict[str, SchedState]:
    """``sacct -X -n --parsable2 -o JobID,State,Reason`` lines; ``CANCELLED by 0`` → CANCELLED."""
    out: dict[str, SchedState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            reason = parts[2] if len(parts) > 2 else ""
            out[parts[0]] = SchedState(parts[1].split()[0] if parts[1] else "", reason, "sacct")
    return out


class SlurmQueue:
    """The process's cache of Slurm states, per login node; see the module docstring."""

    def __init__(self, min_interval: float = 1.0, max_interval: float = 15.0) -> None:
        self.min_interval = min_interval
        self.max_interval = max_interval
        self._hosts: dict[str, _Host] = {}
        self._lock = threading.Lock()
        #: Scheduler commands run so far, per host (what ``bench/slurm_watch.py`` counts).
        self.calls: dict[str, int] = {}

    def state(self, transport: Transport, job_id: str, fresh: bool = False) -> SchedState | None:
        """Slurm's state of ``job_id`` (``None``: Slurm no longer knows it). ``fresh`` forces a
        refresh (after a submit or a cancel)."""
        with self._lock:
            host = self._hosts.setdefault(transport.host, _Host(set(), {}))
            known = host.states.get(job_id)
            if known is not None and not fresh and known.raw not in _MAY_CHANGE:
                return known  # it has ended: Slurm's word on it will not change
            host.followed.add(job_id)
            due = time.monotonic() - host.fetched_at >= host.interval
            if fresh or due or job_id not in host.asked:
                self._refresh(transport, host)
            return host.states.get(job_id)

    def follow(self, host_name: str, job_id: str) -> None:
        """Include ``job_id`` in the next refresh for that login node, without a call now: the
        jobs a notebook shows are asked about together."""
        with self._lock:
            self._hosts.setdefault(host_name, _Host(set(), {})).followed.add(job_id)

    def forget(self, transport: Transport, job_id: str) -> None:
        """Stop following a job (it ended and its state is recorded)."""
        with self._lock:
            host = self._hosts.get(transport.host)
            if host is not None:
                host.followed.discard(job_id)

    def _run(self, transport: Transport, argv: list[str]) -> tuple[int, str, str]:
        self.calls[transport.host] = self.calls.get(transport.host, 0) + 1
        result = transport.exec(argv, timeout=60)
        return (
            result.returncode,
            result.stdout.decode(errors="replace"),
            result.stderr.decode(errors="replace"),
        )

    def _refresh(self, transport: Transport, host: _Host) -> None:
        ids = sorted(host.followed)
        if not ids:
            return
        rc, out, err = self._run(
            transport,
            ["squeue", "-h", "-r", "-t", "all", f"--jobs={','.join(ids)}", "-o", SQUEUE_FORMAT],
        )
        if rc != 0 and "Invalid job id" not in err:
            raise TransportError(f"squeue failed on {transport.host} (exit {rc}): {err[-500:]}")
        seen = parse_squeue(out) if rc == 0 else {}
        if rc != 0:
            # Every id is unknown now (or one is): ask for the user's jobs instead, still once.
            rc2, out2, _ = self._run(
                transport, ["squeue", "-h", "-r", "-t", "all", "--me", "-o", SQUEUE_FORMAT]
            )
            seen = {k: v for k, v in parse_squeue(out2).items() if k in host.followed}
        missing = [i for i in ids if i not in seen and i not in host.states]
        if missing and not host.sacct_missing:
            rc3, out3, _ = self._run(
                transport,
                [
                    "sacct",
                    "-X",
                    "-n",
                    "--parsable2",
                    f"--jobs={','.join(missing)}",
                    "-o",
                    "JobID,State,Reason",
                ],
            )
            if rc3 == 0:
                seen.update({k: v for k, v in parse_sacct(out3).items() if k in host.followed})
            else:
                host.sacct_missing = True  # no accounting here: the agent's records decide
        host.asked = set(ids)
        changed = any(host.states.get(k) != v for k, v in seen.items())
        host.states.update(seen)
        host.fetched_at = time.monotonic()
        host.interval = self.min_interval if changed else min(host.interval * 2, self.max_interval)


_QUEUE: SlurmQueue | None = None


def slurm_queue() -> SlurmQueue:
    """The process's Slurm queue cache."""
    global _QUEUE
    if _QUEUE is None:
        _QUEUE = SlurmQueue()
    return _QUEUE
