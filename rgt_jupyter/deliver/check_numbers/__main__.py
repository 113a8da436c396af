"""``python -m rgt_jupyter.deliver.check_numbers NOTEBOOK ...``: see :func:`main`."""

import sys

from . import main

sys.exit(main())
