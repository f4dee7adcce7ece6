"""Exact k nearest neighbours: blocked float32 GEMM tiles, a Numba k-heap per row, float64 distances.

The reference every other search (:mod:`bigclust.algo.knn.approx`,
:mod:`bigclust.algo.knn.ivf`) is measured against (:func:`recall`); memory is
the tiles and the (n, k) heaps, never an n x n matrix.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import UserError


def _dense(X, dtype=None):
    """X as a C-contiguous 2-D float array (float32 / float64 kept unless ``dtype`` is given)."""
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    if X.ndim != 2:
        raise UserError(f"kNN needs a 2-D array of rows, got shape {X.shape}")
    if dtype is None:
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    X = np.ascontiguousarray(X, dtype=dtype)
    if not np.isfinite(X).all():
        raise UserError("kNN input has NaN or infinite values (first in row "
                        f"{int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])})")
    return X


def _augment(A, scale, query):
    """``[scale * A, -|a|^2, 1]`` (query side) or ``[A, 1, -|a|^2]`` (base side), float32."""
    sq = np.einsum("ij,ij->i", A, A, dtype=np.float64).astype(np.float32)
    out = np.empty((A.shape[0], A.shape[1] + 2), dtype=np.float32)
    np.multiply(A, scale, out=out[:, :-2])
    out[:, -2] = -sq if query else 1.0
    out[:, -1] = 1.0 if query else -sq
    return out


def knn_exact(X, k, queries=None, *, row_block=2048, col_block=2048):
    """Exact k nearest neighbours by blocked GEMM and a partial top-k per row.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (m, d)
        The base points: searched in float32, the chosen distances
        recomputed in float64 from X as given.
    k : int
        Neighbours per query, ``1 <= k <= m`` (``m - 1`` when ``queries`` is None).
    queries : ndarray, shape (n, d), optional
        Query rows; ``None`` searches X among itself and excludes each point
        from its own list (a duplicate of it at distance 0 is kept).
    row_block, col_block : int
        Tile sizes: one (row_block x col_block) float32 tile is held at a
        time (a self search uses square tiles of the larger size, and the
        transposed copy of one), plus (n, k) heaps and float32 copies of the
        rows augmented by two columns.  The result does not depend on them
        beyond float32 near-ties (see Notes).

    Returns
    -------
    indices : ndarray int64, shape (n, k)
    sqdist : ndarray float64, shape (n, k)
        ``||q_i - x_j||^2`` recomputed exactly in float64 for the chosen
        pairs; every row sorted by (distance, index).

    Notes
    -----
    Candidates are chosen on float32 distances: two neighbours whose
    distances agree to float32 rounding may be exchanged at the k-th place
    (ties are otherwise broken toward the smaller index).  A self search
    computes only the tiles on and above the diagonal: the tile (a, b)
    holds ``-||x_i - x_j||^2``, a symmetric quantity, so its transpose is
    tile (b, a).
    """
    from bigclust.algo.knn._numba import merge_tile, refine_sort

    B = _dense(X)
    self_search = queries is None
    Q = B if self_search else _dense(queries, B.dtype)
    m, n = B.shape[0], Q.shape[0]
    if Q.shape[1] != B.shape[1]:
        raise UserError(f"queries have {Q.shape[1]} columns, the base {B.shape[1]}")
    kmax = m - 1 if self_search else m
    if not 1 <= k <= kmax:
        raise UserError(f"k={k} must be between 1 and {kmax} (the number of candidate neighbours)")
    if row_block < 1 or col_block < 1:
        raise UserError(f"row_block and col_block must be >= 1, got {row_block}, {col_block}")
    # augmented rows: [2q, -|q|^2, 1] . [x, 1, -|x|^2] = -||q - x||^2 from one GEMM per tile
    Ba = _augment(B, 1.0, False)
    Qa = _augment(Q, 2.0, True)
    heap_d = np.full((n, k), np.inf, dtype=np.float32)
    heap_i = np.full((n, k), -1, dtype=np.int64)
    if self_search:
        # tile (a, b), b >= a, serves rows of tile a and (transposed) rows of tile b: half the GEMMs
        T = max(row_block, col_block)
        for r0 in range(0, n, T):
            r1 = min(n, r0 + T)
            for c0 in range(r0, n, T):
                c1 = min(n, c0 + T)
                G = Qa[r0:r1] @ Ba[c0:c1].T
                merge_tile(G, r0, c0, True, heap_d[r0:r1], heap_i[r0:r1])
                if c0 != r0:
                    merge_tile(np.ascontiguousarray(G.T), c0, r0, False, heap_d[c0:c1], heap_i[c0:c1])
                del G
    else:
        for r0 in range(0, n, row_block):
            r1 = min(n, r0 + row_block)
            for c0 in range(0, m, col_block):
                c1 = min(m, c0 + col_block)
                G = Qa[r0:r1] @ Ba[c0:c1].T          # BLAS sgemm; the only large temporary
                merge_tile(G, r0, c0, False, heap_d[r0:r1], heap_i[r0:r1])
    del heap_d
    sqdist = np.empty((n, k))
    refine_sort(Q, B, heap_i, sqdist)
    return heap_i, sqdist


def recall(ind, ref) -> float:
    """Mean fraction of the true neighbours ``ref`` (n, k) found in ``ind`` (n, k') per row (recall@k)."""
    ind, ref = np.asarray(ind), np.asarray(ref)
    hits = 0
    for r0 in range(0, ref.shape[0], 4096):   # (rows, k, k') comparisons in bounded blocks
        a, b = ind[r0:r0 + 4096], ref[r0:r0 + 4096]
        hits += int((b[:, :, None] == a[:, None, :]).any(axis=2).sum())
    return hits / ref.size
