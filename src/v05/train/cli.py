"""``v05 train``: one training run from a config file or name, dotted overrides, ``--resume`` and ``--quick``.

Registration stays torch-free (``v05 --help`` and ``v05 simulate`` do not pay for torch); the config schema is
imported when ``v05 train`` runs or its ``--help`` is shown, which lists every option with its default and docstring.
Bad configs or overrides raise ValueError (exit 2 with one line naming the field); a missing optional dependency
names the extra to install.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path
from types import ModuleType

INSTALL_HINT = "pip install 'v05[train]' (the trainer's extra: torch==2.13.0 first, then transformers, omegaconf, ...)"


def require_trainer() -> None:
    """Import the trainer's dependencies or raise a one-line ValueError naming the extra to install."""
    try:
        import omegaconf  # noqa: F401, PLC0415
        import torch  # noqa: F401, PLC0415
        import transformers  # noqa: F401, PLC0415
    except ModuleNotFoundError as err:
        raise ValueError(f"v05 train needs {err.name!r}: {INSTALL_HINT}") from None


def trainer_modules() -> tuple[ModuleType, ModuleType]:
    """The trainer, ``(v05.train.config, v05.train.loop)``, imported on first use (``v05 train``, ``v05 demo``).

    The one place these commands import it: it needs the ``[train]`` extra (torch, transformers, omegaconf), which
    registering them must not (``v05 --help`` and ``v05 simulate`` run on the core install). Call
    :func:`require_trainer` first for its one-line message; a missing dependency here is a ``ModuleNotFoundError``
    (the CLI names its extra too).
    """
    from v05.train import config, loop  # noqa: PLC0415 (the [train] extra: torch, transformers, omegaconf)

    return config, loop


def schema_help() -> str:
    """Every config field as ``dotted.key (type, default): docstring`` lines, from the dataclass schema."""
    require_trainer()
    config, _ = trainer_modules()
    docs = _field_docs(config.TrainConfig)
    lines = ["config keys (override with key=value; nested dicts as key.sub=value):"]

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name.startswith("_") or not f.init:
                continue
            typ = hints[f.name]
            key = f"{prefix}{f.name}"
            if dataclasses.is_dataclass(typ):
                walk(typ, f"{key}.")  # type: ignore[arg-type]
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            doc = docs.get((cls.__name__, f.name), "")
            lines.append(f"  {key} = {default!r}  {doc}".rstrip())

    walk(config.TrainConfig, "")
    return "\n".join(lines)


def _field_docs(root: type) -> dict[tuple[str, str], str]:
    """(class name, field) → the docstring written under the field (the schema's documentation)."""
    import ast  # noqa: PLC0415
    import inspect  # noqa: PLC0415

    out: dict[tuple[str, str], str] = {}
    seen: set[type] = set()

    def visit(cls: type) -> None:
        if cls in seen:
            return
        seen.add(cls)
        try:
            tree = ast.parse(inspect.getsource(cls))
        except (OSError, TypeError):
            return
        body = tree.body[0].body  # type: ignore[attr-defined]
        for a, b in zip(body, body[1:], strict=False):
            if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr):
                if isinstance(b.value, ast.Constant) and isinstance(b.value.value, str):
                    out[(cls.__name__, a.target.id)] = " ".join(b.value.value.split())
        for t in typing.get_type_hints(cls).values():
            if dataclasses.is_dataclass(t):
                visit(t)  # type: ignore[arg-type]

    visit(root)
    return out


class _SchemaHelp(argparse.Action):
    """``-h/--help``: the usage, then the full config schema (imported only now)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show this help and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kw: object) -> None:
        parser.print_help()
        try:
            text = schema_help()
        except ValueError as err:
            text = f"(config schema unavailable: {err})"
        print(f"\n{text}")  # the CLI's help output
        config, _ = trainer_modules()
        print(f"\npackaged configs (--config NAME): {', '.join(sorted(config.packaged_configs()))}")
        parser.exit()


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``v05 train``."""
    p = sub.add_parser(
        "train",
        help="train a policy with any estimator/allocator/prior (RLVR on a verifiable task)",
        description="Train a Hugging Face causal LM with RLVR: prompts → prior → allocator rounds (generate + verify) "
        "→ advantages → clipped policy update. Writes config.yaml, metrics.jsonl, TensorBoard events and "
        "checkpoints to --out.",
        add_help=False,
    )
    p.add_argument("-h", "--help", action=_SchemaHelp)
    p.add_argument("--config", default=None, help="a YAML file or a packaged config name (e.g. demo-v05)")
    p.add_argument("--out", required=True, help="the run directory")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run of a minute or two on CPU, the method kept: the tiny policy ≤ 6 steps of ≤ 16 "
                   "prompts, eval on ≤ 64 prompts, ≤ 200 SFT steps; a real checkpoint (e.g. smollm2-135m-instruct) "
                   "≤ 2 steps of ≤ 16 rollouts, ≤ 16 new tokens, eval on ≤ 8 prompts, ≤ 2 SFT steps")  # fmt: skip
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.steps=50")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    require_trainer()
    config, loop = trainer_modules()
    cfg = config.load_config(args.config, args.overrides, quick=args.quick)
    try:
        result = loop.train(cfg, Path(args.out), resume=args.resume)
    except loop.RunStopped as err:  # a fault the run could not work around: one line, exit 1
        print(f"v05 train: stopped after step {err.step}: {err}", file=sys.stderr)
        return 1
    state = "interrupted (checkpoint saved; --resume continues)" if result.interrupted else "done"
    print(  # the CLI's summary line
        f"{state}: {result.steps} steps, {result.rollouts_total} rollouts, eval pass rate "
        f"{result.eval_pass_rate:.3f} → {result.run_dir}",
        file=sys.stderr if result.interrupted else sys.stdout,
    )
    return 130 if result.interrupted else 0


__all__ = ["INSTALL_HINT", "register", "require_trainer", "schema_help", "trainer_modules"]
