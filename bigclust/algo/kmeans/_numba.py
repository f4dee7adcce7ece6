"""Numba kernels of :mod:`bigclust.algo.kmeans` on dense rows (the CSR twins are in ``_numba_csr``).

All kernels take float64 C-contiguous arrays (the Python side converts), write
into preallocated outputs and document their arguments as IN / OUT / INOUT.
Random draws come from :mod:`bigclust.algo.kmeans.draws` (one splitmix64
stream per restart: the same output for any number of threads).
"""
import numpy as np
from numba import prange

from bigclust._util.jit import njit
from bigclust.algo.kmeans.draws import METHOD_RANDOM, d2_draw, farthest_donor, next_below, random_distinct


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
def _update_centers(sums, counts, C, CT):
    """Centres = cluster means (INOUT C (k, d) and its padded transpose CT); returns the summed squared shift."""
    return _update_centers_moves(sums, counts, C, CT, np.empty(C.shape[0]))


@njit
def _update_centers_moves(sums, counts, C, CT, move):
    """:func:`_update_centers`, and OUT ``move[j]``: how far centre j moved (Euclidean; Hamerly's bounds)."""
    k, d = C.shape
    shift = 0.0
    for j in range(k):
        mj = 0.0
        for t in range(d):
            c = sums[j, t] / counts[j]
            diff = c - C[j, t]
            shift += diff * diff
            mj += diff * diff
            C[j, t] = c
            CT[t, j] = c
        move[j] = np.sqrt(mj)
    return shift


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
    first = next_below(state, n)
    for t in range(d):
        C[0, t] = X[first, t]
    d2 = np.empty(n)
    for i in range(n):
        d2[i] = _sqdist(X, i, C, 0)
    for j in range(1, k):
        pick = d2_draw(d2, state)
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
def _nearest2(X, i, CT, k, dbuf):
    """:func:`_nearest` (the same distances, the same choice) and the squared distance to the second nearest."""
    best, bd = _nearest(X, i, CT, k, dbuf)
    second = np.inf
    for j in range(k):
        if j != best and dbuf[j] < second:
            second = dbuf[j]
    return best, bd, second


@njit
def _half_gaps(C, half):
    """OUT ``half[j]``: half the distance from centre j to its nearest other centre (Hamerly's s(j) / 2)."""
    k = C.shape[0]
    for j in range(k):
        m = np.inf
        for a in range(k):
            if a != j:
                m = min(m, _sqdist(C, j, C, a))
        half[j] = 0.5 * np.sqrt(m)


@njit
def _lloyd_one(X, C, max_iter, tol, labels):
    """Lloyd iterations of one restart from centres C (INOUT, (k, d)).

    labels : OUT int32 (n,).  Returns ``(inertia, n_iter, n_empty)``.

    Each iteration assigns every point, then the new centres are the means of
    their points.  It stops when no label changes, when the centres move by
    at most ``tol`` (sum of squared shifts) or after ``max_iter`` assignment
    passes; in the last two cases a final assignment makes the labels and the
    inertia consistent with the returned centres.  An empty cluster takes the
    point farthest from its centre among clusters with at least two points
    (MATLAB's EmptyAction 'singleton').

    A point is compared with every centre only when Hamerly's bounds (2010)
    cannot prove that its centre is still the nearest: ``u`` (above the
    distance to its centre) plus a margin stays below ``l`` (under the
    distance to any other) or half the gap from its centre to the next.  On
    a spectral embedding most points settle after a few passes, and this
    pass skips them (MNIST-70k's SK embedding, k = 10, 10 restarts, 244
    passes: 1.2-1.7 CPU s -> 0.45-0.73 at load 11-12).  The labels, inertia,
    centres and pass count are those of the full pass to the bit: a skipped
    point's nearest centre cannot change (the margin, 1e-9 of the largest
    row norm plus the largest initial centre norm, is far above the rounding
    of the bounds); every distance computed is the full pass's (:func:`_sqdist`
    adds the terms of :func:`_nearest` in the same order); the sums, counts
    and the returned inertia are accumulated in row order as before.
    """
    # long: one restart's whole loop (assign with bounds, re-seed, update, bounds) shares a dozen buffers
    n, d = X.shape
    k = C.shape[0]
    sums = np.empty((k, d))
    counts = np.empty(k, dtype=np.int64)
    d2 = np.empty(n)
    u = np.empty(n)                    # upper bound on the distance to the assigned centre
    low = np.zeros(n)                  # lower bound on the distance to every other centre
    half = np.empty(k)
    move = np.empty(k)
    CT = _padded_transpose(C)
    dbuf = np.empty(CT.shape[1])
    # every distance and move is at most the largest row norm plus the largest initial centre norm (later
    # centres are means of rows): the bounds' rounding is ~1e-16 of that a pass, the margin 1e-9 of it
    origin = np.zeros((1, d))
    xmax = 0.0
    for i in range(n):
        labels[i] = -1
        xmax = max(xmax, _sqdist(X, i, origin, 0))
    cmax = 0.0
    for j in range(k):
        cmax = max(cmax, _sqdist(C, j, origin, 0))
    margin = 1e-9 * (np.sqrt(xmax) + np.sqrt(cmax)) + 1e-300
    inertia = 0.0
    n_iter = 0
    n_empty = 0
    converged = False
    while n_iter < max_iter:
        n_iter += 1
        changed = 0
        _half_gaps(C, half)
        fresh = True                    # every d2 of this pass is known (no point skipped)
        for i in range(n):
            a = labels[i]
            if a >= 0 and u[i] + margin < max(low[i], half[a]):
                fresh = False
                continue
            if a >= 0:                  # tighten the upper bound first: often that suffices
                u[i] = np.sqrt(_sqdist(X, i, C, a))
                if u[i] + margin < max(low[i], half[a]):
                    fresh = False
                    continue
            best, bd, second = _nearest2(X, i, CT, k, dbuf)
            if a != best:
                changed += 1
                labels[i] = best
            d2[i] = bd
            u[i] = np.sqrt(bd)
            low[i] = np.sqrt(second)
        if changed == 0:
            converged = True
            break
        # the new sums and counts in row order, as the full pass accumulated them
        sums[:] = 0.0
        counts[:] = 0
        for i in range(n):
            b = labels[i]
            counts[b] += 1
            for t in range(d):
                sums[b, t] += X[i, t]
        reseeded = False
        for j in range(k):
            if counts[j] > 0:
                continue
            if not fresh:               # the donor rule needs every point's distance of this pass
                for i in range(n):
                    d2[i] = _sqdist(X, i, C, labels[i])
                fresh = True
            far = farthest_donor(labels, counts, d2)
            old = labels[far]
            counts[old] -= 1
            for t in range(d):
                sums[old, t] -= X[far, t]
                sums[j, t] = X[far, t]
            counts[j] = 1
            labels[far] = j
            d2[far] = 0.0
            n_empty += 1
            reseeded = True
        shift = _update_centers_moves(sums, counts, C, CT, move)
        if reseeded:                    # bounds of re-labelled points are void: recompute everyone next pass
            for i in range(n):
                low[i] = 0.0
                u[i] = np.inf
        else:
            m1, m2, j1 = 0.0, 0.0, -1   # the two largest moves: a point's other centres moved at most that
            for j in range(k):
                if move[j] > m1:
                    m1, m2, j1 = move[j], m1, j
                elif move[j] > m2:
                    m2 = move[j]
            for i in range(n):
                b = labels[i]
                u[i] += move[b]
                low[i] -= m2 if b == j1 else m1
        if shift <= tol:
            break
    if converged:
        inertia = 0.0
        for i in range(n):              # row order: the bits of the full pass's running sum
            inertia += _sqdist(X, i, C, labels[i])
    else:
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


