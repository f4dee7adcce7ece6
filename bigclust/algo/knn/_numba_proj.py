"""Numba kernels of the projected search of high-dimensional rows (:func:`bigclust.algo.knn.ivf_rows.knn_ivf_rows`).

The probed search of :mod:`bigclust.algo.knn._numba` computes one distance at a
time, a 64-term reduction per pair whose horizontal sum costs as much as its
arithmetic.  Here a row's distances to a whole probed cell are one
vectorisable loop: the cell-sorted rows are also held transposed (d, n), so
``|b|^2 - 2 q.b`` for every row b of a cell is d rank-one updates of a
buffer (an axpy over the cell's rows, no reduction).  The parallel loop runs
over cells, so that the centroids near a cell are transposed once for all of
its rows.  The candidates are then ranked by their distances in the full
rows: float32 for the choice, float64 (eight independent partial sums, so not
bound by the latency of one addition chain) for the k kept.
"""
import numpy as np
from numba import prange

from bigclust._util.jit import njit
from bigclust.algo.knn._numba import _push, _worse

#: scores screened at once before any heap work (a branch-free count LLVM vectorises)
SCREEN = 32


@njit(inline="always")
def _near_centroids(cent, graph, c, d, L):
    """``(CT, sqc)``: the L centroids ``graph[c]`` near cell c transposed (d, L), and their squared norms."""
    CT = np.empty((d, L), np.float32)
    sqc = np.empty(L, np.float32)
    for a in range(L):
        g = graph[c, a]
        s = np.float32(0.0)
        for f in range(d):
            v = cent[g, f]
            CT[f, a] = v
            s += v * v
        sqc[a] = s
    return CT, sqc


@njit(inline="always")
def _screen(buf, m, b0, q, hd, hi, k):
    """Offer the scores ``buf[:m]`` of rows ``b0:b0 + m`` to row q's heap, skipping q itself."""
    thr = hd[0]
    for j0 in range(0, m, SCREEN):
        j1 = min(m, j0 + SCREEN)
        cnt = 0
        for j in range(j0, j1):
            cnt += buf[j] <= thr
        if cnt == 0:
            continue
        for j in range(j0, j1):
            r = b0 + j
            if buf[j] > thr or r == q:
                continue
            dd = max(buf[j], np.float32(0.0))   # rounding on near-duplicates: the distance is 0
            if _worse(hd[0], hi[0], dd, r):
                _push(hd, hi, dd, r, k)
                thr = hd[0]


@njit(inline="always")
def _top_probes(cd, P, sel):
    """The P smallest entries of ``cd`` by (value, position) into ``sel[:P]``, ascending (insertion; P << L)."""
    m = 0
    for a in range(cd.shape[0]):
        v = cd[a]
        if m == P and not (v < cd[sel[m - 1]]):   # ties keep the earlier position
            continue
        u = m - 1 if m == P else m
        if m < P:
            m += 1
        while u > 0 and v < cd[sel[u - 1]]:
            sel[u] = sel[u - 1]
            u -= 1
        sel[u] = a
    return m


@njit(parallel=True, nogil=True, fastmath={"contract"})
def search_cells_t(Zs, ZsT, sqn, cent, graph, off, n_probe, max_rows, out_i):
    """Candidate lists of every row of the cell-sorted rows Zs: its k nearest rows among its nearest cells.

    IN Zs : (n, d) float32 rows sorted by cell (cell c: ``off[c]:off[c+1]``);
    ZsT : (d, n) the same transposed; sqn : (n,) float32 ``|z|^2``;
    cent : (C, d) float32 centroids; graph : (C, L) every centroid's L nearest (itself first);
    n_probe : cells searched per row (more, nearest first, while it has fewer than k candidates);
    max_rows : rows of the largest cell.
    OUT out_i : (n, k) positions in Zs of each row's k candidates (any order; -1 where the L
    cells near its own held fewer than k other rows).

    A row ranks the L centroids near its own cell by distance to itself and
    searches the rows of the nearest n_probe cells, as
    :func:`bigclust.algo.knn._numba_cells.search_cells` does; distances are
    ``|q|^2 + |b|^2 - 2 q.b`` in float32 (the candidates are ranked again in
    the full rows).
    """
    C = off.shape[0] - 1
    L = graph.shape[1]
    d = Zs.shape[1]
    k = out_i.shape[1]
    m2 = np.float32(-2.0)
    for c in prange(C):
        a0, a1 = off[c], off[c + 1]
        if a1 == a0:
            continue
        CT, sqc = _near_centroids(cent, graph, c, d, L)   # the centroids near c, transposed
        cd = np.empty(L, np.float32)
        sel = np.empty(L, np.int64)
        buf = np.empty(max_rows, np.float32)
        hd = np.empty(k, np.float32)
        hi = np.empty(k, np.int64)
        for q in range(a0, a1):
            qq = sqn[q]
            cd[:] = sqc
            for f in range(d):
                w = m2 * Zs[q, f]
                crow = CT[f]
                for a in range(L):
                    cd[a] += w * crow[a]
            P = _top_probes(cd, min(n_probe, L), sel)
            hd[:] = np.inf
            hi[:] = -1
            a = 0
            while a < L:
                if a == P:                      # too few candidates yet: the remaining cells, nearest first
                    if hi[0] >= 0:
                        break
                    sel[:] = np.argsort(cd, kind="mergesort")
                    P = L
                p = graph[c, sel[a]]
                a += 1
                b0, b1 = off[p], off[p + 1]
                m = b1 - b0
                sq = sqn[b0:b1]
                for j in range(m):
                    buf[j] = sq[j] + qq
                for f in range(d):
                    w = m2 * Zs[q, f]
                    row = ZsT[f, b0:b1]
                    for j in range(m):
                        buf[j] += w * row[j]
                _screen(buf, m, b0, q, hd, hi, k)
            out_i[q] = hi


@njit(nogil=True, fastmath={"reassoc", "contract"})
def _sq_dist32(X, i, j):
    """``||X[i] - X[j]||^2`` in float32, vectorised (fastmath, its own function so that the float64 sums of
    :func:`rerank_rows` keep their order): the choice among candidates."""
    s = np.float32(0.0)
    for f in range(X.shape[1]):
        t = X[i, f] - X[j, f]
        s += t * t
    return s


@njit(inline="always")
def _sq_dist64(X, i, j):
    """``||X[i] - X[j]||^2`` in float64 by eight partial sums in a fixed order (independent of the CPU)."""
    d = X.shape[1]
    s = np.zeros(8)
    f8 = d - d % 8
    for f in range(0, f8, 8):
        for u in range(8):
            t = np.float64(X[i, f + u]) - np.float64(X[j, f + u])
            s[u] += t * t
    for f in range(f8, d):
        t = np.float64(X[i, f]) - np.float64(X[j, f])
        s[f - f8] += t * t
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))


@njit(parallel=True, nogil=True)
def rerank_rows(X, order, cand, out_i, out_d):
    """The k nearest of every row's candidates by their distances in the full rows X.

    IN X : (n, D) the rows (float32 or float64, original order); order : (n,)
    the row at each cell-sorted position; cand : (n, kc) candidate positions of
    each position (-1 = none).  OUT out_i : (n, k) row ids, out_d : float64
    squared distances, each row sorted by (distance, id), written at the row's
    own index.  Positions are visited in cell order, so consecutive rows share
    most of their candidates in cache.  The k are chosen on float32 distances
    and then recomputed in float64 (:func:`_sq_dist64`).
    """
    n, kc = cand.shape
    k = out_i.shape[1]
    for t in prange(n):
        q = order[t]
        hd = np.full(k, np.inf, np.float32)
        hi = np.full(k, -1, np.int64)
        for a in range(kc):
            p = cand[t, a]
            if p < 0:
                continue
            j = order[p]
            dd = np.float32(_sq_dist32(X, q, j))
            if _worse(hd[0], hi[0], dd, j):
                _push(hd, hi, dd, j, k)
        for a in range(k):
            j = hi[a]
            out_i[q, a] = j
            out_d[q, a] = _sq_dist64(X, q, j) if j >= 0 else np.inf
        for a in range(1, k):  # insertion sort on (distance, id): k is small
            dv = out_d[q, a]
            iv = out_i[q, a]
            u = a - 1
            while u >= 0 and (out_d[q, u] > dv or (out_d[q, u] == dv and (iv >= 0 and (out_i[q, u] < 0
                                                                                     or out_i[q, u] > iv)))):
                out_d[q, u + 1] = out_d[q, u]
                out_i[q, u + 1] = out_i[q, u]
                u -= 1
            out_d[q, u + 1] = dv
            out_i[q, u + 1] = iv

