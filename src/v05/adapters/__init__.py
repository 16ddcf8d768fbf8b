"""Engine adapters: thin translators between v05's estimators/priors and an RL engine, one module per engine.

``v05.adapters.trl`` is the only module that imports TRL (``pip install 'v05[trl]'``); beside it sit its TRL-free
parts (``trl_rewards``: the reward rule and guard; ``trl_batch``: TRL's batch layout as groups; ``trl_options``: the
estimator's options and TRL's ``scale_rewards``). Importing this package imports no engine. Beside the adapters sit
the benches that drive both v05's trainer and TRL through them (``trl_bench``: ``v05 bench train``; ``trl_parity``:
``v05 bench trl-parity``; their TRL trainers come from ``trl_harness``; their parsers in ``cli``): they import the
trainer and the TRL adapter, so they live above both.
"""
