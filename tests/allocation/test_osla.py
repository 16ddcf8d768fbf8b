"""OSLA (SPEC §3.3): the stopping rule, its round schedules, the global-budget variant and its fill, and bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from v05.allocation import allocate
from v05.allocation.osla import OSLA, osla_gain, osla_stop_k

C, K_INIT, K_MAX = 0.0039, 4, 16


def bernoulli(p: np.ndarray, rng: np.random.Generator, reward_range: str = "pm1"):
    """A sampler: rollouts of prompt i succeed with probability p[i]."""

    def sample(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        r = (rng.random(int(counts.sum())) < np.repeat(p[ids], counts)).astype(np.float64)
        return 2 * r - 1 if reward_range == "pm1" else r

    return sample


def streams(seqs: np.ndarray):
    """A sampler replaying fixed per-prompt reward sequences (P, L) in order: rollout j of prompt i is seqs[i, j]."""
    used = np.zeros(len(seqs), np.int64)

    def sample(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        out = np.concatenate([seqs[i, used[i] : used[i] + c] for i, c in zip(ids, counts, strict=True)])
        used[ids] += counts
        return out

    return sample


def oracle_k(rewards: np.ndarray, prior: float, c: float = C, k_init: int = K_INIT, k_max: int = K_MAX) -> int:
    """The paper's per-prompt loop (methods-v05-v0.md §1.9), written plainly: buy one rollout while it pays."""
    k = k_init
    while True:
        vbar = float(np.mean(rewards[:k]))
        d2 = max(0.0, (vbar - prior) ** 2 - 1.0 / k)
        if d2 == 0:
            return k
        gain = d2 / (1 + k * d2) - d2 / (1 + (k + 1) * d2)
        if k >= k_max or gain <= c:
            return k
        k += 1


def test_stop_k_matches_spec_table():
    """The predicted stopping k under fixed Δ̂² reproduces SPEC §3.3's table (c = 0.0039, k 4 → 16)."""
    delta2 = [0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 10.0, 1e6]
    expected = [4, 4, 4, 6, 12, 14, 15, 16, 16, 16]
    np.testing.assert_array_equal(osla_stop_k(delta2, 4, c=C, k_max=K_MAX), expected)


def test_stop_k_useless_prior_crosses_c_between_15_and_16():
    """As Δ̂² → ∞, gain(k) → 1/(k(k+1)): 1/240 > c > 1/272, so the rule stops at exactly 16 (and 15 if k_max=15)."""
    assert osla_gain(np.array([1e9]), 15)[0] == pytest.approx(1 / 240, rel=1e-6)
    assert 1 / 240 > C > 1 / 272
    assert osla_stop_k(1e9, 4, k_max=15)[0] == 15


def test_stop_k_is_the_first_k_where_gain_drops_to_c():
    """Differential: k* equals a scalar scan of the rule over a grid of Δ̂² and starting k."""
    for d2 in np.geomspace(1e-3, 50, 60):
        for k0 in (1, 4, 9, 16, 20):
            k = k0
            while k < K_MAX and d2 / (1 + k * d2) - d2 / (1 + (k + 1) * d2) > C:
                k += 1
            assert osla_stop_k(d2, k0)[0] == k, (d2, k0)


def test_plus_one_matches_the_per_prompt_loop():
    """With the same per-prompt reward streams, batched +1 rounds stop every prompt where the paper's loop does."""
    rng = np.random.default_rng(0)
    n = 300
    p = rng.uniform(size=n)
    prior = np.clip(2 * p - 1 + rng.normal(0, 0.6, n), -1, 1)  # a noisy prior: some accepted, some rejected
    seqs = np.where(rng.random((n, K_MAX)) < p[:, None], 1.0, -1.0)
    a = allocate(OSLA(), streams(seqs), n_prompts=n, rng=rng, prior=prior)
    expected = [oracle_k(seqs[i], prior[i]) for i in range(n)]
    np.testing.assert_array_equal(a.counts, expected)
    assert a.counts.max() > K_INIT, "the fixture should exercise extra rollouts"
    assert a.rounds <= 1 + (K_MAX - K_INIT)


def test_exact_prior_spends_about_k_init():
    """With an exact prior, a prompt gets extras only when round 0 rejects it: the extra fraction matches the
    exact binomial rejection probability within 4 SE (false-failure rate < 1e-4), and the mean k stays near 4."""
    rng = np.random.default_rng(1)
    n = 4000
    p = rng.uniform(size=n)
    prior = 2 * p - 1
    a = allocate(OSLA(), bernoulli(p, rng), n_prompts=n, rng=rng, prior=prior)
    j = np.arange(5)  # successes out of 4
    vbar = 2 * j[None, :] / 4 - 1  # (1, 5)
    d2 = np.maximum(0, (vbar - prior[:, None]) ** 2 - 1 / 4)  # (n, 5)
    go = (d2 > 0) & (osla_gain(d2, 4) > C)
    pmf = np.array([[math.comb(4, x) for x in j]]) * p[:, None] ** j * (1 - p[:, None]) ** (4 - j)
    q = float((pmf * go).sum(axis=1).mean())  # exact P(extra) averaged over the pool
    frac = float(np.mean(a.counts > K_INIT))
    se = math.sqrt(q * (1 - q) / n)
    assert abs(frac - q) < 4 * se, (frac, q, se)
    assert a.counts.min() == K_INIT and a.counts.mean() < K_INIT + 1.5


def test_useless_prior_goes_to_k_max():
    """A prior at the wrong end (V = +1 for p = 0) is rejected every round: every prompt reaches k_max = 16,
    in 13 rounds with +1 and in 2 rounds with the jump schedule."""
    rng = np.random.default_rng(2)
    n = 50
    sample = bernoulli(np.zeros(n), rng)
    plus = allocate(OSLA(), sample, n_prompts=n, rng=rng, prior=np.ones(n))
    jump = allocate(OSLA(schedule="jump"), sample, n_prompts=n, rng=rng, prior=np.ones(n))
    assert np.all(plus.counts == K_MAX) and plus.rounds == 1 + K_MAX - K_INIT
    assert np.all(jump.counts == K_MAX) and jump.rounds == 2


def test_useless_prior_statistically_approaches_k_max():
    """A far-off prior (V = +1, p ≤ 0.25, so |V − μ| ≥ 1.5) spends close to k_max: mean k > 15 (observed ≈ 15.8
    with SE ≈ 0.02, so a false failure needs a > 30 SE deviation)."""
    rng = np.random.default_rng(3)
    n = 2000
    p = rng.uniform(0.0, 0.25, n)
    a = allocate(OSLA(), bernoulli(p, rng), n_prompts=n, rng=rng, prior=np.ones(n))
    assert a.counts.mean() > 15


def test_reward_range_01_gives_the_same_counts():
    """The test runs in ±1 space: the same outcomes and prior in 0/1 give identical counts."""
    rng = np.random.default_rng(4)
    n = 200
    p, prior01 = rng.uniform(size=n), rng.uniform(size=n)
    seqs = (rng.random((n, K_MAX)) < p[:, None]).astype(float)
    a01 = allocate(OSLA(), streams(seqs), n_prompts=n, rng=rng, prior=prior01, reward_range="01")
    apm = allocate(OSLA(), streams(2 * seqs - 1), n_prompts=n, rng=rng, prior=2 * prior01 - 1)
    np.testing.assert_array_equal(a01.counts, apm.counts)


def test_jump_never_exceeds_k_max_and_keeps_all_rollouts():
    """The jump schedule caps at k_max; every sampled prompt (all of them) enters the loss."""
    rng = np.random.default_rng(5)
    n = 300
    p = rng.uniform(size=n)
    a = allocate(OSLA(schedule="jump"), bernoulli(p, rng), n_prompts=n, rng=rng, prior=rng.uniform(-1, 1, n))
    assert a.counts.max() <= K_MAX and a.counts.min() == K_INIT and a.kept.all()
    r, _, idx = a.loss_batch()
    assert len(r) == a.n_rollouts and len(idx) == n


def test_extra_budget_goes_to_the_largest_gain():
    """Global budget (ours): with one extra rollout per step, it goes to the prompt with the largest Δ̂² (gain
    grows with Δ̂²), and the extras never exceed the budget."""
    rng = np.random.default_rng(6)
    seqs = np.array([[1.0] * K_MAX, [1.0] * K_MAX, [1.0] * K_MAX])
    prior = np.array([0.0, -1.0, 1.0])  # Δ̂² = 1 − 1/4, 4 − 1/4, 0 at k = 4
    a = allocate(OSLA(extra_budget=1), streams(seqs), n_prompts=3, rng=rng, prior=prior)
    np.testing.assert_array_equal(a.counts, [4, 5, 4])
    p = rng.uniform(size=100)
    for budget in (0, 7, 50):
        b = allocate(
            OSLA(extra_budget=budget, c=0.0), bernoulli(p, rng), n_prompts=100, rng=rng, prior=rng.uniform(-1, 1, 100)
        )
        assert b.n_rollouts <= 100 * K_INIT + budget


def test_fill_spends_the_whole_budget_on_the_least_sampled_prompts():
    """fill=True (budget-neutral OSLA): exact priors (V = +1 against 4 × (+1): Δ̂² = 0) stop every prompt at k_init,
    so the rule spends nothing; the 5 extras go one at a time to the least-sampled prompt, ties by pool index:
    (4, 4, 4) → (5, 5, 5) → (6, 6, 5). Total 3·4 + 5 = 17 exactly; filled_rollouts = 5."""
    seqs = np.ones((3, K_MAX))
    a = allocate(OSLA(extra_budget=5, fill=True), streams(seqs), n_prompts=3, rng=np.random.default_rng(0),
                 prior=np.ones(3))  # fmt: skip
    np.testing.assert_array_equal(a.counts, [6, 6, 5])
    assert a.n_rollouts == 17 and a.stats["filled_rollouts"] == 5 and a.kept.all()


def test_fill_tops_up_after_the_rule_by_hand():
    """The rule first: prompt 1 (V = −1 against +1s: Δ̂² = 4 − 1/k) continues while gain(k) > c = 0.03 — gain(4) =
    0.0445, gain(5) = 0.0303, gain(6) = 0.0220 — so it buys 2 extras (k = 6); the other prompts are accepted at 4. Of
    extra_budget = 7, the fill spends the 5 left: (4, 6, 4) → (5, 6, 5) → (6, 6, 6) → (7, 6, 6). fill=False stops at
    (4, 6, 4) and reports no filled_rollouts."""
    assert osla_gain(4 - 1 / 5, 5) > 0.03 > osla_gain(4 - 1 / 6, 6)
    seqs, prior = np.ones((3, K_MAX)), np.array([1.0, -1.0, 1.0])
    filled = allocate(OSLA(c=0.03, extra_budget=7, fill=True), streams(seqs), n_prompts=3,
                      rng=np.random.default_rng(0), prior=prior)  # fmt: skip
    np.testing.assert_array_equal(filled.counts, [7, 6, 6])
    assert filled.n_rollouts == 12 + 7 and filled.stats["filled_rollouts"] == 5
    assert filled.stats["extra_rollouts"] == 7
    plain = allocate(OSLA(c=0.03, extra_budget=7), streams(seqs), n_prompts=3, rng=np.random.default_rng(0),
                     prior=prior)  # fmt: skip
    np.testing.assert_array_equal(plain.counts, [4, 6, 4])
    assert "filled_rollouts" not in plain.stats


def test_fill_respects_k_max_and_stops_early_only_there():
    """k_max = 5 with 3 prompts at k_init = 4 and extra_budget = 10: the fill can add one per prompt, so it stops at
    (5, 5, 5) = 15 < 12 + 10 (the documented only case below the budget)."""
    a = allocate(OSLA(k_max=5, extra_budget=10, fill=True), streams(np.ones((3, K_MAX))), n_prompts=3,
                 rng=np.random.default_rng(0), prior=np.ones(3))  # fmt: skip
    np.testing.assert_array_equal(a.counts, [5, 5, 5])
    assert a.stats["filled_rollouts"] == 3


def test_fill_total_is_exact_statistically():
    """On random pools, priors, budgets, k_max and both schedules: rollouts = min(B·k_init + extra_budget, B·k_max)
    exactly with fill=True (every step, 200 draws), and never more than k_max per prompt."""
    rng = np.random.default_rng(12)
    for _ in range(200):
        n, b, k_max = int(rng.integers(1, 40)), int(rng.integers(1, 40)), int(rng.integers(4, 12))
        budget = int(rng.integers(0, 120))
        schedule, c = str(rng.choice(["plus_one", "jump"])), float(rng.choice([0.0, 0.0039, 0.05]))
        alloc = OSLA(k_max=k_max, batch_size=b, extra_budget=budget, fill=True, schedule=schedule, c=c)
        a = allocate(alloc, bernoulli(rng.uniform(size=n), rng), n_prompts=n, rng=rng, prior=rng.uniform(-1, 1, n))
        bb = min(b, n)
        assert a.n_rollouts == min(bb * K_INIT + budget, bb * k_max)
        assert a.counts.max() <= k_max


def test_fill_needs_extra_budget():
    """fill=True without extra_budget has no total to fill to: a ValueError naming fill and extra_budget."""
    with pytest.raises(ValueError, match="fill=True needs extra_budget"):
        OSLA(fill=True)


def test_batch_size_samples_the_first_prompts():
    """batch_size limits OSLA to the first prompts of the pool; the rest are neither sampled nor kept."""
    rng = np.random.default_rng(7)
    a = allocate(OSLA(batch_size=3), bernoulli(np.full(5, 0.5), rng), n_prompts=5, rng=rng, prior=np.zeros(5))
    assert np.all(a.counts[3:] == 0) and np.all(a.counts[:3] >= K_INIT)
    np.testing.assert_array_equal(a.kept, [True, True, True, False, False])


def test_missing_prior_is_a_clear_error():
    """OSLA without a prior raises a ValueError that says how to pass one."""
    rng = np.random.default_rng(8)
    with pytest.raises(ValueError, match="osla needs a prior"):
        allocate(OSLA(), bernoulli(np.full(3, 0.5), rng), n_prompts=3, rng=rng)


def test_k_init_below_4_warns_not_fails():
    """k_init < 4 is allowed but warns (SPEC §3.2); k_init = 4 does not."""
    with pytest.warns(UserWarning, match="k_init=2"):
        OSLA(k_init=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        OSLA(k_init=4)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"k_init": 0}, "k_init"),
        ({"k_init": 4.0}, "k_init"),
        ({"k_max": 3}, "k_max"),
        ({"c": -1.0}, "c must"),
        ({"schedule": "double"}, "schedule"),
        ({"noise": "gauss"}, "noise"),
        ({"extra_budget": -1}, "extra_budget"),
        ({"batch_size": 0}, "batch_size"),
        ({"fill": "yes", "extra_budget": 4}, "fill"),
    ],
)
def test_bad_config_raises(options, match):
    """Invalid OSLA options raise a ValueError naming the option."""
    with pytest.raises(ValueError, match=match):
        OSLA(**options)


@pytest.mark.parametrize(
    ("args", "match"),
    [(([-0.1], 4), "delta2"), (([np.nan], 4), "delta2"), (([0.1], 0), "k must"), (([0.1], 2.5), "integers")],
)
def test_stop_k_bad_input(args, match):
    """osla_stop_k rejects negative/NaN Δ̂² and non-positive or non-integer k."""
    with pytest.raises(ValueError, match=match):
        osla_stop_k(*args)


def test_plugin_gain_uses_the_bernoulli_variance_of_the_prior():
    """noise="plugin": MSE_hat(k) = Δ̂²σ²/(σ² + kΔ̂²) with σ² = 1 − V², so gain = Δ̂⁴σ²/((σ² + kΔ̂²)(σ² + (k+1)Δ̂²)).
    Hand value: Δ̂² = 0.25, k = 4, σ² = 0.36 (V = 0.8): 0.0625·0.36/((0.36 + 1)(0.36 + 1.25)) = 0.010278; the bound
    form gives 0.0625/(2·2.25) = 0.013889. σ² → the limit Δ̂² → ∞ is σ²/(k(k + 1))."""
    np.testing.assert_allclose(osla_gain(0.25, 4, 0.36), 0.0625 * 0.36 / (1.36 * 1.61))
    np.testing.assert_allclose(osla_gain(0.25, 4), 0.0625 / (2 * 2.25))
    np.testing.assert_allclose(osla_gain(np.inf, 4, 0.36), 0.36 / 20)
    # in the allocator: V = 0.8 with 4 × (−1) rewards: v̄ = −1, (v̄ − V)² = 3.24, σ² = 0.36 → Δ̂² = 3.24 − 0.09 = 3.15;
    # the plug-in stopping k differs from the bound's (gain·σ² smaller): compare with osla_stop_k's scan by hand.
    seqs = -np.ones((1, 32))
    a = allocate(OSLA(noise="plugin", schedule="jump"), streams(seqs), n_prompts=1, rng=np.random.default_rng(0),
                 prior=[0.8])  # fmt: skip
    k, d2, s2 = 4, 3.15, 0.36
    while k < K_MAX and osla_gain(d2, k, s2) > C:
        k += 1
    assert a.counts[0] == k and k < K_MAX  # σ² = 0.36 stops earlier than the bound's 16


def test_osla_returns_its_step_statistics():
    """Allocation.stats: the rejection rate after round 0, extras, k histogram, mean ŵ and |b − v̄| (SPEC §3.3).
    Prompt 0: V = 0.9 against 4 × (+1) → accepted (|0.1| ≤ 0.5), stops at 4, ŵ = 0; prompt 1: V = 0.9 against
    4 × (−1): rejected, goes on."""
    seqs = np.stack([np.ones(32), -np.ones(32)])
    a = allocate(OSLA(), streams(seqs), n_prompts=2, rng=np.random.default_rng(0), prior=[0.9, 0.9])
    st = a.stats
    assert st["reject_rate"] == 0.5 and st["continued_frac"] == 0.5
    assert st["extra_rollouts"] == int(a.counts.sum()) - 8
    assert st["k_hist"][4] == 1 and sum(st["k_hist"]) == 2
    k1 = int(a.counts[1])
    d2 = (-1 - 0.9) ** 2 - 1 / k1
    w1 = d2 / (d2 + 1 / k1)
    np.testing.assert_allclose(st["mean_weight"], w1 / 2)
    np.testing.assert_allclose(st["mean_abs_shift"], (0.1 + (1 - w1) * 1.9) / 2)


def test_eb_guard_test_buys_extras_only_for_flagged_priors():
    """test="eb_guard": V = 0.9 with n0 = 20 predicts Beta–Binomial(4, 19, 1); 4 × (−1) has p ≈ 2e-5 < 0.01 → flagged;
    the group-mean gain σ²/(k(k + 1)) > c continues it (bound σ² = 1: to k = 15, where 1/(15·16) = 0.0042 > c
    → 16). 4 × (+1) is likely under the prior: stops at k_init. Without n0 it is a clear error."""
    seqs = np.stack([np.ones(32), -np.ones(32)])
    a = allocate(OSLA(test="eb_guard"), streams(seqs), n_prompts=2, rng=np.random.default_rng(0), prior=[0.9, 0.9],
                 n0=20.0)  # fmt: skip
    np.testing.assert_array_equal(a.counts, [4, 16])
    assert a.stats["reject_rate"] == 0.5
    with pytest.raises(ValueError, match="n0"):
        allocate(OSLA(test="eb_guard"), streams(seqs), n_prompts=2, rng=np.random.default_rng(0), prior=[0.9, 0.9])
    with pytest.raises(ValueError, match="test"):
        OSLA(test="bogus")
