"""Loop implementations that are obviously correct, for differential tests (never shipped in src/)."""

from __future__ import annotations

import numpy as np


def groups_of(group):
    return {g: np.flatnonzero(group == g) for g in np.unique(group)}


def grpo_loop(r, group, *, eps=1e-6, norm=True):
    """GRPO per group; singleton groups get A = 0 (v05's documented rule)."""
    a = np.zeros(len(r))
    for _, idx in groups_of(group).items():
        if len(idx) == 1:
            continue
        m, s = r[idx].mean(), r[idx].std(ddof=1)
        a[idx] = (r[idx] - m) / (s + eps) if norm else r[idx] - m
    return a


def rloo_loop(r, group):
    a = np.zeros(len(r))
    for _, idx in groups_of(group).items():
        n = len(idx)
        for i in idx:
            if n > 1:
                a[i] = r[i] - (r[idx].sum() - r[i]) / (n - 1)
    return a


def v05_loop(r, group, prior_g):
    """V0.5 shrinkage per group in ±1 space, written from SPEC §3.1 with plain Python floats."""
    b = np.zeros(len(r))
    for g, idx in groups_of(group).items():
        k = len(idx)
        vbar = float(sum(r[idx])) / k
        v = float(prior_g[g])
        delta2 = max(0.0, (vbar - v) ** 2 - 1.0 / k)
        w = delta2 / (delta2 + 1.0 / k)
        b[idx] = w * vbar + (1 - w) * v
    return b


def eb_loop(r, group, prior_g, n0, *, loo=False):
    b = np.zeros(len(r))
    for g, idx in groups_of(group).items():
        k, s = len(idx), float(sum(r[idx]))
        for i in idx:
            if loo:
                den = n0 + k - 1
                b[i] = (n0 * prior_g[g] + s - r[i]) / den if den > 0 else r[i]
            else:
                b[i] = (n0 * prior_g[g] + s) / (n0 + k)
    return b


def segment_var_loop(x, group, ddof=1):
    out = []
    for g in range(group.max() + 1):
        v = x[group == g]
        out.append(np.nan if len(v) <= ddof else float(np.var(v, ddof=ddof)))
    return np.array(out)


def dbb_loop(r01, group, keys, state, lam, a0, b0):
    """The methods-siblings.md §8 DBB reference loop (posterior mean, include_current=True); state: dict key->(a,b)."""
    base = np.zeros(len(r01))
    for g, idx in groups_of(group).items():
        k, n = r01[idx].sum(), len(idx)
        a, b = state.get(keys[g], (a0, b0))
        seen = keys[g] in state
        lam_g = lam if seen else 1.0
        a2, b2 = lam_g * a + (1 - lam_g) * a0 + k, lam_g * b + (1 - lam_g) * b0 + (n - k)
        state[keys[g]] = (a2, b2)
        base[idx] = a2 / (a2 + b2)
    return base
