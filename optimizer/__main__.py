"""``python -m optimizer ARGS`` = ``optimize ARGS``."""

import sys

from optimizer.cli.app import main

sys.exit(main())
