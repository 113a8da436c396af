"""Transfer progress as a tqdm bar (bytes, rate, ETA): in a terminal on stderr (only when it
is one), in a notebook as tqdm's widget bar with a text fallback. The phases that follow a
transfer (checking that checkpoints load) are said apart, so the rate is the transfer's own."""

from __future__ import annotations

from typing import Any


class TransferBar:
    """A callable ``(done, total, path)`` that drives one bar; :meth:`close` ends it."""

    def __init__(self, desc: str, notebook: bool = False) -> None:
        self.desc = desc
        self.notebook = notebook
        self.bar: Any = None

    def __call__(self, done: int, total: int, path: str) -> None:
        if self.bar is None:
            if self.notebook:
                from tqdm.auto import tqdm  # deferred: the notebook bar needs ipywidgets
            else:
                from tqdm import tqdm  # deferred: only a pull shows a bar
            self.bar = tqdm(
                total=total,
                desc=self.desc,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                disable=None if not self.notebook else False,
                leave=True,
            )
        self.bar.total = total
        self.bar.update(max(0, done - self.bar.n))
        self.bar.set_postfix_str(path[-40:], refresh=False)
        if done >= total:
            self.close()

    def close(self) -> None:
        """End the bar (it stays shown, full)."""
        if self.bar is not None:
            self.bar.close()
