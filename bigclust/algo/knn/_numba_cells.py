"""Numba kernel of the probed search of low-dimensional rows (:func:`bigclust.algo.knn.ivf_rows.search_rows`).

Scoring one pair at a time (a d-term reduction whose horizontal sum costs as
much as its arithmetic) made the probed search of MNIST PCA-50 rows the
largest part of the kNN stage.  Here the parallel loop runs over cells: the
rows of a cell choose their probes (a row's distances to the L centroids near
its cell are d rank-one updates, no reduction), the choices are inverted
into, for every probed cell, the rows that probe it, and each probed cell is
scored against all of those rows at once: one (rows x d) x (d x cell rows)
product through BLAS (sgemm), then ``|q|^2 + |b|^2 - 2 q.b`` and a screen of
:data:`~bigclust.algo.knn._numba_proj.SCREEN` scores at a time before any heap work.  A cell's rows, and each
block they probe, are read once per cell instead of once per row.  (A fused
Numba scoring of four rows at a time against the transposed block measured
2.7-3.3 CPU s against BLAS's 1.6-1.9 on MNIST-70k PCA-50, 24 probes.)  The
BLAS call runs inside the parallel loop, so its own threads must be one
(:func:`~bigclust.algo.knn.ivf_rows.search_rows` sets that): nested, the
two pools cost 10-70 CPU s instead of 1.6.  Scores are float32; the k kept
are recomputed in float64 and sorted by (distance, position)
(:func:`bigclust.algo.knn._numba._finish`), as before.
"""
import numpy as np
from numba import prange

from bigclust._util.jit import njit
from bigclust.algo.knn._numba import _finish, _push, _sq_dist
from bigclust.algo.knn._numba_proj import _near_centroids, _screen, _top_probes

#: scores screened at once before any heap work (a branch-free count LLVM vectorises)


@njit(parallel=True, nogil=True, fastmath={"contract"})
def search_cells(Xs, cent, graph, off, c0, c1, p0, p1, n_probe, max_rows, out_i, out_d):
    """The k nearest other rows of positions ``p0:p1`` of the cell-sorted Xs, each row probing its own nearest cells.

    IN Xs : (n, d) float32 rows sorted by cell (rows of cell c: ``off[c]:off[c+1]``);
    cent : (C, d) float32; graph : (C, L) nearest centroids of every centroid, itself first;
    c0, c1 : the cells holding positions p0:p1; n_probe : cells probed per row; max_rows : rows of the
    largest cell.  OUT out_i : (p1 - p0, k) positions in Xs, out_d : float64 squared distances, each row
    sorted by (distance, position); -1 / inf where the L cells near a row's own held fewer than k others.

    A row ranks the L centroids near its own cell's centroid by distance to
    itself and searches the rows of the nearest ``n_probe`` (more, in that
    order, while it has fewer than k candidates).
    """
    # long: one cell's whole search (choose probes, invert them, score each probed block once, widen, finish)
    # is one parallel iteration; split into functions it would pass a dozen per-cell buffers between them
    L = graph.shape[1]
    d = Xs.shape[1]
    k = out_i.shape[1]
    P = min(n_probe, L)
    m2 = np.float32(-2.0)
    for c in prange(c0, c1):
        r0, r1 = max(off[c], p0), min(off[c + 1], p1)
        nq = r1 - r0
        if nq <= 0:
            continue
        CT, sqc = _near_centroids(cent, graph, c, d, L)   # the centroids near c, transposed
        # every row's probes (positions in graph[c]), and for every probed cell the rows probing it
        cdq = np.empty((nq, L), np.float32)
        sel = np.empty((nq, P), np.int64)
        qn = np.empty(nq, np.float32)
        start = np.zeros(L + 1, np.int64)
        for t in range(nq):
            q = r0 + t
            cd = cdq[t]
            cd[:] = sqc
            s = np.float32(0.0)
            for f in range(d):
                v = Xs[q, f]
                s += v * v
                w = m2 * v
                crow = CT[f]
                for a in range(L):
                    cd[a] += w * crow[a]
            qn[t] = s
            _top_probes(cd, P, sel[t])
            for u in range(P):
                start[sel[t, u] + 1] += 1
        for a in range(L):
            start[a + 1] += start[a]
        who = np.empty(nq * P, np.int64)
        fill = start[:L].copy()
        for t in range(nq):
            for u in range(P):
                a = sel[t, u]
                who[fill[a]] = t
                fill[a] += 1
        hd = np.full((nq, k), np.inf, np.float32)
        hi = np.full((nq, k), -1, np.int64)
        Q = np.empty((nq, d), Xs.dtype)
        sq = np.empty(max_rows, np.float32)
        for a in range(L):
            e0, e1 = start[a], start[a + 1]
            if e1 == e0:
                continue
            p = graph[c, a]
            b0 = off[p]
            m = off[p + 1] - b0
            B = Xs[b0:b0 + m]
            for j in range(m):
                s = np.float32(0.0)
                for f in range(d):
                    v = B[j, f]
                    s += v * v
                sq[j] = s
            for e in range(e1 - e0):
                Q[e] = Xs[r0 + who[e0 + e]]
            G = np.dot(Q[:e1 - e0], B.T)    # sgemm: every probing row against the whole block
            for e in range(e1 - e0):
                t = who[e0 + e]
                row = G[e]
                qv = qn[t]
                for j in range(m):
                    row[j] = sq[j] + qv + m2 * row[j]
                _screen(row, m, b0, r0 + t, hd[t], hi[t], k)
        for t in range(nq):
            q = r0 + t
            if hi[t, 0] < 0 and P < L:  # too few candidates (a tiny input): the remaining cells, nearest first
                rank = np.argsort(cdq[t], kind="mergesort")
                for a in range(P, L):
                    if hi[t, 0] >= 0:
                        break
                    p = graph[c, rank[a]]
                    for r in range(off[p], off[p + 1]):
                        if r != q:
                            _push(hd[t], hi[t], _sq_dist(Xs, q, Xs, r), r, k)
            _finish(Xs, q, hd[t], hi[t], out_i, out_d, q - p0)
