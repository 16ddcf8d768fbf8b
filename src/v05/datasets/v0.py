"""Loader for the V0 instruction–performance format (arXiv:2602.03584; github.com/Now-Join-Us/V0, Apache-2.0).

A V0 directory holds ``context.jsonl`` (the rows a prior may see), one or more query files (any other ``*.jsonl``,
e.g. ``train.jsonl`` → split ``train``), and ``prompts.json`` or ``prompt_dict.json`` mapping ``"{dataset}_{id}"``
to the prompt text. Each row is ``{"id", "score", "model", "step", "dataset"}`` with ``score`` the policy's mean ±1
reward on that prompt (the simulator's true value μ). A *snapshot* is one (dataset, model, step) policy; priors fit
on a snapshot's context rows and predict its query rows.

The bundled copy (``v05/datasets/v0_dapomath``: context + train_query of 6 snapshots) keeps the source's LICENSE
and a NOTICE.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from v05._types import FloatArray, IntArray

PROMPT_FILES = ("prompts.json", "prompt_dict.json")
CONTEXT_FILE = "context.jsonl"


@dataclass(frozen=True, slots=True)
class V0Rows:
    """The rows of one V0 file, as parallel arrays.

    Attributes:
        prompt_id: (R,) prompt keys ``"{dataset}_{id}"`` (index into ``V0Dataset.prompts``).
        score: (R,) mean ±1 reward of the snapshot's policy on the prompt, in [−1, 1].
        snapshot: (R,) index into ``V0Dataset.snapshots``.
    """

    prompt_id: np.ndarray
    score: FloatArray
    snapshot: IntArray

    def __len__(self) -> int:
        return len(self.score)

    def select(self, mask: np.ndarray) -> V0Rows:
        """The subset of rows where ``mask`` is true."""
        return V0Rows(self.prompt_id[mask], self.score[mask], self.snapshot[mask])


@dataclass(frozen=True, slots=True)
class V0Dataset:
    """A loaded V0 directory.

    Attributes:
        root: the directory it was read from.
        prompts: prompt key → text.
        snapshots: ``(dataset, model, step)`` of each snapshot, sorted.
        context: rows a prior may see.
        queries: split name (query file stem) → rows to predict; never overlaps its snapshot's context in V0's data.
    """

    root: Path
    prompts: dict[str, str]
    snapshots: tuple[tuple[str, str, int], ...]
    context: V0Rows
    queries: dict[str, V0Rows]

    def snapshot_name(self, index: int) -> str:
        """Readable name ``model@step`` (dataset prefixed when the directory mixes datasets)."""
        dataset, model, step = self.snapshots[index]
        several = len({s[0] for s in self.snapshots}) > 1
        return f"{dataset}:{model}@{step}" if several else f"{model}@{step}"

    def texts(self, prompt_ids: np.ndarray) -> list[str]:
        """Prompt texts for an array of prompt keys."""
        return [self.prompts[str(p)] for p in prompt_ids]

    def all_queries(self) -> V0Rows:
        """All query splits concatenated (in sorted split order)."""
        parts = [self.queries[k] for k in sorted(self.queries)]
        return V0Rows(
            np.concatenate([p.prompt_id for p in parts]),
            np.concatenate([p.score for p in parts]),
            np.concatenate([p.snapshot for p in parts]),
        )


def bundled_v0_path() -> Path:
    """Directory of the V0 data bundled with the package (DAPO-Math, 6 snapshots)."""
    return Path(str(resources.files("v05.datasets").joinpath("v0_dapomath")))


def _read_rows(path: Path) -> list[tuple[str, float, tuple[str, str, int]]]:
    try:
        return _parse_rows(path)
    except UnicodeDecodeError as err:  # a binary file (e.g. a pickle) with a .jsonl name: refused, never unpickled
        raise ValueError(f"{path}: not UTF-8 JSON lines ({err.reason} at byte {err.start})") from None


def _parse_rows(path: Path) -> list[tuple[str, float, tuple[str, str, int]]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                key = f"{obj['dataset']}_{obj['id']}"
                score = float(obj["score"])
                snap = (str(obj["dataset"]), str(obj["model"]), int(obj["step"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError) as err:  # step: Infinity
                raise ValueError(f"{path}:{lineno}: not a V0 row ({type(err).__name__}: {err})") from None
            if not np.isfinite(score) or not -1.0 <= score <= 1.0:
                raise ValueError(f"{path}:{lineno}: score {score!r} outside [-1, 1]")
            rows.append((key, score, snap))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def load_v0(path: str | Path | None = None) -> V0Dataset:
    """Load a V0-format directory (the bundled data when ``path`` is None).

    Only JSON is read (never pickle), so a crafted file is refused as malformed.

    Raises:
        ValueError: missing directory, context or prompt file, no query file, a file that is not UTF-8 JSON,
            malformed rows, unknown prompt keys.
    """
    root = bundled_v0_path() if path is None else Path(path)
    if not root.is_dir():
        raise ValueError(f"V0 data directory not found: {root}")
    prompt_file = next((root / f for f in PROMPT_FILES if (root / f).is_file()), None)
    if prompt_file is None:
        raise ValueError(f"{root}: no {' or '.join(PROMPT_FILES)}")
    if not (root / CONTEXT_FILE).is_file():
        raise ValueError(f"{root}: no {CONTEXT_FILE}")
    query_files = sorted(p for p in root.glob("*.jsonl") if p.name != CONTEXT_FILE)
    if not query_files:
        raise ValueError(f"{root}: no query file (any *.jsonl besides {CONTEXT_FILE})")
    try:
        prompts = json.loads(prompt_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{prompt_file}: invalid JSON ({err})") from None
    except UnicodeDecodeError as err:  # a binary file (e.g. a pickle) with a .json name: refused, never unpickled
        raise ValueError(f"{prompt_file}: not UTF-8 JSON ({err.reason} at byte {err.start})") from None
    if not isinstance(prompts, dict):
        raise ValueError(f"{prompt_file}: expected an object mapping prompt keys to texts")

    raw = {"context": _read_rows(root / CONTEXT_FILE)} | {p.stem: _read_rows(p) for p in query_files}
    snapshots = tuple(sorted({snap for rows in raw.values() for _, _, snap in rows}, key=lambda s: (s[0], s[1], s[2])))
    snap_index = {s: i for i, s in enumerate(snapshots)}
    tables: dict[str, V0Rows] = {}
    for name, rows in raw.items():
        keys = np.array([k for k, _, _ in rows], dtype=object)
        missing = [k for k in keys if k not in prompts]
        if missing:
            raise ValueError(
                f"{root}: {len(missing)} prompt key(s) of {name} not in {prompt_file.name}, e.g. {missing[0]}"
            )
        tables[name] = V0Rows(
            keys,
            np.array([s for _, s, _ in rows], dtype=np.float64),
            np.array([snap_index[s] for _, _, s in rows], dtype=np.int64),
        )
    context = tables.pop("context")
    return V0Dataset(root, {str(k): str(v) for k, v in prompts.items()}, snapshots, context, tables)


__all__ = ["V0Dataset", "V0Rows", "bundled_v0_path", "load_v0"]
