"""``rgt repro NOTEBOOK``: rebuild what a notebook delivered from the runs alone, and say which
outputs changed.

The project is copied to a temporary folder without ``figures/`` and ``delivery/`` (what is
rebuilt), the notebook runs there in a fresh kernel (``RGT_REPRO=1``: ``%%remote_run`` refuses to
launch anything), and the manifest of the rebuild is compared with the one ``%deliver`` wrote:
every generated number whose text or source changed and every figure file whose bytes changed is
listed. Nothing in the project is written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .manifest import collect, compare
from .notebook import read_notebook

_REBUILT = ("figures", "delivery")


@dataclass
class ReproReport:
    """The outputs a rebuild changed (empty: everything delivered was regenerated exactly)."""

    notebook: str
    changes: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def identical(self) -> bool:
        """Every delivered output came out the same, and the notebook ran."""
        return not self.changes and self.error is None

    def text(self) -> str:
        """One line per changed output."""
        if self.error:
            return f"rgt repro {self.notebook}: the rebuild failed: {self.error}"
        if not self.changes:
            return (
                f"rgt repro {self.notebook}: every delivered number and figure rebuilt identically"
            )
        lines = [f"rgt repro {self.notebook}: {len(self.changes)} output(s) changed"]
        for c in self.changes:
            lines.append(f"  {c['kind']} {c['where']}: {c.get('was')} -> {c.get('now')}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """``{"notebook", "identical", "changes", "error"}``."""
        return {
            "notebook": self.notebook,
            "identical": self.identical,
            "changes": self.changes,
            "error": self.error,
        }


def manifest_path(notebook: Path, project: Path) -> Path:
    """Where ``%deliver`` keeps the manifest of ``notebook``."""
    return project / "delivery" / f"{notebook.stem}.manifest.json"


def execute(notebook: Path, project: Path, timeout: float = 900, launch: bool = False) -> None:
    """Run ``notebook`` in place in a fresh kernel whose project is ``project`` (``launch``:
    its ``%%remote_run`` cells may launch jobs; a rebuild never does)."""
    import nbformat  # deferred: nbformat, only for a repro
    from nbclient import NotebookClient  # deferred: nbclient, only for a repro

    from .execute import KERNEL_NAME, kernel_manager  # deferred: jupyter_client, only for a repro

    nb = nbformat.read(str(notebook), as_version=4)
    client = NotebookClient(
        nb,
        km=kernel_manager(),
        timeout=int(timeout),
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(project)}},
    )
    env = {**os.environ, "RGT_PROJECT": str(project)}
    if not launch:
        env["RGT_REPRO"] = "1"
    try:
        client.execute(env=env, cleanup_kc=True)
    finally:
        nbformat.write(nb, str(notebook))


def repro(notebook: str | os.PathLike[str], project: Path, timeout: float = 900) -> ReproReport:
    """Rebuild ``notebook``'s outputs from the runs in a clean copy; see the module docstring."""
    source = Path(notebook).resolve()
    read_notebook(source)  # a file that is not a notebook is refused before anything runs
    delivered_path = manifest_path(source, project)
    if not delivered_path.is_file():
        raise UsageError(
            f"rgt repro: {source.name} was never delivered ({delivered_path} is missing): "
            "run %deliver (or `rgt deliver`) first"
        )
    try:
        delivered = json.loads(delivered_path.read_text())
    except (ValueError, RecursionError) as exc:
        raise UsageError(
            f"rgt repro: {delivered_path} is not valid JSON ({exc}): run %deliver (or "
            "`rgt deliver`) again to write it"
        ) from None
    with tempfile.TemporaryDirectory(prefix="rgt-repro-") as tmp:
        clean = Path(tmp) / project.name
        shutil.copytree(
            project,
            clean,
            symlinks=True,
            ignore=lambda d, names: [n for n in names if Path(d) == project and n in _REBUILT],
        )
        copy = clean / source.relative_to(project)
        report = ReproReport(str(source.relative_to(project)))
        try:
            execute(copy, clean, timeout)
        except Exception as exc:  # noqa: BLE001 - a notebook that does not rebuild is the answer
            report.error = f"{type(exc).__name__}: {str(exc)[:2000]}"
            return report
        report.changes = compare(delivered, collect(copy, clean))
    return report
