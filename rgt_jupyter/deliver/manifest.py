"""What a notebook delivered: every generated number (code outputs tagged by rgt, markdown
placeholders rendered) and every exported figure file with its sha256, collected from the
notebook file and the ``figures/`` folders. ``%deliver`` writes it to
``delivery/<notebook>.manifest.json``; ``rgt repro`` collects it again from a rebuild and
compares the two."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from .notebook import read_notebook
from .placeholders import render

SCHEMA = "rgt/delivery/v1"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def notebook_numbers(nb: Any, project: Path) -> list[dict[str, Any]]:
    """Every generated number of a notebook: tagged outputs of code cells, and the rendered
    placeholders of markdown cells, each keyed by where it is shown."""

    out: list[dict[str, Any]] = []
    for index, cell in enumerate(nb["cells"]):
        cell_id = cell.get("id") or f"cell-{index}"
        source = cell["source"]
        source = "".join(source) if isinstance(source, list) else source
        if cell["cell_type"] == "markdown" and "{{rgt:" in source:
            _, sources = render(source, project)
            for k, src in enumerate(sources):
                out.append(_entry(f"{cell_id}/md/{k}", src))
        for o_index, output in enumerate(
            cell.get("outputs", []) if cell["cell_type"] == "code" else []
        ):
            meta = output.get("metadata")
            rgt = meta.get("rgt_jupyter") if isinstance(meta, dict) else None
            generated = rgt.get("generated") if isinstance(rgt, dict) else None
            for k, src in enumerate(generated if isinstance(generated, list) else []):
                if isinstance(src, dict):
                    out.append(_entry(f"{cell_id}/out/{o_index}/{k}", src))
    return out


def _entry(where: str, src: dict[str, Any]) -> dict[str, Any]:
    return {
        "where": where,
        "ref": src.get("ref"),
        "text": src.get("text"),
        "value": src.get("value"),
        "results_json": src.get("results_json"),
        "key": src.get("key"),
        "sha256": src.get("sha256"),
        "claim_id": src.get("claim_id"),
    }


def figure_files(project: Path) -> dict[str, dict[str, Any]]:
    """Every exported figure's outputs and source data, by figure id, with their sha256."""
    out: dict[str, dict[str, Any]] = {}
    root = project / "figures"
    if not root.is_dir():
        return out
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        files = {}
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.name.endswith(".provenance"):
                files[path.name] = _sha(path)
        built_from = set()
        for sidecar in folder.glob("*.provenance"):
            try:
                data = json.loads(sidecar.read_text())
            except ValueError:
                continue
            for item in data.get("built_from", []):
                built_from.add(f"{item.get('results_json')}@{item.get('sha256')}")
        out[folder.name] = {"files": files, "built_from": sorted(built_from)}
    return out


def collect(notebook: Path, project: Path) -> dict[str, Any]:
    """The manifest of what ``notebook`` (as saved) and ``figures/`` deliver; raises
    :class:`.notebook.NotebookError` when it is not a notebook that can be read."""
    nb, sha = read_notebook(notebook)
    return {
        "schema": SCHEMA,
        "notebook": notebook.name,
        "notebook_sha256": sha,
        "created": time.time(),
        "numbers": notebook_numbers(nb, project),
        "figures": figure_files(project),
    }


def compare(delivered: dict[str, Any], rebuilt: dict[str, Any]) -> list[dict[str, Any]]:
    """The outputs that differ between two manifests: each number (by where it is shown) whose
    text or source changed, and each figure file whose bytes changed, appeared or vanished."""
    changes: list[dict[str, Any]] = []
    old = {n["where"]: n for n in delivered.get("numbers", [])}
    new = {n["where"]: n for n in rebuilt.get("numbers", [])}
    for where in sorted(set(old) | set(new)):
        a, b = old.get(where), new.get(where)
        if a is None or b is None:
            changes.append({"kind": "number", "where": where, "was": a, "now": b})
        elif (a["text"], a["sha256"]) != (b["text"], b["sha256"]):
            changes.append(
                {
                    "kind": "number",
                    "where": where,
                    "ref": b["ref"],
                    "was": a["text"],
                    "now": b["text"],
                }
            )
    figs_a, figs_b = delivered.get("figures", {}), rebuilt.get("figures", {})
    for fig in sorted(set(figs_a) | set(figs_b)):
        files_a = (figs_a.get(fig) or {}).get("files", {})
        files_b = (figs_b.get(fig) or {}).get("files", {})
        for name in sorted(set(files_a) | set(files_b)):
            if files_a.get(name) != files_b.get(name):
                changes.append(
                    {
                        "kind": "figure",
                        "where": f"figures/{fig}/{name}",
                        "was": files_a.get(name),
                        "now": files_b.get(name),
                    }
                )
    return changes
