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
# Malformed inputs for the fuzz tests (tests/fuzz/): every strategy below mixes valid values with broken ones.

BAD_FLOATS = (float("nan"), float("inf"), -float("inf"), 1e308, -1e308, 5e-324, -5e-324, 0.0, -0.0, 1e-300)
"""Floats that break naive arithmetic: NaN, ±inf, the largest and smallest doubles, signed zeros."""

UNICODE_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12
)
"""Any UTF-8-encodable text: emoji, combining marks, RTL, NUL, control characters, the empty string."""


def any_floats(*, lo: float | None = None, hi: float | None = None) -> st.SearchStrategy[float]:
    """A float, usually in [lo, hi] when given, often one of ``BAD_FLOATS`` or an arbitrary double."""
    parts = [st.sampled_from(BAD_FLOATS), st.floats(allow_nan=True, allow_infinity=True)]
    if lo is not None and hi is not None:
        parts = [st.floats(lo, hi), st.sampled_from((lo, hi, lo - 1e-9, hi + 1e-9)), *parts]
    return st.one_of(*parts)


def junk() -> st.SearchStrategy[object]:
    """Values of the wrong type for any parameter: None, strings, bools, containers, objects."""
    return st.one_of(
        st.none(),
        st.booleans(),
        UNICODE_TEXT,
        st.just([]),
        st.just({}),
        st.just([[1.0, 2.0], [3.0]]),  # ragged nested list
        st.just(object()),
        st.just(b"\x00\xff"),
        st.just(1j),
        st.integers(-(2**70), 2**70),
    )


def scalar_option(kind: str) -> st.SearchStrategy[object]:
    """An option value for a scalar parameter of ``kind`` (``"float"``, ``"int"``, ``"prob"``, ``"bool"``).

    Mostly in-range values (so the fuzzer reaches the arithmetic), with boundary values, non-finite numbers, huge
    integers and wrong types mixed in.
    """
    if kind == "int":
        good = st.one_of(st.integers(0, 64), st.sampled_from((-1, 0, 1, 2**31, 2**63, 2**64 + 1, -(2**63) - 1)))
    elif kind == "prob":
        good = st.one_of(st.floats(0.0, 1.0), st.sampled_from((0.0, 1.0, 1e-12, 1 - 1e-12)))
    elif kind == "bool":
        good = st.booleans()
    else:
        good = st.one_of(st.floats(1e-3, 100.0), st.floats(0.0, 1e308))
    return st.one_of(good, good, good, any_floats(), junk())


@st.composite
def float_arrays(draw, n: int, *, lo: float = -1.0, hi: float = 1.0):
    """(n,) values in [lo, hi] as a list, an array of some dtype, or broken (non-finite, out of range, wrong shape)."""
    base = np.array(draw(st.lists(st.floats(lo, hi), min_size=n, max_size=n)), dtype=np.float64)
    mutation = draw(
        st.sampled_from(
            ("none", "none", "none", "list", "float32", "int", "bool", "object", "str", "bad_value", "out_of_range",
             "2d", "scalar", "empty", "short", "long", "complex", "none_entry", "junk")
        )
    )  # fmt: skip
    if mutation == "none":
        return base
    if mutation == "list":
        return base.tolist()
    if mutation == "float32":
        return base.astype(np.float32)
    if mutation == "int":
        return np.rint(base).astype(np.int64)
    if mutation == "bool":
        return base > (lo + hi) / 2
    if mutation == "object":
        return base.astype(object)
    if mutation == "str":
        return base.astype(str)
    if mutation in ("bad_value", "out_of_range") and n:
        out = base.copy()
        i = draw(st.integers(0, n - 1))
        out[i] = draw(st.sampled_from(BAD_FLOATS)) if mutation == "bad_value" else draw(
            st.sampled_from((hi + 1e-9, lo - 1e-9, hi + 1.0, lo - 1.0, 2.0 * hi + 3.0))
        )
        return out
    if mutation == "2d":
        return base.reshape(1, -1) if draw(st.booleans()) else base[:, None]
    if mutation == "scalar":
        return float(base[0]) if n else 0.5
    if mutation == "empty":
        return np.zeros(0)
    if mutation == "short":
        return base[:-1]
    if mutation == "long":
        return np.concatenate([base, base[:1] if n else [0.0]])
    if mutation == "complex":
        return base.astype(np.complex128)
    if mutation == "none_entry":
        return [*base.tolist()[:-1], None] if n else [None]
    return draw(junk())


@st.composite
def group_ids(draw, group: np.ndarray):
    """A group id array: the valid one, or broken (negative, gaps, float, 2-D, strings, wrong length, huge ids)."""
    mutation = draw(
        st.sampled_from(
            ("none", "none", "none", "list", "float", "fractional", "negative", "gap", "huge", "str", "2d", "short",
             "nan", "bool", "uint8", "junk", "object")
        )
    )  # fmt: skip
    g = np.asarray(group, np.int64)
    if mutation == "none":
        return g
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
        out = g.copy()
        out[draw(st.integers(0, len(g) - 1))] = draw(st.sampled_from((10**6, 2**40, 2**62)))
        return out
    if mutation == "str":
        return g.astype(str)
    if mutation == "2d":
        return g[None, :]
    if mutation == "short":
        return g[:-1]
    if mutation == "nan":
        out = g.astype(np.float64)
        out[0] = np.nan
        return out
    if mutation == "bool":
        return g > 0
    if mutation == "uint8":
        return g.astype(np.uint8)
    if mutation == "object":
        return g.astype(object)
    return draw(junk())


@st.composite
def messy_batches(draw, *, max_groups: int = 6, max_size: int = 6):
    """``(rewards, group, n_groups, n_rollouts, reward_range)``: a ragged batch (singletons and empty groups likely),
    then, often, one malformed ingredient (see :func:`float_arrays` and :func:`group_ids`).

    The batch is binary or graded; ``n_groups`` and ``n_rollouts`` describe the *intended* batch (the arrays may
    disagree with them when mutated).
    """
    reward_range = draw(st.sampled_from(("pm1", "01", "pm1", "01", "0-1", "", None, 1)))
    lo = 0.0 if reward_range == "01" else -1.0
    rewards, group, _ = draw(
        ragged_batches(min_groups=1, max_groups=max_groups, min_size=1, max_size=max_size,
                       binary=draw(st.booleans()), reward_range="01" if lo == 0.0 else "pm1")
    )  # fmt: skip
    n_groups = int(group.max()) + 1
    if draw(st.booleans()):
        return rewards, group, n_groups, len(rewards), reward_range
    if draw(st.booleans()):
        r = draw(float_arrays(len(rewards), lo=lo, hi=1.0))
        if not isinstance(r, list | np.ndarray) or len(np.shape(r)) != 1 or len(r) != len(rewards):
            return r, group, n_groups, len(rewards), reward_range
        rewards = r
    return rewards, draw(group_ids(group)), n_groups, len(group), reward_range


def registry_names(valid: tuple[str, ...] | list[str]) -> st.SearchStrategy[object]:
    """A registered name, mostly, or a near miss (case, whitespace, unicode look-alike), empty, or not a string."""
    names = list(valid)
    near = [n.upper() for n in names] + [f" {n}" for n in names] + [n + "\u200b" for n in names]
    return st.one_of(
        st.sampled_from(names), st.sampled_from(names), st.sampled_from(names), st.sampled_from(near),
        UNICODE_TEXT, st.none(), st.integers(), st.just(["grpo"]),
    )  # fmt: skip


JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), UNICODE_TEXT
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(UNICODE_TEXT, children, max_size=3),
    max_leaves=6,
)
"""Any JSON value (NaN and ±Infinity included, as Python's json writes them), nested a little."""


@st.composite
def jsonl_text(draw, rows: st.SearchStrategy[object]) -> str:
    """JSON-lines text of some ``rows``, with broken lines mixed in (truncated, not JSON, blank, binary-ish)."""
    import json

    lines = []
    for row in draw(st.lists(rows, min_size=0, max_size=6)):
        kind = draw(st.sampled_from(("row", "row", "row", "row", "truncated", "garbage", "blank", "array", "nul")))
        text = json.dumps(row, ensure_ascii=draw(st.booleans()))
        if kind == "truncated":
            text = text[: max(1, len(text) // 2)]
        elif kind == "garbage":
            text = draw(UNICODE_TEXT) + "{"
        elif kind == "blank":
            text = " \t"
        elif kind == "array":
            text = json.dumps([row])
        elif kind == "nul":
            text = "\x00" + text
        lines.append(text)
    return "\n".join(lines) + draw(st.sampled_from(("\n", "", "\r\n")))


@st.composite
def prompt_keys(draw, n: int):
    """(n,) stable prompt keys: ints, unicode strings, or broken (duplicates, mixed types, None, NaN, 2-D, short)."""
    kind = draw(
        st.sampled_from(("int", "int", "str", "str", "dup", "mixed", "none", "nan", "2d", "short", "bytes", "float"))
    )
    if kind == "int":
        return np.asarray(draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n, unique=True)), np.int64)
    if kind == "str":
        return draw(st.lists(UNICODE_TEXT, min_size=n, max_size=n, unique=True))
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
    return [i + 0.5 for i in range(n)]
