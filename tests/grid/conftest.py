"""Fixtures of the grid tests: the trainer's tiny task and cached warm start, and a tiny grid file over them."""

from __future__ import annotations

import pytest

from tests.grid._grids import write_grid
from tests.train.conftest import tiny_overrides, warm_cache  # noqa: F401 (the trainer's fixtures, shared)


@pytest.fixture
def tiny_grid(tmp_path, tiny_overrides):  # noqa: F811 (the fixture imported above)
    body = {
        "name": "tiny",
        "seeds": [0, 1],
        "overrides": [*tiny_overrides, "train.max_rollouts=96", "train.steps=50"],
        "tasks": {"tiny-easy": {"regime": "easy"}, "tiny-hard": {"regime": "hard", "overrides": ["optim.lr=2.0e-4"]}},
        "methods": {
            "grpo4": "demo-grpo4",
            "rloo": "demo-rloo",
            "v05_k2": {"config": "demo-v05-k4", "overrides": ["allocator.options.k=2"]},
        },
    }
    return write_grid(tmp_path / "tiny.yaml", body)
