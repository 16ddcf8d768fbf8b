"""Engine adapters: thin translators between v05's estimators/priors and an RL engine, one module per engine.

``v05.adapters.trl`` is the only module that imports TRL (``pip install 'v05[trl]'``). Importing this package
imports no engine.
"""
