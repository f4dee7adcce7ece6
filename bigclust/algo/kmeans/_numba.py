"""Numba kernels of :mod:`bigclust.algo.kmeans`.

All kernels take float64 C-contiguous arrays (the Python side converts), write
into preallocated outputs and document their arguments as IN / OUT / INOUT.

Randomness comes only from the explicit per-restart ``uint64`` seeds through
the splitmix64 generator below (Steele, Lea & Flood 2014), never from Numba's
``np.random``: inside ``prange`` that state is per thread, so results would
depend on how restarts are spread over threads.  With one private generator
per restart the output is the same for any number of threads.
"""
import numpy as np
from numba import prange

from bigclust._util.jit import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0  # 2**-53

METHOD_KMEANSPP = 0
METHOD_RANDOM = 1


@njit
def _next_u64(state):
    """splitmix64: advance ``state`` (INOUT uint64[1]) and return 64 random bits."""
    z = state[0] + _GOLDEN
    state[0] = z
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@njit
def _next_double(state):
    """Uniform float64 in [0, 1) with 53 random bits."""
    return float(_next_u64(state) >> _S11) * _INV53


@njit
def _next_below(state, m):
    """Uniform integer in [0, m) (exact enough for m < 2**53)."""
    j = int(_next_double(state) * m)
    return j if j < m else m - 1


@njit
def _sqdist(X, i, C, j):
    """Squared Euclidean distance between row i of X and row j of C."""
    s = 0.0
    for t in range(X.shape[1]):
        diff = X[i, t] - C[j, t]
        s += diff * diff
    return s


@njit
def _padded_transpose(C):
    """Centres (k, d) as a zero-padded (d, kp) array, kp = k rounded up to 8.

    With a fixed multiple-of-8 inner length the loop over centres in
    :func:`_nearest` compiles to whole SIMD vectors without a scalar tail
    (about 1.5-2.5x faster for k = 10..30); padded columns are never compared.
    """
    k, d = C.shape
    CT = np.zeros((d, (k + 7) // 8 * 8))
    for j in range(k):
        for t in range(d):
            CT[t, j] = C[j, t]
    return CT


@njit
def _nearest(X, i, CT, k, dbuf):
    """Index of the centre nearest to row i (first one on ties) and its squared distance.

    CT : IN (d, kp), padded transposed centres (:func:`_padded_transpose`).
    k : IN int, the real number of centres.  dbuf : scratch (kp,).
    The loop over centres is innermost so that the independent sums
    vectorise without reassociating any of them (no fastmath needed): each
    distance is still summed over the features in order.
    """
    d, kp = CT.shape
    for j in range(kp):
        dbuf[j] = 0.0
    for t in range(d):
        xt = X[i, t]
        for j in range(kp):
            diff = xt - CT[t, j]
            dbuf[j] += diff * diff
    best = 0
    bd = dbuf[0]
    for j in range(1, k):
        if dbuf[j] < bd:
            bd = dbuf[j]
            best = j
    return best, bd


@njit
def _d2_draw(d2, state):
    """A row drawn with probability proportional to ``d2`` (IN (n,)), k-means++'s D^2 sampling."""
    n = d2.shape[0]
    total = 0.0
    for i in range(n):
        total += d2[i]
    if not total > 0.0:
        # Every point coincides with a chosen centre (fewer distinct
        # points than k): no D^2 mass left, fall back to a uniform draw.
        return _next_below(state, n)
    u = _next_double(state) * total
    acc = 0.0
    last_pos = -1
    for i in range(n):
        if d2[i] > 0.0:
            last_pos = i
        acc += d2[i]
        if acc > u:
            return i
    return last_pos  # u rounded up to total: the last point of positive weight


@njit
def _farthest_donor(labels, counts, d2):
    """The point farthest from its centre among clusters of two or more points (the re-seed donor).

    ``n >= k`` guarantees one exists when a cluster is empty.
    """
    far = -1
    fd = -1.0
    for i in range(labels.shape[0]):
        if counts[labels[i]] > 1 and d2[i] > fd:
            fd = d2[i]
            far = i
    return far


@njit
def _update_centers(sums, counts, C, CT):
    """Centres = cluster means (INOUT C (k, d) and its padded transpose CT); returns the summed squared shift."""
    k, d = C.shape
    shift = 0.0
    for j in range(k):
        for t in range(d):
            c = sums[j, t] / counts[j]
            diff = c - C[j, t]
            shift += diff * diff
            C[j, t] = c
            CT[t, j] = c
    return shift


@njit
def random_distinct(state, n, k, idx):
    """k distinct indices of 0..n-1 into idx (OUT int64 (k,)) by a partial Fisher-Yates shuffle with ``state``."""
    perm = np.arange(n)
    for j in range(k):
        m = j + _next_below(state, n - j)
        tmp = perm[j]
        perm[j] = perm[m]
        perm[m] = tmp
        idx[j] = perm[j]


@njit
def _init_one(X, k, state, method, C):
    """Initial centres of one restart into C (OUT, (k, d)), drawn with ``state``."""
    n, d = X.shape
    if method == METHOD_RANDOM:
        idx = np.empty(k, dtype=np.int64)
        random_distinct(state, n, k, idx)
        for j in range(k):
            for t in range(d):
                C[j, t] = X[idx[j], t]
        return
    # k-means++ (Arthur & Vassilvitskii 2007): D^2 sampling.
    first = _next_below(state, n)
    for t in range(d):
        C[0, t] = X[first, t]
    d2 = np.empty(n)
    for i in range(n):
        d2[i] = _sqdist(X, i, C, 0)
    for j in range(1, k):
        pick = _d2_draw(d2, state)
        for t in range(d):
            C[j, t] = X[pick, t]
        for i in range(n):
            s = _sqdist(X, i, C, j)
            if s < d2[i]:
                d2[i] = s


@njit(parallel=True)
def init_centers_kernel(X, k, seeds, method, centers):
    """Initial centres for every restart.

    X : IN float64 (n, d).  k : IN int.  seeds : IN uint64 (r,), one per
    restart.  method : IN int, METHOD_KMEANSPP or METHOD_RANDOM.
    centers : OUT float64 (r, k, d).
    """
    for r in prange(seeds.shape[0]):
        state = np.empty(1, dtype=np.uint64)
        state[0] = seeds[r]
        _init_one(X, k, state, method, centers[r])


@njit
def _lloyd_one(X, C, max_iter, tol, labels):
    """Lloyd iterations of one restart from centres C (INOUT, (k, d)).

    labels : OUT int32 (n,).  Returns ``(inertia, n_iter, n_empty)``.

    Each iteration assigns every point and accumulates the new cluster sums
    in the same pass over X.  It stops when no label changes, when the
    centres move by at most ``tol`` (sum of squared shifts) or after
    ``max_iter`` assignment passes; in the last two cases a final assignment
    makes the labels and the inertia consistent with the returned centres.
    An empty cluster takes the point farthest from its centre among clusters
    with at least two points (MATLAB's EmptyAction 'singleton').
    """
    n, d = X.shape
    k = C.shape[0]
    sums = np.empty((k, d))
    counts = np.empty(k, dtype=np.int64)
    d2 = np.empty(n)
    CT = _padded_transpose(C)
    dbuf = np.empty(CT.shape[1])
    for i in range(n):
        labels[i] = -1
    inertia = 0.0
    n_iter = 0
    n_empty = 0
    converged = False
    while n_iter < max_iter:
        n_iter += 1
        sums[:] = 0.0
        counts[:] = 0
        changed = 0
        inertia = 0.0
        for i in range(n):
            best, bd = _nearest(X, i, CT, k, dbuf)
            if labels[i] != best:
                changed += 1
                labels[i] = best
            d2[i] = bd
            inertia += bd
            counts[best] += 1
            for t in range(d):
                sums[best, t] += X[i, t]
        if changed == 0:
            converged = True
            break
        for j in range(k):
            if counts[j] > 0:
                continue
            far = _farthest_donor(labels, counts, d2)
            old = labels[far]
            counts[old] -= 1
            for t in range(d):
                sums[old, t] -= X[far, t]
                sums[j, t] = X[far, t]
            counts[j] = 1
            labels[far] = j
            d2[far] = 0.0
            n_empty += 1
        shift = _update_centers(sums, counts, C, CT)
        if shift <= tol:
            break
    if not converged:
        inertia = 0.0
        for i in range(n):
            best, bd = _nearest(X, i, CT, k, dbuf)
            labels[i] = best
            inertia += bd
    return inertia, n_iter, n_empty


@njit(parallel=True)
def lloyd_kernel(X, centers, max_iter, tol, labels, inertia, n_iter, n_empty):
    """Independent Lloyd runs, one per restart, in parallel over restarts.

    X : IN float64 (n, d).  centers : INOUT float64 (r, k, d), initial centres
    in, final centres out.  max_iter : IN int.  tol : IN float.
    labels : OUT int32 (r, n).  inertia : OUT float64 (r,).
    n_iter : OUT int32 (r,).  n_empty : OUT int64 (r,).
    """
    for r in prange(centers.shape[0]):
        res = _lloyd_one(X, centers[r], max_iter, tol, labels[r])
        inertia[r] = res[0]
        n_iter[r] = res[1]
        n_empty[r] = res[2]


@njit(parallel=True)
def assign_kernel(X, C, labels, dist2):
    """Nearest centre of every row, in parallel over blocks of rows.

    X : IN float64 (n, d).  C : IN float64 (k, d).  labels : OUT int32 (n,).
    dist2 : OUT float64 (n,), squared distance to that centre.
    """
    n = X.shape[0]
    k = C.shape[0]
    CT = _padded_transpose(C)
    block = 1024
    for b in prange((n + block - 1) // block):
        dbuf = np.empty(CT.shape[1])
        for i in range(b * block, min(n, (b + 1) * block)):
            best, bd = _nearest(X, i, CT, k, dbuf)
            labels[i] = best
            dist2[i] = bd


@njit
def running_sum(values, total):
    """``total`` plus the elements of ``values`` (IN float64 (m,)) added in order.

    Continuing one sequential sum across blocks gives the same result for any
    block boundaries, unlike NumPy's pairwise summation per block.
    """
    for v in values:
        total += v
    return total


@njit(parallel=True)
def minibatch_step_kernel(Xb, centers, counts, active, dist2, batch_inertia):
    """One mini-batch update (Sculley 2010) of every active restart.

    Xb : IN float64 (b, d), the batch.  centers : INOUT float64 (r, k, d).
    counts : INOUT float64 (r, k), points seen per centre.  active : IN bool
    (r,).  dist2 : OUT float64 (r, b), squared distance of each batch point
    to its centre before the update.  batch_inertia : OUT float64 (r,).

    The per-point rule ``c += (x - c) / count`` with a learning rate of one
    over the centre's count makes each centre the running mean of the points
    it was given, so a batch's points can be added in one step:
    ``c += (sum(x) - m c) / (count + m)`` for the m points assigned to c.
    """
    b, d = Xb.shape
    for r in prange(centers.shape[0]):
        if not active[r]:
            continue
        C = centers[r]
        k = C.shape[0]
        CT = _padded_transpose(C)
        dbuf = np.empty(CT.shape[1])
        sums = np.zeros((k, d))
        m = np.zeros(k)
        s = 0.0
        for i in range(b):
            best, bd = _nearest(Xb, i, CT, k, dbuf)
            dist2[r, i] = bd
            s += bd
            m[best] += 1.0
            for t in range(d):
                sums[best, t] += Xb[i, t]
        batch_inertia[r] = s
        for j in range(k):
            if m[j] == 0.0:
                continue
            counts[r, j] += m[j]
            for t in range(d):
                C[j, t] += (sums[j, t] - m[j] * C[j, t]) / counts[r, j]


# -- sparse rows (CSR): distances by ||x||^2 - 2 x.c + ||c||^2, O(nnz k) per pass --------------


@njit
def _nearest_csr(data, indices, indptr, i, xx, CT, cc, k, dbuf):
    """Nearest centre of CSR row i and its squared distance (first on ties).

    xx : IN ``||x_i||^2``.  CT : IN (d, kp) padded transposed centres.
    cc : IN (kp,) squared centre norms.  dbuf : scratch (kp,).  The
    expansion can round below zero for a point on its centre: clamped.
    """
    kp = CT.shape[1]
    for j in range(kp):
        dbuf[j] = 0.0
    for p in range(indptr[i], indptr[i + 1]):
        v = data[p]
        t = indices[p]
        for j in range(kp):
            dbuf[j] += v * CT[t, j]
    best = 0
    bd = np.inf
    for j in range(k):
        s = xx + cc[j] - 2.0 * dbuf[j]
        if s < bd:
            bd = s
            best = j
    return best, max(bd, 0.0)


@njit
def _center_norms(CT, k, cc):
    """``cc[j] = ||c_j||^2`` from the padded transposed centres (OUT cc (kp,))."""
    cc[:] = 0.0
    for t in range(CT.shape[0]):
        for j in range(k):
            cc[j] += CT[t, j] * CT[t, j]


@njit
def _sqdist_csr_dense(data, indices, indptr, i, xx, c, cn):
    """``||x_i - c||^2`` for CSR row i and a dense vector c with ``cn = ||c||^2``."""
    s = 0.0
    for p in range(indptr[i], indptr[i + 1]):
        s += data[p] * c[indices[p]]
    return max(xx + cn - 2.0 * s, 0.0)


@njit
def _row_to_dense(data, indices, indptr, i, out):
    out[:] = 0.0
    for p in range(indptr[i], indptr[i + 1]):
        out[indices[p]] = data[p]


@njit
def _init_one_csr(data, indices, indptr, xx, k, state, method, C):
    """:func:`_init_one` for CSR rows (same draws from ``state``, same rules)."""
    n = xx.shape[0]
    if method == METHOD_RANDOM:
        idx = np.empty(k, dtype=np.int64)
        random_distinct(state, n, k, idx)
        for j in range(k):
            _row_to_dense(data, indices, indptr, idx[j], C[j])
        return
    first = _next_below(state, n)
    _row_to_dense(data, indices, indptr, first, C[0])
    d2 = np.empty(n)
    for i in range(n):
        d2[i] = _sqdist_csr_dense(data, indices, indptr, i, xx[i], C[0], xx[first])
    for j in range(1, k):
        pick = _d2_draw(d2, state)
        _row_to_dense(data, indices, indptr, pick, C[j])
        for i in range(n):
            s = _sqdist_csr_dense(data, indices, indptr, i, xx[i], C[j], xx[pick])
            if s < d2[i]:
                d2[i] = s


@njit(parallel=True)
def init_centers_csr_kernel(data, indices, indptr, xx, k, seeds, method, centers):
    """:func:`init_centers_kernel` for CSR X (``xx`` (n,) IN: squared row norms)."""
    for r in prange(seeds.shape[0]):
        state = np.empty(1, dtype=np.uint64)
        state[0] = seeds[r]
        _init_one_csr(data, indices, indptr, xx, k, state, method, centers[r])


@njit
def _lloyd_one_csr(data, indices, indptr, xx, C, max_iter, tol, labels):
    """:func:`_lloyd_one` on CSR rows: the same steps, stops and re-seeding rule."""
    n = xx.shape[0]
    k, d = C.shape
    sums = np.empty((k, d))
    counts = np.empty(k, dtype=np.int64)
    d2 = np.empty(n)
    CT = _padded_transpose(C)
    cc = np.zeros(CT.shape[1])
    _center_norms(CT, k, cc)
    dbuf = np.empty(CT.shape[1])
    for i in range(n):
        labels[i] = -1
    inertia = 0.0
    n_iter = 0
    n_empty = 0
    converged = False
    while n_iter < max_iter:
        n_iter += 1
        sums[:] = 0.0
        counts[:] = 0
        changed = 0
        inertia = 0.0
        for i in range(n):
            best, bd = _nearest_csr(data, indices, indptr, i, xx[i], CT, cc, k, dbuf)
            if labels[i] != best:
                changed += 1
                labels[i] = best
            d2[i] = bd
            inertia += bd
            counts[best] += 1
            for p in range(indptr[i], indptr[i + 1]):
                sums[best, indices[p]] += data[p]
        if changed == 0:
            converged = True
            break
        for j in range(k):
            if counts[j] > 0:
                continue
            far = _farthest_donor(labels, counts, d2)
            old = labels[far]
            counts[old] -= 1
            sums[j, :] = 0.0
            for p in range(indptr[far], indptr[far + 1]):
                sums[old, indices[p]] -= data[p]
                sums[j, indices[p]] = data[p]
            counts[j] = 1
            labels[far] = j
            d2[far] = 0.0
            n_empty += 1
        shift = _update_centers(sums, counts, C, CT)
        _center_norms(CT, k, cc)
        if shift <= tol:
            break
    if not converged:
        inertia = 0.0
        for i in range(n):
            best, bd = _nearest_csr(data, indices, indptr, i, xx[i], CT, cc, k, dbuf)
            labels[i] = best
            inertia += bd
    return inertia, n_iter, n_empty


@njit(parallel=True)
def lloyd_csr_kernel(data, indices, indptr, xx, centers, max_iter, tol, labels, inertia, n_iter, n_empty):
    """:func:`lloyd_kernel` for CSR X.

    data (nnz,) float64, indices (nnz,) int64, indptr (n+1,) int64 : IN, CSR
    with sorted indices.  xx : IN (n,) squared row norms.  Other arguments as
    in :func:`lloyd_kernel`.
    """
    for r in prange(centers.shape[0]):
        res = _lloyd_one_csr(data, indices, indptr, xx, centers[r], max_iter, tol, labels[r])
        inertia[r] = res[0]
        n_iter[r] = res[1]
        n_empty[r] = res[2]
