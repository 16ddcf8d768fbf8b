"""`v05 bench train` on the tiny task: the contract keys, numbers that make sense (the grid: tests/grid/)."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("trl")

from tests.train.conftest import tiny_overrides, warm_cache  # noqa: E402, F401 (the trainer's fixtures, shared)
from v05.adapters import trl_bench  # noqa: E402
from v05.adapters.trl_bench import WARMUP_STEPS, _step_times  # noqa: E402
from v05.cli import main  # noqa: E402

SMALL = ["train.batch_size=8", "eval.size=16", "eval.every=2", "run.progress=false", "run.tensorboard=false"]


def test_bench_train_contract(tmp_path, tiny_overrides):  # noqa: F811 (the fixture imported above)
    """`v05 bench train --json` (1-s windows, 1 round) writes v05's and TRL's rollouts/s on the same model, task,
    batch and k as medians of the per-round rates, the median per-round ratio with its spread, and v05's overhead
    fraction (prior + allocator + estimator of step time), in [0, 1); every side ran at least its window."""
    out = tmp_path / "train.json"
    argv = ["bench", "train", "--out", str(tmp_path / "runs"), "--window-s", "1", "--repeats", "1", "--configs",
            "demo-grpo4,demo-v05", "--json", str(out), *tiny_overrides, *SMALL]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert res["v05_rollouts_per_s"] > 0 and res["trl_rollouts_per_s"] > 0
    assert res["rollouts_per_s"] == {"v05": res["v05_rollouts_per_s"], "trl": res["trl_rollouts_per_s"]}
    assert res["v05_overhead_share"] == res["overhead_frac"] and res["lora_rank"] is None
    assert res["policy"] == "tiny-llama (SFT warm start)"
    assert 0 <= res["overhead_frac"] < 1 and set(res["configs"]) == {"demo-grpo4", "demo-v05"}
    assert res["order"] == ["v05:demo-grpo4", "trl", "v05:demo-v05"] and res["repeats"] == 1
    assert res["spread"]["speedup_vs_trl"]["rounds"] == [res["speedup_vs_trl"]]
    rounds = [*res["configs"]["demo-grpo4"]["rounds"], *res["configs"]["demo-v05"]["rounds"], *res["trl"]["rounds"]]
    assert len(rounds) == 3 and all(r["seconds"] >= 1.0 and r["steps"] >= 1 for r in rounds)
    assert all(r["warmup_steps"] == 2 for r in res["trl"]["rounds"])


def _fake_side(calls, name, rates, overhead=0.0):
    """A stand-in timer: records its call and returns the next of ``rates`` as a 30-s window's timing."""
    remaining = iter(rates)

    def measure():
        calls.append(name)
        rate = next(remaining)
        return {"steps": 10, "rollouts": 30.0 * rate, "seconds": 30.0, "rollouts_per_s": rate,
                "overhead_frac": overhead, "generate_tokens_per_s": 8.0 * rate,
                "update_s_per_rollout": 0.5 / rate}  # fmt: skip

    return measure


def test_bench_train_interleaves_and_takes_medians(tmp_path, monkeypatch):
    """With stand-in timers, `bench_train` runs first config, TRL, other configs in every round (A, T, B, A, T, B,
    A, T, B), and quotes medians of per-round figures: v05 rates [100, 300, 200] and TRL [50, 100, 100] give
    ratios [2, 3, 2] → speedup 2 (range 2–3), v05 200/s and TRL 100/s."""
    calls = []
    v05 = {"demo-grpo4": _fake_side(calls, "demo-grpo4", [100.0, 300.0, 200.0], 0.01),
           "demo-v05": _fake_side(calls, "demo-v05", [80.0, 90.0, 70.0], 0.03)}  # fmt: skip
    monkeypatch.setattr(trl_bench, "_v05_window", lambda cfg, run_dir, window_s: v05[run_dir.name]())
    monkeypatch.setattr(trl_bench, "_trl_window", lambda cfg, out, window_s: _fake_side(calls, "trl", [50.0, 100, 100]))
    res = trl_bench.bench_train(tmp_path, window_s=30, repeats=3, configs=("demo-grpo4", "demo-v05"))
    assert calls == ["demo-grpo4", "trl", "demo-v05"] * 3
    assert res["speedup_vs_trl"] == 2.0 and res["spread"]["speedup_vs_trl"]["rounds"] == [2.0, 3.0, 2.0]
    assert (res["spread"]["speedup_vs_trl"]["min"], res["spread"]["speedup_vs_trl"]["max"]) == (2.0, 3.0)
    assert res["v05_rollouts_per_s"] == 200.0 and res["trl_rollouts_per_s"] == 100.0
    assert res["configs"]["demo-v05"]["rollouts_per_s"] == 80.0 and res["overhead_frac"] == 0.01
    assert res["configs"]["demo-v05"]["overhead_frac"] == 0.03
    assert res["configs"]["demo-v05"]["generate_tokens_per_s"] == 640.0  # median of 8 x [80, 90, 70]
    assert res["configs"]["demo-grpo4"]["update_s_per_rollout"] == 0.5 / 200.0
    assert res["window_s"] == 30 and res["order"] == ["v05:demo-grpo4", "trl", "v05:demo-v05"]


def test_step_times_leave_out_the_warm_up():
    """Rollouts/s and overhead are sums over the steps after WARMUP_STEPS = 2: steps 3–4 with 128 and 64 rollouts in
    0.1 + 0.1 s → 960/s; overhead (0.01 + 0.01 + 0.02 + 0) / 0.2 = 0.2."""
    assert WARMUP_STEPS == 2
    rows = [{"step": s, "time/step": t, "rollouts_step": n, "time/prior": p, "time/estimate": e}
            for s, t, n, p, e in [(1, 5.0, 128, 1.0, 1.0), (2, 5.0, 128, 1.0, 1.0), (3, 0.1, 128, 0.01, 0.01),
                                  (4, 0.1, 64, 0.02, 0.0)]]  # fmt: skip
    res = _step_times(rows)
    assert res["steps"] == 2 and res["rollouts_per_s"] == pytest.approx(960.0)
    assert res["overhead_frac"] == pytest.approx(0.2)
    assert math.isnan(res["generate_tokens_per_s"]) and math.isnan(res["update_s_per_rollout"])  # not logged
    # with the generation and update clocks: (1000 + 600) tokens in 0.04 + 0.06 s; (0.03 + 0.01) s over 192 rollouts
    clocks = [(9, 9.0, 9.0), (9, 9.0, 9.0), (1000, 0.04, 0.03), (600, 0.06, 0.01)]
    for row, (tokens, gen, upd) in zip(rows, clocks, strict=True):
        row |= {"tokens_step": tokens, "time/generate": gen, "time/update": upd}
    res = _step_times(rows)
    assert res["generate_tokens_per_s"] == pytest.approx(16000.0)
    assert res["update_s_per_rollout"] == pytest.approx(0.04 / 192)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window-s", "0.5"], "window_s must be >= 1.0"),
        (["--window-s", "nan"], "window_s must be >= 1.0"),
        (["--repeats", "0"], "repeats must be an integer >= 1"),
        (["--configs", ","], "need at least one config"),
        (["--policy", "gpt5"], "policy must be one of tiny, smollm2"),
        (["--lora", "0"], "lora must be a rank >= 1"),
    ],
)
def test_bench_train_bad_options_one_line_error(argv, message, capsys):
    """A window under 1 s, fewer than one round or no config is a one-line error with exit code 2, before any run."""
    assert main(["bench", "train", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
