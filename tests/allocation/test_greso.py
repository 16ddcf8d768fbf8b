"""GRESO (arXiv:2506.02177, ``Infini-AI-Lab/GRESO``): skip rule, streaks, adaptation, the walk, state, registry.

Hand cases marked "reference" are the behaviour of GRESO's code: ``DataProfiler.easy_probabilistic_skip`` /
``hard_probabilistic_skip`` (``verl/trainer/ttis/presampling_selector.py``) and the "adjust exploration factor"
block of ``RayPPOTrainer.fit`` (``verl/trainer/ppo/ray_trainer.py``), with its scripts' settings (p_easy = p_hard =
0.5, target_zero_variance = 0.25, min_p = 0.05, max_p = 0.95, rollout.n = 8).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from v05.allocation import GRESO, GresoState, Pool, allocate
from v05.allocation.greso import adapt_explore, skip_probability
from v05.registry import ALLOCATORS, get_allocator
from v05.round import state_from_json, state_to_json


def rows(table: dict[int, list[float]]):
    """Deterministic sampler: pool prompt i's k rewards are table[i] (its length must be k)."""

    def sample(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return np.concatenate([np.asarray(table[int(i)], float)[:c] for i, c in zip(ids, counts, strict=True)])

    return sample


def bernoulli(p: np.ndarray, rng: np.random.Generator):
    """Sampler: rollouts of pool prompt i succeed with probability p[i] (0/1 rewards)."""

    def sample(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return (rng.random(int(counts.sum())) < np.repeat(p[ids], counts)).astype(float)

    return sample


def state_of(keys, c, w, p_c=0.5, p_w=0.5) -> GresoState:
    """A GresoState with the given (sorted) keys and streaks."""
    return GresoState(np.asarray(keys), np.asarray(c, np.int64), np.asarray(w, np.int64), p_c, p_w)


def streaks(state: GresoState, key) -> tuple[int, int]:
    """(c, w) stored for key."""
    i = int(np.flatnonzero(state.keys == key)[0])
    return int(state.streak_correct[i]), int(state.streak_wrong[i])


# ----------------------------------------------------------------------------- the rule, by hand


def test_skip_probability_hand_cases_from_the_reference():
    """Reference: p = 0.5 and 3 all-correct groups → 1 − 0.5³ = 0.875; 2 all-wrong → 0.75; 7 all-correct → 0.5⁷ =
    0.0078 < 0.01, so the keep floor gives 0.99; no streak → 0; the profiler's own default p = 0.75 with 2 → 0.4375."""
    q = skip_probability([0, 3, 0, 7], [0, 0, 2, 0], p_explore_correct=0.5, p_explore_wrong=0.5)
    np.testing.assert_allclose(q, [0.0, 0.875, 0.75, 0.99], rtol=0, atol=1e-15)
    q = skip_probability([2], [0], p_explore_correct=0.75, p_explore_wrong=0.5)
    np.testing.assert_allclose(q, [1 - 0.75**2], rtol=1e-15)  # 0.4375
    # ρ_w only acts on all-wrong streaks and ρ_c only on all-correct ones
    q = skip_probability([1, 0], [0, 1], p_explore_correct=0.9, p_explore_wrong=0.2)
    np.testing.assert_allclose(q, [0.1, 0.8], rtol=1e-12)


def test_skip_probability_rejects_bad_input():
    """Negative or non-integer streaks, both streaks positive, mismatched shapes and out-of-range ρ raise."""
    kw = {"p_explore_correct": 0.5, "p_explore_wrong": 0.5}
    for c, w, match in [([-1], [0], "streak_correct"), ([0.5], [0], "streak_correct"), ([1], [1], "both streaks"),
                        ([1, 0], [0], "same shape")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            skip_probability(c, w, **kw)
    with pytest.raises(ValueError, match="p_explore_wrong"):
        skip_probability([1], [0], p_explore_correct=0.5, p_explore_wrong=1.5)


def test_adapt_explore_hand_cases_from_the_reference():
    """Reference: a share at or above the target lowers ρ by 0.01 (0.5 → 0.49; ``>=``, so 1/6 against the all-wrong
    target 0.25·2/3 = 1/6 lowers it), below raises it (0.5 → 0.51); clamped to [0.05, 0.95]; δ = 0 freezes ρ."""
    bounds = {"step": 0.01, "p_min": 0.05, "p_max": 0.95}
    assert adapt_explore(0.5, 1 / 6, target=0.25 * 2 / 3, **bounds) == 0.5 - 0.01
    assert adapt_explore(0.5, 0.0, target=0.25 / 3, **bounds) == 0.5 + 0.01
    assert adapt_explore(0.05, 0.9, target=0.25 / 3, **bounds) == 0.05
    assert adapt_explore(0.95, 0.0, target=0.25 / 3, **bounds) == 0.95
    assert adapt_explore(0.3, 1.0, target=0.1, step=0.0, p_min=0.05, p_max=0.95) == 0.3


def reference_skip(trace: list[float], p_easy: float, p_hard: float) -> float:
    """Skip probability by the reference's rule, from a prompt's trace of group-mean rewards on GRESO's scale
    (correct 1, wrong 0.1): the easy rule (trailing run of means ≥ 0.98) is drawn first, then the hard rule (the
    last mean ≤ 0.11 and the trailing run of such means), each as 1 − max(p^count, 0.01)."""
    if not trace:
        return 0.0
    easy = next((i for i, m in enumerate(reversed(trace)) if m < 0.98), len(trace))
    q_easy = 1 - max(p_easy**easy, 0.01)
    hard = 0 if trace[-1] > 0.11 else next((i for i, m in enumerate(reversed(trace)) if m > 0.11), len(trace))
    q_hard = 1 - max(p_hard**hard, 0.01)
    return q_easy + (1 - q_easy) * q_hard


def test_state_gives_the_reference_skip_probability_after_many_steps():
    """Differential: after each of 30 steps on a pool of 24 prompts (B = 12, k = 8, pass rates mostly 0 or 1), every
    stored prompt's skip probability from GRESO's state equals the reference rule applied to its trace of group means
    (rewards mapped to GRESO's scale: correct 1, wrong 0.1), at the state's ρ_c, ρ_w."""
    rng = np.random.default_rng(11)
    n = 24
    p = rng.choice([0.0, 1.0, 0.0, 1.0, 0.5, 0.9, 0.05], n)
    alloc = GRESO(k=8, batch_size=12)
    traces: dict[int, list[float]] = {}
    state = None
    for t in range(30):
        keys = np.arange(n)
        a = allocate(alloc, bernoulli(p, rng), n_prompts=n, rng=np.random.default_rng([t, 5]), keys=keys,
                     reward_range="01", state=state)  # fmt: skip
        state = a.state
        for i in np.flatnonzero(a.kept):
            r = a.rewards[a.prompt == i]
            traces.setdefault(int(i), []).append(float(np.mean(np.where(r == 1.0, 1.0, 0.1))))
        got = skip_probability(state.streak_correct, state.streak_wrong, p_explore_correct=state.p_explore_correct,
                               p_explore_wrong=state.p_explore_wrong)  # fmt: skip
        want = [reference_skip(traces[int(key)], state.p_explore_correct, state.p_explore_wrong) for key in state.keys]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert state is not None and state.streak_correct.max() >= 3 and state.streak_wrong.max() >= 3


# ----------------------------------------------------------------------------- the walk


def test_rollouts_are_exactly_batch_size_times_k_in_one_round():
    """Whatever the state, B·k rollouts in one round, B prompts kept (all sampled), k each; P < B takes the pool."""
    rng = np.random.default_rng(0)
    n = 128
    odd = np.arange(n) % 2
    state = state_of(np.arange(n), rng.integers(0, 6, n) * odd, rng.integers(0, 6, n) * (1 - odd))  # c·w = 0
    a = allocate(GRESO(k=4, batch_size=32), bernoulli(rng.random(n), rng), n_prompts=n, rng=rng, keys=np.arange(n),
                 reward_range="01", state=state)  # fmt: skip
    assert a.n_rollouts == 32 * 4 and a.rounds == 1 and a.kept.sum() == 32
    np.testing.assert_array_equal(a.kept, a.counts > 0)
    assert set(np.unique(a.counts).tolist()) == {0, 4}
    b = allocate(GRESO(k=3, batch_size=8), bernoulli(np.full(5, 0.5), rng), n_prompts=5, rng=rng, keys=np.arange(5))
    assert b.n_rollouts == 5 * 3 and b.kept.all()


def test_fresh_prompts_are_taken_in_the_walk_order():
    """With no history nothing is skipped: the sampled prompts are the first B of the rng's permutation."""
    for seed in (0, 1, 2):
        a = allocate(GRESO(k=2, batch_size=4), bernoulli(np.full(10, 0.5), np.random.default_rng(9)), n_prompts=10,
                     rng=np.random.default_rng(seed), keys=np.arange(10))  # fmt: skip
        walk = np.random.default_rng(seed).permutation(10)
        assert set(np.flatnonzero(a.kept).tolist()) == set(walk[:4].tolist())
        assert a.stats["skipped"] == 0 and a.stats["filled"] == 0


def test_a_long_streak_is_skipped_more_often_than_a_fresh_prompt():
    """Pool {A with streak s, fresh F}, B = 1, 2000 seeds: A is sampled only when walked first and not skipped, so
    Pr(A) = ½·max(ρ^s, κ) — 1/32 at s = 4 all-wrong, 1/4 at s = 1 (ρ = 0.5) — and F the rest. Tolerance 4 SE of a
    binomial share (false failure < 1e-4 per check)."""
    n_seeds = 2000
    alloc, keys = GRESO(k=2, batch_size=1), np.array([0, 1])
    for s, want in ((4, 1 / 32), (1, 1 / 4)):
        state = state_of([0], [0], [s])
        # the selection is made in init (before any rollout), so the draw itself is not needed
        hits = sum(
            bool(alloc.init(Pool(2, keys, None, None, "01", np.random.default_rng([seed, 3])), state).selected[0])
            for seed in range(n_seeds)
        )
        se = math.sqrt(want * (1 - want) / n_seeds)
        assert abs(hits / n_seeds - want) < 4 * se, (s, hits)
        assert hits / n_seeds < 0.5  # the fresh prompt wins more often than it would by the walk alone


def test_pool_running_out_fills_with_the_skipped_prompts_in_walk_order():
    """All 7 streaked prompts skip with probability 1 (κ = 0, ρ_c^60 underflows); with 3 fresh ones and B = 5, the
    batch is the 3 fresh plus the first 2 streaked prompts of the walk: skipped = 5, filled = 2."""
    keys = np.arange(10)
    state = state_of(keys, [0, 0, 0] + [60] * 7, [0] * 10, p_c=0.05)
    for seed in (0, 1, 2, 3):
        a = allocate(GRESO(k=2, batch_size=5, min_keep=0.0), rows(dict.fromkeys(range(10), [1, 1])), n_prompts=10,
                     rng=np.random.default_rng(seed), keys=keys, state=state)  # fmt: skip
        walk = np.random.default_rng(seed).permutation(10)
        first_streaked = [int(i) for i in walk if i >= 3][:2]
        assert set(np.flatnonzero(a.kept).tolist()) == {0, 1, 2, *first_streaked}
        assert (a.stats["skipped"], a.stats["filled"], a.n_rollouts) == (5, 2, 10)
        # every unsampled prompt was walked and skipped: all five are passed over (the trainer drops them)
        np.testing.assert_array_equal(a.passed, a.counts == 0)


def test_skipped_counts_only_the_prompts_walked_before_the_batch_filled():
    """Prompts that skip for sure (κ = 0) and lie after the B-th taken prompt in the walk are not counted."""
    keys = np.arange(8)
    state = state_of(keys, [0, 0, 0, 0, 60, 60, 60, 60], [0] * 8, p_c=0.05)
    for seed in range(5):
        a = allocate(GRESO(k=2, batch_size=2, min_keep=0.0), rows(dict.fromkeys(range(8), [0, 1])), n_prompts=8,
                     rng=np.random.default_rng(seed), keys=keys, state=state)  # fmt: skip
        walk = np.random.default_rng(seed).permutation(8)
        end = [j for j, i in enumerate(walk) if i < 4][1]  # position of the 2nd fresh prompt
        assert a.stats["skipped"] == int(np.sum(walk[:end] >= 4)) and a.stats["filled"] == 0
        assert set(np.flatnonzero(a.kept).tolist()) == {int(i) for i in walk[: end + 1] if i < 4}
        # passed = the skipped prompts walked before the batch filled; the ones after the walk's end were not
        # reached (they go back to the trainer's queue), nor were the fresh ones after it
        assert set(np.flatnonzero(a.passed).tolist()) == {int(i) for i in walk[:end] if i >= 4}


# ----------------------------------------------------------------------------- streaks and adaptation


def test_streaks_grow_on_zero_variance_and_reset_on_a_mixed_group():
    """Every prompt is sampled (P = B): correct, correct, mixed, wrong, wrong gives (c, w) = (1,0), (2,0), (0,0),
    (0,1), (0,2); a correct group after a wrong streak resets w. Both reward ranges."""
    for rr, lo in (("01", 0.0), ("pm1", -1.0)):
        seq = [[1, 1], [1, 1], [1, lo], [lo, lo], [lo, lo], [1, 1]]
        want = [(1, 0), (2, 0), (0, 0), (0, 1), (0, 2), (1, 0)]
        state = None
        for t, (r, w) in enumerate(zip(seq, want, strict=True)):
            a = allocate(GRESO(k=2, batch_size=1), rows({0: r}), n_prompts=1, rng=np.random.default_rng(t),
                         keys=np.array([42]), reward_range=rr, state=state)  # fmt: skip
            state = a.state
            assert a.kept[0] and streaks(state, 42) == w, (rr, t)


def test_exploration_moves_towards_the_targets():
    """With a history: all groups correct (share 1 ≥ 1/12) lowers ρ_c by 0.01 and (no wrong group, 0 < 1/6) raises
    ρ_w; all wrong does the opposite; all mixed raises both. Stats report the new values and the shares."""
    keys = np.arange(4)
    for row, p_c, p_w, shares in [([1, 1], 0.49, 0.51, (1.0, 1.0, 0.0)), ([0, 0], 0.51, 0.49, (1.0, 0.0, 1.0)),
                                  ([0, 1], 0.51, 0.51, (0.0, 0.0, 0.0))]:  # fmt: skip
        a = allocate(GRESO(k=2, batch_size=4), rows(dict.fromkeys(range(4), row)), n_prompts=4,
                     rng=np.random.default_rng(0), keys=keys, reward_range="01",
                     state=state_of(keys, [0] * 4, [0] * 4))  # fmt: skip
        assert (a.state.p_explore_correct, a.state.p_explore_wrong) == (p_c, p_w)
        assert (a.stats["p_explore_correct"], a.stats["p_explore_wrong"]) == (p_c, p_w)
        assert (a.stats["zero_var_frac"], a.stats["all_correct_frac"], a.stats["all_wrong_frac"]) == shares


def test_exploration_is_frozen_until_some_pool_prompt_has_a_history():
    """First step (no pool prompt in the state, GRESO's first epoch): ρ stays at its configured start even though
    every group is all correct; the next step on the same prompts lowers ρ_c to 0.69 (start 0.7)."""
    alloc = GRESO(k=2, batch_size=3, p_explore_correct=0.7, p_explore_wrong=0.4)
    sample = rows(dict.fromkeys(range(3), [1, 1]))
    a = allocate(alloc, sample, n_prompts=3, rng=np.random.default_rng(0), keys=np.arange(3))
    assert (a.state.p_explore_correct, a.state.p_explore_wrong) == (0.7, 0.4)
    b = allocate(alloc, sample, n_prompts=3, rng=np.random.default_rng(1), keys=np.arange(3), state=a.state)
    assert (b.state.p_explore_correct, b.state.p_explore_wrong) == (0.7 - 0.01, 0.4 + 0.01)


def test_seven_correct_groups_reach_the_keep_floor():
    """Reference: after 7 all-correct groups at ρ_c = 0.5 (adaptation off) the skip probability is 1 − 0.01."""
    state = None
    for t in range(7):
        a = allocate(GRESO(k=8, batch_size=1, adapt_step=0.0), rows({0: [1] * 8}), n_prompts=1,
                     rng=np.random.default_rng(t), keys=np.array(["q7"]), reward_range="01", state=state)  # fmt: skip
        state = a.state
    assert streaks(state, "q7") == (7, 0) and state.p_explore_correct == 0.5
    q = skip_probability(state.streak_correct, state.streak_wrong, p_explore_correct=0.5, p_explore_wrong=0.5)
    np.testing.assert_allclose(q, [0.99], rtol=0, atol=1e-15)


# ----------------------------------------------------------------------------- state


def run_steps(alloc: GRESO, state, steps: range, p: np.ndarray, keys: np.ndarray):
    """Steps with per-step rngs (pool and sampler), as the trainer draws them; returns (counts per step, state)."""
    out = []
    for t in steps:
        perm = np.random.default_rng([t, 7]).permutation(len(keys))
        a = allocate(alloc, bernoulli(p[perm], np.random.default_rng([t, 8])), n_prompts=len(keys),
                     rng=np.random.default_rng([t, 9]), keys=keys[perm], reward_range="01", state=state)  # fmt: skip
        out.append(keys[perm][a.kept].tolist())
        state = a.state
    return out, state


def test_state_round_trips_and_a_resumed_run_equals_the_uninterrupted_one():
    """6 steps straight vs 3 steps, JSON (through the trainer's ``state_to_json``), 3 steps: the same prompts are
    sampled each step and the final states are identical; the round trip itself is exact (dtypes included)."""
    rng = np.random.default_rng(4)
    n = 40
    p = rng.choice([0.0, 1.0, 0.5], n)
    for keys in (np.arange(100, 100 + n), np.array([f"p{i:03d}" for i in range(n)])):
        alloc = GRESO(k=4, batch_size=10)
        straight, final = run_steps(alloc, None, range(6), p, keys)
        first, mid = run_steps(alloc, None, range(3), p, keys)
        restored = state_from_json(json.loads(json.dumps(state_to_json(mid))))
        assert isinstance(restored, GresoState) and restored.to_dict() == mid.to_dict()
        for name in ("keys", "streak_correct", "streak_wrong"):
            np.testing.assert_array_equal(getattr(restored, name), getattr(mid, name))
            assert getattr(restored, name).dtype == getattr(mid, name).dtype
        rest, resumed = run_steps(alloc, restored, range(3, 6), p, keys)
        assert first + rest == straight
        assert resumed.to_dict() == final.to_dict()
        assert final.streak_correct.max() > 0 and final.p_explore_correct != 0.5  # the run exercised the state


def test_empty_state_round_trips():
    """The empty state (and its ρ) survives to_dict/from_dict."""
    s = GresoState.from_dict(json.loads(json.dumps(GresoState.empty(0.3, 0.6).to_dict())))
    assert s.keys.size == 0 and (s.p_explore_correct, s.p_explore_wrong) == (0.3, 0.6)
    with pytest.raises(ValueError, match="streaks"):
        GresoState.from_dict({"keys": [1, 2], "streak_correct": [0], "streak_wrong": [0, 0],
                              "p_explore_correct": 0.5, "p_explore_wrong": 0.5})  # fmt: skip


# ----------------------------------------------------------------------------- errors and registry


def test_missing_or_repeated_keys_and_a_foreign_state_raise():
    """No keys, repeated keys and a state of another allocator each raise a ValueError naming the problem."""
    sample = rows(dict.fromkeys(range(3), [0, 1]))
    with pytest.raises(ValueError, match="greso keeps per-prompt state"):
        allocate(GRESO(k=2), sample, n_prompts=3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="distinct pool keys"):
        allocate(GRESO(k=2), sample, n_prompts=3, rng=np.random.default_rng(0), keys=np.array([1, 1, 2]))
    with pytest.raises(ValueError, match="GresoState"):
        allocate(GRESO(k=2), sample, n_prompts=3, rng=np.random.default_rng(0), keys=np.arange(3), state={"a": 1})


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"k": 1}, "k must"),
        ({"k": True}, "k must"),
        ({"batch_size": 0}, "batch_size"),
        ({"p_explore_correct": 1.5}, "p_explore_correct"),
        ({"p_explore_wrong": -0.1}, "p_explore_wrong"),
        ({"target_correct": 2.0}, "target_correct"),
        ({"target_wrong": float("nan")}, "target_wrong"),
        ({"adapt_step": -0.01}, "adapt_step"),
        ({"p_explore_min": 0.6}, "p_explore_min"),
        ({"p_explore_max": 0.4}, "p_explore_max"),
        ({"p_explore_min": 0.5, "p_explore_max": 0.4}, "p_explore_min"),
        ({"min_keep": 1.01}, "min_keep"),
        ({"min_keep": True}, "min_keep"),
        ({"adapt_step": "0.01"}, "adapt_step"),
    ],
)
def test_bad_options_raise_naming_the_option(options, match):
    """Each invalid option raises a ValueError that names it."""
    with pytest.raises(ValueError, match=match):
        GRESO(**options)


def test_registry_builds_greso_by_name_with_the_reference_defaults():
    """``greso`` is registered; get_allocator passes options through; the defaults are GRESO's."""
    assert ALLOCATORS["greso"].cls is GRESO
    alloc = get_allocator("greso", k=4, batch_size=8)
    assert isinstance(alloc, GRESO) and (alloc.k, alloc.batch_size) == (4, 8)
    d = GRESO()
    assert (d.k, d.p_explore_correct, d.p_explore_wrong, d.adapt_step, d.p_explore_min, d.p_explore_max,
            d.min_keep) == (8, 0.5, 0.5, 0.01, 0.05, 0.95, 0.01)  # fmt: skip
    assert d.target_correct == pytest.approx(0.25 / 3) and d.target_wrong == pytest.approx(0.25 * 2 / 3)
    with pytest.raises(ValueError, match="no option"):
        get_allocator("greso", group_size=4)
