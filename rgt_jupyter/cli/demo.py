"""``rgt demo``: execute the quickstart notebook headless and say where its run landed.

The notebook runs in a fresh kernel (nbclient) started with this very interpreter, with
``RGT_PROJECT`` pointing at the demo's project folder, so the job, its checkpoints and the pulled
run all land under that folder. The executed notebook is saved beside them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from nbformat import NotebookNode

from ..deliver.execute import KERNEL_NAME, kernel_manager
from ..store.project import runs_dir
from ..views.render import strip_ansi

NOTEBOOK = "quickstart.ipynb"
EXECUTED = "quickstart.executed.ipynb"


def quickstart_path() -> Path:
    """The shipped quickstart notebook: inside the wheel, else ``example_notebooks/`` of a
    source checkout."""
    here = Path(str(resources.files("rgt_jupyter")))
    for candidate in (
        here / "_example_notebooks" / NOTEBOOK,
        here.parent / "example_notebooks" / NOTEBOOK,
    ):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"{NOTEBOOK} is not installed with rgt_jupyter (looked in {here / '_example_notebooks'} "
        f"and {here.parent / 'example_notebooks'})"
    )


def latest_run(project: Path) -> Path | None:
    """The newest run folder under ``<project>/runs/`` (by modification time), if any."""
    root = runs_dir(project)
    if not root.is_dir():
        return None
    runs = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return max(runs, key=lambda p: p.stat().st_mtime, default=None)


def error_outputs(nb: NotebookNode) -> list[tuple[int, dict[str, Any]]]:
    """(cell index, output) for every error output of an executed notebook."""
    found = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                found.append((index, dict(output)))
    return found


def _save(nb: NotebookNode, path: Path) -> None:
    tmp = path.with_name(path.name + ".part")
    nbformat.write(nb, str(tmp))
    os.replace(tmp, path)


def run_demo(project: Path, timeout: float = 900.0) -> int:
    """Execute the quickstart notebook in ``project`` and report where its run landed.

    ``timeout`` limits the whole notebook (in seconds). Returns 0 when every cell ran and the
    pulled run is verified, 1 otherwise (with the failing cell and its error on stderr).
    """
    project = Path(project).expanduser().resolve()
    project.mkdir(parents=True, exist_ok=True)
    try:
        source = quickstart_path()
    except FileNotFoundError as exc:
        print(f"rgt demo: {exc}", file=sys.stderr)
        return 1
    notebook = project / NOTEBOOK
    shutil.copyfile(source, notebook)
    executed = project / EXECUTED
    nb = nbformat.read(str(notebook), as_version=4)

    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    total = len(code_cells)
    deadline = time.monotonic() + timeout
    current: dict[str, int] = {"index": -1, "number": 0}

    def on_cell_execute(cell: NotebookNode, cell_index: int, **_: Any) -> None:
        current["index"] = cell_index
        current["number"] += 1
        first = cell.source.strip().splitlines()[0]
        print(f"executing cell {current['number']}/{total}: {first[:70]}", flush=True)

    def remaining(cell: NotebookNode) -> int:
        return max(1, int(deadline - time.monotonic()))

    client = NotebookClient(
        nb,
        km=kernel_manager(),
        timeout=int(timeout),
        timeout_func=remaining,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(project)}},
        on_cell_execute=on_cell_execute,
    )
    env = {**os.environ, "RGT_PROJECT": str(project)}
    print(f"rgt demo: running {source.name} in {project} with {sys.executable}", flush=True)
    started = time.monotonic()
    failure: str | None = None
    try:
        client.execute(env=env, cleanup_kc=True)
    except CellTimeoutError:
        failure = f"stopped after the demo's {timeout:g} s limit"
    except CellExecutionError as exc:
        failure = f"{exc.ename}: {exc.evalue}\n{_cell_traceback(nb, current['index'], exc)}"
    except DeadKernelError as exc:
        failure = f"the kernel died: {exc}"
    except (RuntimeError, TimeoutError, OSError) as exc:
        failure = f"could not run the notebook: {type(exc).__name__}: {exc}"
    finally:
        _save(nb, executed)

    if failure is not None:
        where = (
            f"cell {current['number']}/{total} (notebook cell {current['index']})"
            if current["number"]
            else "before the first cell"
        )
        print(f"rgt demo: FAILED at {where}: {failure}", file=sys.stderr)
        print(f"rgt demo: the partly executed notebook is {executed}", file=sys.stderr)
        return 1
    errors = error_outputs(nb)
    if errors:
        index, output = errors[0]
        print(
            f"rgt demo: FAILED: notebook cell {index} shows an error: "
            f"{output.get('ename')}: {output.get('evalue')}",
            file=sys.stderr,
        )
        print(f"rgt demo: see {executed}", file=sys.stderr)
        return 1

    run = latest_run(project)
    if run is None:
        print(
            f"rgt demo: FAILED: the notebook ran but no run landed in {runs_dir(project)}",
            file=sys.stderr,
        )
        return 1
    verification_path = run / "verification.json"
    verification: dict[str, Any] = (
        json.loads(verification_path.read_text()) if verification_path.exists() else {}
    )
    verified = bool(verification.get("verified"))
    print(f"rgt demo: notebook executed in {time.monotonic() - started:.1f} s -> {executed}")
    print(f"rgt demo: run landed in {run}")
    print(
        f"rgt demo: verified: {'yes' if verified else 'NO'}"
        f" ({verification.get('summary', 'no verification.json')})"
    )
    if not verified:
        for mismatch in verification.get("mismatches", []):
            print(f"  MISMATCH {mismatch.get('path')}: {mismatch.get('reason')}", file=sys.stderr)
        return 1
    return 0


def _cell_traceback(nb: NotebookNode, index: int, exc: CellExecutionError, lines: int = 40) -> str:
    """The failing cell's traceback (from its error output, else the exception), uncoloured."""
    text = str(exc)
    if 0 <= index < len(nb.cells):
        for output in nb.cells[index].get("outputs", []):
            if output.get("output_type") == "error":
                text = "\n".join(output.get("traceback", []))
    return "\n".join(strip_ansi(text).rstrip().splitlines()[-lines:])
