"""Claims about the ``oracle`` prior (``v05.priors.oracle``): measured pass rates from a bound sampler, or an error."""

import json

import numpy as np
import pytest

from v05.priors import make_provider


class _Sampler:
    """A fake oracle sampler: a fixed number of successes out of m per prompt; records the draws it was asked for."""

    def __init__(self, wins: dict[str, int], m: int) -> None:
        self.wins, self.m, self.draws = wins, m, []

    def __call__(self, ids: list[str], draw: int) -> tuple[np.ndarray, np.ndarray]:
        self.draws.append(draw)
        return np.array([self.wins[i] for i in ids], float), np.full(len(ids), float(self.m))


def test_oracle_predicts_each_prompts_measured_pass_rate_and_counts_its_rollouts():
    """V = 2(s + 1/2)/(m + 1) − 1 per prompt; the extra rollouts are counted apart; the draw is the provider's step."""
    prov = make_provider("oracle", rollouts=4)
    sampler = _Sampler({"a": 0, "b": 4, "c": 1}, m=4)
    prov.bind_sampler(sampler)
    pred = prov.predict(["a", "b", "c"], ["a", "b", "c"])
    np.testing.assert_allclose(pred.pass_rate, [0.5 / 5, 4.5 / 5, 1.5 / 5])
    assert prov.oracle_rollouts_ == 12
    prov.update(["a", "b", "c"], ["a", "b", "c"], np.array([-1.0, 1.0, -1.0]), np.ones(3), step=7)
    prov.predict(["a"], ["a"])
    assert sampler.draws == [0, 7]  # a resumed run (the step restored) draws the same rollouts
    other = make_provider("oracle", rollouts=4)
    other.load_state_dict(json.loads(json.dumps(prov.state_dict())))
    assert (other.oracle_rollouts_, other.step_) == (16, 7)


def test_an_unbound_oracle_is_an_error_not_a_prior():
    """Only the trainer can draw the oracle's rollouts: anywhere else predicting is a RuntimeError (never 0.5)."""
    with pytest.raises(RuntimeError, match="only v05 train binds"):
        make_provider("oracle").predict(["a"], ["a"])
    with pytest.raises(ValueError, match="rollouts"):
        make_provider("oracle", rollouts=0)
