"""Training frameworks under rgt, each an optional extra imported only where it is used.

- :mod:`rgt_jupyter.integrations.hf` (extra ``hf``): a ``transformers.TrainerCallback`` and the
  checkpoint to resume a ``Trainer`` from;
- :mod:`rgt_jupyter.integrations.lightning` (extra ``lightning``): a ``lightning.pytorch``
  ``Callback`` and the ``ckpt_path`` to resume ``fit`` from.
- :mod:`rgt_jupyter.integrations.debug` and :mod:`rgt_jupyter.integrations.debug_data` (torch):
  training-debug probes of the model, a resume and the data, whose findings (what was seen,
  the likely cause, the fix) the job's view shows.

They sit beside the job API (they import :mod:`rgt_jupyter.job` only) and travel with it: a
job's ``lib/rgt_jupyter/integrations/`` holds these files wherever it runs. Importing this
package imports no framework.
"""

from __future__ import annotations

from importlib import resources

#: The files of this folder that travel beside the job API.
SHIPPED = ("__init__.py", "debug.py", "debug_data.py", "hf.py", "lightning.py")


def sources() -> dict[str, bytes]:
    """The bytes of each shipped file, by name."""
    here = resources.files(__name__)
    return {name: here.joinpath(name).read_bytes() for name in SHIPPED}
