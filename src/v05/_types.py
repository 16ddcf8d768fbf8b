"""Array aliases and the dimension glossary used across v05.

Dimension letters: N rollouts, G prompts (groups), K rollouts per prompt when uniform, D embedding width,
C context rows, Q query rows. Per-prompt arrays have shape (G,) and the suffix ``_g``; they are gathered
back to rollouts with ``x_g[group]``.

``HeadOutput`` names what an in-context head's ``predict`` returns: ``"score"`` (±1 scores, E[s]) or
``"prob_nonneg"`` (V0's label, P(s ≥ 0)). It lives here, below ``priors`` and ``value``, because heads of both
declare it (``priors.heads``, ``value_probe``) and ``priors.head_registry`` registers them all.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
HeadOutput = Literal["score", "prob_nonneg"]

__all__ = ["BoolArray", "FloatArray", "HeadOutput", "IntArray"]
