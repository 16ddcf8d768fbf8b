"""Throughput of the default prior (v0 provider, MiniLM + KRR) on new prompts; prints and optionally writes JSON.

Median over ``--repeats`` rounds (each from a fresh cache) with its spread; the same as ``v05 bench priors``.
Usage: OPENBLAS_NUM_THREADS=1 python benchmarks/bench_priors.py [--n 512] [--repeats 3] [--backend minilm] [--json PATH]
"""

import argparse
import json
import sys

from v05.bench import bench_priors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", default="minilm")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = bench_priors(args.n, repeats=args.repeats, backend=args.backend)
    text = json.dumps(result, indent=2)
    print(text)  # a script, not the library: printing is its output
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
