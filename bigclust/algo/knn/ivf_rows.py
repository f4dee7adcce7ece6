"""Approximate kNN in time linear in n: an inverted file where every row probes its own nearest cells, then a
neighbours-of-neighbours pass (``knn = "ivf-rows"``).

:mod:`bigclust.algo.knn.ivf` searches a whole cell against the cells nearest to
*its centroid* and needs ever more of them as n grows (n^1.5 work).  Here:

1. **Partition** (:func:`partition`, once per search; the kNN stage stores it):
   cells of about ``ROWS_PER_CELL`` rows by a two-level k-means on a seeded
   sample — about sqrt(C) coarse groups, then each group's sample split into
   cells in proportion to its size — so training and assignment cost
   ``n (sqrt(C) + C / sqrt(C) + L) d``, not the ``n C d`` of one flat k-means
   (which at 8.1M rows would cost more than the search).  Every centroid
   knows its L nearest centroids (``graph``).  The rows are then sorted by
   cell (``order``, ``off``), so a cell's rows are contiguous.
2. **Search** (:func:`search_rows`): a row ranks the L centroids near its own
   cell by distance to itself and searches the rows of its nearest
   ``n_probe`` cells (faiss's IVF-Flat probing, not the cell-level probing of
   :mod:`~bigclust.algo.knn.ivf`): 3.7x fewer rows scanned at the same recall on MNIST-70k.
   The rows of a cell are searched together (:mod:`bigclust.algo.knn._numba_cells`):
   each probed cell is scored in one product against all the rows probing it.
3. **Refine** (:func:`refine_rows`): each row's list is merged with its
   neighbours' lists (NN-descent's local join), k^2 distances a row.
   Recall of the probing alone falls slowly as n grows on mnist-1m (its near
   copies crowd each other), the neighbours' lists recover what it missed.

Rows of more than :data:`PROJECT_ABOVE` dimensions (raw pixels) are searched
in memory on their top principal components instead (:func:`knn_ivf_rows`): the
same partition and per-row probes, each probed cell one vectorised sweep of
the transposed projection (:mod:`bigclust.algo.knn._numba_proj`), and the
candidates ranked by their distances in the full rows.

Work per row is ``n_probe * ROWS_PER_CELL + k^2`` distances whatever n, and
the result is a function of X, k, the settings and the seed only — not of the
chunking nor of which process computes a chunk (each row's list is computed
from the stored partition alone, with the same kernels).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bigclust._util.errors import UserError
from bigclust.algo.knn.exact import _dense, knn_exact

#: rows per cell (C = n / ROWS_PER_CELL), as :mod:`bigclust.algo.knn.ivf`
ROWS_PER_CELL = 256
#: cells each row searches, independent of n.  recall@10 on mnist-1m PCA-50 prefixes (2000 sampled rows, after
#: two refine passes) with 16: 0.9938 at 125k, 0.9919 at 250k, 0.9883 at 500k, 0.9839 at 1M — the misses grow
#: about 1.4x per doubling of n (the copies of one digit crowd together), 0.957 by that trend at 8.1M; with 24:
#: 0.9960 at 250k, 0.9897 at 1M (0.64x the misses of 16, for 1.2x the CPU), about 0.973 at 8.1M by that trend
DEFAULT_PROBE = 24
#: cells each row searches in the projected search of high-dimensional rows (MNIST-70k raw pixels, k = 10,
#: 3k candidates reranked, recall@10 on 2000 sampled rows against the exact lists: 8: 0.972, 10: 0.979,
#: 12: 0.983, 16: 0.987; the search's time is proportional)
PROJECTED_PROBE = 12
#: centroids near a row's own cell among which it chooses its probes (and its cell, at assignment)
NEAR_CENTROIDS = 256
#: neighbours-of-neighbours passes after the probed search (each about 5% of the search's time; the second
#: adds 0.001-0.002 of recall, and more as n grows and the probes miss more)
DEFAULT_REFINE = 2
#: passes on the projected search of high-dimensional rows, whose 3k candidates are reranked anyway
PROJECTED_REFINE = 0
#: rows of more dimensions than this are searched on their top PROJECT_DIM principal components for
#: CANDIDATES_PER_K * k candidates, reranked by exact distances (MNIST-70k raw pixels, k = 10: 64 components and
#: 30 candidates held 0.991 of the exact lists; a search in 784-d costs 12x the distances)
PROJECT_ABOVE = 128
PROJECT_DIM = 64
CANDIDATES_PER_K = 3
#: the projection is used only when its components hold this fraction of the variance (MNIST pixels: 0.85);
#: below it the rows are searched as they are
PROJECT_MIN_VARIANCE = 0.8
#: rows of the seeded sample whose covariance gives the projection
PROJECT_SAMPLE = 20000
#: Lloyd iterations, and sample rows per cell
LLOYD_ITER = 10
SAMPLE_PER_CELL = 40


@dataclass
class Partition:
    """Cells of the rows: centroids (C, d) float32, ``graph`` (C, L) nearest centroids (itself first),
    ``order`` (n,) the rows sorted by cell (stable), ``off`` (C + 1,) where each cell's run starts."""

    cent: np.ndarray
    graph: np.ndarray
    order: np.ndarray
    off: np.ndarray

    def cell_of(self, p0, p1):
        """The cell of each position ``p0:p1`` of the cell-sorted rows."""
        return (np.searchsorted(self.off, np.arange(p0, p1), side="right") - 1).astype(np.int64)


def resolve(n, n_cells=0, n_probe=0, refine=None):
    """``(C, n_probe, refine)`` for n rows; 0 / None take the defaults.  One-line :class:`UserError` if invalid."""
    C = int(n_cells or min(n, max(1, round(n / ROWS_PER_CELL))))
    if not 1 <= C <= n:
        raise UserError(f"ivf_cells={C} must be between 1 and n={n}")
    P = int(n_probe or min(C, DEFAULT_PROBE))
    if not 1 <= P <= C:
        raise UserError(f"ivf_probe={P} must be between 1 and ivf_cells={C}")
    R = DEFAULT_REFINE if refine is None else int(refine)
    if R < 0:
        raise UserError(f"refine={R} must be >= 0")
    return C, P, R


def _nearest(cent, S, block=16384):
    """Index of the nearest centroid of every row of S: argmin of ``|c|^2 - 2 s.c`` over float32 GEMM blocks.

    Lloyd needs no more (a float32 near-tie may go either way, as in any k-means); the exact search with its
    heaps and float64 recomputation cost 3x as much here.
    """
    c32 = np.ascontiguousarray(cent, dtype=np.float32)
    half = 0.5 * np.einsum("ij,ij->i", c32, c32)
    lab = np.empty(S.shape[0], np.int64)
    for r0 in range(0, S.shape[0], block):
        G = S[r0:r0 + block] @ c32.T
        G -= half
        lab[r0:r0 + block] = G.argmax(axis=1)
    return lab


def _lloyd(S, C, rng, n_iter):
    """Plain Lloyd k-means of the rows S into C centroids (float64), seeded; an empty cell keeps its centroid."""
    cent = np.array(S[np.sort(rng.choice(S.shape[0], C, replace=False))], dtype=np.float64)
    for _ in range(n_iter):
        lab = _nearest(cent, S)
        cnt = np.bincount(lab, minlength=C)
        # per-column bincounts: the sums of every cell's rows (np.add.at is 10x slower)
        sums = np.stack([np.bincount(lab, weights=S[:, f], minlength=C) for f in range(S.shape[1])], axis=1)
        nz = cnt > 0
        cent[nz] = sums[nz] / cnt[nz, None]
    return cent


def _train(X, C, rng, n_iter):
    """Two-level k-means on a sample: coarse centroids, fine centroids grouped by coarse group, group offsets."""
    n = X.shape[0]
    m = min(n, SAMPLE_PER_CELL * C)
    S = X[np.sort(rng.choice(n, m, replace=False))] if m < n else X
    G = max(1, min(C, round(math.sqrt(C))))
    coarse = _lloyd(S, G, rng, n_iter)
    lab = _nearest(coarse, S)
    # each group's sample split into cells in proportion to its size (at least one, at most its rows)
    sizes = np.bincount(lab, minlength=G)
    keep = np.flatnonzero(sizes)
    share = np.maximum(1, np.round(C * sizes[keep] / m)).astype(int)
    share = np.minimum(share, sizes[keep])
    fine = [_lloyd(S[lab == g], int(c), rng, n_iter) for g, c in zip(keep, share)]
    goff = np.zeros(len(keep) + 1, np.int64)
    np.cumsum(share, out=goff[1:])
    return coarse[keep], np.vstack(fine), goff


def partition(X, n_cells=0, *, random_state=0, n_iter=LLOYD_ITER, near=NEAR_CENTROIDS):
    """The :class:`Partition` of X into about ``n_cells`` cells (0: n / ROWS_PER_CELL), seeded."""
    from threadpoolctl import threadpool_limits

    from bigclust.algo.knn._numba import assign_cells

    X = _dense(X, np.float32)
    n = X.shape[0]
    C, _, _ = resolve(n, n_cells, 1)
    rng = np.random.default_rng(random_state)
    # one BLAS thread: the products here are small (a ~40-row-per-cell sample against tens of centroids), and
    # two OpenBLAS threads spin-wait for each other on a busy machine: training took 0.94 CPU s against 0.14 on
    # one thread at MNIST-70k PCA-50 (load 7), the same centroids to the bit
    with threadpool_limits(limits=1, user_api="blas"):
        coarse, cent, goff = _train(X, C, rng, n_iter)
        C = cent.shape[0]
        L = min(C, near)
        graph = np.empty((C, L), np.int64)
        graph[:, 0] = np.arange(C)
        if L > 1:
            graph[:, 1:] = knn_exact(cent, L - 1)[0]
        group = _nearest(coarse, X)
    cent32 = np.ascontiguousarray(cent, dtype=np.float32)
    cell = np.empty(n, np.int64)
    assign_cells(X, group, goff, cent32, graph, cell)
    order = np.argsort(cell, kind="stable").astype(np.int64)
    off = np.zeros(C + 1, np.int64)
    np.cumsum(np.bincount(cell, minlength=C), out=off[1:])
    return Partition(cent32, graph, order, off)


def sort_rows(X, part):
    """Put the rows of X in the partition's cell order in place (``X[:] = X[part.order]``, no second copy of X)."""
    from bigclust.algo.knn._numba import permute_rows

    permute_rows(X, part.order)


def search_rows(Xs, part, k, p0, p1, n_probe):
    """Lists of the k nearest other rows of positions ``p0:p1`` of the cell-sorted rows Xs (positions in Xs).

    Returns ``(ind int64, sqdist float64)``, (p1 - p0, k), sorted by (distance, position); -1 / inf where a
    row's L nearby cells held fewer than k other rows (only for tiny inputs; :func:`knn_ivf_rows` fills them).
    """
    from threadpoolctl import threadpool_limits

    from bigclust.algo.knn._numba_cells import search_cells

    ind = np.empty((p1 - p0, k), np.int64)
    d2 = np.empty((p1 - p0, k))
    if p1 > p0:
        c0, c1 = np.searchsorted(part.off, [p0, p1 - 1], side="right") - [1, 0]
        # one BLAS thread: the kernel's products run inside its own parallel loop over cells
        with threadpool_limits(limits=1, user_api="blas"):
            search_cells(np.ascontiguousarray(Xs), part.cent, part.graph, part.off, int(c0), int(c1), p0, p1,
                         int(n_probe), int(np.diff(part.off).max()), ind, d2)
    return ind, d2


def refine_rows(Xs, nbr, p0, p1):
    """One neighbours-of-neighbours pass over positions ``p0:p1``, given every row's list ``nbr`` (positions)."""
    from bigclust.algo.knn._numba import refine_lists

    ind = np.empty((p1 - p0, nbr.shape[1]), np.int64)
    d2 = np.empty((p1 - p0, nbr.shape[1]))
    refine_lists(Xs, nbr, p0, p1, ind, d2)
    return ind, d2


def fill_missing(Xs, ind, d2, p0):
    """Rows of a tiny input whose nearby cells held fewer than k others: searched exactly (in place)."""
    miss = np.flatnonzero((ind < 0).any(axis=1))
    if miss.size:
        k = ind.shape[1]
        got, g2 = knn_exact(Xs, k + 1, queries=Xs[p0 + miss])
        for a, t in enumerate(miss):
            keep = got[a] != p0 + t
            keep[-1] &= not keep.all()  # itself not among the k + 1 (duplicates at 0): drop the farthest
            ind[t], d2[t] = got[a][keep], g2[a][keep]
    return ind, d2


def to_rows(order, ind, d2, p0):
    """Lists of positions ``p0:`` mapped to row ids, each row's own id first (distance 0), the rest sorted by
    (distance, id): ``(rows, ind, dist)`` with Euclidean distances, as :func:`bigclust.algo.knn.ivf.search_cells`."""
    rows = order[p0:p0 + ind.shape[0]]
    ids = order[ind]
    o = np.lexsort((ids, d2), axis=-1)
    ids = np.take_along_axis(ids, o, 1)
    dist = np.sqrt(np.take_along_axis(d2, o, 1))
    return rows, np.hstack([rows[:, None], ids]), np.hstack([np.zeros((rows.size, 1)), dist])


def knn_ivf_rows_lists(X, k, *, n_cells=0, n_probe=0, refine=None, random_state=0, block=65536):
    """Neighbour lists of every row, the row itself first: ``(ind int64, dist float64)``, (n, k), in one process.

    The same lists as the chunked kNN stage computes (:mod:`bigclust.pipeline.stages.knn`), in blocks of rows.
    """
    X = _dense(X, np.float32)
    n = X.shape[0]
    if not 2 <= k <= n:
        raise UserError(f"k={k} must be between 2 and n={n} (the row itself is counted)")
    C, P, R = resolve(n, n_cells, n_probe, refine)
    part = partition(X, C, random_state=random_state)
    Xs = X[part.order]
    del X
    nbr = np.empty((n, k - 1), np.int64)
    d2 = np.empty((n, k - 1))
    for p0 in range(0, n, block):
        p1 = min(n, p0 + block)
        i, d = search_rows(Xs, part, k - 1, p0, p1, P)
        nbr[p0:p1], d2[p0:p1] = fill_missing(Xs, i, d, p0)
    for _ in range(R):
        new = np.empty_like(nbr)
        for p0 in range(0, n, block):
            p1 = min(n, p0 + block)
            new[p0:p1], d2[p0:p1] = refine_rows(Xs, nbr, p0, p1)
        nbr = new
    rows, ind, dist = to_rows(part.order, nbr, d2, 0)
    out_i = np.empty((n, k), np.int64)
    out_d = np.empty((n, k))
    out_i[rows], out_d[rows] = ind, dist
    return out_i, out_d


def project(X, dim, *, random_state=0):
    """X on its top ``dim`` principal components (float32), from the covariance of a seeded row sample, and the
    fraction of the sample's variance they hold."""
    rng = np.random.default_rng(random_state)
    n = X.shape[0]
    S = X[np.sort(rng.choice(n, PROJECT_SAMPLE, replace=False))] if n > PROJECT_SAMPLE else X
    from threadpoolctl import threadpool_limits

    mean = S.mean(axis=0, dtype=np.float64).astype(np.float32)
    Sc = (S - mean).astype(np.float32)
    with threadpool_limits(1):  # LAPACK's threaded eigh of 784 x 784 took 3.6 s on 2 busy cores, 0.3 s on one
        w, V = np.linalg.eigh((Sc.T @ Sc).astype(np.float64))
    comps = np.ascontiguousarray(V[:, ::-1][:, :dim], dtype=np.float32)
    kept = float(w[::-1][:dim].sum() / max(w.sum(), 1e-300))
    Z = X.astype(np.float32, copy=False) @ comps   # (X - mean) @ comps without an n x d centred copy
    Z -= mean @ comps
    return Z, kept


def knn_ivf_rows(X, k, *, n_cells=0, n_probe=0, refine=None, random_state=0):
    """Approximate k nearest *other* rows of X (``knn = "ivf-rows"``): ``(indices int64, squared distances
    float64)``, each (n, k), the point itself excluded, rows sorted by (distance, index).

    Rows of more than :data:`PROJECT_ABOVE` dimensions are searched on their
    top :data:`PROJECT_DIM` principal components for ``CANDIDATES_PER_K * k``
    candidates, which are then ranked by their exact distances in X — when
    those components hold :data:`PROJECT_MIN_VARIANCE` of the variance (else X
    is searched as it is, at d / PROJECT_DIM times the work).
    """
    X = _dense(X)
    n, d = X.shape
    if d <= PROJECT_ABOVE:
        ind, dist = knn_ivf_rows_lists(X, k + 1, n_cells=n_cells, n_probe=n_probe, refine=refine,
                                       random_state=random_state)
        return ind[:, 1:], dist[:, 1:] ** 2
    Z, kept = project(X, PROJECT_DIM, random_state=random_state)
    if kept < PROJECT_MIN_VARIANCE:  # no low-dimensional structure: the projection's neighbours are not X's
        del Z
        ind, dist = knn_ivf_rows_lists(X, k + 1, n_cells=n_cells, n_probe=n_probe, refine=refine,
                                       random_state=random_state)
        return ind[:, 1:], dist[:, 1:] ** 2
    C = resolve(n, n_cells)[0]
    C, P, R = resolve(n, C, n_probe or min(C, PROJECTED_PROBE), PROJECTED_REFINE if refine is None else refine)
    return _projected(X, Z, k, C, P, R, random_state)


def _projected(X, Z, k, C, P, R, random_state):
    """The k nearest other rows of X among ``CANDIDATES_PER_K * k`` candidates found in its projection Z.

    The candidates come from :func:`bigclust.algo.knn._numba_proj.search_cells_t` (a row's probed cells as
    vectorised sweeps over the transposed cell-sorted Z), then R neighbours-of-neighbours passes; they are
    ranked by their distances in X (:func:`~bigclust.algo.knn._numba_proj.rerank_rows`), float64 for the k kept.
    """
    from bigclust.algo.knn._numba_proj import rerank_rows, search_cells_t

    n = X.shape[0]
    kc = min(n - 1, CANDIDATES_PER_K * k)
    part = partition(Z, C, random_state=random_state)
    Zs = Z[part.order]
    del Z
    ZsT = np.ascontiguousarray(Zs.T)
    sqn = np.einsum("ij,ij->i", Zs, Zs)
    cand = np.empty((n, kc), np.int64)
    search_cells_t(Zs, ZsT, sqn, part.cent, part.graph, part.off, min(P, part.graph.shape[1]),
                   int(np.diff(part.off).max()), cand)
    del ZsT
    if (cand < 0).any():  # a tiny input: rows whose nearby cells held fewer than kc others
        cand = fill_missing(Zs, cand, np.zeros(cand.shape), 0)[0]
    for _ in range(R):
        cand = refine_rows(Zs, cand, 0, n)[0]
    ind = np.empty((n, k), np.int64)
    d2 = np.empty((n, k))
    rerank_rows(X, part.order, cand, ind, d2)  # exact float64 distances in X, sorted by (distance, index)
    return ind, d2
