"""Numba kernels of kernel k-means (:func:`bigclust.nmf.kernel_kmeans` and its streamed form).

Both paths run the same batch (Lloyd) iteration and share its steps here:
every point is assigned against frozen cluster statistics (:func:`kk_step`),
then the statistics are rebuilt -- in memory from K (:func:`kk_lloyd`), out of
core from one pass over K's row blocks (:func:`kk_block_sums`, :func:`kk_cluster_sums`).

Statistics of a partition of restart r: ``F[i, c] = sum_{j in c} K_ij``,
``s[c] = sum_{j, l in c} K_jl`` and ``counts[c] = |c|``; the squared
feature-space distance of i to the mean of c is
``K_ii - 2 F[i, c] / |c| + s[c] / |c|^2``.
"""
import numpy as np
from numba import prange

from bigclust._util.jit import njit
from bigclust.algo.kmeans.draws import METHOD_RANDOM, d2_draw, farthest_donor, next_below, random_distinct

# -- seeding -----------------------------------------------------------------------------------------


@njit
def _kk_init_one(K, k, state, method, idx):
    """Seed points of one restart into idx (OUT int64 (k,)): k-means++ in feature space or uniform."""
    n = K.shape[0]
    if method == METHOD_RANDOM:
        random_distinct(state, n, k, idx)
        return
    first = next_below(state, n)
    idx[0] = first
    d2 = np.empty(n)
    for i in range(n):
        d2[i] = max(K[i, i] + K[first, first] - 2.0 * K[i, first], 0.0)
    for j in range(1, k):
        pick = d2_draw(d2, state)
        idx[j] = pick
        for i in range(n):
            s = max(K[i, i] + K[pick, pick] - 2.0 * K[i, pick], 0.0)
            if s < d2[i]:
                d2[i] = s


@njit(parallel=True)
def kk_init(K, k, seeds, method, idx):
    """Seed points of every restart.  K : IN (n, n).  seeds : IN uint64 (r,).  idx : OUT int64 (r, k)."""
    for r in prange(seeds.shape[0]):
        state = np.empty(1, dtype=np.uint64)
        state[0] = seeds[r]
        _kk_init_one(K, k, state, method, idx[r])


# the same seeding split at the points where it needs a column of K (the streamed path reads them by passes)


@njit
def kk_seed_start(seeds, n, k, method, idx, states):
    """Start every restart's seeding: all k points (uniform) or the first one (k-means++).

    seeds : IN uint64 (r,).  idx : OUT int64 (r, k).  states : OUT uint64 (r,),
    the random streams, continued by :func:`kk_seed_draw`.
    """
    for r in range(seeds.shape[0]):
        states[r] = seeds[r]
        st = states[r:r + 1]
        if method == METHOD_RANDOM:
            random_distinct(st, n, k, idx[r])
        else:
            idx[r, 0] = next_below(st, n)


@njit
def kk_seed_dist(kdiag, col, p, d2, first):
    """k-means++ distances after seed point p: ``d2 = min(d2, K_ii + K_pp - 2 K_ip)`` (``first``: d2 is set).

    kdiag : IN (n,).  col : IN (n,), ``K[:, p]``.  d2 : INOUT (n,).
    """
    for i in range(kdiag.shape[0]):
        s = max(kdiag[i] + kdiag[p] - 2.0 * col[i], 0.0)
        if first or s < d2[i]:
            d2[i] = s


@njit
def kk_seed_draw(d2, state):
    """The next k-means++ seed point (D^2 sampling); state : INOUT uint64 (1,)."""
    return d2_draw(d2, state)


# -- the batch iteration -----------------------------------------------------------------------------


@njit
def _kk_stats(K, labels, k, F, s, counts):
    """``F[i, c] = sum_{j in c} K_ij``, ``s[c] = sum_{j, l in c} K_jl``, ``counts[c] = |c|``.  O(n^2)."""
    n = K.shape[0]
    counts[:] = 0
    for j in range(n):
        counts[labels[j]] += 1
    for i in range(n):
        for c in range(k):
            F[i, c] = 0.0
        for j in range(n):
            F[i, labels[j]] += K[i, j]
    s[:] = 0.0
    for i in range(n):
        s[labels[i]] += F[i, labels[i]]


@njit
def _kk_assign(kdiag, F, s, counts, k, i):
    """Nearest implicit centre of point i: ``K_ii - 2 F_ic / |c| + s_c / |c|^2`` (first on ties)."""
    best = 0
    bd = np.inf
    for c in range(k):
        m = counts[c]
        if m == 0:
            continue
        d = kdiag[i] - 2.0 * F[i, c] / m + s[c] / (m * m)
        if d < bd:
            bd = d
            best = c
    return best, max(bd, 0.0)


@njit
def kk_step(kdiag, F, s, counts, labels, prev, d2):
    """One batch assignment of every point against frozen statistics, then the empty-cluster rule.

    kdiag : IN (n,).  F : IN (n, k).  s : IN (k,).  counts : INOUT int64 (k,),
    recounted when a label changed.  labels : INOUT int32 (n,).  prev : OUT
    int32 (n,), the labels before.  d2 : OUT (n,), each point's distance.
    Returns ``(changed, objective, n_empty)``: ``objective`` sums the
    distances to the frozen centres.  An empty cluster takes the point
    farthest from its centre among clusters of two or more points (as
    :func:`bigclust.algo.kmeans.lloyd.kmeans`).
    """
    n = labels.shape[0]
    k = counts.shape[0]
    changed = 0
    obj = 0.0
    for i in range(n):
        prev[i] = labels[i]
    for i in range(n):
        best, bd = _kk_assign(kdiag, F, s, counts, k, i)
        if labels[i] != best:
            changed += 1
            labels[i] = best
        d2[i] = bd
        obj += bd
    if changed == 0:
        return 0, obj, 0
    n_empty = 0
    counts[:] = 0
    for i in range(n):
        counts[labels[i]] += 1
    for c in range(k):
        if counts[c] > 0:
            continue
        far = farthest_donor(labels, counts, d2)
        counts[labels[far]] -= 1
        counts[c] = 1
        labels[far] = c
        d2[far] = 0.0
        n_empty += 1
    return changed, obj, n_empty


@njit
def kk_final(kdiag, F, s, counts, labels):
    """Assign every point to its nearest centre (after max_iter); labels : OUT.  Returns the objective."""
    k = counts.shape[0]
    obj = 0.0
    for i in range(labels.shape[0]):
        best, bd = _kk_assign(kdiag, F, s, counts, k, i)
        labels[i] = best
        obj += bd
    return obj


@njit
def _kk_lloyd_one(K, idx, max_iter, labels):
    """Kernel k-means (Lloyd in feature space) of one restart from the seed points idx (IN (k,)).

    labels : OUT int32 (n,).  Returns ``(objective, n_iter, n_empty)``.  The
    steps, stops and empty-cluster rule are those of :func:`bigclust.algo.kmeans.lloyd.kmeans`:
    the centres are the seed points for the first assignment and the means of
    the clusters afterwards.
    """
    n = K.shape[0]
    k = idx.shape[0]
    F = np.empty((n, k))
    s = np.empty(k)
    counts = np.ones(k, dtype=np.int64)
    d2 = np.empty(n)
    kdiag = np.empty(n)
    for i in range(n):
        kdiag[i] = K[i, i]
        for c in range(k):
            F[i, c] = K[i, idx[c]]
        labels[i] = -1
    for c in range(k):
        s[c] = K[idx[c], idx[c]]
    obj = 0.0
    n_iter = 0
    n_empty = 0
    converged = False
    prev = np.empty(n, dtype=np.int32)
    fresh = True
    while n_iter < max_iter:
        n_iter += 1
        changed, obj, ne = kk_step(kdiag, F, s, counts, labels, prev, d2)
        n_empty += ne
        if changed == 0:
            converged = True
            break
        moved = 0
        for i in range(n):
            if labels[i] != prev[i]:
                moved += 1
        if fresh or 4 * moved > n:
            _kk_stats(K, labels, k, F, s, counts)   # O(n^2)
            fresh = False
        else:
            # late passes move few points: F's columns change by the moved points' kernel rows only,
            # O(n * moved) instead of O(n^2) (K symmetric: row j is column j)
            for j in range(n):
                a = prev[j]
                b = labels[j]
                if a != b:
                    for i in range(n):
                        v = K[j, i]
                        F[i, a] -= v
                        F[i, b] += v
            s[:] = 0.0
            for i in range(n):
                s[labels[i]] += F[i, labels[i]]
    if not converged:
        obj = kk_final(kdiag, F, s, counts, labels)
    return obj, n_iter, n_empty


@njit(parallel=True)
def kk_lloyd(K, idx, max_iter, labels, objective, n_iter, n_empty):
    """Independent kernel k-means runs, in parallel over restarts.

    K : IN (n, n) symmetric.  idx : IN int64 (r, k), seed points per restart.
    labels : OUT int32 (r, n).  objective : OUT (r,), sum of squared
    feature-space distances to the centres.  n_iter : OUT int32 (r,).
    n_empty : OUT int64 (r,), empty clusters re-seeded.
    """
    for r in prange(idx.shape[0]):
        res = _kk_lloyd_one(K, idx[r], max_iter, labels[r])
        objective[r] = res[0]
        n_iter[r] = res[1]
        n_empty[r] = res[2]


# -- out of core: statistics from K's row blocks -------------------------------------------------------


@njit(parallel=True)
def kk_block_sums(blk, w, row0, labels, k, out):
    """``F`` of every restart on the rows of one block of K: ``out[i, r k + c] = sum_{j in c_r} K'_ij``.

    blk : IN (b, n) float64, rows ``row0 .. row0 + b`` of K.  w : IN (n,) NCW
    weights, or (0,): then ``K' = K``, else ``K'_ij = (w_i K_ij) w_j`` (the
    product in the order NumPy forms ``w[:, None] * K * w[None, :]``).
    labels : IN int32 (r, n).  out : OUT (b, r k).  Each entry sums over j in
    increasing order, as :func:`_kk_stats` does, so a block's rows equal the
    in-memory ones bit for bit.
    """
    b, n = blk.shape
    nr = labels.shape[0]
    scaled = w.shape[0] > 0
    for i in prange(b):
        for q in range(nr * k):
            out[i, q] = 0.0
        wi = w[row0 + i] if scaled else 1.0
        for j in range(n):
            v = (wi * blk[i, j]) * w[j] if scaled else blk[i, j]
            for r in range(nr):
                out[i, r * k + labels[r, j]] += v


@njit
def kk_cluster_sums(F, labels, s):
    """``s[c] = sum_{i in c} F[i, c]`` (= ``1_c^T K 1_c``); F : IN (n, k), labels : IN (n,), s : OUT (k,)."""
    s[:] = 0.0
    for i in range(labels.shape[0]):
        s[labels[i]] += F[i, labels[i]]
