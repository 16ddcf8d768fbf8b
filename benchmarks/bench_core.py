"""Estimator speed vs verl's GRPO and import time; same as `v05 bench core`. Usage: python benchmarks/bench_core.py"""

import sys

from v05.cli import main

sys.exit(main(["bench", "core", *sys.argv[1:]]))
