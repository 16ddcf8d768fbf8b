"""``v05 simulate``: run the simulator grid and write the table, the JSON records and the figure.

Thin: argv → :class:`~v05.sim.runner.SimConfig` + population → :func:`~v05.sim.runner.run_simulation` →
:mod:`v05.sim.report`. Bad input raises ``ValueError``, which ``v05.cli.main`` turns into a one-line error and exit 2.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from v05.datasets.v0 import load_v0
from v05.registry import ALLOCATORS, ESTIMATORS
from v05.sim.claims import summarize_claims
from v05.sim.config import SimConfig
from v05.sim.populations import BETA_MIXTURES, Population, synthetic_population, v0_population
from v05.sim.report import plot, render_claims, render_table, write_json
from v05.sim.runner import run_simulation
from v05.sim.specs import split_specs

DEFAULTS = SimConfig()
FIGURE_NAME = "simulate.png"
JSON_NAME = "results.json"


def _ints(text: str, what: str) -> tuple[int, ...]:
    out = []
    for piece in text.split(","):
        try:
            out.append(int(piece.strip()))
        except ValueError:
            raise ValueError(f"bad {what} {text!r}: expected comma-separated integers, e.g. 1,2,4,8,16") from None
    return tuple(out)


def _floats(text: str, what: str) -> tuple[float, ...]:
    if text.strip().lower() in ("", "none"):
        return ()
    out = []
    for piece in text.split(","):
        try:
            out.append(float(piece.strip()))
        except ValueError:
            raise ValueError(f"bad {what} {text!r}: expected comma-separated numbers or 'none'") from None
    return tuple(out)


class _HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: …)`` to options whose default is a value (not None/False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" not in text and action.default not in (None, False, argparse.SUPPRESS):
            text += " (default: %(default)s)"
        return text


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``simulate`` subcommand."""
    p = subparsers.add_parser(
        "simulate",
        help="simulate estimators × allocators × priors × k on V0 data or synthetic prompts",
        description=(
            "Simulate baseline estimators and rollout allocators on prompts with known true values μ "
            "(the bundled V0 data by default) and report baseline MSE vs μ, rollouts spent, zero-advantage "
            "groups and the variance of Σ A per group, plus the paper's claims."
        ),
        formatter_class=_HelpFormatter,
    )
    d = DEFAULTS
    p.add_argument(
        "--v0-data",
        metavar="DIR",
        default=None,
        help="V0-format directory (context.jsonl, query *.jsonl, prompts.json); default: the bundled data",
    )
    p.add_argument(
        "--splits",
        metavar="LIST",
        default=None,
        help="comma list of V0 query splits to use (file stems, e.g. train); default: all",
    )
    p.add_argument(
        "--population",
        metavar="NAME",
        default="v0",
        help=f"'v0' (V0 data) or a synthetic pass-rate mixture: {', '.join(BETA_MIXTURES)}, or beta:A:B",
    )
    p.add_argument("--n-prompts", type=int, default=64, metavar="N", help="synthetic: prompts per step batch")
    p.add_argument("--n-batches", type=int, default=4, metavar="B", help="synthetic: step batches")
    p.add_argument(
        "--estimators",
        metavar="LIST",
        default=",".join(d.estimators),
        help=f"comma list of estimators ({', '.join(ESTIMATORS)}), options as name:key=value,... e.g. v05_eb:loo=true",
    )
    p.add_argument(
        "--allocators",
        metavar="LIST",
        default=",".join(d.allocators),
        help=f"comma list of allocators ({', '.join(ALLOCATORS)}), options as osla:schedule=jump; "
        "--ks sets each one's base group size",
    )
    p.add_argument(
        "--prior",
        metavar="LIST",
        default=",".join(d.priors),
        help="comma list of priors: context_mean (each snapshot's context mean), oracle_noise:SIGMA "
        "(μ + N(0, SIGMA²)), oracle:noise=S,bias=B,halluc=H (H: chance of a uniform random "
        "prior), or a learned provider of v05.priors (running_mean, history, v0, combined); "
        "the first is the headline prior of the table and claims",
    )
    p.add_argument(
        "--ks",
        metavar="LIST",
        default=",".join(map(str, d.ks)),
        help="comma list of base group sizes k (fixed k, OSLA k_init, pool allocators' group size)",
    )
    p.add_argument(
        "--noise-sweep",
        metavar="LIST",
        default=",".join(f"{s:g}" for s in d.noise_sweep),
        help="σ values of extra oracle_noise:σ priors for the prior-quality view, or 'none'",
    )
    p.add_argument(
        "--reps",
        type=int,
        default=d.reps,
        metavar="R",
        help="replicates (passes over all step batches) for sampled records",
    )
    p.add_argument("--seed", type=int, default=d.seed, help="random seed")
    p.add_argument(
        "--no-equal-budget",
        action="store_true",
        help="skip fixed-k records at k = round(OSLA's realised rollouts per prompt)",
    )
    p.add_argument(
        "--out", metavar="DIR", default=None, help=f"output directory: writes {JSON_NAME} and {FIGURE_NAME} there"
    )
    p.add_argument(
        "--json", metavar="PATH", default=None, help=f"JSON output path (default: DIR/{JSON_NAME} with --out)"
    )
    p.add_argument(
        "--figure", metavar="PATH", default=None, help=f"PNG figure path (default: DIR/{FIGURE_NAME} with --out)"
    )
    p.add_argument("--no-figure", action="store_true", help="do not draw the figure")
    p.add_argument("--quiet", action="store_true", help="do not print the table and claims")
    p.set_defaults(func=run)


def build_population(args: argparse.Namespace) -> Population:
    """The population the arguments select (V0 data, bundled or ``--v0-data``, or a synthetic mixture)."""
    if args.population == "v0":
        if args.v0_data is not None and not Path(args.v0_data).is_dir():
            raise ValueError(f"--v0-data: directory not found: {args.v0_data}")
        splits = None if args.splits is None else tuple(s.strip() for s in args.splits.split(",") if s.strip())
        return v0_population(load_v0(args.v0_data), splits)
    if args.v0_data is not None or args.splits is not None:
        raise ValueError("--v0-data/--splits apply to --population v0 only")
    return synthetic_population(
        args.population, rng=np.random.default_rng(args.seed), n_prompts=args.n_prompts, n_batches=args.n_batches
    )


def build_config(args: argparse.Namespace) -> SimConfig:
    """The :class:`SimConfig` the arguments describe (validated)."""
    return SimConfig(
        estimators=split_specs(args.estimators, what="estimator"),
        allocators=split_specs(args.allocators, what="allocator"),
        priors=split_specs(args.prior, what="prior"),
        ks=_ints(args.ks, "--ks"),
        noise_sweep=_floats(args.noise_sweep, "--noise-sweep"),
        reps=args.reps,
        seed=args.seed,
        equal_budget=not args.no_equal_budget,
    )


def run(args: argparse.Namespace) -> int:
    """Run ``v05 simulate``; returns the exit code."""
    if not getattr(args, "verbose", False):  # per-step allocator INFO lines would flood the table; the run notes them
        logging.getLogger("v05.allocation").setLevel(logging.WARNING)
    config = build_config(args)
    population = build_population(args)
    console = Console(quiet=args.quiet)
    if not console.is_terminal:  # piped or under make: rich would assume 80 columns and truncate the table
        console = Console(quiet=args.quiet, width=132)
    start = time.perf_counter()
    with console.status("simulating…"):
        result = run_simulation(population, config)
    claims = summarize_claims(result.records, prior=result.config.prior_specs()[0].text, mu=population.mu, ks=config.ks)
    elapsed = time.perf_counter() - start
    render_table(result, console, prior=claims["prior"])
    render_claims(claims, console)
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    out = Path(args.out) if args.out else None
    json_path = Path(args.json) if args.json else (out / JSON_NAME if out else None)
    fig_path = Path(args.figure) if args.figure else (out / FIGURE_NAME if out else None)
    if json_path is not None:
        write_json(
            result,
            claims,
            json_path,
            extra={"population_prompts": population.n_prompts, "elapsed_s": round(elapsed, 2)},
        )
        console.print(f"wrote {json_path}")
    if fig_path is not None and not args.no_figure:
        plot(result, claims, fig_path)
        console.print(f"wrote {fig_path}")
    console.print(f"[dim]{len(result.records)} records in {elapsed:.1f} s[/dim]")
    return 0


__all__ = ["build_config", "build_population", "register", "run"]
