"""Jobs, seed groups and pulled runs found by what a user types: an id, a name, a run folder.

Below the API, so that VERIFY and DELIVER find runs without it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import JobNotFound, UsageError
from ..store.registry import Registry
from .spec import JobSpec


def group_rows(registry: Registry, ref: str) -> list[dict[str, Any]]:
    """The registry rows of the newest seed group whose name or id is ``ref``, in seed order
    (empty when there is none)."""
    grouped = []
    for row in registry.jobs():
        group = JobSpec.from_row(row).group
        if group and group.get("id") and ref in (group.get("id"), group.get("name")):
            grouped.append((group, row))
    if not grouped:
        return []
    newest = grouped[-1][0]["id"]
    members = [(g, r) for g, r in grouped if g["id"] == newest]
    return [r for g, r in sorted(members, key=lambda m: int(m[0].get("seed", 0)))]


def resolve_runs(refs: Iterable[str], project: Path) -> list[Path]:
    """Run folders named by ``refs``: a run folder, a run id, a job id or name (its newest pulled
    run), or a seed group's name (the newest pulled run of each seed)."""
    registry = Registry(project)
    out: list[Path] = []
    for ref in refs:
        path = Path(ref).expanduser()
        if not path.is_absolute():
            path = project / path
        if (path / "run.json").is_file():
            out.append(path)
            continue
        candidate = project / "runs" / ref
        if (candidate / "run.json").is_file():
            out.append(candidate)
            continue
        jobs = [r["id"] for r in group_rows(registry, ref)]
        if not jobs:
            try:
                jobs = [registry.get(ref)["id"]]
            except JobNotFound as exc:
                raise UsageError(
                    f"%verify: {ref!r} is not a run folder, a run id, a job or a seed group of "
                    f"{project}"
                ) from exc
        for job_id in jobs:
            runs = registry.runs(job_id)
            if not runs:
                raise UsageError(f"%verify: job {job_id} has no pulled run: `%pull {ref}` first")
            recorded = Path(runs[-1]["path"])
            # The project's own copy first: a project moved or copied (rgt repro's clean copy)
            # reads its runs/, not the folder the registry recorded.
            local = project / "runs" / recorded.name
            out.append(local if (local / "run.json").is_file() else recorded)
    return out
