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
