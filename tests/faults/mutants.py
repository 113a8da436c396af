"""Remove each case's protection and run the case: it must fail.

Each fault case names its protection twice: in words in its docstring (``Protection: ...``) and
as ``mutation=(FILE, OLD, NEW)`` (or a list of them) in its ``fault`` marker: the text that,
replaced, takes the protection away. This runs every such case (or those named) in a copy of the
working tree with the mutation applied, and reports whether the case failed there (the
protection is what makes it pass) or passed anyway. The working tree itself is never touched.

    python -m tests.faults.mutants [--json OUT [--update]] [--keep] [NODEID_OR_PATH ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


class _Collector:
    def __init__(self) -> None:
        self.found: dict[str, list[tuple[str, str, str]]] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            mark = item.get_closest_marker("fault")
            if mark is None or "mutation" not in mark.kwargs:
                continue
            spec = mark.kwargs["mutation"]
            muts = [spec] if isinstance(spec, tuple) else list(spec)
            base = item.nodeid.split("[", 1)[0]
            self.found.setdefault(base, [])
            for mut in muts:
                if tuple(mut) not in self.found[base]:
                    self.found[base].append(tuple(mut))


def collect(targets: list[str]) -> dict[str, list[tuple[str, str, str]]]:
    """Fault cases with their mutations, by node id (parameters folded into one run)."""
    collector = _Collector()
    code = pytest.main(
        ["--collect-only", "-qq", "-p", "no:cacheprovider", *(targets or ["tests/faults"])],
        plugins=[collector],
    )
    if code not in (0, 5):
        raise SystemExit(f"collection failed ({code})")
    return collector.found


def _copy_tree(dest: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        rel = raw.decode()
        src = ROOT / rel
        if not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def run_one(nodeid: str, mutation: tuple[str, str, str], keep: bool = False) -> dict[str, Any]:
    """Apply one mutation in a fresh copy and run the case there."""
    rel, old, new = mutation
    tmp = Path(tempfile.mkdtemp(prefix="rgt-mutant-"))
    try:
        _copy_tree(tmp)
        target = tmp / rel
        text = target.read_text()
        count = text.count(old)
        if count != 1:
            return {
                "test": nodeid,
                "file": rel,
                "removed": old,
                "result": f"mutation not applied: the text occurs {count} times in {rel}",
            }
        target.write_text(text.replace(old, new))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp), env.get("PYTHONPATH")) if p)
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", nodeid, "-x", "-q", "-p", "no:cacheprovider"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [""]
        return {
            "test": nodeid,
            "file": rel,
            "removed": old,
            "replaced_by": new,
            "result": "fails without it"
            if proc.returncode == 1
            else "PASSES without it"
            if proc.returncode == 0
            else f"pytest exit {proc.returncode}",
            "pytest_said": tail[0][:300],
            "seconds": round(time.monotonic() - start, 1),
        }
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*")
    parser.add_argument("--json", type=Path, help="write the outcomes here")
    parser.add_argument(
        "--update", action="store_true", help="keep OUT's outcomes of the tests not run now"
    )
    parser.add_argument("--keep", action="store_true", help="keep the mutated copies")
    args = parser.parse_args(argv)
    found = collect(args.targets)
    outcomes = []
    for nodeid, muts in sorted(found.items()):
        for mut in muts:
            outcome = run_one(nodeid, mut, args.keep)
            outcomes.append(outcome)
            print(f"{outcome['result']:>22}  {nodeid}  ({mut[0]})", flush=True)
    if args.json:
        kept = []
        if args.update and args.json.exists():
            kept = [
                o for o in json.loads(args.json.read_text())["mutants"] if o["test"] not in found
            ]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        merged = sorted(kept + outcomes, key=lambda o: (o["test"], o["file"], o["removed"]))
        args.json.write_text(json.dumps({"mutants": merged}, indent=2) + "\n")
    return 0 if all(o["result"] == "fails without it" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
