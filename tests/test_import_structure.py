"""v05's import structure: no import circles between its modules, no arrow running from a lower floor up to a higher.

The graph is read from the source with ``ast`` (nothing is imported): every ``import v05...`` and
``from v05... import ...`` — at module level, in functions, under ``TYPE_CHECKING`` — and every relative import,
resolved to the module it loads (``from v05.priors import PROVIDERS`` is the package ``v05/priors/__init__.py``,
``from v05.train import config`` the module ``v05/train/config.py``). Importing a submodule also runs its parent
packages' ``__init__``; those implicit arrows are not counted (Python resolves them while the package is initialising,
so they close no real circle).

Imports of v05's own modules inside a function are few, each at an optional extra's boundary (LAZY_V05_IMPORTS):
one per module, naming its extra (STYLE.md: imports at the top of a module; lazy only at an optional-extra boundary).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# The floors of the package, lowest first. A module sits on the floor of the first (longest) name below that prefixes
# it (``v05.priors.heads`` → ``priors``; ``v05`` alone is the package ``__init__``). A module may import from its own
# floor or any lower one, never from a higher one. A new top-level module or package must be placed here.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("types", ("_types",)),  # array aliases and shared type names: imports nothing of v05
    ("helpers", ("_checks", "names", "timing", "extras", "stats", "hardware")),  # checks, registry helper, timing,
    # extras table, the statistics the grid and the reports share (intervals, paired differences, crossings), CPU label
    ("core", ("groups", "rewards", "baselines", "advantages", "allocation", "estimators", "registry")),  # numpy core
    ("leaves", ("datasets", "tasks", "report", "value_probe")),  # V0 data, tasks and verifiers, run readers, probe
    ("priors", ("priors",)),  # prompt-level priors (their heads include value_probe's; they read V0 data)
    ("round", ("round",)),  # one step's prior → allocation → advantages → prior update, shared by every runner
    ("sim+engines", ("sim", "engines")),  # the simulator (over priors); the rollout engines (torch)
    ("train", ("train",)),  # the CPU/GPU trainer
    ("adapters", ("adapters",)),  # verl and TRL (on the round, as the trainer), the TRL benches
    ("grid", ("grid",)),  # the results grid (`v05 bench matrix`): trains cells with the trainer, renders the pages
    ("entry", ("bench", "cli", "__main__", "")),  # entry points; "" is the package ``v05/__init__.py``
)

# Known upward arrows, (importer, imported) → why it is still there. Each entry must still be needed
# (test_every_allowed_exception_is_still_needed), so a moved file shortens this list.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
}


def module_files() -> dict[str, tuple[Path, bool]]:
    """Every module under ``src/v05``: dotted name → (file, is a package ``__init__``)."""
    modules = {}
    for path in sorted((SRC / "v05").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def _loaded(name: str, modules: dict) -> str | None:
    """The v05 module that importing ``name`` loads: itself, or its longest prefix that is a module or package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name if name.split(".")[0] == "v05" else None


def import_edges() -> dict[tuple[str, str], list[int]]:
    """(importer, imported) → line numbers, for every import of one v05 module by another."""
    modules = module_files()
    edges: dict[tuple[str, str], list[int]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [_loaded(alias.name, modules) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: level 1 is this package, each further dot one package up
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # ``from pkg import x`` loads the submodule pkg.x when there is one, else the package pkg
                targets = [_loaded(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, modules)
                           for a in node.names]  # fmt: skip
            else:
                continue
            for target in set(targets) - {None, name}:
                edges.setdefault((name, target), []).append(node.lineno)
    return edges


def floor_of(module: str) -> int:
    """Index in FLOORS of the module's floor (ValueError for a module no floor names)."""
    rest = module.removeprefix("v05").removeprefix(".")
    best = None
    for level, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            matches = rest == prefix or (prefix != "" and rest.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[1]):
                best = (level, len(prefix))
    if best is None:
        raise ValueError(f"{module} is on no floor: add it to FLOORS in {Path(__file__).name}")
    return best[0]


def find_cycle(edges: dict[tuple[str, str], list[int]]) -> list[str] | None:
    """One import circle as a path ``[a, b, ..., a]``, or None (iterative depth-first search)."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    for root in sorted(graph):
        if state.get(root):
            continue
        path, stack = [root], [iter(graph.get(root, ()))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(graph.get(nxt, ())))
    return None


def _where(edges: dict[tuple[str, str], list[int]], a: str, b: str) -> str:
    lines = ", ".join(str(n) for n in sorted(edges[(a, b)]))
    return f"{a} -> {b} ({module_files()[a][0].relative_to(SRC.parent)}:{lines})"


def test_the_graph_sees_top_level_local_and_relative_imports():
    """The parser finds arrows of every kind it claims to (a parser that saw nothing would pass the tests below)."""
    edges = import_edges()
    assert ("v05.priors.head_registry", "v05.value_probe") in edges  # module level, from-import of a module's name
    assert ("v05.train.loop", "v05.engines.vllm") in edges  # function-local (the optional vLLM engine)
    assert ("v05", "v05.registry") in edges  # the package __init__ as importer
    assert ("v05.adapters.verl_trainer", "v05.priors") in edges  # ``from v05.priors import x`` is the package
    assert len(edges) > 200


def test_no_import_circles():
    """No v05 module imports itself back through others, at module level or in a function."""
    edges = import_edges()
    cycle = find_cycle(edges)
    if cycle is not None:
        steps = [_where(edges, a, b) for a, b in zip(cycle[:-1], cycle[1:], strict=True)]
        raise AssertionError("import circle: " + " -> ".join(cycle) + "\n" + "\n".join(steps))


def test_every_module_is_on_a_floor():
    """Each module under src/v05 belongs to one floor of FLOORS (a new package must be placed)."""
    for module in module_files():
        floor_of(module)


def test_no_import_runs_up_a_floor():
    """No module imports one on a higher floor (FLOORS), except the named ALLOWED_UPWARD arrows."""
    edges = import_edges()
    upward = [
        f"{_where(edges, a, b)}: floor {FLOORS[floor_of(a)][0]!r} imports floor {FLOORS[floor_of(b)][0]!r}"
        for a, b in sorted(edges)
        if floor_of(b) > floor_of(a) and (a, b) not in ALLOWED_UPWARD
    ]
    assert not upward, "imports running up a floor (move the shared piece down):\n" + "\n".join(upward)


def test_every_allowed_exception_is_still_needed():
    """Each ALLOWED_UPWARD entry is still an upward import: once its file moves, the entry must go too."""
    edges = import_edges()
    stale = [pair for pair in ALLOWED_UPWARD if pair not in edges or floor_of(pair[1]) <= floor_of(pair[0])]
    assert not stale, f"ALLOWED_UPWARD entries no longer needed, remove them: {stale}"


def package_names_hiding_submodules() -> list[str]:
    """``pkg.name`` pairs where a package ``__init__`` binds ``name`` to something other than its submodule ``name``.

    ``from v05.estimators.poise_baseline import poise`` in a package that also had a submodule ``poise`` would leave
    ``v05.estimators.poise`` the function, so ``import v05.estimators.poise as m`` hands back the function.
    """
    modules = module_files()
    hidden = []
    for name, (path, is_package) in modules.items():
        if not is_package:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                bound = f"{name}.{alias.asname or alias.name}"
                if bound in modules and f"{base}.{alias.name}" != bound:
                    hidden.append(bound)
    return hidden


def test_no_package_name_hides_a_submodule():
    """No package re-exports a name that is also one of its submodules' names (module files are named apart from
    the functions they hold: ``estimators/poise_baseline.py`` holds ``poise``)."""
    assert not package_names_hiding_submodules(), package_names_hiding_submodules()


def test_find_cycle_reports_the_circle_and_floor_of_the_longest_prefix():
    """The helpers themselves: a three-module circle comes back as its path; a dotted prefix beats a shorter one."""
    edges = {("a", "b"): [1], ("b", "c"): [2], ("c", "a"): [3], ("c", "d"): [4]}
    cycle = find_cycle(edges)
    assert cycle is not None and cycle[0] == cycle[-1] and sorted(cycle[:-1]) == ["a", "b", "c"]
    assert find_cycle({("a", "b"): [1], ("b", "c"): [2], ("a", "c"): [3]}) is None
    assert floor_of("v05") == len(FLOORS) - 1
    assert floor_of("v05.priors.heads") == floor_of("v05.priors") > floor_of("v05.value_probe")


# Imports of v05 modules inside a function (or class) body, outside ``if TYPE_CHECKING:``: module → the optional extra
# that keeps it there. One boundary per module (a single statement may import several modules); every other import of
# v05 sits at the top of its module. Each entry must still be needed (test_every_lazy_import_allowance_is_still_needed).
LAZY_V05_IMPORTS: dict[str, str] = {
    "v05.train.cli": "[train] (torch, transformers, omegaconf): trainer_modules() imports the trainer for `v05 train` "
    "and `v05 demo`, whose registration must run on the core install (`v05 --help`, `v05 simulate`)",
    "v05.train.loop": "[vllm] (GPU only, in its own environment): the vLLM engine, when generation.engine is vllm",
    "v05.grid.cli": "[train]: `v05 bench matrix` trains its cells with the trainer; registering it must not import it",
    "v05.adapters.cli": "[trl] (on [train]): the TRL benches `v05 bench train` and `trl-parity`, imported to run",
}
MAX_LAZY_V05_IMPORTS = 10
"""The ceiling on function-local imports of v05 modules, in all (the issue's bound)."""


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def local_v05_import_lines(tree: ast.Module) -> list[int]:
    """Line numbers of the imports of v05 modules (absolute ``v05...`` or relative) not at module level: inside a
    function or class body, outside the body of an ``if TYPE_CHECKING:`` (a module-level ``try``/``if`` is module
    level)."""
    lines: list[int] = []

    def visit(node: ast.AST, local: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            relative = isinstance(node, ast.ImportFrom) and node.level > 0
            if local and (relative or any(n.split(".")[0] == "v05" for n in names)):
                lines.append(node.lineno)
            return
        typing_only = isinstance(node, ast.If) and _is_type_checking(node.test)  # its body is for type checkers
        children = node.orelse if typing_only else ast.iter_child_nodes(node)
        inner = local or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for child in children:
            visit(child, inner)

    visit(tree, False)
    return sorted(lines)


def function_local_v05_imports() -> dict[str, list[int]]:
    """module → line numbers of its function-local imports of v05 modules (:func:`local_v05_import_lines`)."""
    found = {}
    for name, (path, _) in module_files().items():
        lines = local_v05_import_lines(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        if lines:
            found[name] = lines
    return found


def test_function_local_v05_imports_are_few_and_each_at_an_extras_boundary():
    """At most MAX_LAZY_V05_IMPORTS function-local imports of v05 modules, each in a module of LAZY_V05_IMPORTS (the
    extra that keeps it there) and at most one per module: a new one goes to the top of its module, or is one
    module's single boundary for an optional extra, added here with that extra named."""
    found = function_local_v05_imports()
    where = {m: ", ".join(f"{module_files()[m][0].relative_to(SRC.parent)}:{n}" for n in lines)
             for m, lines in found.items()}  # fmt: skip
    unlisted = [where[m] for m in sorted(found) if m not in LAZY_V05_IMPORTS]
    assert not unlisted, "function-local imports of v05 modules (move them to the top of the module):\n" + "\n".join(
        unlisted
    )
    repeated = [where[m] for m in sorted(found) if len(found[m]) > 1]
    assert not repeated, "more than one lazy v05 import in a module (one boundary per extra):\n" + "\n".join(repeated)
    assert sum(map(len, found.values())) <= MAX_LAZY_V05_IMPORTS


def test_every_lazy_import_allowance_is_still_needed():
    """Each LAZY_V05_IMPORTS entry still has its function-local import: once it moves to the top, the entry goes."""
    stale = sorted(set(LAZY_V05_IMPORTS) - set(function_local_v05_imports()))
    assert not stale, f"LAZY_V05_IMPORTS entries no longer needed, remove them: {stale}"


def test_local_import_lines_see_functions_and_skip_module_level_and_type_checking():
    """The detector itself: imports of v05 in a function or method count (absolute or relative); module-level ones
    (in a ``try`` too), ``TYPE_CHECKING`` ones and a function's imports of other packages do not."""
    source = """
import v05.groups
try:
    from v05.adapters import verl
except ImportError:
    pass
if TYPE_CHECKING:
    from v05.round import Round
def f():
    import numpy
    from v05.train import config, loop
    if TYPE_CHECKING:
        from v05.priors import PROVIDERS
    else:
        import v05.sim
class C:
    def m(self):
        from . import sibling
"""
    assert local_v05_import_lines(ast.parse(source)) == [11, 15, 18]
