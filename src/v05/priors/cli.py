"""``v05 prior eval``: measure prior providers on a V0-format directory (argv → ``evaluate_v0`` → JSON/PNG).

Heavy libraries (scikit-learn, torch, sentence-transformers) load only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from v05.datasets.v0 import load_v0
from v05.priors.evaluate import evaluate_v0
from v05.priors.registry import PROVIDERS

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``prior`` with its ``eval`` subcommand."""
    prior = subparsers.add_parser("prior", help="evaluate prior providers (value models) on V0-format data")
    sub = prior.add_subparsers(dest="prior_command", metavar="ACTION")
    sub.required = True
    ev = sub.add_parser(
        "eval",
        help="fit each provider per (model, step) snapshot on its context and score it on the query files",
        description="Context 5-fold CV (split context_cv) and every query file (split = file stem), offline (context "
        "only) and online (prequential: each row predicted before its outcome calibrates the provider).",
    )
    ev.add_argument("--v0-data", metavar="DIR", default=None, help="V0-format directory (default: the bundled data)")
    ev.add_argument(
        "--providers", default="running_mean,history,v0,combined", help="comma list of providers (default: %(default)s)"
    )
    ev.add_argument("--pooled", action="store_true", help="let combined pool every snapshot's context")
    ev.add_argument(
        "--backend", default="minilm", help="embedding backend: minilm, tfidf, hf, sentence_transformers, v0_adapter"
    )
    ev.add_argument(
        "--backend-path",
        default=None,
        help="local model directory for the hf / sentence_transformers backend (v0_adapter: the encoder directory)",
    )
    ev.add_argument(
        "--v0-adapter", default=None, help="V0 adapter checkpoint (safetensors / .pt) for --backend v0_adapter"
    )
    ev.add_argument("--head", default="krr", help="head: krr, gp, knn, logistic, logistic_hard, tabpfn (v0 only)")
    ev.add_argument("--tabpfn-checkpoint", default=None, help="local TabPFN checkpoint for --head tabpfn")
    ev.add_argument("--protocol", default="offline,online", help="comma list of offline, online (default: %(default)s)")
    ev.add_argument("--folds", type=int, default=5, help="context CV folds (default: %(default)s)")
    ev.add_argument("--batch-size", type=int, default=1, help="online replay rows per snapshot per step (default: 1)")
    ev.add_argument(
        "--cache-dir", default=None, help="embedding cache (default: $V05_CACHE_DIR or ~/.cache/v05/embeddings)"
    )
    ev.add_argument("--json", metavar="PATH", default=None, help="write {'results': [...]} here")
    ev.add_argument("--plot", metavar="PATH", default=None, help="write a reliability plot (PNG) here")
    ev.set_defaults(func=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    """Run ``v05 prior eval``; returns 0."""
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    unknown = [p for p in providers if p not in PROVIDERS]
    if unknown or not providers:
        raise ValueError(f"unknown prior provider(s) {unknown or providers}; valid: {', '.join(PROVIDERS)}")
    if args.folds < 2:
        raise ValueError(f"--folds must be >= 2, got {args.folds}")
    options: dict[str, object] = {"backend": args.backend, "head": args.head, "cache_dir": args.cache_dir}
    if args.backend == "v0_adapter":
        if args.v0_adapter is None or args.backend_path is None:
            raise ValueError("--backend v0_adapter needs --v0-adapter CHECKPOINT and --backend-path ENCODER_DIR")
        options["backend_options"] = {"adapter": args.v0_adapter, "encoder": args.backend_path}
    elif args.backend_path is not None:
        key = "path" if args.backend == "hf" else "model"
        options["backend_options"] = {key: args.backend_path}
    if args.tabpfn_checkpoint is not None:
        options["head_options"] = {"checkpoint": args.tabpfn_checkpoint}
    dataset = load_v0(args.v0_data)
    results = evaluate_v0(
        dataset,
        providers,
        pooled=args.pooled,
        protocols=[p.strip() for p in args.protocol.split(",") if p.strip()],
        folds=args.folds,
        batch_size=args.batch_size,
        plot=args.plot,
        **options,
    )
    for r in results:
        log.info(
            "%-12s %-10s %-7s mse %.4f mae %.4f auc_within %.3f auc_global %.3f gauc_step %.3f slope %.2f n %d "
            "| v05_eb@4/grpo@4 %.3f (worth %.2f rollouts)",
            r["provider"],
            r["split"],
            r["protocol"],
            r["mse"],
            r["mae"],
            r["auc_within"],
            r["auc_global"],
            r["gauc_step"],
            r["calibration_slope"],
            r["n"],
            r["eb_over_grpo_k4"],
            r["worth_k4"],
        )
    if args.json is not None:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"pooled": args.pooled, "v0_data": str(dataset.root), "results": results}, indent=2))
    return 0


__all__ = ["register", "run_eval"]
