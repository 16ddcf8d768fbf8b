"""Claims about the fixed-point RBF kernel and the kernel cache the ``combined`` prior refits from."""

import numpy as np

from v05.priors.heads import rbf_gram
from v05.priors.kernel_cache import PoolKernel, RBFKernelCache, fixed_point_rbf, fixed_point_rows


def _unit_rows(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32).astype(np.float64)  # embedder rows are float32 values
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_fixed_point_rows_round_within_their_bound_and_multiply_exactly():
    """x̃ = s·u with integer u, |x − x̃| ≤ 2^(e−q−1) < 2^(−q)·max|x|; float64 u·uᵀ equals the exact int64 product."""
    rng = np.random.default_rng(0)
    for d, q in ((384, 22), (2048, 21)):
        x = _unit_rows(rng, 50, d)
        x[3] = 0.0  # a zero row stays zero
        u, s, sq = fixed_point_rows(x)
        assert np.array_equal(u, np.rint(u)) and np.max(np.abs(u)) <= 2.0**q
        biggest = np.max(np.abs(x), axis=1)
        assert np.all(np.abs(x - s[:, None] * u) <= 2.0**-q * np.maximum(biggest, 1e-300)[:, None])
        exact = u.astype(np.int64) @ u.astype(np.int64).T  # integer arithmetic: no rounding at all
        assert np.array_equal(u @ u.T, exact.astype(np.float64))
        assert np.array_equal(sq, np.diag(exact) * s * s)


def test_fixed_point_rbf_is_symmetric_with_unit_diagonal_and_close_to_the_float64_kernel():
    """K = Kᵀ bit for bit, K_ii = 1, and |K − K_float64| < 1e-7 (below rbf_gram's float32 error, ~1e-6)."""
    rng = np.random.default_rng(1)
    x = _unit_rows(rng, 120, 384)
    rows = fixed_point_rows(x)
    k = fixed_point_rbf(rows, rows, 2.0)
    assert np.array_equal(k, k.T) and np.all(np.diag(k) == 1.0)
    d2 = np.maximum(np.sum(x * x, 1)[:, None] + np.sum(x * x, 1)[None, :] - 2 * x @ x.T, 0)
    k64 = np.exp(-2.0 * d2)
    assert np.max(np.abs(k - k64)) < 1e-7
    assert np.max(np.abs(rbf_gram(x, x, 2.0) - k64)) < 1e-5


def test_cache_entries_equal_a_fresh_computation_bit_for_bit():
    """After refreshes with kept, dropped, re-added and repeated texts, and queries in between, every gathered Gram
    block and every query row equals fixed_point_rbf on freshly embedded rows, bit for bit."""
    rng = np.random.default_rng(2)
    table = {f"t{i}": row for i, row in enumerate(_unit_rows(rng, 200, 64))}
    names = list(table)

    def embed(texts):
        return np.stack([table[t] for t in texts])

    cache = RBFKernelCache(gamma=1.5, embed=embed)
    buf = names[:40]
    slots = cache.refresh(buf)
    for _ in range(12):
        query = [names[i] for i in rng.choice(200, size=15, replace=False)]  # held and new texts
        held = fixed_point_rows(embed(buf))
        assert np.array_equal(cache.cross(query, slots), fixed_point_rbf(fixed_point_rows(embed(query)), held, 1.5))
        buf = [names[i] for i in rng.choice(120, size=int(rng.integers(20, 60)), replace=False)]
        buf = buf + buf[:3] + query[:5]  # a text in two rows; queried texts join
        slots = cache.refresh(buf)
        fresh = fixed_point_rows(embed(buf))
        assert np.array_equal(np.take(np.take(cache.gram, slots, 0), slots, 1), fixed_point_rbf(fresh, fresh, 1.5))


def test_a_cache_over_a_pool_kernel_computes_exactly_what_one_without_it_does():
    """With the pool's kernel precomputed (150 of 200 texts), the same refreshes and queries — buffers inside the pool
    (served from the pool's rows, nothing copied) alternating with buffers reaching outside it, queries inside and
    outside — give bit-identical Gram blocks and query rows, and a text held in the pool is never embedded again
    after the pool was built."""
    rng = np.random.default_rng(5)
    table = {f"t{i}": row for i, row in enumerate(_unit_rows(rng, 200, 64))}
    names = list(table)
    embedded: list[str] = []

    def embed(texts):
        embedded.extend(texts)
        return np.stack([table[t] for t in texts])

    pool = PoolKernel.build(names[:150], embed, 1.5)
    assert np.array_equal(pool.gram, fixed_point_rbf(pool.rows, pool.rows, 1.5)) and pool.lookup(["t3", "t199"]) is None
    embedded.clear()
    plain, pooled = RBFKernelCache(gamma=1.5, embed=embed), RBFKernelCache(gamma=1.5, embed=embed, pool=pool)
    for step in range(10):
        hi = 150 if step % 2 else 200  # even steps reach outside the pool
        buf = [names[i] for i in rng.choice(hi, size=int(rng.integers(20, 60)), replace=False)]
        query = [names[i] for i in rng.choice(200 if step % 4 == 1 else hi, size=15, replace=False)]
        used = pooled.used_
        slots_a, slots_b = plain.refresh(buf), pooled.refresh(buf)
        assert pooled.pooled_ == (hi == 150) and (hi == 200 or pooled.used_ == used)  # pool rows: no slot copied
        assert np.array_equal(np.take(np.take(plain.gram, slots_a, 0), slots_a, 1),
                              np.take(np.take(pooled.gram, slots_b, 0), slots_b, 1))  # fmt: skip
        assert np.array_equal(plain.cross(query, slots_a), pooled.cross(query, slots_b))
    n_plain = len(embedded)
    embedded.clear()
    pooled2 = RBFKernelCache(gamma=1.5, embed=embed, pool=pool)
    pooled2.cross(names[:20], pooled2.refresh(names[20:60]))
    assert embedded == [] and n_plain > 0  # inside the pool nothing is embedded


def test_cache_embeds_each_new_text_once_when_it_was_queried_before_the_refresh():
    """A text predicted (``cross``) and then added to the buffer is embedded once, at the query."""
    rng = np.random.default_rng(3)
    table = {f"t{i}": row for i, row in enumerate(_unit_rows(rng, 30, 16))}
    seen = []
    cache = RBFKernelCache(gamma=2.0, embed=lambda texts: (seen.extend(texts), np.stack([table[t] for t in texts]))[1])
    slots = cache.refresh([f"t{i}" for i in range(10)])
    cache.cross([f"t{i}" for i in range(5, 15)], slots)
    cache.refresh([f"t{i}" for i in range(3, 15)])
    assert sorted(seen) == sorted(f"t{i}" for i in range(15))  # t0..t9 at the first refresh, t10..t14 at the query


def test_cache_answers_a_batch_larger_than_its_memory_without_keeping_it():
    """Query rows are remembered up to ``max_queries``; a larger batch is answered and forgotten."""
    rng = np.random.default_rng(4)
    table = {f"t{i}": row for i, row in enumerate(_unit_rows(rng, 40, 8))}
    cache = RBFKernelCache(gamma=2.0, embed=lambda texts: np.stack([table[t] for t in texts]), max_queries=5)
    slots = cache.refresh([f"t{i}" for i in range(10)])
    assert cache.cross([f"t{i}" for i in range(20, 40)], slots).shape == (20, 10) and not cache.queries_
    cache.cross(["t20", "t21"], slots)
    assert set(cache.queries_) == {"t20", "t21"}
