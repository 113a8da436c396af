"""``python -m rgt_jupyter.deliver.reconcile PATH ...``: see :func:`main`."""

import sys

from . import main

sys.exit(main())
