"""Hypothesis strategies: ragged, shuffled flat batches."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


@st.composite
def ragged_batches(draw, *, min_groups=1, max_groups=8, min_size=1, max_size=9, binary=True, reward_range="pm1"):
    """(rewards (N,), group (N,), prior_g (G,)) with group sizes in [min_size, max_size], rollouts shuffled."""
    n_groups = draw(st.integers(min_groups, max_groups))
    sizes = draw(st.lists(st.integers(min_size, max_size), min_size=n_groups, max_size=n_groups))
    group = np.repeat(np.arange(n_groups), sizes)
    lo = -1.0 if reward_range == "pm1" else 0.0
    n = len(group)
    if binary:
        bits = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        rewards = np.where(np.array(bits, bool), 1.0, lo)
    else:
        rewards = np.array(draw(st.lists(st.floats(lo, 1.0), min_size=n, max_size=n)))
    prior = np.array(draw(st.lists(st.floats(lo, 1.0), min_size=n_groups, max_size=n_groups)))
    perm = np.array(draw(st.permutations(range(n))), dtype=np.int64)
    return rewards[perm], group[perm], prior


# ---------------------------------------------------------------------------------------------------------------------
# Malformed inputs for the fuzz tests (tests/fuzz/): valid values mixed with broken ones. Thousands of cases must stay
# cheap, so a strategy draws only a few *choices* (which mutation, which kind) and a seed; the arrays and the option
# values are then built by numpy from that seed (``messy_*`` helpers). Strategies are module-level constants.

BAD_FLOATS = (float("nan"), float("inf"), -float("inf"), 1e308, -1e308, 5e-324, -5e-324, 0.0, -0.0, 1e-300)
"""Floats that break naive arithmetic: NaN, ±inf, the largest and smallest doubles, signed zeros."""

JUNK_VALUES = (None, True, False, "", "1.0", "nan", "é😀", [], {}, [[1.0, 2.0], [3.0]], b"\x00\xff", 1j, object(),
               (1, 2), {"a": 1}, 2**70, -(2**70), 2**2000)  # fmt: skip
"""Values of the wrong type for any parameter: None, bools, strings, containers, ragged lists, objects, huge ints."""

OPTION_POOLS: dict[str, tuple[object, ...]] = {
    "float": (1e-3, 0.5, 1.0, 2.0, 7.5, 100.0, 1e6, 1e300, 1.7e308, 5e-324, 1e-300, 0.0, -1.0, 2**64),
    "int": (0, 1, 2, 3, 4, 8, 16, 64, -1, 2**31, 2**62, 2**63, 2**64 + 1, -(2**63) - 1, 1.5, 4.0),
    "prob": (0.0, 0.01, 0.3, 0.5, 0.7, 0.99, 1.0, 1e-300, 1 - 1e-16, -0.1, 1.1),
    "bool": (True, False, True, False, 0, 1, "yes"),
}
"""kind → option values: in range, at the edges, just outside."""

SEEDS = st.integers(0, 2**32 - 1)
"""The seed a fuzz case builds its arrays from (``np.random.default_rng(seed)``)."""
TEXT_SAMPLES = ("", " ", "é", "a\u0301", "😀", "\u202eevil", "\x00", "日本語", "\ufeffbom", "tab\tnew\nline", "ß" * 40)
"""Awkward unicode for keys and texts: empty, combining mark, emoji, RTL override, NUL, CJK, BOM, newline, long."""


def pick(rng: np.random.Generator, pool) -> object:
    """One element of ``pool`` (a sequence), uniformly."""
    return pool[int(rng.integers(len(pool)))]


def messy_option(rng: np.random.Generator, kind: str) -> object:
    """An option value of ``kind`` (``OPTION_POOLS``): usually from its pool, sometimes a bad float or junk."""
    u = rng.random()
    if u < 0.7:
        return pick(rng, OPTION_POOLS[kind])
    if u < 0.85:
        return pick(rng, BAD_FLOATS)
    return pick(rng, JUNK_VALUES)


FLOAT_MUTATIONS = ("list", "float32", "int", "bool", "object", "str", "bad_value", "out_of_range", "2d", "scalar",
                   "empty", "short", "long", "complex", "none_entry", "huge_int", "junk")  # fmt: skip


def mutate_floats(values: np.ndarray, mutation: str, rng: np.random.Generator, *, lo: float, hi: float) -> object:
    """``values`` (n,) in [lo, hi], broken as ``mutation`` says (one of ``FLOAT_MUTATIONS``, or ``"none"``)."""
    n = len(values)
    out = values.copy()
    if mutation == "none":
        return out
    if mutation == "list":
        return out.tolist()
    if mutation == "float32":
        return out.astype(np.float32)
    if mutation == "int":
        return np.rint(out).astype(np.int64)
    if mutation == "bool":
        return out > (lo + hi) / 2
    if mutation == "object":
        return out.astype(object)
    if mutation == "str":
        return out.astype(str)
    if mutation == "bad_value" and n:
        out[rng.integers(n)] = pick(rng, BAD_FLOATS)
        return out
    if mutation == "out_of_range" and n:
        out[rng.integers(n)] = pick(rng, (hi + 1e-9, lo - 1e-9, hi + 1.0, lo - 1.0, 2.0 * hi + 3.0))
        return out
    if mutation == "2d":
        return out.reshape(1, -1) if rng.random() < 0.5 else out[:, None]
    if mutation == "scalar":
        return float(out[0]) if n else 0.5
    if mutation == "empty":
        return np.zeros(0)
    if mutation == "short":
        return out[:-1]
    if mutation == "long":
        return np.concatenate([out, out[:1] if n else [0.0]])
    if mutation == "complex":
        return out.astype(np.complex128) + 1j
    if mutation == "none_entry":
        return [*out.tolist()[:-1], None]
    if mutation == "huge_int":
        return [*out.tolist()[:-1], 2**2000]
    return pick(rng, JUNK_VALUES)


def messy_floats(rng: np.random.Generator, n: int, *, lo: float = -1.0, hi: float = 1.0, p_bad: float = 0.35):
    """(n,) values in [lo, hi] (often at the ends), broken with probability ``p_bad`` (see :func:`mutate_floats`)."""
    values = rng.uniform(lo, hi, n) if rng.random() < 0.7 else rng.choice([lo, hi], n)
    return mutate_floats(values, pick(rng, FLOAT_MUTATIONS) if rng.random() < p_bad else "none", rng, lo=lo, hi=hi)


GROUP_MUTATIONS = ("list", "float", "fractional", "negative", "gap", "huge", "str", "2d", "short", "nan", "bool",
                   "uint8", "object", "junk")  # fmt: skip


def mutate_group(group: np.ndarray, mutation: str, rng: np.random.Generator) -> object:
    """A group id array broken as ``mutation`` says (one of ``GROUP_MUTATIONS``)."""
    g = np.asarray(group, np.int64).copy()
    if mutation == "list":
        return g.tolist()
    if mutation == "float":
        return g.astype(np.float64)
    if mutation == "fractional":
        return g + 0.5
    if mutation == "negative":
        return g - 1
    if mutation == "gap":
        return g * 2 + 1
    if mutation == "huge":
        g[rng.integers(len(g))] = pick(rng, (10**6, 2**40, 2**62, 2**63 - 1))
        return g
    if mutation == "str":
        return g.astype(str)
    if mutation == "2d":
        return g[None, :]
    if mutation == "short":
        return g[:-1]
    if mutation == "nan":
        out = g.astype(np.float64)
        out[rng.integers(len(g))] = np.nan
        return out
    if mutation == "bool":
        return g > 0
    if mutation == "uint8":
        return g.astype(np.uint8)
    if mutation == "object":
        return g.astype(object)
    return pick(rng, JUNK_VALUES)


def ragged_arrays(rng: np.random.Generator, *, max_groups: int = 6, max_size: int = 6, lo: float = -1.0):
    """A shuffled ragged batch ``(rewards (N,), group (N,), prior (G,))``, binary or graded; singleton and all-equal
    groups and priors at the ends of the range are common."""
    n_groups = int(rng.integers(1, max_groups + 1))
    sizes = rng.integers(1, max_size + 1, n_groups)
    sizes[rng.random(n_groups) < 0.25] = 1  # singleton groups
    group = rng.permutation(np.repeat(np.arange(n_groups), sizes))
    if rng.random() < 0.6:
        rewards = np.where(rng.random(len(group)) < rng.random(), 1.0, lo)
    else:
        rewards = rng.uniform(lo, 1.0, len(group))
    constant = (rng.random(n_groups) < 0.3)[group]  # all-equal groups
    rewards = np.where(constant, np.where(rng.random(n_groups) < 0.5, 1.0, lo)[group], rewards)
    prior = rng.uniform(lo, 1.0, n_groups)
    prior[rng.random(n_groups) < 0.2] = pick(rng, (lo, 1.0))
    return rewards, group.astype(np.int64), prior


@st.composite
def valid_batches(draw, *, max_groups: int = 6, max_size: int = 6, reward_range: str | None = None):
    """``(rewards, group, prior, reward_range)``: a valid ragged batch (binary or graded, singletons, all-equal)."""
    reward_range = reward_range or draw(st.sampled_from(("pm1", "01")))
    rng = np.random.default_rng(draw(SEEDS))
    lo = 0.0 if reward_range == "01" else -1.0
    return (*ragged_arrays(rng, max_groups=max_groups, max_size=max_size, lo=lo), reward_range)


BATCH_MUTATIONS = ("none",) * 10 + tuple(f"rewards:{m}" for m in FLOAT_MUTATIONS) + tuple(
    f"group:{m}" for m in GROUP_MUTATIONS) + ("range:0-1", "range:", "range:None", "range:1", "range:list")  # fmt: skip
"""What :func:`messy_batches` breaks: nothing (a third of the cases), the rewards, the group ids or the range."""
_BATCH_MUTATION = st.sampled_from(BATCH_MUTATIONS)
_RANGE = st.sampled_from(("pm1", "01"))


def messy_batch(rng: np.random.Generator, mutation: str, reward_range: str, *, max_groups: int = 6,
                max_size: int = 6):  # fmt: skip
    """``(rewards, group, n_groups, n_rollouts, reward_range)`` broken as ``mutation`` (``BATCH_MUTATIONS``) says."""
    lo = 0.0 if reward_range == "01" else -1.0
    rewards, group, _ = ragged_arrays(rng, max_groups=max_groups, max_size=max_size, lo=lo)
    n_groups, n_rollouts = int(group.max()) + 1, len(group)
    what, _, how = mutation.partition(":")
    if what == "rewards":
        rewards = mutate_floats(rewards, how, rng, lo=lo, hi=1.0)
    elif what == "group":
        group = mutate_group(group, how, rng)
    elif what == "range":
        reward_range = {"None": None, "1": 1, "list": ["pm1"]}.get(how, how)
    return rewards, group, n_groups, n_rollouts, reward_range


@st.composite
def messy_batches(draw, *, max_groups: int = 6, max_size: int = 6):
    """A ragged batch, valid in a third of the cases, else with one broken ingredient (see :func:`messy_batch`)."""
    return messy_batch(np.random.default_rng(draw(SEEDS)), draw(_BATCH_MUTATION), draw(_RANGE),
                       max_groups=max_groups, max_size=max_size)  # fmt: skip


def registry_names(valid) -> st.SearchStrategy[object]:
    """A registered name, mostly, or a near miss (case, whitespace, a zero-width space), unicode, or not a string."""
    names = list(valid)
    near = [n.upper() for n in names] + [f" {n}" for n in names] + [n + "\u200b" for n in names]
    return st.sampled_from(names * 6 + near + ["", "é😀", None, 0, ["grpo"]])


KEY_KINDS = ("int", "int", "str", "str", "dup", "mixed", "none", "nan", "2d", "short", "bytes", "float", "bool")


def messy_keys(rng: np.random.Generator, n: int, kind: str | None = None) -> object:
    """(n,) stable prompt keys of ``kind`` (``KEY_KINDS``; drawn when None): ints or unicode strings, or broken
    (duplicates, mixed ints and strings, None, NaN, 2-D, too short, bytes, floats, bools)."""
    kind = kind or pick(rng, KEY_KINDS)
    if kind == "int":
        return rng.choice(2**62, size=n, replace=False).astype(np.int64) - 2**61
    if kind == "str":
        return [f"{pick(rng, TEXT_SAMPLES)}{i}" for i in range(n)]
    if kind == "dup":
        return ["k"] * n
    if kind == "mixed":
        return [i if i % 2 else f"p{i}" for i in range(n)]
    if kind == "none":
        return [None, *range(n - 1)]
    if kind == "nan":
        return [float("nan"), *map(float, range(n - 1))]
    if kind == "2d":
        return np.arange(n)[None, :]
    if kind == "short":
        return list(range(n - 1))
    if kind == "bytes":
        return [f"b{i}".encode() for i in range(n)]
    if kind == "bool":
        return [bool(i % 2) for i in range(n)]
    return [i + 0.5 for i in range(n)]


LINE_KINDS = ("truncated", "garbage", "blank", "array", "nul", "bom")


def jsonl_text(rng: np.random.Generator, rows: list[object], *, p_bad: float = 0.2) -> str:
    """JSON-lines text of ``rows``, each line broken with probability ``p_bad`` (truncated, not JSON, blank, a NUL,
    a BOM, wrapped in a list)."""
    import json

    lines = []
    for row in rows:
        kind = pick(rng, LINE_KINDS) if rng.random() < p_bad else "row"
        text = json.dumps(row, ensure_ascii=bool(rng.random() < 0.5))
        if kind == "truncated":
            text = text[: max(1, len(text) // 2)]
        elif kind == "garbage":
            text = pick(rng, TEXT_SAMPLES) + "{"
        elif kind == "blank":
            text = " \t"
        elif kind == "array":
            text = json.dumps([row])
        elif kind == "nul":
            text = "\x00" + text
        elif kind == "bom":
            text = "\ufeff" + text
        lines.append(text)
    return "\n".join(lines) + pick(rng, ("\n", "", "\r\n"))
