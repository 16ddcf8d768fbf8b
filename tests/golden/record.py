"""Golden numbers of the trainer, the TRL adapter and the verl plugin: recorded from one source tree, compared exactly.

Written for the issue "one round from prior to update" (the trainer, ``v05.adapters.trl`` and the verl plugin made to
call one module, ``v05/round.py``), a refactor that must change no number. The golden files hold what the code
*before* the refactor computed (commit 262772b: ``git worktree add ../baseline 262772b``); the tests compare the code
under test against them, bit for bit. Recorded (about 5 and 1 minutes on 2 cores) with

    export OPENBLAS_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    PYTHONPATH=../baseline/src .venv/bin/python tests/golden/record.py --out tests/golden --sections train,trl --verify
    PYTHONPATH=../baseline/src .venv-verl/bin/python tests/golden/record.py --out tests/golden --sections verl --verify

(``--verify`` records twice and writes nothing unless the two recordings agree.) The files, gzip'd JSON:

- ``train_quick.json.gz``: per packaged trainer config, the metrics rows of ``v05 train --config NAME --quick`` but
  their wall-clock fields, and the ``state.json`` of its step-3 and final checkpoints but ``counters.wall_time``
  (``tests/test_golden_identity.py``; the configs that cannot run offline are listed with the reason);
- ``trl_parity.json.gz``: the advantages ``V05GRPOTrainer`` computed for each batch of the TRL parity bench's
  ``rec_k1`` and ``rec_k2`` runs, at a tiny budget (``tests/test_golden_identity.py``);
- ``verl.json.gz``: the verl plugin's advantages and carried states on a synthetic multi-step trace, for every name
  in ``VERL_ESTIMATORS``, and the advantages verl's own fit loop handed its actor
  (``tests/adapters/test_verl_golden.py``, run in the verl environment). The fit loop alone is not reproducible
  bit for bit (its rows arrive in no fixed order): it is compared to a tolerance (:data:`VERIFY_REL_TOL`).

Floats are exact: Python's ``json`` writes ``repr``, which round-trips every float64 (NaN and ±inf as the JSON
extensions ``NaN``/``Infinity``). Trained numbers depend on the CPU's kernels and on the library versions, so each file
names the CPU (:func:`cpu_identity`: model name, vector unit, family/model/stepping) and the versions it was
recorded with; on another CPU or other versions the tests skip, naming both. This module needs the standard library
and numpy only: the verl environment (no trl) and the main one (no verl trainer stack) both import it; each
section's recorder lives in the test module that checks it, and is loaded by name when that section is recorded.
The files were re-recorded from the same baseline tree on 2026-12-07, when an AMD EPYC of another generation under
the same name gave numbers one ulp off the first recording (``CPU_ID_FIELDS``).
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import importlib.metadata
import io
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import v05
from v05.hardware import cpu_label, cpuinfo_fields

ROOT = Path(__file__).resolve().parents[2]
"""The repository (its ``tests`` package holds the section recorders)."""
if str(ROOT) not in sys.path:  # run as a script (``python tests/golden/record.py``): make ``tests`` importable
    sys.path.insert(0, str(ROOT))

GOLDEN_DIR = Path(os.environ.get("V05_GOLDEN_DIR") or Path(__file__).resolve().parent)
"""Where the tests read the golden files: this folder, or ``$V05_GOLDEN_DIR`` (another recording, or a perturbed
copy that the tests must fail on)."""

SECTIONS: dict[str, tuple[str, str, str]] = {
    "train": ("tests.test_golden_identity", "record_train", "train_quick.json.gz"),
    "trl": ("tests.test_golden_identity", "record_trl", "trl_parity.json.gz"),
    "verl": ("tests.adapters.test_verl_golden", "record_verl", "verl.json.gz"),
}
"""Section → (module of its recorder, the recorder's name, its golden file). A recorder takes a scratch folder and
returns the JSON payload, ``meta`` (:func:`meta`) included."""
VERIFY_REL_TOL: dict[str, dict[str, float]] = {"verl": {"fit": 1e-6}}
"""Parts of a payload that are not reproducible bit for bit (``--verify`` compares them to this relative tolerance,
as their test does): verl's fit loop (``tests/adapters/test_verl_golden.py``, ``FIT_REL_TOL``)."""


# -- the machine and the code a golden file came from -------------------------------------------------------------


CPU_ID_FIELDS = ("cpu family", "model", "stepping")
"""/proc/cpuinfo fields that tell apart two generations behind one ``model name``: a virtual machine may name every
AMD EPYC "AMD EPYC", and two of them with AVX-512 gave numbers one ulp apart (the golden files recorded before these
fields were in the label skip everywhere)."""


def cpu_identity(cpuinfo: str, fallback: str) -> str:
    """The golden files' CPU label: :func:`v05.hardware.cpu_label` (model name, widest vector/matrix unit) and the
    first processor's :data:`CPU_ID_FIELDS` (``AMD EPYC, AVX-512, family 25 model 17 stepping 1``)."""
    fields = cpuinfo_fields(cpuinfo)
    ids = [f"{key.split()[-1]} {fields[key]}" for key in CPU_ID_FIELDS if key in fields]
    return ", ".join([cpu_label(cpuinfo, fallback), *([" ".join(ids)] if ids else [])])


def cpu() -> str:
    """This machine's CPU label (:func:`cpu_identity`); off Linux, the platform's processor name."""
    fallback = platform.processor() or platform.machine()
    try:
        return cpu_identity(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"), fallback)
    except OSError:  # not Linux
        return fallback


def versions(packages: Sequence[str]) -> dict[str, str | None]:
    """Installed version of each distribution (None: not installed)."""
    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def source() -> dict[str, Any]:
    """The v05 source tree being run: its path and, if it is a git checkout, its commit and whether it is modified."""
    src = Path(v05.__file__).resolve().parent
    out: dict[str, Any] = {"v05": str(src)}

    def git(*args: str) -> str | None:
        proc = subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None

    out["commit"] = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", ".")
    out["modified"] = None if status is None else bool(status)
    return out


def meta(packages: Sequence[str]) -> dict[str, Any]:
    """What a golden file says about where it came from: CPU, library versions, source tree, command line."""
    return {
        "cpu": cpu(),
        "versions": versions(packages),
        "python": platform.python_version(),
        "source": source(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }


def mismatch(recorded: dict[str, Any], packages: Sequence[str]) -> str | None:
    """Why this machine cannot reproduce a golden file's numbers (another CPU or library versions), or None."""
    here = cpu()
    if recorded.get("cpu") != here:
        return f"golden numbers were recorded on CPU {recorded.get('cpu')!r}; this machine is {here!r}"
    now = versions(packages)
    for name in packages:
        if recorded.get("versions", {}).get(name) != now[name]:
            return (
                f"golden numbers were recorded with {name} {recorded['versions'].get(name)}; this environment "
                f"has {now[name]} (re-record them from the baseline tree with tests/golden/record.py)"
            )
    return None


# -- exact JSON ---------------------------------------------------------------------------------------------------


def canon(x: object) -> Any:
    """A value as plain JSON data with every float exact: arrays, tensors' lists and tuples become lists."""
    if isinstance(x, dict):
        return {str(k): canon(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        return canon(x.tolist())
    if isinstance(x, (list, tuple)):
        return [canon(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


def _same_float(a: float, b: float) -> bool:
    """Bit-level equality of two floats: NaN equals NaN, and -0.0 differs from 0.0."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def first_difference(golden: Any, current: Any, path: str = "", *, rel_tol: float = 0.0) -> str | None:
    """Where ``current`` first departs from ``golden`` (``path: golden … != current …``), or None if identical.

    Types must match (an int is not a float); floats compare bit for bit (:func:`_same_float`), or, with ``rel_tol``
    > 0 (only for numbers that are not reproducible bit for bit, e.g. verl's fit loop), to that relative tolerance
    (and as much absolute tolerance, for values near 0); dict keys missing on either side count.
    """
    where = path or "<root>"
    if type(golden) is not type(current):
        return f"{where}: golden {golden!r} ({type(golden).__name__}) != current {current!r} ({type(current).__name__})"
    if isinstance(golden, dict):
        for key in golden.keys() | current.keys():
            if key not in current:
                return f"{path}[{key!r}]: in the golden file, missing now (golden {golden[key]!r})"
            if key not in golden:
                return f"{path}[{key!r}]: new now, absent from the golden file (current {current[key]!r})"
        for key in golden:  # in the golden's order: the first difference is the first a reader meets
            found = first_difference(golden[key], current[key], f"{path}[{key!r}]", rel_tol=rel_tol)
            if found is not None:
                return found
        return None
    if isinstance(golden, list):
        for i, (a, b) in enumerate(zip(golden, current, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]", rel_tol=rel_tol)
            if found is not None:
                return found
        if len(golden) != len(current):
            return f"{where}: golden has {len(golden)} items, current {len(current)}"
        return None
    if isinstance(golden, float):
        same = _same_float(golden, current) or (
            rel_tol > 0 and math.isclose(golden, current, rel_tol=rel_tol, abs_tol=rel_tol)
        )
        return None if same else f"{where}: golden {golden!r} != current {current!r}"
    return None if golden == current else f"{where}: golden {golden!r} != current {current!r}"


def dumps(payload: object) -> str:
    """JSON text of ``payload`` (floats as ``repr``: exact)."""
    return json.dumps(canon(payload), allow_nan=True, separators=(",", ":"))


def write_golden(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as gzip'd JSON, byte-reproducible (no timestamp or file name in the gzip header)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
        gz.write(dumps(payload).encode("utf-8"))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)


def read_golden(path: Path) -> dict[str, Any]:
    """A golden file's payload."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def golden_or_skip(path: Path, packages: Sequence[str], *, section: str) -> dict[str, Any]:
    """The golden payload at ``path`` for a test: fail if it is missing (record it: ``--sections section``), skip
    where this machine's CPU or package versions are not the recording's (:func:`mismatch`)."""
    if not path.is_file():
        pytest.fail(f"{path} is missing: record it with tests/golden/record.py --sections {section} (its docstring)")
    payload = read_golden(path)
    reason = mismatch(payload["meta"], packages)
    if reason is not None:
        pytest.skip(reason)
    return payload


# -- the recorder -------------------------------------------------------------------------------------------------


def recorder(section: str) -> Callable[[Path], dict[str, Any]]:
    """The recorder function of ``section`` (its module is imported here: each needs its own environment)."""
    module, name, _ = SECTIONS[section]
    return getattr(importlib.import_module(module), name)


def record(section: str) -> dict[str, Any]:
    """One recording of ``section`` in a scratch folder (removed after)."""
    with tempfile.TemporaryDirectory(prefix=f"golden-{section}-") as scratch:
        return recorder(section)(Path(scratch))


def main(argv: Sequence[str] | None = None) -> int:
    """Record the chosen sections into ``--out``; exit 1 if ``--verify`` finds two recordings that differ."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write the golden files to")
    parser.add_argument("--sections", default="train,trl", help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--verify", action="store_true", help="record twice; write only if identical")
    args = parser.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; valid: {', '.join(SECTIONS)}")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    for section in sections:
        payload = record(section)
        if args.verify:
            again = record(section)
            loose = VERIFY_REL_TOL.get(section, {})
            found = first_difference({k: v for k, v in payload.items() if k not in loose},
                                     {k: v for k, v in again.items() if k not in loose})  # fmt: skip
            for key, tol in loose.items():
                found = found or first_difference(payload.get(key), again.get(key), f"[{key!r}]", rel_tol=tol)
            if found is not None:
                sys.stderr.write(f"record.py: {section}: two recordings differ, nothing written: {found}\n")
                return 1
        path = args.out / SECTIONS[section][2]
        write_golden(path, payload)
        sys.stderr.write(f"record.py: {section} → {path} ({path.stat().st_size:,} bytes)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
