"""The rules of docs/contributing.md that a machine can check, read from the source with ``ast`` (nothing imported
except in the one subprocess that measures what the numpy core loads).

Each allowlist below names its exceptions with a reason and must shrink: an entry that no longer applies fails its
test, so fixing a file means deleting its line here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "v05"

MAX_LINES = 400
"""docs/contributing.md: modules stay under 400 lines (split by concept, never into ``utils.py``)."""

LONG_MODULES: dict[str, str] = {
    "adapters/trl.py": "the TRL config and trainer subclasses (wrapped private methods, broadcast, checkpoints)",
    "train/config.py": "the trainer's whole config schema (one frozen dataclass per section) and its merge/check",
    "adapters/verl_trainer.py": "verl's V1 trainer mode (priors, OSLA's extra rounds, checkpoint hooks) in one class",
    "engines/vllm.py": "the vLLM engine: the HFEngine contract, weight sync and the log-prob recompute",
    "train/loop.py": "the loop read top to bottom in one file (sample, score, baseline, loss, step, checkpoint)",
    "adapters/verl_estimators.py": "verl's batch translation, config and per-estimator state for every estimator",
    "report/runs.py": "run loading, seed groups, curves and rollouts-to-target: split loading from the statistics",
    "priors/v0_official.py": "the official V0 checkpoint: its loader, adapter backend and TabPFN head together",
    "grid/render.py": "every page of the grid (tables, index.html, the results page, the README section)",
    "train/features.py": "POISE's features: hidden-state pooling, the entropy spans and the recompute pass",
    "train/policy.py": "policy loading for the tiny model, hub checkpoints, LoRA and GGUF",
    "estimators/fusion.py": "v05 and v05_eb share the prior-error state and its sums (prior_error_stats)",
    "value_probe.py": "POISE's probe, its group buffer and the prompt-only pca_ridge head share the PCA/ridge fit",
    "engines/hf.py": "the HF generate engine: padding, ragged requests and the log π_old pass",
    "priors/heads.py": "the kernel, GP, kNN and logistic heads share the cross-validated fit",
}
"""Modules over :data:`MAX_LINES`, relative to ``src/v05``, each with why it is still one file."""

PRINT_ALLOWED: dict[str, str] = {
    "train/demo.py": "the ``v05 demo`` command prints its final table and the report's path",
}
"""Modules besides the command-line ones (``cli.py``) that may call ``print``."""

ASSERT_ALLOWED: dict[str, str] = {
    "priors/v0_official.py": "an internal invariant (an encoder was given), never user input",
}
"""Modules that may use ``assert`` (never on user input)."""

HEAVY_IMPORTERS: dict[str, tuple[str, ...]] = {
    "torch": ("priors/encoders.py", "priors/heads.py", "priors/v0_checkpoint.py", "priors/v0_official.py")
    + ("engines/", "train/", "adapters/", "bench.py"),
    "verl": ("adapters/verl.py", "adapters/verl_trainer.py", "bench.py"),
    "trl": ("adapters/trl.py",),
    "vllm": ("engines/vllm.py",),
}
"""Optional heavy libraries → the only modules (or folders) that may import them (``bench.py``: timing anchors)."""

NUMPY_CORE = ("groups", "rewards", "baselines", "advantages", "estimators", "allocation", "registry", "sim")
"""docs/contributing.md's statistical core: importing it loads numpy and nothing else from outside the stdlib."""


def _modules() -> dict[str, ast.Module]:
    """Every module under src/v05, by its path relative to it (``priors/heads.py``), parsed."""
    return {
        path.relative_to(SRC).as_posix(): ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for path in sorted(SRC.rglob("*.py"))
    }


def _lines(rel: str) -> int:
    return len((SRC / rel).read_text(encoding="utf-8").splitlines())


def long_modules() -> dict[str, int]:
    """Modules over MAX_LINES → their line counts."""
    return {rel: n for rel in _modules() if (n := _lines(rel)) > MAX_LINES}


def _calls_print(tree: ast.Module) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print" for n in ast.walk(tree)
    )


def _imported_roots(tree: ast.Module) -> set[str]:
    """Top-level names of every absolute import in the module (function-local ones included)."""
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_modules_stay_under_the_line_limit_or_are_listed_with_a_reason():
    """No module outside LONG_MODULES exceeds MAX_LINES, and each listed one still does (a split shrinks the list)."""
    found = long_modules()
    new = {rel: n for rel, n in found.items() if rel not in LONG_MODULES}
    assert not new, f"modules over {MAX_LINES} lines: {new}; split them by concept (or list one with its reason)"
    back = [rel for rel in LONG_MODULES if rel not in found]
    assert not back, f"under {MAX_LINES} lines now (or gone): remove {back} from LONG_MODULES"
    assert all(reason.strip() for reason in LONG_MODULES.values())


def test_no_utils_module():
    """There is no utils.py anywhere in the package: a helper lives with the concept it serves."""
    assert not [rel for rel in _modules() if Path(rel).stem in ("utils", "util", "helpers")]


def test_only_command_line_modules_print():
    """The library logs or returns; ``print`` appears only in the ``cli.py`` modules and PRINT_ALLOWED."""
    printing = {rel for rel, tree in _modules().items() if _calls_print(tree)}
    stray = sorted(rel for rel in printing if Path(rel).name != "cli.py" and rel not in PRINT_ALLOWED)
    assert not stray, f"print in library modules (log or return instead): {stray}"
    stale = [rel for rel in PRINT_ALLOWED if rel not in printing]
    assert not stale, f"no print left: remove {stale} from PRINT_ALLOWED"


def test_asserts_only_where_listed():
    """``assert`` is never a check on user input: it appears only in ASSERT_ALLOWED (internal invariants)."""
    asserting = {rel for rel, tree in _modules().items() if any(isinstance(n, ast.Assert) for n in ast.walk(tree))}
    assert asserting == set(ASSERT_ALLOWED), (sorted(asserting - set(ASSERT_ALLOWED)), "or stale", ASSERT_ALLOWED)


def test_heavy_libraries_are_imported_only_where_listed():
    """torch, verl, TRL and vLLM are imported only by the modules HEAVY_IMPORTERS names (one place per engine), and
    each named module or folder still imports its library."""
    modules = _modules()
    for library, places in HEAVY_IMPORTERS.items():
        importers = {rel for rel, tree in modules.items() if library in _imported_roots(tree)}
        stray = sorted(rel for rel in importers if not rel.startswith(places))
        assert not stray, f"{library} imported outside {places}: {stray}"
        unused = [p for p in places if not any(rel.startswith(p) for rel in importers)]
        assert not unused, f"{unused} no longer import {library}: remove them from HEAVY_IMPORTERS"


def test_the_numpy_core_loads_numpy_only():
    """Importing the statistical core (NUMPY_CORE) loads no third-party package but numpy (and never torch)."""
    code = (
        "import sys; before = set(sys.modules); "
        + "; ".join(f"import v05.{name}" for name in NUMPY_CORE)
        + "; roots = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(' '.join(sorted(r for r in roots if r not in sys.stdlib_module_names and r != 'v05')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["numpy"], out


def tests_without_docstrings() -> list[str]:
    """``path::name`` of every test function under tests/ that has no docstring."""
    missing = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            is_test = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
            if is_test and not ast.get_docstring(node):
                missing.append(f"{path.relative_to(ROOT).as_posix()}::{node.name}")
    return missing


def test_every_test_states_its_claim_in_a_docstring():
    """docs/contributing.md: each test's docstring states the claim it checks; no test function lacks one."""
    assert not tests_without_docstrings(), tests_without_docstrings()


def test_the_checks_see_what_they_claim():
    """The helpers find what they look for (a checker that saw nothing would pass every test above)."""
    assert _calls_print(ast.parse("def f():\n    print('x')"))
    assert not _calls_print(ast.parse("log.info('x')"))
    local = ast.parse("def f():\n    from verl.utils import x\n    import torch.nn")
    assert _imported_roots(local) == {"verl", "torch"}
    assert "adapters/trl.py" in long_modules() and "groups.py" not in long_modules()
    assert "tests/test_contributing.py::test_the_checks_see_what_they_claim" not in tests_without_docstrings()
