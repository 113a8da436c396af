"""Where a project's local state lives: ``<project>/.rgt/`` (registry, partials) and ``runs/``,
and how what a killed pull left among the runs is put in order before the next one."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ...store.registry import Registry
from ...transport.local import LocalTransport


def partial_dir(root: Path, job_id: str) -> Path:
    """The hidden folder in which a pull of ``job_id`` into ``root`` assembles its run (and from
    which an interrupted pull resumes)."""
    return root / f".partial-{job_id}"


def _landed_run(folder: Path, job_id: str) -> bool | None:
    """Whether a run folder that is in place holds a verified run of ``job_id`` (None: it holds
    no whole run of that job: its records are missing, torn or name another run)."""
    try:
        run = json.loads((folder / "run.json").read_text())
        json.loads((folder / "manifest.json").read_text())
        verification = json.loads((folder / "verification.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(run, dict) or not isinstance(verification, dict):
        return None
    if run.get("job_id") != job_id or run.get("run_id") != folder.name:
        return None
    return verification.get("verified") is True


def settle_interrupted_pull(root: Path, job_id: str, registry: Registry) -> list[Path]:
    """Put in order what a pull of ``job_id`` into ``root`` left when it was killed, before the
    next pull of that job starts; returns the run folders it registered, oldest first.

    A pull claims ``<job-id>-r<n>`` by creating it empty, assembles the run in its partial
    folder, writes the run's records last and renames the whole folder onto the claim, then
    registers it. Killed between two of these steps, it leaves:

    - a run folder in place but not registered: it landed whole (nothing is renamed into place
      before its records are written), so it is registered now, not pulled a second time;
    - an empty claimed folder: removed, so that no empty folder stands among the runs and the
      next pull claims the name again;
    - temporaries of a record write in the partial folder: removed, so that the run the next
      pull assembles there carries none of them.
    """

    registered = {r["run_id"] for r in registry.runs(job_id)}
    name = re.compile(re.escape(job_id) + r"-r(\d+)")
    adopted: list[tuple[int, Path]] = []
    if root.is_dir():
        for folder in root.iterdir():
            match = name.fullmatch(folder.name)
            if match is None or folder.name in registered:
                continue
            if folder.is_symlink() or not folder.is_dir():
                continue
            if not any(folder.iterdir()):
                try:
                    folder.rmdir()
                except OSError:
                    pass  # filled meanwhile by a pull now landing there: it is that pull's
                continue
            verified = _landed_run(folder, job_id)
            if verified is not None:
                registry.add_run(folder.name, job_id, folder, verified)
                registry.event(job_id, "pull_recovered", run_id=folder.name, path=str(folder))
                adopted.append((int(match.group(1)), folder))
    partial = partial_dir(root, job_id)
    if partial.is_dir():
        for entry in partial.iterdir():
            tmp = re.fullmatch(r"\..+\.tmp-(\d+)", entry.name)
            if tmp and entry.is_file() and not LocalTransport().proc_alive(int(tmp.group(1)), None):
                entry.unlink()
    return [path for _, path in sorted(adopted)]
