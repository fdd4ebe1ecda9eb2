"""``python -m phalanx ...``: the ``phalanx`` command line (phalanx.cli)."""

import sys

from .cli import main

sys.exit(main())
