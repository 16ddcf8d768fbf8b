"""SARA (SPEC §5, methods-siblings.md §6.2): the closed-form P_eff, the commit/abandon/refill loop, budget, history."""

from __future__ import annotations

import math

import numpy as np
import pytest

from v05.allocation import Fixed, allocate
from v05.allocation.posterior import BetaHistory, BetaPosterior
from v05.allocation.sara import SARA, p_eff

# methods-siblings.md §6.2 calibration table: P_eff for G = 8 after m all-success probes
TABLE_PRIORS = [(1, 1), (2, 2), (4, 1), (8, 1), (16, 1)]
TABLE = np.array(
    [
        [0.778, 0.778, 0.667, 0.556, 0.444],
        [0.891, 0.891, 0.818, 0.727, 0.618],
        [0.665, 0.583, 0.500, 0.417, 0.333],
        [0.500, 0.438, 0.375, 0.312, 0.250],
        [0.333, 0.292, 0.250, 0.208, 0.167],
    ]
)


def replay(per_prompt: np.ndarray):
    """A sampler where rollout j of prompt i has reward per_prompt[i, j] (cycling), counted per prompt."""
    used = np.zeros(len(per_prompt), np.int64)

    def sample(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        out = []
        for i, c in zip(ids, counts, strict=True):
            cols = (used[i] + np.arange(c)) % per_prompt.shape[1]
            out.append(per_prompt[i, cols])
            used[i] += c
        return np.concatenate(out)

    return sample


def mixed_groups(a) -> int:
    """Number of kept groups whose rewards are not all equal."""
    r, g, idx = a.loss_batch()
    lo, hi = np.full(len(idx), np.inf), np.full(len(idx), -np.inf)
    np.minimum.at(lo, g, r)
    np.maximum.at(hi, g, r)
    return int(np.sum(hi > lo))


def test_p_eff_matches_calibration_table():
    """P_eff after m all-success probes (G = 8) reproduces the §6.2 table to its 3 decimals; all-failure probes
    give the same values with a and b swapped (symmetry)."""
    for row, (a, b) in enumerate(TABLE_PRIORS):
        m = np.arange(5.0)
        succ = p_eff(BetaPosterior(np.full(5, a, float), np.full(5, b, float)), m, m, group_size=8)
        fail = p_eff(BetaPosterior(np.full(5, b, float), np.full(5, a, float)), np.zeros(5), m, group_size=8)
        np.testing.assert_allclose(succ, TABLE[row], atol=6e-4)
        np.testing.assert_allclose(fail, succ, rtol=1e-12)


def test_p_eff_before_probes_matches_beta_binomial_integral():
    """Differential: m = 0 P_eff equals 1 − ∫(p^G + (1−p)^G) Beta(p; a, b) dp by numerical quadrature."""
    grid = np.linspace(0, 1, 200_001)
    for a, b, g in [(1.0, 1.0, 8), (2.5, 0.7 + 1, 4), (3.0, 9.0, 16), (1.2, 1.0, 2)]:
        log_norm = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
        dens = np.exp(
            (a - 1) * np.log(np.clip(grid, 1e-300, 1)) + (b - 1) * np.log(np.clip(1 - grid, 1e-300, 1)) - log_norm
        )
        f = dens * (grid**g + (1 - grid) ** g)
        integral = float(np.sum((f[1:] + f[:-1]) / 2 * np.diff(grid)))  # trapezoid rule (numpy < 2 has no trapezoid)
        got = p_eff(BetaPosterior(np.array([a]), np.array([b])), [0], [0], group_size=g)[0]
        assert got == pytest.approx(1 - integral, abs=1e-6)


def test_p_eff_mixed_probes_is_one_and_complete_agreeing_group_is_zero():
    """Mixed probes make the group effective (P_eff = 1); m = G agreeing outcomes make it surely ineffective."""
    belief = BetaPosterior(np.ones(3), np.ones(3))
    np.testing.assert_allclose(p_eff(belief, [1, 8, 0], [2, 8, 8], group_size=8), [1.0, 0.0, 0.0])


def test_saturated_prompts_are_probed_then_abandoned():
    """All-success prompts under a flat prior: P_eff 0.667 → 0.556 → 0.444 (m = 2, 3, 4) never reaches
    tau_hi = 0.7 nor tau_lo = 0.4, so each costs m_max = 4 probes, is abandoned, and nothing is kept."""
    rng = np.random.default_rng(0)
    n = 10
    a = allocate(
        SARA(batch_size=4), replay(np.ones((n, 1))), n_prompts=n, keys=np.arange(n), rng=rng, reward_range="01"
    )
    np.testing.assert_array_equal(a.counts, np.full(n, 4))
    assert not a.kept.any() and a.n_rollouts == 40
    alpha, beta = a.state.lookup(np.arange(n))
    np.testing.assert_allclose(alpha, 5.0)  # unseen prompts start at (1, 1): no discount, + 4 successes
    np.testing.assert_allclose(beta, 1.0)


def test_mixed_probes_commit_at_once_and_fill_the_group():
    """Prompts whose first two probes differ commit immediately: the first batch_size prompts get G rollouts in
    two rounds, the rest of the pool is never sampled."""
    rng = np.random.default_rng(1)
    n = 20
    a = allocate(
        SARA(batch_size=5, group_size=8),
        replay(np.tile([1.0, 0.0], (n, 1))),
        n_prompts=n,
        keys=np.arange(n),
        rng=rng,
        reward_range="01",
    )
    np.testing.assert_array_equal(a.counts, [8] * 5 + [0] * 15)
    assert a.kept.sum() == 5 and a.rounds == 2 and mixed_groups(a) == 5


def test_informative_history_abandons_after_the_first_probe():
    """A history saying 'solved' (Beta(16, 1) ⇒ P_eff 0.25 ≤ tau_lo after two successes) abandons after m0 = 2,
    and refills the slot from the pool until the pool runs out."""
    rng = np.random.default_rng(2)
    n = 6
    hist = BetaHistory.empty().update(np.arange(n), np.full(n, 15.0), np.full(n, 15.0), lambda_=1.0)
    a = allocate(
        SARA(batch_size=2),
        replay(np.ones((n, 1))),
        n_prompts=n,
        keys=np.arange(n),
        rng=rng,
        reward_range="01",
        state=hist,
    )
    np.testing.assert_array_equal(a.counts, np.full(n, 2))
    assert not a.kept.any()


def test_high_p_eff_commits_even_when_probes_agree():
    """With a Beta(2, 2) history, two agreeing probes leave P_eff = 0.818 ≥ tau_hi: the prompt commits and its
    full (all-equal) group is kept."""
    rng = np.random.default_rng(3)
    hist = BetaHistory.empty().update(np.array([0]), np.array([1.0]), np.array([2.0]), lambda_=1.0)
    a = allocate(
        SARA(batch_size=1),
        replay(np.ones((1, 1))),
        n_prompts=1,
        keys=np.arange(1),
        rng=rng,
        reward_range="01",
        state=hist,
    )
    assert a.counts[0] == 8 and a.kept[0] and mixed_groups(a) == 0


def test_budget_is_never_exceeded_and_unfinishable_commits_are_abandoned():
    """A budget too small to fill committed groups abandons them: rollouts ≤ budget and nothing half-filled is kept."""
    rng = np.random.default_rng(4)
    n = 30
    a = allocate(
        SARA(batch_size=10, budget=20),
        replay(np.tile([1.0, 0.0], (n, 1))),
        n_prompts=n,
        keys=np.arange(n),
        rng=rng,
        reward_range="01",
    )
    assert a.n_rollouts <= 20
    assert np.all(a.counts[a.kept] == 8)


def test_state_carries_history_across_steps():
    """The returned BetaHistory feeds the next step: a saturated prompt abandoned after 4 probes under the flat
    prior is abandoned after 3 the next step (λ = 1, tau_lo = 0.45)."""
    rng = np.random.default_rng(5)
    sample = replay(np.ones((1, 1)))
    sara = SARA(batch_size=1, lambda_=1.0, tau_lo=0.45)
    first = allocate(sara, sample, n_prompts=1, keys=np.arange(1), rng=rng, reward_range="01")
    second = allocate(sara, sample, n_prompts=1, keys=np.arange(1), rng=rng, reward_range="01", state=first.state)
    # step 1: Beta(1, 1): P_eff 0.667, 0.556, 0.444 ≤ 0.45 at m = 4 → history Beta(5, 1)
    # step 2: m = 2 → Beta(7, 1): 1 − 7/13 = 0.462; m = 3 → Beta(8, 1): 1 − 8/13 = 0.385 ≤ 0.45
    assert first.counts[0] == 4 and second.counts[0] == 3


def test_sara_beats_uniform_on_a_bimodal_pool():
    """At the same budget (256 rollouts, G = 8) on a recurring bimodal pool (60 % p ∈ {0.02, 0.98}), SARA yields
    more mixed groups per step and a higher mixed fraction than uniform (Fixed on a shuffled pool). Steps 20–59;
    the tolerance is 4 SE of the per-step difference (treating steps as independent; the observed margin is
    ≈ 12 SE, so a false failure is < 1e-6 even if autocorrelation doubled the SE)."""
    rng = np.random.default_rng(6)
    n = 256
    p = np.where(rng.random(n) < 0.6, rng.choice([0.02, 0.98], n), rng.uniform(0.2, 0.8, n))
    out = {}
    for name, alloc in [("sara", SARA(batch_size=32, group_size=8, budget=256)), ("fixed", Fixed(k=8, batch_size=32))]:
        state, mixed, frac = None, [], []
        for step in range(60):
            perm = rng.permutation(n)

            def sample(ids, counts, perm=perm):
                return (rng.random(int(counts.sum())) < np.repeat(p[perm[ids]], counts)).astype(float)

            a = allocate(alloc, sample, n_prompts=n, rng=rng, keys=perm, reward_range="01", state=state)
            assert a.n_rollouts <= 256
            state = a.state
            if step >= 20:
                mixed.append(mixed_groups(a))
                frac.append(mixed_groups(a) / max(a.kept.sum(), 1))
        out[name] = (np.array(mixed), np.array(frac))
    diff = out["sara"][0] - out["fixed"][0]
    assert diff.mean() > 4 * diff.std(ddof=1) / math.sqrt(len(diff)), diff.mean()
    dfrac = out["sara"][1] - out["fixed"][1]
    assert dfrac.mean() > 4 * dfrac.std(ddof=1) / math.sqrt(len(dfrac))


def test_non_binary_rewards_and_bad_state_are_rejected():
    """SARA needs binary rewards, a BetaHistory state, and distinct keys; each mistake names itself."""
    rng = np.random.default_rng(7)
    with pytest.raises(ValueError, match="binary"):
        allocate(
            SARA(batch_size=1), replay(np.full((2, 1), 0.5)), n_prompts=2, keys=np.arange(2), rng=rng, reward_range="01"
        )
    with pytest.raises(ValueError, match="BetaHistory"):
        allocate(
            SARA(),
            replay(np.ones((2, 1))),
            n_prompts=2,
            keys=np.arange(2),
            rng=rng,
            state={"alpha": 1},
        )
    with pytest.raises(ValueError, match="stable key"):
        allocate(SARA(), replay(np.ones((2, 1))), n_prompts=2, rng=rng)
    with pytest.raises(ValueError, match="alpha0"):
        allocate(
            SARA(alpha0=2.0), replay(np.ones((2, 1))), n_prompts=2, rng=rng, keys=[0, 1], state=BetaHistory.empty()
        )
    with pytest.raises(ValueError, match="distinct"):
        allocate(SARA(), replay(np.ones((2, 1))), n_prompts=2, rng=rng, keys=[3, 3])


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"group_size": 1}, "group_size"),
        ({"m0": 0}, "m0"),
        ({"m0": 3, "m_max": 2}, "m_max"),
        ({"m_max": 9}, "group_size"),
        ({"tau_lo": 0.8, "tau_hi": 0.7}, "tau_lo"),
        ({"tau_hi": 1.5}, "tau_hi"),
        ({"budget": 0}, "budget"),
        ({"lambda_": 0.0}, "lambda_"),
        ({"alpha0": -1.0}, "alpha0"),
        ({"order": "sorted"}, "order"),
        ({"batch_size": 2.0}, "batch_size"),
    ],
)
def test_bad_config_raises(options, match):
    """Invalid SARA options raise a ValueError naming the option."""
    with pytest.raises(ValueError, match=match):
        SARA(**options)


def test_p_eff_bad_input():
    """p_eff rejects successes outside [0, m], negative m and mismatched shapes."""
    belief = BetaPosterior(np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="successes"):
        p_eff(belief, [3, 0], [2, 2], group_size=8)
    with pytest.raises(ValueError, match="must match"):
        p_eff(belief, [0], [2], group_size=8)
