"""Cost so far and the idle warning. Both only inform: nothing here can stop a machine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..backends import observe
from ..errors import UsageError
from ..jobs.spec import JobSpec
from ..machines.profiles import load_profile
from ..store.registry import Registry
from ..transport import Transport, get_transport

#: GPU utilisation (percent) under which a machine with no job running counts as idle.
IDLE_UTIL = 5.0


def cost_so_far(inst: dict[str, Any], now: float | None = None) -> float | None:
    """USD spent on a machine since it came up (None when its price is unknown)."""
    rate = inst.get("cost_per_hour")
    if not rate:
        return None
    end = inst.get("ended_at") or (now if now is not None else time.time())
    return max(0.0, end - inst["created_at"]) / 3600.0 * float(rate)


def cost_text(inst: dict[str, Any], now: float | None = None) -> str:
    """``$1.23 so far at $0.69/h on runpod:abc``, or why it is unknown."""
    spent = cost_so_far(inst, now)
    if spent is None:
        return f"cost unknown on {inst['id']} (no price from the platform or the profile)"
    return f"${spent:.2f} so far at ${float(inst['cost_per_hour']):.2f}/h on {inst['id']}"


def job_cost(
    rate: float | None, elapsed: float | None, inst: dict[str, Any] | None = None
) -> tuple[float | None, str | None]:
    """A job's cost so far, in USD and in words: its run time at the machine's price (the
    machine's from ``rgt up`` when there is one, else ``rate``, the profile's), with the
    machine's own cost so far beside it. Without a price: no amount, and the machine's own
    line (which says its cost is unknown) when there is a machine."""
    machine_rate = inst.get("cost_per_hour") if inst else None
    price = float(machine_rate or rate or 0.0)
    if not price:
        return None, cost_text(inst) if inst else None
    spent = max(0.0, elapsed or 0.0) / 3600.0 * price
    text = f"${spent:.2f} for this job ({_hours(elapsed or 0.0)} at ${price:.2f}/h)"
    if inst:
        text += f"; machine: {cost_text(inst)}"
    return spent, text


def _hours(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def gpu_utilisation(transport: Transport) -> float | None:
    """The highest GPU utilisation (percent) on the machine now; None without nvidia-smi."""
    argv = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
    try:
        result = transport.exec(argv, timeout=30)
    except Exception:  # noqa: BLE001 - no GPU tool there is an answer, not an error
        return None
    if result.returncode != 0:
        return None
    values = [float(x) for x in result.stdout.decode().split() if x.replace(".", "", 1).isdigit()]
    return max(values) if values else None


def record_sample(registry: Registry, instance_id: str, util: float | None, running: int) -> None:
    """Keep one observation of the machine (GPU utilisation, jobs running) for the idle check."""
    registry.event(instance_id, "gpu_sample", util=util, running=running)


def samples(registry: Registry, instance_id: str) -> list[tuple[float, float | None, int]]:
    """(time, GPU utilisation, jobs running) observations of a machine, oldest first."""
    return [
        (h["at"], h.get("util"), int(h.get("running", 0)))
        for h in registry.history(instance_id)
        if h["kind"] == "gpu_sample"
    ]


def idle_warning(
    observations: list[tuple[float, float | None, int]], minutes: float, label: str
) -> str | None:
    """A warning when, for the last ``minutes`` (or longer), every observation saw no job
    running and GPU utilisation under 5 %. It warns only: stopping the meter is the user's."""
    if not observations:
        return None
    latest = observations[-1][0]
    idle_since = None
    for at, util, running in reversed(observations):
        if running or util is None or util >= IDLE_UTIL:
            break
        idle_since = at
    if idle_since is None or latest - idle_since < minutes * 60:
        return None
    spent = (latest - idle_since) / 60
    return (
        f"{label} looks idle: no job running and GPU utilisation under {IDLE_UTIL:g} % for "
        f"{spent:.0f} min, while it bills. Pull what you need, then `rgt down` when you are done "
        "(nothing is stopped for you)."
    )


def check_idle(inst: dict[str, Any], project: Path) -> str | None:
    """Take one observation of a live machine (jobs running, GPU utilisation) and return the
    idle warning if it has been idle long enough. Only warns."""
    registry = Registry(project)
    specs = [JobSpec.from_row(r) for r in registry.jobs()]
    specs = [s for s in specs if s.instance_id == inst["id"]]
    running, util = 0, None
    if specs:
        spec = specs[-1]
        transport = get_transport(spec.transport, spec.host_alias, project)
        running = sum(not observe(transport, s, log_lines=0).terminal for s in specs)
        util = gpu_utilisation(transport)
    record_sample(registry, inst["id"], util, running)
    minutes = load_profile(inst["profile"], project).idle_warn_minutes
    return idle_warning(samples(registry, inst["id"]), minutes, inst["id"])


def describe(inst: dict[str, Any]) -> str:
    """One line for ``rgt instances``."""
    data = inst["data"]
    conn = data.get("ssh") or ""
    return f"{inst['id']:28} {inst['profile']:12} {inst['state']:12} {cost_text(inst)} {conn}"


def budgets_for(
    registry: Registry,
    lineage_jobs: list[str],
    budget: float | None,
    rate: float | None,
    inst: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """The budgets a launch holds its job to: the job's own (``--budget``, the earlier attempts
    of its lineage, ``lineage_jobs``, counted as spent) and its machine's (``rgt up
    --budget``); refused, saying what to do, without a price or with a budget already spent."""
    out: list[dict[str, Any]] = []
    price = float((inst or {}).get("cost_per_hour") or rate or 0.0)
    if budget is not None:
        if budget <= 0:
            raise UsageError(f"--budget {budget:g}: give a positive amount in USD")
        if not price:
            raise UsageError(
                "--budget needs the machine's price: set cost_per_hour in the profile (or "
                "bring the machine up with `rgt up`, which records the platform's)"
            )
        seconds = registry.run_seconds()
        spent = sum(seconds.get(job_id, 0.0) for job_id in lineage_jobs) / 3600.0 * price
        if spent >= budget:
            raise UsageError(
                f"this job has already cost ${spent:.2f} of its ${budget:.2f} budget: give a "
                "larger --budget to go on"
            )
        out.append({"of": "job", "usd": budget, "rate": price, "spent_usd": spent})
    machine_budget = ((inst or {}).get("data") or {}).get("budget_usd")
    if inst is not None and machine_budget:
        spent_m = cost_so_far(inst) or 0.0
        if spent_m >= float(machine_budget):
            raise UsageError(
                f"machine {inst['id']} has cost ${spent_m:.2f} of its ${float(machine_budget):.2f}"
                " budget: nothing more is launched on it (`rgt down` stops its meter behind "
                "the gate)"
            )
        out.append(
            {
                "of": "machine",
                "usd": float(machine_budget),
                "rate": float(inst["cost_per_hour"] or price),
                "since": inst["created_at"],
            }
        )
    return out


def job_budget(spec: JobSpec) -> float | None:
    """The job's own budget in USD (``--budget``), None without one."""
    for budget in spec.budgets:
        if budget.get("of") == "job":
            return float(budget["usd"])
    return None
