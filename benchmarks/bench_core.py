"""Estimator speed vs verl's GRPO and import time (medians over interleaved rounds, with their spread).

Same as `v05 bench core`. Usage: python benchmarks/bench_core.py [--repeats 3] [--json PATH]
"""

import sys

from v05.cli import main

sys.exit(main(["bench", "core", *sys.argv[1:]]))
