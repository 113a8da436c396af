"""Benchmark: how long ``rgt check-numbers`` takes on a large notebook.

Generates a notebook of ``--cells`` cells holding ``--numbers`` numbers (markdown prose and
tables, code literals, stdout, generated outputs carrying ``metadata["rgt_jupyter"]``, HTML
tables, a few IPython-syntax cells), mixing typed numbers that match results.json, typed ones
that match nothing, generated ones, placeholders and innocent ones (years, versions, ResNet-50,
figure numbers, list markers, layout and configuration literals), in a project with five pulled
runs. Times :func:`check_numbers` on it, best of ``--repeats``, and writes
``bench/results/check_numbers.json`` (or ``--out``). The goal: at most 2 s for 1,000 cells and
10,000 numbers.

    python bench/check_numbers.py [--cells 1000] [--numbers 10000] [--repeats 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from _machine import machine  # noqa: E402 - the bench folder on the path

from rgt_jupyter.deliver.check_numbers import check_numbers  # noqa: E402 - needs the repo

GOAL_SECONDS = 2.0
RUNS = 5
Snippet = tuple[str, int]  # text and how many numbers it holds


def make_project(root: Path, rng: random.Random) -> tuple[Path, list[dict[str, Any]]]:
    """Five runs, each with a results.json of 40 numeric leaves; returns the project and each
    run's values."""
    runs: list[dict[str, Any]] = []
    for k in range(RUNS):
        run_id = f"exp{k}-s0"
        results = {
            "test": {
                "psnr": round(rng.uniform(28, 34), 4),
                "ssim": round(rng.uniform(0.8, 0.95), 4),
            },
            "val": {
                "psnr": round(rng.uniform(28, 34), 4),
                "accuracy": round(rng.uniform(0.6, 0.95), 4),
            },
            "per_class": {f"c{i}": round(rng.uniform(0, 1), 4) for i in range(36)},
        }
        folder = root / "runs" / run_id
        folder.mkdir(parents=True)
        data = (json.dumps(results, indent=2, sort_keys=True) + "\n").encode()
        (folder / "results.json").write_bytes(data)
        (folder / "run.json").write_text(json.dumps({"schema": "rgt-run/1", "run_id": run_id}))
        runs.append(
            {
                "run_id": run_id,
                "results": results,
                "sha256": hashlib.sha256(data).hexdigest(),
                "path": f"runs/{run_id}/results.json",
            }
        )
    return root, runs


class Generator:
    """Cells of a realistic analysis notebook, with a known count of numbers."""

    def __init__(self, rng: random.Random, runs: list[dict[str, Any]]) -> None:
        self.rng = rng
        self.runs = runs

    def _run(self) -> dict[str, Any]:
        return self.rng.choice(self.runs)

    # -- markdown snippets

    def md_typed(self) -> Snippet:
        run = self._run()
        return f"Our PSNR on test is {run['results']['test']['psnr']:.2f} dB.", 1

    def md_percent(self) -> Snippet:
        run = self._run()
        return f"It reaches {run['results']['val']['accuracy']:.1%} accuracy on val.", 1

    def md_drift(self) -> Snippet:
        return f"SSIM {self.rng.uniform(0.5, 0.7):.3f} on the held-out test split.", 1

    def md_innocent(self) -> Snippet:
        return (
            "We use PyTorch 2.1.0 and a ResNet-50 on CIFAR-10 (2023), see Figure 3 and [12].",
            6,
        )

    def md_placeholder(self) -> Snippet:
        return f"PSNR {{{{rgt:{self._run()['run_id']}:test.psnr|.2f}}}} dB on test.", 1

    def md_table(self) -> Snippet:
        rows = "\n".join(
            f"| {r['run_id']} | {r['results']['test']['psnr']:.2f} | {r['results']['test']['ssim']:.3f} |"
            for r in self.rng.sample(self.runs, 3)
        )
        # Each row: two values, and the run id's two digits (identifiers, ignored).
        return f"\n| Method | PSNR | SSIM |\n|---|---|---|\n{rows}\n", 12

    def md_list(self) -> Snippet:
        return "\n1. the baseline\n2. ours with 0.35 weight decay\n", 3

    # -- code snippets

    def code_layout(self) -> Snippet:
        return "fig, ax = plt.subplots(figsize=(8, 4), dpi=150)", 3

    def code_config(self) -> Snippet:
        return "train(lr=3e-4, epochs=90, batch_size=256)", 3

    def code_hardcoded(self) -> Snippet:
        return f"psnr = {self._run()['results']['test']['psnr']:.2f}", 1

    def code_misc(self) -> Snippet:
        return f"y = compute(x, {self.rng.uniform(0, 1):.2f}, {self.rng.randint(11, 99)})", 2

    # -- outputs

    def out_stdout(self) -> tuple[dict[str, Any], int]:
        text = f"epoch 3 loss {self.rng.uniform(0.1, 0.9):.4f} lr 0.0003\n"
        return {"output_type": "stream", "name": "stdout", "text": text}, 3

    def out_generated(self) -> tuple[dict[str, Any], int]:
        run = self._run()
        psnr, ssim = run["results"]["test"]["psnr"], run["results"]["test"]["ssim"]
        records = [
            {
                "ref": f"{run['run_id']}:test.{key}",
                "run_id": run["run_id"],
                "results_json": run["path"],
                "sha256": run["sha256"],
                "key": f"test.{key}",
                "value": value,
                "fmt": fmt,
                "text": format(value, fmt),
                "claim_id": None,
            }
            for key, value, fmt in (("psnr", psnr, ".2f"), ("ssim", ssim, ".3f"))
        ]
        text = f"PSNR **{psnr:.2f}** dB and SSIM {ssim:.3f} on test (baseline 29.87)"
        output = {
            "output_type": "display_data",
            "data": {"text/markdown": text, "text/plain": text},
            "metadata": {"rgt_jupyter": {"generated": records}},
        }
        return output, 3

    def out_result(self) -> tuple[dict[str, Any], int]:
        value = f"{self._run()['results']['val']['accuracy']:.4f}"
        data = {"text/plain": value}
        return {
            "output_type": "execute_result",
            "data": data,
            "metadata": {},
            "execution_count": 1,
        }, 1

    def out_html(self) -> tuple[dict[str, Any], int]:
        rows = "".join(
            f"<tr><th>{i}</th><td>{r['run_id']}</td><td>{r['results']['test']['psnr']:.3f}</td></tr>"
            for i, r in enumerate(self.rng.sample(self.runs, 2))
        )
        # Two rows: index, run id (two digits) and value each, and the shape footer.
        markup = (
            "<div><table><thead><tr><th></th><th>run</th><th>psnr</th></tr></thead>"
            f"<tbody>{rows}</tbody></table><p>2 rows × 2 columns</p></div>"
        )
        return {
            "output_type": "display_data",
            "data": {"text/html": markup, "text/plain": "..."},
            "metadata": {},
        }, 9

    # -- cells

    def markdown(self, budget: int, ident: int) -> tuple[dict[str, Any], int]:
        makers: list[Callable[[], Snippet]] = [
            self.md_typed,
            self.md_percent,
            self.md_drift,
            self.md_innocent,
            self.md_placeholder,
            self.md_table,
            self.md_list,
        ]
        parts, count = [f"## {ident % 9 + 1}.{ident % 7} Results"], 1
        while count < budget:
            text, n = self.rng.choice(makers)()
            parts.append(text)
            count += n
        cell = {
            "cell_type": "markdown",
            "id": f"md{ident}",
            "metadata": {},
            "source": "\n".join(parts),
        }
        return cell, count

    def code(self, budget: int, ident: int) -> tuple[dict[str, Any], int]:
        makers: list[Callable[[], Snippet]] = [
            self.code_layout,
            self.code_config,
            self.code_hardcoded,
            self.code_misc,
        ]
        out_makers: list[Callable[[], tuple[dict[str, Any], int]]] = [
            self.out_stdout,
            self.out_generated,
            self.out_result,
            self.out_html,
        ]
        lines = ["%matplotlib inline"] if ident % 50 == 0 else []
        count = 0
        outputs: list[dict[str, Any]] = []
        while count < budget:
            if self.rng.random() < 0.5:
                text, n = self.rng.choice(makers)()
                lines.append(text)
            else:
                output, n = self.rng.choice(out_makers)()
                outputs.append(output)
            count += n
        cell = {
            "cell_type": "code",
            "id": f"code{ident}",
            "metadata": {},
            "execution_count": ident,
            "source": "\n".join(lines),
            "outputs": outputs,
        }
        return cell, count

    def notebook(self, cells: int, numbers: int) -> tuple[dict[str, Any], int]:
        out: list[dict[str, Any]] = []
        total = 0
        for i in range(cells):
            budget = max(1, (numbers - total) // (cells - i))
            maker = self.markdown if i % 5 in (0, 2) else self.code
            cell, n = maker(budget, i)
            out.append(cell)
            total += n
        nb = {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
            "cells": out,
        }
        return nb, total


def run(cells: int, numbers: int, repeats: int, out: Path, seed: int = 0) -> dict[str, Any]:
    """Generate the notebook and project, time the check, write the report to ``out``."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="rgt-check-numbers-") as tmp:
        project, runs = make_project(Path(tmp) / "proj", rng)
        nb, total = Generator(rng, runs).notebook(cells, numbers)
        path = project / "analysis.ipynb"
        path.write_text(json.dumps(nb, indent=1))
        times: list[float] = []
        report = None
        for _ in range(repeats):
            start = time.perf_counter()
            report = check_numbers(path, project=project)
            times.append(time.perf_counter() - start)
        assert report is not None
        summary = report.summary
        size = path.stat().st_size
    best = min(times)
    result: dict[str, Any] = {
        "benchmark": "check_numbers",
        "cells": cells,
        "numbers": total,
        "items_found": summary["total"],
        "summary": summary,
        "notebook_bytes": size,
        "results_json_files": RUNS,
        "repeats": repeats,
        "seconds": round(best, 4),
        "all_seconds": [round(t, 4) for t in times],
        "numbers_per_second": round(total / best),
        "goal_seconds": GOAL_SECONDS,
        "meets_goal": best <= GOAL_SECONDS,
        "machine": machine(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the benchmark, print a one-line summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=1000, help="cells (default 1000)")
    parser.add_argument("--numbers", type=int, default=10000, help="numbers (default 10000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results" / "check_numbers.json",
        help="where to write the JSON (default: bench/results/check_numbers.json)",
    )
    args = parser.parse_args(argv)
    if args.cells < 1 or args.numbers < args.cells or args.repeats < 1:
        parser.error("--cells and --repeats must be at least 1, --numbers at least --cells")
    r = run(args.cells, args.numbers, args.repeats, args.out, args.seed)
    print(
        f"check_numbers: {r['cells']} cells, {r['numbers']} numbers in {r['seconds']:.3f} s "
        f"(best of {r['repeats']}; {r['numbers_per_second']} numbers/s; goal "
        f"{r['goal_seconds']} s: {'met' if r['meets_goal'] else 'missed'}) -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
