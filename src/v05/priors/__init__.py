"""Prior providers: predicted pass rates (±1 scores) and their worth in rollouts, for V0.5 and ``v05_eb``.

Step protocol (simulator, trainer, engine adapters)::

    prov = make_provider("combined", backend="minilm")        # or running_mean / domain_mean / history / v0
    pred = prov.predict(prompt_ids, texts, policy="step")     # PriorPrediction: mean (Q,) in [−1, 1], tau2, n0
    ...  rollouts  ...
    scores, counts = group_outcomes(rewards, group)            # flat batch → (G,) ±1 means and rollout counts
    prov.update(prompt_ids, texts, scores, counts)             # calibrates on the predictions above, then learns
    prov.calibration()                                         # Calibration(tau2, auc, n0, n, ...)
    json.dump(prov.state_dict(), fh)                           # state is JSON (no pickle); load_state_dict restores

``predict_rows`` is the V0-data seam for the simulator; ``evaluate_v0`` drives ``v05 prior eval``. Importing this
package loads numpy only: scikit-learn, torch and sentence-transformers are imported when a head or backend runs.
"""

from v05.priors.base import Calibration, PriorPrediction, PriorProvider, auc_score, calibrate, group_outcomes
from v05.priors.evaluate import (
    benchmark_throughput,
    cross_validate_context,
    evaluate_v0,
    predict_rows,
    predict_rows_online,
)
from v05.priors.registry import (
    PROVIDERS,
    ProviderSpec,
    check_provider_options,
    get_provider_spec,
    make_provider,
    provider_spec,
)

__all__ = [
    "PROVIDERS",
    "Calibration",
    "PriorPrediction",
    "PriorProvider",
    "ProviderSpec",
    "auc_score",
    "benchmark_throughput",
    "calibrate",
    "check_provider_options",
    "cross_validate_context",
    "evaluate_v0",
    "get_provider_spec",
    "provider_spec",
    "group_outcomes",
    "make_provider",
    "predict_rows",
    "predict_rows_online",
]
