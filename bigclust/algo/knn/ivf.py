"""Approximate kNN by an inverted file (IVF): a k-means partition and exact search within nearby cells.

The rows are partitioned into C cells by a Lloyd k-means on a seeded sample
(:func:`ivf_partition`); every row is assigned to its nearest centroid.  The
rows of one cell are then searched exactly (:func:`bigclust.algo.knn.exact.knn_exact`,
blocked GEMM) against the rows of the ``nprobe`` cells whose centroids are
nearest to that cell's centroid (the cell itself first), and the results are
mapped back to global row ids (:func:`search_cells`).  A point whose true
neighbour lies in a cell not probed misses it; recall grows with nprobe / C
and cost with ``nprobe / C * n^2 d``.

Cells are independent, so the search runs in groups of cells: the chunked
kNN stage (:mod:`bigclust.pipeline.stages.knn`) makes one resumable task of each group.
The result is a function of X, k, C, nprobe and the seed only (not of the
grouping), the same in one call (:func:`knn_ivf`) and in chunks.

Defaults (:func:`default_cells`, :func:`default_probe`) were chosen from
recall@k against the exact search on MNIST-70k and mnist-1m (PCA-50), k = 10
and 30 (the README has the tables): cells of about ROWS_PER_CELL rows,
C = round(n / ROWS_PER_CELL), and nprobe = DEFAULT_PROBE * sqrt(n / PROBE_REF_N)
(at least DEFAULT_PROBE).  Recall at a fixed nprobe fell with n (at 1M,
C = 3906: nprobe 32 gave 0.88, 128 gave 0.98), so nprobe grows with n to keep
recall@10 near its 70k value (0.98); the work, n * nprobe * ROWS_PER_CELL * d,
then grows as n^1.5.  Fix ``ivf_probe`` for work linear in n at a recall that
falls with n.
"""
from __future__ import annotations

import math

import numpy as np

from bigclust._util.errors import UserError
from bigclust.algo.knn.exact import _dense, knn_exact

#: C = n / ROWS_PER_CELL cells: at n = 70000 (273 cells) the same as the sqrt(n) cells measured first;
#: at n = 1M smaller cells with more probes gave more recall per row scanned than sqrt(n) cells
ROWS_PER_CELL = 256
#: cells searched per query cell at n = PROBE_REF_N (its own and the nearest others by centroid distance):
#: the smallest measured with recall >= 0.98 at k = 10 and 30 on MNIST-70k PCA-50 (32: 0.982 / 0.979,
#: 36: 0.985 / 0.982, 40: 0.987 / 0.985)
DEFAULT_PROBE = 36
PROBE_REF_N = 70000
#: Lloyd iterations on the sample, and sample rows per cell
LLOYD_ITER = 10
SAMPLE_PER_CELL = 40


def default_cells(n: int) -> int:
    """The number of cells for n rows: ``round(n / ROWS_PER_CELL)``, at least 1 and at most n."""
    return int(min(n, max(1, round(n / ROWS_PER_CELL))))


def default_probe(n_cells: int, n: int = PROBE_REF_N) -> int:
    """Cells searched per query cell: ``ceil(DEFAULT_PROBE * sqrt(n / PROBE_REF_N))``, at least DEFAULT_PROBE, at most C."""
    return int(min(n_cells, max(DEFAULT_PROBE, math.ceil(DEFAULT_PROBE * math.sqrt(n / PROBE_REF_N)))))


def resolve(n, n_cells=0, n_probe=0):
    """``(C, nprobe)`` for n rows; 0 (or None) means the default rule.  One-line :class:`UserError` if invalid."""
    C = int(n_cells or default_cells(n))
    if not 1 <= C <= n:
        raise UserError(f"ivf_cells={C} must be between 1 and n={n}")
    P = int(n_probe or default_probe(C, n))
    if not 1 <= P <= C:
        raise UserError(f"ivf_probe={P} must be between 1 and ivf_cells={C}")
    return C, P


def _nearest(C, Y):
    """Index of the nearest row of C for every row of Y (exact blocked search)."""
    ind, _ = knn_exact(C, 1, queries=Y)
    return ind[:, 0]


def ivf_partition(X, n_cells, n_probe, *, random_state=0, n_iter=LLOYD_ITER):
    """The IVF partition of X: centroids, cell of every row, probe lists.

    Parameters
    ----------
    X : ndarray, shape (n, d)
    n_cells, n_probe : int
        C cells, nprobe cells searched per cell.
    random_state : int
        Seed of the sample and of the initial centroids.
    n_iter : int
        Lloyd iterations on the sample (``SAMPLE_PER_CELL * C`` rows).

    Returns
    -------
    centroids : ndarray float64, (C, d)
    cell : ndarray int64, (n,)
        The nearest centroid of every row.
    probes : ndarray int64, (C, nprobe)
        Per cell, the cells searched: itself first, then the nearest other
        centroids by increasing distance.
    """
    X = _dense(X)
    n = X.shape[0]
    C, P = resolve(n, n_cells, n_probe)
    rng = np.random.default_rng(random_state)
    m = min(n, SAMPLE_PER_CELL * C)
    S = X[np.sort(rng.choice(n, m, replace=False))] if m < n else X
    cent = np.array(S[np.sort(rng.choice(S.shape[0], C, replace=False))], dtype=np.float64)
    for _ in range(n_iter):  # plain Lloyd; an empty cell keeps its centroid (harmless for the search)
        lab = _nearest(cent, S)
        cnt = np.bincount(lab, minlength=C)
        sums = np.zeros_like(cent)
        np.add.at(sums, lab, S)
        nz = cnt > 0
        cent[nz] = sums[nz] / cnt[nz, None]
    cell = _nearest(cent, X).astype(np.int64)
    probes = np.empty((C, P), dtype=np.int64)
    if P > 1:
        # the P - 1 nearest other centroids (a self search excludes each centroid itself)
        others, _ = knn_exact(cent, P - 1)
        probes[:, 1:] = others
    probes[:, 0] = np.arange(C)
    return cent, cell, probes


def cell_order(cell, n_cells):
    """Rows sorted by cell (stable) and the offsets of each cell's run: rows of cell c are ``order[off[c]:off[c+1]]``."""
    order = np.argsort(cell, kind="stable").astype(np.int64)
    off = np.zeros(n_cells + 1, dtype=np.int64)
    np.cumsum(np.bincount(cell, minlength=n_cells), out=off[1:])
    return order, off


def _self_first_rows(ind, dist, rows):
    """Rows sorted by (distance, index) with each query's own row first (it is at distance 0)."""
    own = ind == rows[:, None]
    order = np.lexsort((ind, ~own, dist), axis=-1)
    ind = np.take_along_axis(ind, order, axis=1)
    dist = np.take_along_axis(dist, order, axis=1)
    miss = ind[:, 0] != rows
    if miss.any():  # k duplicates at distance 0 hid the row itself: put it first, drop the farthest
        ind[miss, 1:] = ind[miss, :-1]
        dist[miss, 1:] = dist[miss, :-1]
        ind[miss, 0] = rows[miss]
        dist[miss, 0] = 0.0
    return ind, dist


def search_cells(X, k, order, off, probes, cells):
    """Neighbour lists of the rows of ``cells``: each row's own point first, then its k - 1 nearest found.

    Parameters
    ----------
    X : ndarray (n, d)
    k : int
        Neighbours per row, the row itself included (as the kNN stage counts them).
    order, off : from :func:`cell_order`
    probes : (C, nprobe) from :func:`ivf_partition`
    cells : iterable of int

    Returns
    -------
    rows : int64 (m,), the global ids of the rows searched (cell by cell)
    ind : int64 (m, k), dist : float64 (m, k)
        Euclidean distances recomputed in float64; rows sorted by
        (distance, index) after the row itself.
    """
    out_r, out_i, out_d = [], [], []
    for c in cells:
        q = order[off[c]:off[c + 1]]
        if q.size == 0:
            continue
        base = np.concatenate([order[off[p]:off[p + 1]] for p in probes[c]])
        if base.size < k:  # too few rows in the probed cells: widen to the nearest cells by centroid order
            more = [p for p in _centroid_rank(c, probes) if p not in set(probes[c])]
            for p in more:
                base = np.concatenate([base, order[off[p]:off[p + 1]]])
                if base.size >= k:
                    break
        base = np.sort(base)  # a fixed base order: ties then break toward the smaller global id
        li, d2 = knn_exact(X[base], k, queries=X[q])
        ind, dist = _self_first_rows(base[li], np.sqrt(d2), q)
        out_r.append(q)
        out_i.append(ind)
        out_d.append(dist)
    if not out_r:
        return np.empty(0, np.int64), np.empty((0, k), np.int64), np.empty((0, k))
    return np.concatenate(out_r), np.vstack(out_i), np.vstack(out_d)


def _centroid_rank(c, probes):
    """Every cell in an order of preference for cell c when its probes hold fewer than k rows.

    Breadth-first over the probe lists (probes of probes), then any cell left.
    """
    C = probes.shape[0]
    seen, queue, out = {int(c)}, [int(c)], []
    while queue:
        nxt = []
        for a in queue:
            for b in probes[a]:
                b = int(b)
                if b not in seen:
                    seen.add(b)
                    out.append(b)
                    nxt.append(b)
        queue = nxt
    out.extend(b for b in range(C) if b not in seen)
    return out


def cell_groups(off, chunk_rows):
    """Consecutive cells grouped so that each group holds about ``chunk_rows`` rows (at least one cell)."""
    groups, start, rows = [], 0, 0
    C = off.size - 1
    for c in range(C):
        rows += int(off[c + 1] - off[c])
        if rows >= chunk_rows or c == C - 1:
            groups.append((start, c + 1))
            start, rows = c + 1, 0
    return groups


def knn_ivf_lists(X, k, *, n_cells=0, n_probe=0, random_state=0):
    """IVF neighbour lists of every row, the row itself first: ``(ind int64, dist float64)``, (n, k)."""
    X = _dense(X)
    n = X.shape[0]
    if not 1 <= k <= n:
        raise UserError(f"k={k} must be between 1 and n={n}")
    C, P = resolve(n, n_cells, n_probe)
    _, cell, probes = ivf_partition(X, C, P, random_state=random_state)
    order, off = cell_order(cell, C)
    rows, ind, dist = search_cells(X, k, order, off, probes, range(C))
    out_i = np.empty((n, k), np.int64)
    out_d = np.empty((n, k))
    out_i[rows] = ind
    out_d[rows] = dist
    return out_i, out_d


def knn_ivf(X, k, *, n_cells=0, n_probe=0, random_state=0):
    """Approximate k nearest *other* rows of X by IVF (``knn = "ivf"``).

    Returns ``(indices int64, squared distances float64)``, each (n, k),
    the point itself excluded, rows sorted by (distance, index).  ``n_cells``
    / ``n_probe``: 0 takes :func:`default_cells` / :func:`default_probe`.
    """
    ind, dist = knn_ivf_lists(X, k + 1, n_cells=n_cells, n_probe=n_probe, random_state=random_state)
    return ind[:, 1:], dist[:, 1:] ** 2
