"""rgt-jupyter: detached, checkpoint-durable GPU jobs from a notebook, pulled home verified.

``%load_ext rgt_jupyter`` registers the magics. The API: :func:`submit` and :func:`find`, the
handles :class:`Job`, :class:`Run`, :class:`JobGroup` and :class:`RunGroup`; the job side is
:mod:`rgt_jupyter.job`; delivery: :func:`num`, :func:`md`, :func:`results`, :func:`figure`.
Importing this package is cheap: nothing heavy (IPython, ipywidgets, torch) is imported until it
is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
    "Job",
    "JobGroup",
    "Run",
    "RunGroup",
    "__version__",
    "figure",
    "find",
    "load_ipython_extension",
    "md",
    "num",
    "results",
    "submit",
]

#: Public name -> the module that defines it (imported on first use).
_LAZY = {
    "Job": "api",
    "JobGroup": "api",
    "Run": "api",
    "RunGroup": "api",
    "submit": "api",
    "find": "api",
    "num": "deliver.numbers",
    "md": "deliver.numbers",
    "results": "deliver.numbers",
    "figure": "deliver.figures",
}

if TYPE_CHECKING:
    from .api import Job, JobGroup, Run, RunGroup, find, submit
    from .deliver.figures import figure
    from .deliver.numbers import md, num, results


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib  # deferred: the package's import stays cheap

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'rgt_jupyter' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext rgt_jupyter``."""
    from .magics import load_ipython_extension as load  # deferred: IPython, for a kernel only

    load(ipython)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The jupyter-server extension (REST API and server-side watcher): :mod:`.server_ext`."""
    return [{"module": "rgt_jupyter.server_ext"}]
