"""The pinned install: requirements/*.lock pin every dependency of each environment, and make installs them.

The package metadata keeps ranges (users resolve them); ``make demo``/``make test`` install the locks (``make lock``
writes them), so a fresh machine next year gets the tested versions. These tests fail when a lock loses a
requirement, stops pinning, or when the repository's ``.venv`` no longer holds the locked versions (the Makefile
stopped using the lock).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

REPO = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^=\s;]+)$")
ENVIRONMENTS = {  # lock → the extras its environment installs (the Makefile's main_env / verl_env)
    "main.lock": ("dev", "lm", "priors", "torch", "train", "trl"),
    "verl.lock": ("dev", "verl"),
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock(name: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "requirements" / name).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = PIN.match(line.strip())
        assert match, f"{name}: {line!r} is not an exact pin (name==version)"
        pins[_norm(match.group(1))] = match.group(2)
    return pins


def _requirements(extras: tuple[str, ...]) -> set[str]:
    """Distribution names the package asks for with these extras (v05[...] self-references followed)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    optional = project["optional-dependencies"]
    names: set[str] = set()
    todo, seen = list(extras), set()
    specs = list(project["dependencies"])
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for spec in optional[extra]:
            self_ref = re.match(r"^v05\[([^\]]+)\]", spec)
            if self_ref:
                todo.extend(e.strip() for e in self_ref.group(1).split(","))
            else:
                specs.append(spec)
    for spec in specs:
        names.add(_norm(re.match(r"^[A-Za-z0-9._-]+", spec).group(0)))
    return names


@pytest.mark.parametrize("lock", sorted(ENVIRONMENTS))
def test_each_lock_pins_every_requirement_of_its_environment(lock):
    """Each lock pins torch 2.13.0 and every requirement of its environment, and never v05 itself."""
    pins = _lock(lock)
    assert pins.get("torch", "").split("+")[0] == "2.13.0"  # an unpinned torch pulls a CUDA build
    missing = _requirements(ENVIRONMENTS[lock]) - set(pins)
    assert not missing, f"{lock} lacks {sorted(missing)}: run `make lock`"
    assert "v05" not in pins  # the package itself is installed editable, never from the lock


def test_the_main_lock_holds_verls_core_algos_dependencies():
    """The main lock holds verl and the packages its core_algos import needs (the verl parity tests run in .venv)."""
    pins = _lock("main.lock")
    assert {"verl", "ray", "tensordict", "omegaconf", "codetiming", "orjson"} <= set(pins)


@pytest.mark.skipif(Path(sys.prefix).resolve() != (REPO / ".venv").resolve(), reason="only in make's .venv")
def test_make_installed_the_locked_versions():
    """In make's .venv every locked package is installed at its locked version."""
    wrong = {}
    for name, version in _lock("main.lock").items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            wrong[name] = (version, installed)
    assert not wrong, f"locked vs installed: {wrong}"
