"""rgt-jupyter: detached, checkpoint-durable GPU jobs from a notebook, pulled home verified.

``%load_ext rgt_jupyter`` registers ``%%remote_run``, ``%watch`` and ``%pull``. The API is
:class:`Job` and :class:`Run`; the job side is :mod:`rgt_jupyter.job`. Importing this package is
cheap: nothing heavy (IPython, ipywidgets, torch) is imported until it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
    "Job",
    "Run",
    "__version__",
    "figure",
    "load_ipython_extension",
    "md",
    "num",
    "results",
]

if TYPE_CHECKING:
    from .api import Job, Run
    from .deliver.figures import figure
    from .deliver.numbers import md, num, results


def __getattr__(name: str) -> Any:
    if name in ("Job", "Run"):
        from . import api

        return getattr(api, name)
    if name in ("num", "md", "results"):
        from .deliver import numbers

        return getattr(numbers, name)
    if name == "figure":
        from .deliver.figures import figure

        return figure
    raise AttributeError(f"module 'rgt_jupyter' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext rgt_jupyter``."""
    from .magics import load_ipython_extension as _load

    _load(ipython)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The jupyter-server extension (REST API and server-side watcher): :mod:`.server_ext`."""
    return [{"module": "rgt_jupyter.server_ext"}]
