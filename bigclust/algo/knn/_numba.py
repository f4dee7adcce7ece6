"""Numba kernels of :mod:`bigclust.algo.knn`: partial top-k per row over GEMM tiles.

The in-memory exact search parallelises over query rows with ``prange``
(one level of parallelism: the BLAS call between two kernels runs alone,
never nested inside a parallel loop).  Every row keeps a max-heap of its k best candidates
ordered by ``(distance, index)``, so ties are broken toward the smaller index
whatever the tile sizes.
"""
import numpy as np
from numba import prange

from bigclust._util.jit import njit


@njit(inline="always")
def _worse(da, ia, db, ib):
    """``(da, ia) > (db, ib)`` in the order (distance, then index)."""
    return da > db or (da == db and ia > ib)


@njit(inline="always")
def _sift_down(hd, hi, k):
    """Restore the max-heap property of row heaps ``hd, hi`` after the root was replaced."""
    p = 0
    while True:
        c = 2 * p + 1
        if c >= k:
            break
        if c + 1 < k and _worse(hd[c + 1], hi[c + 1], hd[c], hi[c]):
            c += 1
        if _worse(hd[c], hi[c], hd[p], hi[p]):
            hd[p], hd[c] = hd[c], hd[p]
            hi[p], hi[c] = hi[c], hi[p]
            p = c
        else:
            break


#: entries screened at once before any heap work (a vectorisable count of candidates)
SCREEN = 32


@njit(parallel=True, nogil=True)
def merge_tile(G, row0, col0, exclude_self, heap_d, heap_i):
    """Merge one tile of scores into the rows' k-heaps.

    IN G : (b, c) float32 — ``2 q_i.x_j - |q_i|^2 - |x_j|^2 = -||q_i - x_j||^2``
       for query rows ``row0 + i`` and base rows ``col0 + j`` (one GEMM of
       augmented matrices; symmetric for a self search, so the transpose of
       tile (a, b) serves as tile (b, a)).
    IN row0, col0 : global indices of the first query row / base row.
    IN exclude_self : skip base row ``row0 + i`` for query row ``i``
       (the base is the query set).
    INOUT heap_d : (b, k) float32 max-heaps of squared distances (root =
       worst kept), initialised to +inf; heap_i : (b, k) int64 their base
       indices (initialised to -1).

    Almost every entry of a large tile is farther than the row's current
    k-th neighbour: entries are screened SCREEN at a time by counting those
    above the row's threshold ``-worst`` (a loop without branches,
    which LLVM vectorises), and only blocks with a candidate touch the heap.
    """
    b, c = G.shape
    k = heap_d.shape[1]
    for i in prange(b):
        hd = heap_d[i]
        hi = heap_i[i]
        gi = row0 + i
        thr = -hd[0]                # -inf while the heap is not full
        g = G[i]
        for j0 in range(0, c, SCREEN):
            j1 = min(c, j0 + SCREEN)
            cnt = 0
            for j in range(j0, j1):
                cnt += g[j] >= thr
            if cnt == 0:
                continue
            for j in range(j0, j1):
                if g[j] < thr:
                    continue
                gj = col0 + j
                if exclude_self and gj == gi:
                    continue
                d = -g[j]
                if d < 0.0:  # rounding on near-duplicates: the distance is 0
                    d = 0.0
                if _worse(hd[0], hi[0], d, gj):
                    hd[0] = d
                    hi[0] = gj
                    _sift_down(hd, hi, k)
                    thr = -hd[0]


@njit(parallel=True, nogil=True)
def refine_sort(Q, B, ind, out_d):
    """Exact float64 squared distances of the selected pairs, each row sorted by (distance, index).

    IN Q : (n, d) query rows; B : (m, d) base rows.
    INOUT ind : (n, k) int64 base indices (any order on entry; -1 = none found,
       sorted last); OUT out_d : (n, k) float64 ``||q_i - b_ind||^2``
       (+inf where ind is -1).

    The GEMM identity ``|x|^2 + |y|^2 - 2 x.y`` in float32 loses digits to
    cancellation; a direct sum over the k chosen pairs costs ``n k d`` only.
    """
    n, k = ind.shape
    d = Q.shape[1]
    for i in prange(n):
        for t in range(k):
            j = ind[i, t]
            if j < 0:
                out_d[i, t] = np.inf
                continue
            s = 0.0
            for f in range(d):
                diff = np.float64(Q[i, f]) - np.float64(B[j, f])
                s += diff * diff
            out_d[i, t] = s
        # insertion sort on (distance, index): k is small
        for t in range(1, k):
            dv = out_d[i, t]
            iv = ind[i, t]
            u = t - 1
            while u >= 0 and (out_d[i, u] > dv or (out_d[i, u] == dv and _idx_after(ind[i, u], iv))):
                out_d[i, u + 1] = out_d[i, u]
                ind[i, u + 1] = ind[i, u]
                u -= 1
            out_d[i, u + 1] = dv
            ind[i, u + 1] = iv


@njit(inline="always")
def _idx_after(a, b):
    """Index order with -1 (no neighbour) after every real index."""
    if a < 0:
        return b >= 0
    return b >= 0 and a > b


# -- IVF with per-row probes (bigclust.algo.knn.ivf_rows) ------------------------------------------------


@njit(inline="always")
def _push(hd, hi, d, j, k):
    """Offer candidate (d, j) to the max-heap ``hd, hi`` of size k (kept if better than its root)."""
    if _worse(hd[0], hi[0], d, j):
        hd[0] = d
        hi[0] = j
        _sift_down(hd, hi, k)


@njit(inline="always")
def _sq_dist(A, i, B, j):
    """``||A[i] - B[j]||^2`` in float32 (the loop LLVM vectorises with fastmath)."""
    s = np.float32(0.0)
    for f in range(A.shape[1]):
        t = A[i, f] - B[j, f]
        s += t * t
    return s


@njit(inline="always")
def _finish(Xs, q, hd, hi, out_i, out_d, t):
    """Row t of the outputs: the heap's entries with exact float64 distances, sorted by (distance, position)."""
    k = hd.shape[0]
    for a in range(k):
        j = hi[a]
        out_i[t, a] = j
        if j < 0:
            out_d[t, a] = np.inf
            continue
        s = 0.0
        for f in range(Xs.shape[1]):
            diff = np.float64(Xs[q, f]) - np.float64(Xs[j, f])
            s += diff * diff
        out_d[t, a] = s
    for a in range(1, k):  # insertion sort: k is small
        dv = out_d[t, a]
        iv = out_i[t, a]
        u = a - 1
        while u >= 0 and (out_d[t, u] > dv or (out_d[t, u] == dv and _idx_after(out_i[t, u], iv))):
            out_d[t, u + 1] = out_d[t, u]
            out_i[t, u + 1] = out_i[t, u]
            u -= 1
        out_d[t, u + 1] = dv
        out_i[t, u + 1] = iv


@njit(parallel=True, nogil=True, fastmath={"reassoc", "contract"})
def assign_cells(X, group, goff, cent, graph, cell):
    """The cell of every row of X: nearest fine centroid of its coarse group, then nearest among that one's neighbours.

    IN X : (n, d) float32 rows; group : (n,) coarse group of every row;
    goff : (G + 1,) the fine centroids of group g are ``cent[goff[g]:goff[g+1]]``;
    graph : (C, L) the L nearest centroids of every centroid (itself first).
    OUT cell : (n,) int64.  The second step moves a row near a group border
    to the nearer cell of the next group, so a cell is (nearly always) the
    row's nearest centroid at a cost of group size + L distances, not C.
    """
    for i in prange(X.shape[0]):
        g = group[i]
        best, bd = goff[g], np.float32(np.inf)
        for c in range(goff[g], goff[g + 1]):
            dd = _sq_dist(X, i, cent, c)
            if dd < bd:
                bd, best = dd, c
        b0 = best
        for a in range(1, graph.shape[1]):
            c = graph[b0, a]
            dd = _sq_dist(X, i, cent, c)
            if dd < bd or (dd == bd and c < best):
                bd, best = dd, c
        cell[i] = best


@njit(parallel=True, nogil=True, fastmath={"reassoc", "contract"})
def refine_lists(Xs, nbr, q0, q1, out_i, out_d):
    """One pass of neighbours-of-neighbours over rows ``q0:q1``: each row's list improved by its neighbours' lists.

    IN Xs : (n, d) float32; nbr : (n, k) int64 the current lists of all rows (positions, -1 = none).
    OUT out_i, out_d : (q1 - q0, k) the k best of each row's list and its
    neighbours' lists, sorted by (float64 distance, position).  A neighbour of a
    neighbour is very often a neighbour (NN-descent's local join, forward lists
    only), which recovers most of what the probed cells missed at k^2 distances a row.
    """
    k = nbr.shape[1]
    for t in prange(q1 - q0):
        q = q0 + t
        hd = np.full(k, np.inf, np.float32)
        hi = np.full(k, -1, np.int64)
        for a in range(k):
            j = nbr[q, a]
            if j >= 0:
                _push(hd, hi, _sq_dist(Xs, q, Xs, j), j, k)
        for a in range(k):
            j = nbr[q, a]
            if j < 0:
                continue
            for b in range(k):
                r = nbr[j, b]
                if r < 0 or r == q:
                    continue
                dd = _sq_dist(Xs, q, Xs, r)
                if dd > hd[0]:
                    continue
                seen = False
                for u in range(k):
                    if hi[u] == r:
                        seen = True
                        break
                if not seen:
                    _push(hd, hi, dd, r, k)
        _finish(Xs, q, hd, hi, out_i, out_d, t)


@njit(nogil=True)
def permute_rows(X, order):
    """``X[:] = X[order]`` in place, cycle by cycle through one spare row (no second copy of X).

    IN order : a permutation of ``range(n)``; INOUT X : (n, d).
    """
    n = X.shape[0]
    done = np.zeros(n, np.bool_)
    tmp = np.empty(X.shape[1], X.dtype)
    for s in range(n):
        if done[s]:
            continue
        tmp[:] = X[s]
        i = s
        while True:
            j = order[i]
            done[i] = True
            if j == s:
                X[i] = tmp
                break
            X[i] = X[j]
            i = j
