import numpy as np
import pytest
from hypothesis import given

from tests._oracles import eb_loop, v05_loop
from tests.strategies import ragged_batches
from v05.baselines import group_mean, leave_one_out, pseudo_count_fusion, v05_shrinkage
from v05.groups import segment_count, segment_mean

# SPEC §3.2 reference table (k = 4, ±1 rewards): rows v̄_4, columns V.
PRIORS = [-0.9, -0.5, 0.0, 0.5, 0.9]
TABLE = {
    -1.0: [-0.900, -0.500, -0.750, -0.833, -0.868],
    -0.5: [-0.900, -0.500, 0.000, -0.250, -0.321],
    0.0: [-0.278, -0.500, 0.000, 0.500, 0.278],
    0.5: [0.321, 0.250, 0.000, 0.500, 0.900],
    1.0: [0.868, 0.833, 0.750, 0.500, 0.900],
}


@pytest.mark.parametrize("vbar", sorted(TABLE))
def test_v05_shrinkage_reference_table(vbar):
    """V0.5 baselines reproduce SPEC §3.2's table to 3 decimals (e.g. v̄=−1, V=0: Δ̂²=1−¼=¾, ŵ=¾, b=−0.75)."""
    out = v05_shrinkage(np.full(5, vbar), np.array(PRIORS), np.full(5, 4.0))
    np.testing.assert_allclose(out.baseline, TABLE[vbar], atol=5e-4)


def test_v05_test_boundary_accepts_on_equality():
    """|v̄ − V| = 1/√k exactly is accepted (≤), so b = V: v̄ = 0.5, V = 0, k = 4."""
    out = v05_shrinkage(np.array([0.5]), np.array([0.0]), np.array([4.0]))
    assert not out.reject[0] and out.baseline[0] == 0.0 and out.weight[0] == 0.0


def test_v05_at_k1_damps_the_surprises_and_keeps_the_expected_outcomes():
    """docs/design.md's sparse-group case: at k = 1 the radius is 1, so an outcome on V's side is accepted (b = V) and
    a surprise is shrunk towards itself: V = −0.5, r = +1 gives Δ̂² = 1.5² − 1 = 1.25, ŵ = 1.25/2.25, b = 1/3 and
    A = 2/3 instead of r − V = 1.5; r = −1 at the same V keeps b = −0.5."""
    out = v05_shrinkage(np.array([1.0, -1.0]), np.array([-0.5, -0.5]), np.array([1.0, 1.0]))
    np.testing.assert_array_equal(out.reject, [True, False])
    np.testing.assert_allclose(out.weight, [1.25 / 2.25, 0.0])
    np.testing.assert_allclose(1.0 - out.baseline[0], 2.0 / 3.0)
    assert out.baseline[1] == -0.5


@given(ragged_batches())
def test_v05_bias_bound_property(batch):
    """|b − v̄_k| ≤ 1/√k for every group, whatever the prior (the paper's O(1/√k) bias bound)."""
    r, g, prior = batch
    k = segment_count(g).astype(float)
    vbar = segment_mean(r, g)
    out = v05_shrinkage(vbar, prior, k)
    assert np.all(np.abs(out.baseline - vbar) <= 1 / np.sqrt(k) + 1e-12)
    assert np.all((out.weight >= 0) & (out.weight <= 1))
    np.testing.assert_array_equal(out.reject, out.delta2 > 0)


@given(ragged_batches())
def test_v05_matches_loop_oracle(batch):
    """The vectorised shrinkage equals the per-group loop written from SPEC §3.1."""
    r, g, prior = batch
    out = v05_shrinkage(segment_mean(r, g), prior, segment_count(g).astype(float))
    np.testing.assert_allclose(out.baseline[g], v05_loop(r, g, prior), atol=1e-12)


def test_v05_hard_switch_and_plugin_noise():
    """hard: ŵ ∈ {0,1}; plugin σ² = 1 − V² = 0.19 at V = 0.9 rejects v̄ = 0.5 (0.16 > 0.19/4) unlike the bound."""
    hard = v05_shrinkage(np.array([-1.0, 0.5]), np.array([0.0, 0.5]), np.array([4.0, 4.0]), switch="hard")
    np.testing.assert_array_equal(hard.weight, [1.0, 0.0])
    np.testing.assert_array_equal(hard.baseline, [-1.0, 0.5])
    plug = v05_shrinkage(np.array([0.5]), np.array([0.9]), np.array([4.0]), noise="plugin")
    bound = v05_shrinkage(np.array([0.5]), np.array([0.9]), np.array([4.0]))
    assert plug.reject[0] and not bound.reject[0]


def test_leave_one_out_hand_values_and_singleton():
    """r = [1,0,0,1]: LOO (2 − r)/3 = [1/3, 2/3, 2/3, 1/3]; a singleton's baseline is its own reward."""
    r, g = np.array([1.0, 0, 0, 1, 0.3]), np.array([0, 0, 0, 0, 1])
    np.testing.assert_allclose(leave_one_out(r, g), [1 / 3, 2 / 3, 2 / 3, 1 / 3, 0.3])
    np.testing.assert_allclose(group_mean(r, g), [0.5] * 4 + [0.3])


def test_pseudo_count_hand_values():
    """STYLE's example: r = [1,0,0,1], p̂ = 0.5, κ = 2: plain b = (1 + 2)/(2 + 4) = 0.5; LOO b₀ = (1 + 2 − 1)/5 = 0.4."""
    r, g = np.array([1.0, 0, 0, 1]), np.zeros(4, np.int64)
    np.testing.assert_allclose(pseudo_count_fusion(r, g, np.array([0.5]), np.array([2.0])), [0.5] * 4)
    loo = pseudo_count_fusion(r, g, np.array([0.5]), np.array([2.0]), leave_one_out=True)
    np.testing.assert_allclose(loo, [0.4, 0.6, 0.6, 0.4])


@given(ragged_batches())
def test_pseudo_count_matches_loop_and_limits(batch):
    """Equals the loop oracle; n0 = 0 gives the (LOO) group mean, n0 → ∞ gives V (κ-limits)."""
    r, g, prior = batch
    n_g = len(prior)
    for loo in (False, True):
        b = pseudo_count_fusion(r, g, prior, np.full(n_g, 1.7), leave_one_out=loo)
        np.testing.assert_allclose(b, eb_loop(r, g, prior, 1.7, loo=loo), atol=1e-12)
    np.testing.assert_allclose(pseudo_count_fusion(r, g, prior, np.zeros(n_g)), group_mean(r, g), atol=1e-12)
    multi = segment_count(g)[g] > 1
    np.testing.assert_allclose(
        pseudo_count_fusion(r, g, prior, np.zeros(n_g), leave_one_out=True)[multi],
        leave_one_out(r, g)[multi],
        atol=1e-12,
    )
    for loo in (False, True):
        big = pseudo_count_fusion(r, g, prior, np.full(n_g, 1e12), leave_one_out=loo)
        np.testing.assert_allclose(big, prior[g], atol=1e-9)
