"""Array aliases and the dimension glossary used across v05.

Dimension letters: N rollouts, G prompts (groups), K rollouts per prompt when uniform, D embedding width,
C context rows, Q query rows. Per-prompt arrays have shape (G,) and the suffix ``_g``; they are gathered
back to rollouts with ``x_g[group]``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

__all__ = ["BoolArray", "FloatArray", "IntArray"]
