"""verl's entry point for v05 (``[project.entry-points."verl.plugins"]``: ``v05 = "v05.adapters.verl_plugin"``).

verl 0.9.1 imports each ``verl.plugins`` entry point's module on ``import verl`` and hides any exception at DEBUG,
so a plugin that cannot be imported (a missing dependency, a broken install) would vanish silently from the driver
and from every Ray worker. This module only imports :mod:`v05.adapters.verl`, which registers v05's estimators and
trainer mode when verl asks for them, and logs a failure at ERROR with its cause before re-raising it. It imports
no verl itself. When that module is what is importing verl (it was imported first), verl's loader runs this shim while
the module is still half initialised: the import then returns it from ``sys.modules`` and the module registers at its
own end (the import circle: :mod:`v05.adapters.verl` module docstring).
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

try:
    from v05.adapters import verl as plugin  # noqa: F401  (importing it registers v05 with verl)
except Exception:
    logger.error(
        "the v05 verl plugin failed to import (v05.adapters.verl): v05's estimators and trainer mode are NOT "
        "available in this process (verl hides plugin errors; the cause follows)",
        exc_info=True,
    )
    raise
