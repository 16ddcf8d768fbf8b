"""Throughput of the default prior (v0 provider, MiniLM + KRR) on new prompts; prints and optionally writes JSON.

Usage: OPENBLAS_NUM_THREADS=1 python benchmarks/bench_priors.py [--n 512] [--backend minilm] [--json PATH]
"""

import argparse
import json
import sys

from v05.priors.evaluate import benchmark_throughput


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--backend", default="minilm")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = benchmark_throughput(args.n, backend=args.backend)
    text = json.dumps(result, indent=2)
    print(text)  # a script, not the library: printing is its output
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
