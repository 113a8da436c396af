"""The job-side API under its public name: ``import rgt_jupyter.job as job``.

The code lives in :mod:`rgt_jupyter.remote.job`, with the other files that travel to the job's
machine; a job receives that file as ``rgt_jupyter/job.py`` beside its program. Imported here,
this name *is* that module (one module object, so what is set on one is seen through the other).
"""

import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .remote.job import *  # noqa: F403 - the same names, for type checkers

sys.modules[__name__] = importlib.import_module("rgt_jupyter.remote.job")
