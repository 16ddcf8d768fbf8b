"""``python -m v05`` runs the CLI."""

import sys

from v05.cli import main

sys.exit(main())
