r"""RBF kernel entries of a support buffer's prompts, kept across refits (the ``combined`` prior's Gram matrices).

A refit every step recomputed the whole (R, R) Gram matrix, mostly R² float64 exponentials, although only the
step's new prompts changed. :class:`RBFKernelCache` keeps the entries of prompts still in the buffer and computes
those of new prompts only, reusing the kernel rows ``predict`` computed for them before their outcomes arrived.

A provider restored from a checkpoint starts with an empty cache and must predict as the live one did, so each
entry has to be an exact function of its two rows, whatever the batch it was computed in. Rows are therefore
rounded to fixed point (:func:`fixed_point_rows`): all their inner products are exact in float64, in any
summation order, and the rest of an entry is elementwise. Deviation from :func:`v05.priors.heads.rbf_gram` (the
one-shot kernel of the other heads): that one takes float32 inner products, whose error (~1e-6) depends on the
BLAS blocking; here the only error is the rounding of the rows, below 2^(−q) of a row's largest entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from v05._types import FloatArray, IntArray

FixedPointRows = tuple[FloatArray, FloatArray, FloatArray]
"""(u (R, D) integer-valued, s (R,) powers of two, ‖s·u‖² (R,)): the rows x̃ = s·u."""


def fixed_point_rows(x: FloatArray) -> FixedPointRows:
    r"""Rows rounded to q fraction bits of their largest entry, so that their inner products are exact in float64.

        x̃_i = s_i·u_i,   u_i = round(x_i / s_i) ∈ ℤᴰ,   s_i = 2^(e_i − q),   max_j |x_ij| < 2^(e_i),
        q = ⌊(53 − ⌈log₂ D⌉) / 2⌋

    |u_ij| ≤ 2^q, so every partial sum of u_i·u_k is an integer of magnitude ≤ D·2^(2q) ≤ 2⁵³: a float64 GEMM adds
    them without rounding, in whatever order or blocking it picks, and s_i·s_k·(u_i·u_k) is exact as well.
    The rounding error is |x_ij − x̃_ij| ≤ 2^(e_i − q − 1) < 2^(−q)·max_j |x_ij| (q = 22 for D = 384, 21 for 2,048).
    The scale comes from the largest entry (exact), not the norm, so it never depends on summation order.

    Args:
        x: (R, D) feature rows.

    Returns:
        u (R, D), s (R,) and the exact squared norms ‖x̃_i‖² (R,).
    """
    x = np.asarray(x, np.float64)
    q = (53 - int(np.ceil(np.log2(max(x.shape[1], 1))))) // 2
    _, e = np.frexp(np.max(np.abs(x), axis=1, initial=0.0))  # (R,) max |x_ij| < 2^e (e = 0 for a zero row)
    s = np.ldexp(1.0, e - q)  # (R,)
    u = np.rint(x / s[:, None])  # (R, D) integers; dividing by a power of two is exact
    return u, s, np.sum(u * u, axis=1) * s * s  # the integer sums are exact


def fixed_point_rbf(a: FixedPointRows, b: FixedPointRows, gamma: float) -> FloatArray:
    """K_ij = exp(−γ·max(‖x̃_i‖² + ‖x̃_j‖² − 2 x̃_i·x̃_j, 0)), shape (A, B); each entry depends only on rows i and j.

    K_ij and K_ji are equal bit for bit (the inner product is exact and float addition commutes), K_ii = 1.
    """
    (u_a, s_a, sq_a), (u_b, s_b, sq_b) = a, b
    cross = (u_a @ u_b.T) * s_a[:, None] * s_b[None, :]  # (A, B) exact x̃_i·x̃_j
    return np.exp(-gamma * np.maximum(sq_a[:, None] + sq_b[None, :] - 2.0 * cross, 0.0))


@dataclass(frozen=True, slots=True)
class PoolKernel:
    """The fixed-point RBF kernel among every prompt of a known pool, computed once (the trainer's prompt pool).

    Its entries are the ones :func:`fixed_point_rbf` gives for any two of its texts in any batch, bit for bit (each
    entry is an exact function of its two rows), so a cache that looks them up computes exactly as one that does not.

    Attributes:
        index: text → row.
        rows: the fixed-point rows of the texts.
        gram: (P, P) kernel.
    """

    index: dict[str, int]
    rows: FixedPointRows
    gram: FloatArray

    @classmethod
    def build(cls, texts: Sequence[str], embed: Callable[[list[str]], FloatArray], gamma: float) -> PoolKernel:
        """The kernel among the distinct ``texts`` (P² float64 entries: 32 MB for 2,000 prompts)."""
        keys = list(dict.fromkeys(texts))
        rows = fixed_point_rows(embed(keys))
        return cls({key: i for i, key in enumerate(keys)}, rows, fixed_point_rbf(rows, rows, gamma))

    def lookup(self, keys: Sequence[str]) -> IntArray | None:
        """Row of each key, or None when one is not in the pool."""
        out = [self.index.get(key, -1) for key in keys]
        return None if -1 in out else np.asarray(out, np.int64)

    def block(self, a: IntArray, b: IntArray) -> FloatArray:
        """(|a|, |b|) kernel between pool rows ``a`` and ``b``."""
        return np.take(np.take(self.gram, a, axis=0), b, axis=1)


@dataclass(kw_only=True, slots=True)
class RBFKernelCache:
    """Fixed-point rows and RBF kernel entries of the prompts a fit holds, by prompt text, kept across refits.

    Rows live in slots (freed slots are reused). Entries are exact functions of their two texts' features, so a
    Gram matrix gathered from the cache equals, bit for bit, one computed at once from the same rows; every
    computation that rounds gathers its rows in the caller's order first (never in slot order). Features of one
    text must not change over time (``Embedder`` rows of a non-volatile backend).

    Attributes:
        gamma: RBF γ.
        embed: texts → (Q, D) features.
        max_queries: kernel rows of not-held query texts remembered until the next :meth:`refresh`.
        pool: the precomputed kernel of the known prompt pool (same γ and features): entries between pool texts are
            looked up instead of computed (the same numbers); None computes every entry.
        gram_: (capacity, capacity) K between slots (valid among held slots); unused while every held text is in
            the pool.
    """

    gamma: float
    embed: Callable[[list[str]], FloatArray]
    max_queries: int = 1024
    pool: PoolKernel | None = None
    index_: dict[str, int] = field(default_factory=dict, init=False)
    rows_: FixedPointRows = field(default_factory=lambda: (np.zeros((0, 0)), np.zeros(0), np.zeros(0)), init=False)
    gram_: FloatArray = field(default_factory=lambda: np.zeros((0, 0)), init=False)
    used_: int = field(default=0, init=False)  # slots [0, used_) hold valid rows (held or freed)
    queries_: dict[str, tuple[FloatArray, FloatArray, float, float]] = field(default_factory=dict, init=False)
    slot_keys_: list[str] = field(default_factory=list, init=False)  # the text whose row each used slot holds
    pooled_: bool = field(default=False, init=False)  # the last refresh's rows are the pool's (every key in it)

    def refresh(self, keys: Sequence[str]) -> IntArray:
        """Hold exactly the distinct ``keys``; (R,) row of :attr:`gram` (a slot) of each key.

        When the pool holds every key, nothing is copied: the rows are the pool's and :attr:`gram` is the pool's
        kernel (the trainer's case, every step; the same numbers). Otherwise kept entries stay and new ones are
        computed.
        """
        at = self.pool.lookup(keys) if self.pool is not None else None
        self.pooled_ = at is not None
        if at is not None:
            return at
        wanted = dict.fromkeys(keys)
        freed = [slot for key, slot in self.index_.items() if key not in wanted]
        self.index_ = {key: slot for key, slot in self.index_.items() if key in wanted}
        new = [key for key in wanted if key not in self.index_]
        if new:
            self._add(new, freed)
        self.queries_ = {}  # their rows were over the old slots
        return np.fromiter((self.index_[key] for key in keys), np.int64, len(keys))

    @property
    def gram(self) -> FloatArray:
        """The kernel matrix that :meth:`refresh`'s rows index: the pool's, or ``gram_`` (valid among held slots)."""
        return self.pool.gram if self.pooled_ else self.gram_  # type: ignore[union-attr]

    def cross(self, keys: Sequence[str], slots: IntArray) -> FloatArray:
        """(Q, R) kernel between ``keys`` and the rows ``slots`` of the last refresh.

        Rows of keys not held are kept for the next refresh; with pool rows, a key outside the pool is embedded and
        computed, not kept.
        """
        if self.pooled_:
            pool = self.pool  # type: ignore[union-attr]
            at = pool.lookup(keys)
            if at is not None:
                return pool.block(at, slots)
            u, s, sq = pool.rows
            return fixed_point_rbf(self._fixed_point_rows(list(keys)), (u[slots], s[slots], sq[slots]), self.gamma)
        out = np.empty((len(keys), len(slots)))
        held = [(i, self.index_[key]) for i, key in enumerate(keys) if key in self.index_]
        if held:
            out[[i for i, _ in held]] = np.take(self.gram_[[s for _, s in held]], slots, axis=1)
        rest = [i for i, key in enumerate(keys) if key not in self.index_]
        new = self._query_rows([key for key in dict.fromkeys(keys[i] for i in rest) if key not in self.queries_])
        for i in rest:
            out[i] = (new[keys[i]] if keys[i] in new else self.queries_[keys[i]])[0][slots]
        if len(self.queries_) + len(new) > self.max_queries:
            self.queries_ = {}
        if len(new) <= self.max_queries:  # a larger one-off batch is not remembered
            self.queries_ |= new
        return out

    def _query_rows(self, keys: list[str]) -> dict[str, tuple[FloatArray, FloatArray, float, float]]:
        """Kernel row over slots [0, used_) and fixed-point row (u, s, ‖x̃‖²) of each of ``keys`` (texts not held)."""
        if not keys:
            return {}
        u, s, sq = rows = self._fixed_point_rows(keys)
        k = np.zeros((len(keys), 0))  # (Q, used_)
        if self.used_:
            k = self._kernel(keys, rows, self.slot_keys_[: self.used_], self._rows(slice(0, self.used_)))
        return {key: (k[j], u[j], float(s[j]), float(sq[j])) for j, key in enumerate(keys)}

    def _fixed_point_rows(self, keys: list[str]) -> FixedPointRows:
        """The fixed-point rows of ``keys`` (the pool's when it holds them all: the same numbers, not re-embedded)."""
        at = self.pool.lookup(keys) if self.pool is not None else None
        if at is None:
            return fixed_point_rows(self.embed(keys))
        u, s, sq = self.pool.rows  # type: ignore[union-attr]
        return u[at], s[at], sq[at]

    def _kernel(
        self, keys_a: list[str], rows_a: FixedPointRows, keys_b: list[str], rows_b: FixedPointRows
    ) -> FloatArray:
        """(A, B) fixed-point kernel between two sets of rows: looked up in the pool where it holds both key sets."""
        if self.pool is not None:
            a, b = self.pool.lookup(keys_a), self.pool.lookup(keys_b)
            if a is not None and b is not None:
                return self.pool.block(a, b)
        return fixed_point_rbf(rows_a, rows_b, self.gamma)

    def _rows(self, index: slice | IntArray) -> FixedPointRows:
        u, s, sq = self.rows_
        return u[index], s[index], sq[index]

    def _add(self, new: list[str], freed: list[int]) -> None:
        """Give ``new`` slots (freed ones first), store their rows and their kernel entries with every held slot."""
        kept = np.fromiter(self.index_.values(), np.int64, len(self.index_))  # (H,) slots held before and after
        seen = [key for key in new if key in self.queries_]  # their kernel rows were computed by `cross`
        unseen = [key for key in new if key not in self.queries_]
        q = [self.queries_[key] for key in seen]
        parts: list[FixedPointRows] = []
        if seen:
            parts.append((np.stack([r[1] for r in q]), np.array([r[2] for r in q]), np.array([r[3] for r in q])))
        if unseen:
            parts.append(self._fixed_point_rows(unseen))
        rows: FixedPointRows = (  # (M, D), (M,), (M,) in the order seen + unseen
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
        )
        reuse = min(len(freed), len(new))
        slots = np.array(freed[:reuse] + list(range(self.used_, self.used_ + len(new) - reuse)), np.int64)  # (M,)
        self._grow(int(slots.max()) + 1, rows[0].shape[1])
        for store, part in zip(self.rows_, rows, strict=True):
            store[slots] = part
        self.used_ = max(self.used_, int(slots.max()) + 1)
        self.slot_keys_ += [""] * (self.used_ - len(self.slot_keys_))
        for slot, key in zip(slots.tolist(), seen + unseen, strict=True):
            self.slot_keys_[slot] = key
        k_new = np.empty((len(new), len(kept)))  # (M, H) kernel of each new row with every kept slot
        if seen:
            k_new[: len(seen)] = np.stack([r[0] for r in q])[:, kept]
        if unseen and len(kept):  # against every valid slot (views, no gather of the rows), then the kept columns
            used = slice(0, self.used_)
            k_all = self._kernel(unseen, self._rows(slots[len(seen) :]), self.slot_keys_[used], self._rows(used))
            k_new[len(seen) :] = k_all[:, kept]
        self.gram_[np.ix_(slots, kept)] = k_new
        self.gram_[np.ix_(kept, slots)] = k_new.T
        self.gram_[np.ix_(slots, slots)] = self._kernel(seen + unseen, rows, seen + unseen, rows)
        self.index_ |= dict(zip(seen + unseen, slots.tolist(), strict=True))

    def _grow(self, n_slots: int, n_features: int) -> None:
        """Room for ``n_slots`` slots (capacity doubles; new room is zero)."""
        capacity = len(self.gram_)
        if n_slots <= capacity:
            return
        size, used = max(n_slots, 2 * capacity), self.used_
        u, s, sq = np.zeros((size, n_features)), np.ones(size), np.zeros(size)
        gram = np.zeros((size, size))
        if used:
            u[:used], s[:used], sq[:used] = (a[:used] for a in self.rows_)
            gram[:used, :used] = self.gram_[:used, :used]
        self.rows_, self.gram_ = (u, s, sq), gram


__all__ = ["FixedPointRows", "PoolKernel", "RBFKernelCache", "fixed_point_rbf", "fixed_point_rows"]
