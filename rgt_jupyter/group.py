"""A seed group: the jobs of one ``--seeds`` launch, seen as one experiment."""

from __future__ import annotations

import html
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

from .api import Job, Run
from .errors import JobNotFound, UsageError
from .project import project_dir
from .registry import Registry
from .status import TERMINAL


class JobGroup:
    """The members of one seed group (``spec["group"]``), in seed order."""

    def __init__(self, jobs: list[Job]) -> None:
        if not jobs:
            raise UsageError("a seed group needs at least one job")
        self.jobs = sorted(jobs, key=lambda j: int(j.spec["group"]["seed"]))
        group = self.jobs[0].spec["group"]
        self.id: str = group["id"]
        self.name: str = group["name"]
        self.seeds: list[int] = [int(j.spec["group"]["seed"]) for j in self.jobs]

    @classmethod
    def from_rows(cls, rows: list[dict[str, Any]], project: Path) -> JobGroup:
        """The group of the rows a launch returned."""
        return cls([Job.just_launched(r, project) for r in rows])

    @classmethod
    def find(cls, ref: str, project: str | os.PathLike[str] | None = None) -> JobGroup | None:
        """The newest group with this name (or id) in the project, or None."""
        proj = project_dir(project)
        rows = [r for r in Registry(proj).jobs() if (r["spec"].get("group") or {}).get("id")]
        named = [r for r in rows if ref in (r["spec"]["group"]["id"], r["spec"]["group"]["name"])]
        if not named:
            return None
        newest = named[-1]["spec"]["group"]["id"]
        members = [Job(r, proj) for r in named if r["spec"]["group"]["id"] == newest]
        return cls(members)

    @classmethod
    def from_registry(cls, ref: str, project: str | os.PathLike[str] | None = None) -> JobGroup:
        """Like :meth:`find`, but raises when there is no such group."""
        group = cls.find(ref, project)
        if group is None:
            raise JobNotFound(f"no seed group {ref!r} in this project (launch one with --seeds)")
        return group

    def states(self) -> dict[str, str]:
        """Each member's state, by job name."""
        return {j.name: j.snapshot(log_lines=0).state for j in self.jobs}

    def wait(self, timeout: float | None = None, poll: float = 0.5) -> dict[str, str]:
        """Block until every member ended (or ``timeout`` seconds pass); return the states."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            states = self.states()
            done = all(s in TERMINAL for s in states.values())
            if done or (deadline is not None and time.monotonic() >= deadline):
                return states
            time.sleep(poll)

    def pull(self, to: str | os.PathLike[str] | None = None) -> RunGroup:
        """Pull every member into its own verified run (each run.json names the group)."""
        return RunGroup(self.name, [job.pull(to=to) for job in self.jobs])

    def text(self) -> str:
        """One line per member."""
        lines = [f"seed group {self.name} ({self.id}): {len(self.jobs)} job(s)"]
        for job in self.jobs:
            snap = job.recent_snapshot()
            extra = f"  {snap.diagnosis}" if snap.diagnosis and snap.terminal else ""
            lines.append(f"  seed {job.spec['group']['seed']}: {job.id} [{snap.state}]{extra}")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        text = self.text()
        return {"text/plain": text, "text/html": "<pre>" + html.escape(text) + "</pre>"}

    def __repr__(self) -> str:
        return f"<JobGroup {self.id} seeds={self.seeds}>"


class RunGroup(Sequence[Run]):
    """The pulled runs of a seed group, with what their saved configs (``job.save_config``)
    differ in besides the seed: a difference is disclosed, not hidden."""

    def __init__(self, name: str, runs: list[Run]) -> None:
        self.runs = runs
        self.name = name
        self.differences = config_differences([r.provenance.get("config") or {} for r in runs])

    @overload
    def __getitem__(self, index: int) -> Run: ...

    @overload
    def __getitem__(self, index: slice) -> list[Run]: ...

    def __getitem__(self, index: int | slice) -> Run | list[Run]:
        return self.runs[index]

    def __len__(self) -> int:
        return len(self.runs)

    def __repr__(self) -> str:
        return f"<RunGroup {self.name} runs={len(self.runs)}>"

    def text(self) -> str:
        """One line per run, and the config check."""
        lines = [f"seed group {self.name}: {len(self)} run(s)"]
        lines += [
            f"  seed {r.provenance.get('seed')}: {r.run_id} verified: "
            + ("yes" if r.verified else "NO")
            + f" ({r.path})"
            for r in self
        ]
        lines.append(
            "  configs differ only in the seed"
            if not self.differences
            else "  DISCLOSE: the configs also differ in " + ", ".join(self.differences)
        )
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        text = self.text()
        return {"text/plain": text, "text/html": "<pre>" + html.escape(text) + "</pre>"}


def config_differences(configs: list[dict[str, Any]]) -> list[str]:
    """Keys (other than ``seed``) whose values are not the same in every config."""
    keys = sorted({k for c in configs for k in c} - {"seed"})
    return [k for k in keys if any(c.get(k) != configs[0].get(k) for c in configs[1:])]
