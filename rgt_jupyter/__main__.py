"""``python -m rgt_jupyter`` is the ``rgt`` command."""

import sys

from .cli import main

sys.exit(main())
