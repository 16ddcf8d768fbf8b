"""The ``v05`` command line: thin argv → config → library function → exit code.

Each subcommand lives beside the library code it drives and exposes ``register(subparsers)``, which adds its
parser and sets ``func(args) -> int``. Bad input (``ValueError``, ``OSError``: missing files, a path of the wrong
kind) becomes a one-line error on stderr and exit code 2, never a traceback; so does a missing optional dependency,
named with the extra that installs it. An interrupt (Ctrl-C, or SIGTERM where a command turns it into one) ends
with one line saying so and exit code 130: the trainer and the grid checkpoint before they stop, so re-running the
command resumes.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

from v05.extras import EXTRAS, missing_dependency_message

# module path of each subcommand group; imported lazily so `v05 --help` stays fast and torch-free.
SUBCOMMANDS = ("v05.train.demo", "v05.train.cli", "v05.report.cli", "v05.sim.cli", "v05.priors.cli")

BENCHES = ("v05.bench", "v05.adapters.cli", "v05.grid.cli")
"""Module path of each group of ``v05 bench`` subcommands (each exposes ``register_bench(subparsers)``): the core
and prior benches, the trainer against TRL, the results grid. Composed here, at the top, so that no bench module
imports another layer's."""

log = logging.getLogger("v05")


def _one_line(err: BaseException) -> str:
    """The error's message on one line (a message that spans lines keeps its first line)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return lines[0] if lines else type(err).__name__


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="v05",
        description="Adaptive advantage baselines for RLVR: train, report, simulate, evaluate priors, benchmark.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in _present(SUBCOMMANDS):
        module.register(sub)
    bench = sub.add_parser("bench", help="speed benchmarks (estimators vs verl; prior throughput) and comparisons")
    bsub = bench.add_subparsers(dest="bench", metavar="BENCH")
    bsub.required = True
    for module in _present(BENCHES):
        module.register_bench(bsub)
    return parser


def _present(names: Sequence[str]) -> list[Any]:
    """The modules of ``names`` that this build of the package has (a missing dependency still raises)."""
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as err:
            if err.name != name:  # a dependency is missing: say so rather than hide the subcommand
                raise
    return modules


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 2 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as err:  # OSError: a missing file, --out naming a file, --json a directory ...
        print(f"v05 {args.command}: error: {_one_line(err)}", file=sys.stderr)  # the CLI's one user-facing line
        return 2
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] not in EXTRAS:
            raise
        print(f"v05 {args.command}: error: {missing_dependency_message(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        detail = _one_line(err) if str(err) else "interrupted"
        print(f"v05 {args.command}: interrupted: {detail}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
