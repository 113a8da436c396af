"""Benchmark: what the training-debug probes add to a training step at their default cadence.

Two copies of one CPU training loop (an MLP, SGD with momentum, a fixed batch) run side by side
in one process, one without probes and one with ``watch_model(model, optimizer)`` (its default
cadence) and ``watch.loss(loss)`` every step, in blocks of ``--steps`` steps taken in turn (A B,
B A, ...; the first block of each a warm-up, left out). Reports the median seconds a step takes
on each side and the overhead in percent, the median of the blocks' ratios (the goal: at most
2 %). Writes ``bench/results/probes.json`` (or ``--out``).

    python bench/probes.py [--rounds 31] [--steps 100] [--width 1024] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from _machine import machine  # noqa: E402 - the bench folder on the path

from rgt_jupyter.integrations.debug import watch_model  # noqa: E402 - needs the repo

GOALS = {"overhead_percent_max": 2.0}


class _Loop:
    """One model, its optimizer and a fixed batch; probed or not."""

    def __init__(self, width: int, probed: bool) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10)
        )
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.x, self.y = torch.randn(64, width), torch.randint(0, 10, (64,))
        self.watch = watch_model(self.model, self.opt) if probed else None

    def steps(self, n: int) -> float:
        """Seconds ``n`` training steps take."""
        start = time.perf_counter()
        for _ in range(n):
            self.opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(self.model(self.x), self.y)
            loss.backward()
            self.opt.step()
            if self.watch is not None:
                self.watch.loss(loss)
        return time.perf_counter() - start


def run(rounds: int, steps: int, width: int) -> dict[str, Any]:
    """Both loops side by side in one process, a block of ``steps`` steps of each in turn
    (A B, then B A, ...), each block's ratio taken; the first block of each is a warm-up."""
    torch.set_num_threads(1)
    loops = {"plain": _Loop(width, False), "probed": _Loop(width, True)}
    samples: dict[str, list[float]] = {"plain": [], "probed": []}
    ratios: list[float] = []
    for i in range(rounds + 1):
        order = ("plain", "probed") if i % 2 == 0 else ("probed", "plain")
        took = {side: loops[side].steps(steps) / steps for side in order}
        if i:
            for side in samples:
                samples[side].append(took[side])
            ratios.append(took["probed"] / took["plain"])
    med = {side: statistics.median(v) for side, v in samples.items()}
    overhead = (statistics.median(ratios) - 1) * 100
    return {
        "schema": "rgt-bench-probes/1",
        "parameters": {"rounds": rounds, "steps": steps, "width": width, "threads": 1},
        "median_step_s": med,
        "samples_step_s": samples,
        "block_ratios": ratios,
        "overhead_percent": round(overhead, 3),
        "goals": GOALS,
        "met": {"overhead_percent_max": overhead <= GOALS["overhead_percent_max"]},
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "probes.json")
    args = parser.parse_args(argv)
    report = run(args.rounds, args.steps, args.width)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("median_step_s", "overhead_percent", "met")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
