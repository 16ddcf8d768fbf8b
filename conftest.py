"""Root pytest configuration: doctest collection of ``src/v05`` skips adapter modules whose engine is not installed.

``--doctest-modules`` imports every module under ``src/v05``; an adapter imports its engine (trl, verl, vllm) at
module level by design (it is the one module that does), so without that optional extra it cannot be imported.
"""

import importlib.util

ENGINE_MODULES = {
    "trl": "src/v05/adapters/trl.py",
    "verl": "src/v05/adapters/verl.py",
    "vllm": "src/v05/engines/vllm.py",
}

collect_ignore = [path for engine, path in ENGINE_MODULES.items() if importlib.util.find_spec(engine) is None]
