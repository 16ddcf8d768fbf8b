import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._oracles import segment_var_loop
from tests.strategies import ragged_batches
from v05.groups import as_group, group_index, segment_count, segment_mean, segment_sum, segment_var


def test_segment_reductions_hand_values():
    """r = [1,0,0,1 | 1,1]: counts (4, 2), sums (2, 2), means (0.5, 1), unbiased vars (1/3, 0)."""
    r, g = np.array([1.0, 0, 0, 1, 1, 1]), np.array([0, 0, 0, 0, 1, 1])
    np.testing.assert_array_equal(segment_count(g), [4, 2])
    np.testing.assert_array_equal(segment_sum(r, g), [2, 2])
    np.testing.assert_array_equal(segment_mean(r, g), [0.5, 1.0])
    np.testing.assert_allclose(segment_var(r, g), [1 / 3, 0.0])


@given(ragged_batches(binary=False))
def test_segment_var_matches_loop(batch):
    """The vectorised two-pass variance equals np.var per group (ddof 0 and 1), nan where n ≤ ddof."""
    r, g, _ = batch
    for ddof in (0, 1):
        np.testing.assert_allclose(segment_var(r, g, ddof=ddof), segment_var_loop(r, g, ddof), atol=1e-12)


def test_two_pass_variance_is_stable_for_large_offsets():
    """A one-pass Σx² − (Σx)²/n would lose all digits at offset 1e9; the two-pass form keeps them."""
    x = 1e9 + np.array([0.0, 1.0, 2.0])
    np.testing.assert_allclose(segment_var(x, np.zeros(3, np.int64)), [1.0])


def test_group_index_first_appearance_and_roundtrip():
    """Dense ids follow first appearance; unique_uids[group] reproduces the uids."""
    uids = np.array(["p7", "p3", "p7", "x", "p3"])
    group, uniq = group_index(uids)
    np.testing.assert_array_equal(group, [0, 1, 0, 2, 1])
    np.testing.assert_array_equal(uniq[group], uids)


@given(st.lists(st.integers(-5, 5), min_size=1, max_size=40))
def test_group_index_relabelling_property(uids):
    """group_index maps equal uids to equal ids and distinct uids to distinct ids, ids dense in [0, G)."""
    group, uniq = group_index(np.array(uids))
    assert set(group.tolist()) == set(range(len(uniq)))
    np.testing.assert_array_equal(uniq[group], uids)


@pytest.mark.parametrize(
    ("group", "msg"),
    [([0, 0, 2], "empty group"), ([0, -1, 0], "non-negative"), ([0.5, 0, 0], "integers"), ([0, 0], "length")],
)
def test_as_group_rejects_bad_ids(group, msg):
    """Gaps, negative, non-integer ids and length mismatches raise ValueError naming the problem."""
    with pytest.raises(ValueError, match=msg):
        as_group(np.array(group), 3)
