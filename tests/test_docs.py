"""The README and docs stand on their own: every relative link resolves inside the repository."""

import re
from pathlib import Path

from v05.registry import ESTIMATORS

ROOT = Path(__file__).resolve().parents[1]


def test_readme_and_docs_links_stay_inside_the_repository():
    """Each relative Markdown link or image in README.md and docs/*.md points at a file in the repository, and the
    README names no design file that lives outside it."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if re.match(r"^[a-z]+://", target):
                continue
            assert (page.parent / target).resolve().is_relative_to(ROOT), (page.name, target)
            assert (page.parent / target).exists(), (page.name, target)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "shared design folder" not in readme and "SPEC.md" not in readme and "STYLE.md" not in readme


def test_every_test_named_in_the_reliability_table_exists():
    """docs/reliability.md names a test for each fault: each ``tests/...py`` exists and each ``::name`` is a test
    function defined in that file (a renamed or deleted test turns this red)."""
    text = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    refs = re.findall(r"`(tests/[\w/]+\.py|tests/[\w/]+/)(?:::(\w+))?`", text)
    assert len(refs) >= 20
    for path, name in refs:
        assert (ROOT / path).exists(), path
        if name:
            assert re.search(rf"^def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M), f"{path}::{name}"


EXTERNAL_PREFIXES = ("verl/", "trl/", "vllm/")
REPO_FOLDERS = ("src/", "tests/", "benchmarks/", "docs/", "examples/", "requirements/")
RUN_OUTPUTS = ("final/",)
"""Paths inside a run directory that ``v05 train`` writes (docs/training.md), not files of the repository."""
"""Backticked paths inside other projects' repositories (quoted as references), not files of this one."""


def _code_paths(text: str) -> list[tuple[str, str]]:
    """(path, test name or "") for each backticked file path with a folder in it: ``src/v05/groups.py``,
    ``priors/heads.py``, ``tests/test_docs.py::test_x``, ``benchmarks/grids/``."""
    found = re.findall(r"`((?:[\w.-]+/)+(?:[\w.-]+\.(?:py|md|yaml|yml|json|toml|lock|txt))?)(?:::(\w+))?`", text)
    return [(path, name) for path, name in found if not path.startswith(EXTERNAL_PREFIXES) and path not in RUN_OUTPUTS]


def test_every_file_path_named_in_the_docs_exists():
    """Each backticked path with a folder in README.md and docs/*.md names a file or folder of the repository:
    from the root (``src/...``, ``tests/...``), from the package (``priors/heads.py`` is ``src/v05/priors/heads.py``)
    or from the page; a ``path::name`` names a function or class defined in that file. A renamed module turns this
    red until the docs follow. Generated pages ("do not edit by hand") also name folders under a grid's ``--out``;
    there only paths from the repository root are checked."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    checked = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        generated = "do not edit by hand" in text
        for path, name in _code_paths(text):
            if generated and not path.startswith(REPO_FOLDERS):
                continue
            bases = (ROOT, ROOT / "src" / "v05", ROOT / "src", page.parent)
            hits = [base / path for base in bases if (base / path).exists()]
            assert hits, f"{page.name}: `{path}` names no file of the repository"
            if name:
                assert re.search(
                    rf"^\s*(?:async )?(?:def|class) {name}\b", hits[0].read_text(encoding="utf-8"), re.M
                ), f"{page.name}: `{path}::{name}`"
            checked += 1
    assert checked >= 50  # the docs name many files: a pattern that matched nothing would pass vacuously


def test_the_doc_path_pattern_reads_what_it_claims():
    """_code_paths finds package-relative, root-relative and ``::name`` paths and skips other projects' paths."""
    text = "`priors/heads.py` `src/v05/groups.py` `tests/test_docs.py::test_x` `verl/trainer/x.py` `groups.py` `a b`"
    assert _code_paths(text) == [("priors/heads.py", ""), ("src/v05/groups.py", ""), ("tests/test_docs.py", "test_x")]


def test_the_reference_table_lists_every_registered_estimator():
    """docs/reference.md's estimator table has a row for each name in the registry (a new estimator needs its row)."""
    text = (ROOT / "docs/reference.md").read_text()
    missing = [name for name in ESTIMATORS if f"| `{name}` |" not in text]
    assert not missing, f"docs/reference.md's estimator table lacks {missing}"
