"""DPS (SPEC §5, methods-siblings.md §5.2): the HMM update against loop oracles, top-B selection, persistence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from v05.allocation import Fixed, allocate
from v05.allocation.dps import DPS, PARTIAL, SOLVED, UNSOLVED, DpsState, hmm_propagate, hmm_update


def oracle_update(alpha, source, observed, lambda_, alpha0):
    """Loop form of one DPS step for an observed prompt (task_sampler.py, written out index by index; ``source`` is
    its ``pis_before``: the last observed state, one-hot, or the propagated belief)."""
    alpha, belief = np.array(alpha, float), np.array(source, float)
    p = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            p[i, j] = alpha[i, j] / sum(alpha[r, j] for r in range(3))
    xi = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            xi[i, j] = (1.0 if i == observed else 0.0) * belief[j] * p[i, j]
    xi /= xi.sum()
    new_alpha = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            new_alpha[i, j] = lambda_ * alpha[i, j] + (1 - lambda_) * alpha0 + xi[i, j]
    new_belief = np.array([new_alpha[i, observed] / sum(new_alpha[r, observed] for r in range(3)) for i in range(3)])
    return new_alpha, new_belief


def oracle_propagate(alpha, belief, lambda_, alpha0):
    """Loop form of the decay-and-predict step for an unselected prompt."""
    new_alpha = np.array([[lambda_ * alpha[i][j] + (1 - lambda_) * alpha0 for j in range(3)] for i in range(3)])
    col = [sum(new_alpha[r, j] for r in range(3)) for j in range(3)]
    new_belief = np.array([sum(new_alpha[i, j] / col[j] * belief[j] for j in range(3)) for i in range(3)])
    return new_alpha, new_belief


def bernoulli(p, rng, perm=None):
    """Sampler with pass rate p[perm[i]] for pool prompt i (0/1 rewards)."""
    perm = np.arange(len(p)) if perm is None else perm

    def sample(ids, counts):
        return (rng.random(int(counts.sum())) < np.repeat(p[perm[ids]], counts)).astype(float)

    return sample


def test_hmm_update_matches_loop_oracle():
    """Vectorised update = the index-by-index loop for random α, π and observed states."""
    rng = np.random.default_rng(0)
    n = 40
    alpha = rng.uniform(0.2, 5.0, (n, 3, 3))
    belief = rng.dirichlet(np.ones(3), n)
    observed = rng.integers(0, 3, n)
    got_a, got_b = hmm_update(alpha, belief, observed, lambda_=0.7, alpha0=1.0)
    for i in range(n):
        exp_a, exp_b = oracle_update(alpha[i], belief[i], observed[i], 0.7, 1.0)
        np.testing.assert_allclose(got_a[i], exp_a, rtol=1e-12)
        np.testing.assert_allclose(got_b[i], exp_b, rtol=1e-12)
    np.testing.assert_allclose(got_b.sum(axis=1), 1.0)


def test_hmm_propagate_matches_loop_oracle():
    """Vectorised decay + prediction = the loop form; beliefs stay distributions."""
    rng = np.random.default_rng(1)
    alpha = rng.uniform(0.2, 5.0, (20, 3, 3))
    belief = rng.dirichlet(np.ones(3), 20)
    got_a, got_b = hmm_propagate(alpha, belief, lambda_=0.5, alpha0=2.0)
    for i in range(20):
        exp_a, exp_b = oracle_propagate(alpha[i], belief[i], 0.5, 2.0)
        np.testing.assert_allclose(got_a[i], exp_a, rtol=1e-12)
        np.testing.assert_allclose(got_b[i], exp_b, rtol=1e-12)


def test_first_update_from_uniform_prior_by_hand():
    """From α = ones and π uniform, observing 'partial': ξ puts 1/3 on each (partial, j); α' = 1 + ξ (λ = 0.7);
    column 'partial' of α' is (1, 4/3, 1), so π' = (3/10, 4/10, 3/10)."""
    a, b = hmm_update(np.ones((1, 3, 3)), np.full((1, 3), 1 / 3), np.array([PARTIAL]), lambda_=0.7)
    np.testing.assert_allclose(a[0, PARTIAL], [4 / 3] * 3)
    np.testing.assert_allclose(b[0], [0.3, 0.4, 0.3])


def test_second_visit_credits_the_transition_from_the_last_observed_state():
    """Reference DPS (task_sampler.py, λ = 0.7): observe SOLVED, then PARTIAL at the next step.

    Visit 1 (α = ones, σ uniform): ξ[solved, j] = 1/3, α' = 1 + ξ → row 'solved' = 4/3; σ ← e_solved.
    Visit 2: ξ ∝ e_partial ⊗ e_solved ∘ P → all mass on (partial ← solved): ξ[1, 2] = 1.
    α'' = 0.7·α' + 0.3 + ξ; column 'partial' of α'' = 0.7·(1, 1, 4/3) + 0.3 = (1, 1, 1.2333) (ξ adds nothing there),
    so π'' = P(α'') e_partial = (1, 1, 1.2333)/3.2333 = (0.309, 0.309, 0.381).
    Crediting from the predicted belief instead (P·e_solved = (0.3, 0.3, 0.4)) gives (0.283, 0.368, 0.349)."""
    rows = iter([[1.0] * 4, [1.0, 0.0, 1.0, 0.0]])  # step 1: all pass (solved); step 2: mixed (partial)
    state = None
    for _ in range(2):
        a = allocate(
            DPS(batch_size=1, k=4, lambda_=0.7),
            lambda ids, counts: np.array(next(rows)),
            n_prompts=1,
            rng=np.random.default_rng(0),
            keys=np.array(["q"]),
            state=state,
            reward_range="01",
        )
        state = a.state
    np.testing.assert_allclose(state.belief[0], np.array([1, 1, 0.7 * 4 / 3 + 0.3]) / (2 + 0.7 * 4 / 3 + 0.3))
    np.testing.assert_allclose(state.belief[0], [0.309, 0.309, 0.381], atol=5e-4)
    np.testing.assert_allclose(state.source[0], [0, 1.0, 0])
    np.testing.assert_allclose(state.alpha[0][:, SOLVED], [1.0, 2.0, 0.7 * 4 / 3 + 0.3])  # ξ[partial, solved] = 1


def test_unselected_step_then_visit_credits_from_the_propagated_belief():
    """A prompt skipped for one step has σ = its belief before that step's propagation (the reference's
    ``pis_before = pi``); the next observed transition is credited from it (loop oracle on the stored values)."""
    alpha0 = np.full((1, 3, 3), 1.0)
    alpha0[0, :, SOLVED] = [1.0, 2.0, 3.0]
    state = DpsState(np.array([1, 2]), np.repeat(alpha0, 2, 0), np.array([[0.1, 0.2, 0.7]] * 2), np.eye(3)[[2, 2]])
    # step 1: only prompt 2 is in the pool → prompt 1 is propagated
    s1 = allocate(
        DPS(batch_size=1, k=2), lambda i, c: np.ones(2), n_prompts=1, rng=np.random.default_rng(0),
        keys=np.array([2]), state=state, reward_range="01",
    ).state  # fmt: skip
    i1 = int(np.flatnonzero(s1.keys == 1)[0])
    np.testing.assert_allclose(s1.source[i1], [0.1, 0.2, 0.7])
    # step 2: prompt 1 is selected and observed unsolved: ξ from σ = (0.1, 0.2, 0.7)
    s2 = allocate(
        DPS(batch_size=1, k=2), lambda i, c: np.zeros(2), n_prompts=1, rng=np.random.default_rng(0),
        keys=np.array([1]), state=s1, reward_range="01",
    ).state  # fmt: skip
    exp_a, exp_b = oracle_update(s1.alpha[i1], [0.1, 0.2, 0.7], UNSOLVED, 0.7, 1.0)
    j1 = int(np.flatnonzero(s2.keys == 1)[0])
    np.testing.assert_allclose(s2.alpha[j1], exp_a, rtol=1e-12)
    np.testing.assert_allclose(s2.belief[j1], exp_b, rtol=1e-12)


def test_selects_top_b_by_partial_belief_and_draws_k_each():
    """The B prompts with the highest stored P(partial) are selected; each gets k rollouts; all enter the loss."""
    rng = np.random.default_rng(2)
    keys = np.array([10, 11, 12, 13])
    belief = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.2, 0.6, 0.2], [0.1, 0.1, 0.8]])
    state = DpsState(keys, np.ones((4, 3, 3)), belief, np.full((4, 3), 1 / 3))
    a = allocate(
        DPS(batch_size=2, k=4),
        bernoulli(np.full(4, 0.5), rng),
        n_prompts=5,
        rng=rng,
        keys=np.array([13, 12, 99, 11, 10]),
        state=state,
        reward_range="01",
    )
    # pool: 13 (0.1), 12 (0.6), 99 unseen (1/3), 11 (0.8), 10 (0.1) → select 11 and 12
    np.testing.assert_array_equal(a.counts, [0, 4, 0, 4, 0])
    np.testing.assert_array_equal(a.kept, a.counts > 0)
    np.testing.assert_array_equal(a.passed, [True, False, True, False, True])  # the rejects: dropped by the trainer
    assert a.rounds == 1 and a.n_rollouts == 8


def test_ties_are_broken_by_the_rng():
    """With no history every prompt ties: the selection is a uniformly random subset, reproducible per seed."""
    picks = [
        np.flatnonzero(
            allocate(
                DPS(batch_size=3, k=2),
                bernoulli(np.full(10, 0.5), np.random.default_rng(9)),
                n_prompts=10,
                rng=np.random.default_rng(s),
                keys=np.arange(10),
            ).counts
        )
        for s in (0, 0, 1, 2)
    ]
    np.testing.assert_array_equal(picks[0], picks[1])
    assert len({tuple(p) for p in picks}) > 1


def test_state_persists_and_unselected_prompts_are_propagated():
    """After a step, selected prompts carry hmm_update's result, stored-but-unselected ones hmm_propagate's."""
    rng = np.random.default_rng(3)
    state = DpsState(np.array([5]), np.full((1, 3, 3), 2.0), np.array([[0.5, 0.0, 0.5]]), np.array([[0, 0, 1.0]]))
    a = allocate(
        DPS(batch_size=1, k=4, lambda_=0.5),
        bernoulli(np.ones(2), rng),
        n_prompts=2,
        rng=rng,
        keys=np.array([7, 8]),
        state=state,
        reward_range="01",
    )
    new = a.state
    assert isinstance(new, DpsState) and set(new.keys.tolist()) == {5, int(np.array([7, 8])[a.kept][0])}
    exp_a, exp_b = oracle_propagate(np.full((3, 3), 2.0), [0.5, 0.0, 0.5], 0.5, 1.0)
    i5 = int(np.flatnonzero(new.keys == 5)[0])
    np.testing.assert_allclose(new.alpha[i5], exp_a)
    np.testing.assert_allclose(new.belief[i5], exp_b)
    np.testing.assert_allclose(new.source[i5], [0.5, 0.0, 0.5])  # its belief before the propagation
    sel = int(np.flatnonzero(new.keys != 5)[0])
    exp_a, exp_b = oracle_update(np.ones((3, 3)), np.full(3, 1 / 3), SOLVED, 0.5, 1.0)  # p = 1: all succeed
    np.testing.assert_allclose(new.alpha[sel], exp_a)
    np.testing.assert_allclose(new.belief[sel], exp_b)
    np.testing.assert_allclose(new.source[sel], [0, 0, 1.0])  # the observed state, one-hot


def test_observed_state_from_success_rate_in_both_reward_ranges():
    """All-fail → unsolved, all-pass → solved, mixed → partial, the same in ±1 and 0/1 rewards."""
    for rr, lo in (("01", 0.0), ("pm1", -1.0)):
        rng = np.random.default_rng(4)
        rows = {0: [lo, lo], 1: [1.0, 1.0], 2: [1.0, lo]}

        def sample(ids, counts, rows=rows):
            return np.concatenate([np.array(rows[int(i)]) for i in ids])

        a = allocate(
            DPS(batch_size=3, k=2, lambda_=1.0), sample, n_prompts=3, rng=rng, reward_range=rr, keys=np.arange(3)
        )
        for i, z in ((0, UNSOLVED), (1, SOLVED), (2, PARTIAL)):
            np.testing.assert_allclose(
                a.state.belief[i], oracle_update(np.ones((3, 3)), np.full(3, 1 / 3), z, 1.0, 1.0)[1]
            )


def test_dps_beats_uniform_on_a_bimodal_pool():
    """At the same budget (32 prompts × 8) on a recurring bimodal pool (60 % p ∈ {0.02, 0.98}), DPS yields more
    mixed groups per step than uniform selection (Fixed on a shuffled pool), steps 20–59. Tolerance: 4 SE of the
    per-step difference (steps treated as independent; the observed margin is > 20 SE, so a false failure is
    < 1e-6 even if autocorrelation doubled the SE)."""
    rng = np.random.default_rng(5)
    n = 256
    p = np.where(rng.random(n) < 0.6, rng.choice([0.02, 0.98], n), rng.uniform(0.2, 0.8, n))
    out = {}
    for name, alloc in [("dps", DPS(batch_size=32, k=8)), ("fixed", Fixed(k=8, batch_size=32))]:
        state, mixed = None, []
        for step in range(60):
            perm = rng.permutation(n)
            a = allocate(
                alloc, bernoulli(p, rng, perm), n_prompts=n, rng=rng, keys=perm, reward_range="01", state=state
            )
            assert a.n_rollouts == 256
            state = a.state
            r, g, idx = a.loss_batch()
            lo, hi = np.full(len(idx), np.inf), np.full(len(idx), -np.inf)
            np.minimum.at(lo, g, r)
            np.maximum.at(hi, g, r)
            if step >= 20:
                mixed.append(np.sum(hi > lo))
        out[name] = np.array(mixed, float)
    diff = out["dps"] - out["fixed"]
    assert diff.mean() > 4 * diff.std(ddof=1) / math.sqrt(len(diff)), diff.mean()


def test_bad_config_and_state_raise():
    """Invalid options, a foreign state, and duplicate keys each raise a ValueError naming the problem."""
    for options, match in [
        ({"k": 0}, "k must"),
        ({"batch_size": 0}, "batch_size"),
        ({"lambda_": 1.5}, "lambda_"),
        ({"alpha0": 0.0}, "alpha0"),
    ]:
        with pytest.raises(ValueError, match=match):
            DPS(**options)
    rng = np.random.default_rng(6)
    with pytest.raises(ValueError, match="DpsState"):
        allocate(DPS(), bernoulli(np.ones(2), rng), n_prompts=2, rng=rng, state=[1, 2], keys=[1, 2])
    with pytest.raises(ValueError, match="stable key"):
        allocate(DPS(), bernoulli(np.ones(2), rng), n_prompts=2, rng=rng)
    with pytest.raises(ValueError, match="distinct"):
        allocate(DPS(), bernoulli(np.ones(2), rng), n_prompts=2, rng=rng, keys=[1, 1])
