"""Affinity (kernel) matrices from the rows of X.

Dense kernels (``gaussian``, ``linear``, ``cosine``, ``cosine2``) are built in
row blocks as a Dask array, so a kernel larger than memory streams straight
into zarr.  The ``knn`` affinity is a sparse CSR matrix: Gaussian weights on
the symmetrised k-nearest-neighbour graph from pynndescent, self-loops kept.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from .errors import UserError

DENSE_KINDS = ("gaussian", "linear", "cosine", "cosine2")


def block_rows(n: int, itemsize: int, block_bytes: int = 64 << 20) -> int:
    """Rows per block so that one (rows x n) block stays under ``block_bytes``."""
    return int(max(1, min(n, block_bytes // max(1, n * itemsize))))


def gram_tile(n: int) -> int:
    """Rows of the fixed Gram tiles of a dense kernel on n points (a function of n only).

    A power of two from 32 to 512 with a (tile x n) float64 panel near 4 MB.
    """
    t = 512
    while t > 32 and t * n * 8 > 4 << 20:
        t //= 2
    return t


def kernel_block_rows(n: int, itemsize: int, block_bytes: int = 64 << 20) -> int:
    """Rows per block of :func:`dense_kernel`: under ``block_bytes``, whole Gram tiles when one fits."""
    rows, T = block_rows(n, itemsize, block_bytes), gram_tile(n)
    return rows - rows % T if rows >= T else rows


def _gram_rows(Xp, r0, r1, n, T):
    """Rows ``r0:r1`` of ``X X^T`` from fixed (T x T) tiles of the zero-padded ``Xp``.

    BLAS rounds differently for different matrix shapes, so a Gram block
    computed as ``X[r0:r1] @ X.T`` changes in the last bit with the chunking
    and is not exactly symmetric.  Here every entry comes from one GEMM of
    two whole T-row tiles, tile (a, b) with a > b being the transpose of tile
    (b, a): the same call for (i, j) and (j, i), whatever the row blocks.
    """
    G = np.empty((r1 - r0, n))
    nt = Xp.shape[0] // T
    for a in range(r0 // T, -(-r1 // T)):
        lo, hi = max(r0, a * T), min(r1, (a + 1) * T)
        A = Xp[a * T:(a + 1) * T]
        for b in range(nt):
            B = Xp[b * T:(b + 1) * T]
            g = A @ B.T if a <= b else (B @ A.T).T
            c1 = min(n, (b + 1) * T)
            G[lo - r0:hi - r0, b * T:c1] = g[lo - a * T:hi - a * T, :c1 - b * T]
    return G


def _dense_block(X, sqn, r0, r1, T, kind, gamma, dtype):
    """One row block ``r0:r1`` of a dense kernel (runs inside a Dask task).

    ``X`` is CSR (the sparse product is exact in the order of its sorted
    column indices, hence symmetric and chunk-free) or the dense X
    zero-padded to a multiple of ``T`` rows.
    """
    from .affinity_numba import gaussian_from_gram, square_inplace

    n = sqn.shape[0]
    if sp.issparse(X):  # text stays sparse here; only the (b, n) block is dense
        G = np.ascontiguousarray((X[r0:r1] @ X.T).toarray(), dtype=np.float64)
    else:
        G = _gram_rows(X, r0, r1, n, T)
    if kind == "gaussian":
        gaussian_from_gram(G, sqn[r0:r1], sqn, r0, gamma)
    elif kind in ("cosine", "cosine2"):
        inv = 1.0 / np.sqrt(np.maximum(sqn, np.finfo(np.float64).tiny))
        G *= np.multiply.outer(inv[r0:r1], inv)  # g * (inv_i * inv_j): symmetric bit for bit
        if kind == "cosine2":
            square_inplace(G)
    return G.astype(dtype, copy=False)


def dense_kernel(X, kind="gaussian", gamma=1.0, *, dtype=np.float64, block_bytes=64 << 20):
    """A dense kernel matrix as a lazy Dask array of row blocks.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (n, d)
        Samples in rows (held in memory: n x d is small next to n x n).
    kind : {"gaussian", "linear", "cosine", "cosine2"}
        ``gaussian``: ``exp(-||x_i - x_j||^2 / gamma)`` (paper 000 Eq. 4);
        ``linear``: ``x_i . x_j``; ``cosine``: the normalised inner product;
        ``cosine2``: its square.
    gamma : float
        Gaussian width, > 0 (ignored by the other kinds).
    dtype : numpy dtype
        Storage type of the result; blocks are computed in float64.

    Returns
    -------
    dask.array.Array, shape (n, n), chunks (rows, n)
        Exactly symmetric, and the same to the last bit whatever ``block_bytes``
        (see :func:`_gram_rows`); rows per block are a multiple of
        :func:`gram_tile` when the budget allows one tile.
    """
    import dask
    import dask.array as da

    if kind not in DENSE_KINDS:
        raise UserError(f"unknown dense affinity {kind!r}; expected one of {', '.join(DENSE_KINDS)}")
    if kind == "gaussian" and not gamma > 0:
        raise UserError(f"gamma must be > 0, got {gamma}")
    n = X.shape[0]
    dtype = np.dtype(dtype)
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        sqn = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    else:
        X = np.ascontiguousarray(X, dtype=np.float64)
        sqn = np.einsum("ij,ij->i", X, X)
    T = gram_tile(n)
    rows = kernel_block_rows(n, dtype.itemsize, block_bytes)  # whole tiles: none computed twice
    if not sp.issparse(X):
        Xp = np.zeros((-(-n // T) * T, X.shape[1]))
        Xp[:n] = X
        X = Xp
    Xd = dask.delayed(X, pure=True)
    sq = dask.delayed(sqn, pure=True)
    blocks = []
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        blk = dask.delayed(_dense_block, pure=True)(Xd, sq, r0, r1, T, kind, float(gamma), dtype)
        blocks.append(da.from_delayed(blk, shape=(r1 - r0, n), dtype=dtype))
    return da.concatenate(blocks, axis=0)


#: a median off-diagonal Gaussian entry below this (or above 1 - this) makes K numerically I (or all ones)
DEGENERATE_KERNEL = 1e-12


def check_gaussian_width(X, gamma, *, n_sample=256, seed=0):
    """Warn when ``exp(-||x_i - x_j||^2 / gamma)`` is numerically the identity or constant.

    Measured on the pairs of ``n_sample`` rows drawn with ``seed`` (cheap on
    any n): when the median off-diagonal entry is below
    :data:`DEGENERATE_KERNEL`, K is the identity to working precision (every
    point its own cluster, MB = MC = 0, chance accuracy); above
    ``1 - DEGENERATE_KERNEL`` it is all ones.  The warning names gamma and the
    data's distance scale (median squared distance of the sampled pairs).

    Returns ``(median entry, median squared distance)``.
    """
    n = X.shape[0]
    if n < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n, min(n, n_sample), replace=False))
    S = X[idx]
    S = np.asarray(S.toarray() if sp.issparse(S) else S, dtype=np.float64)
    sq = np.einsum("ij,ij->i", S, S)
    D2 = np.maximum(sq[:, None] + sq[None, :] - 2 * S @ S.T, 0.0)
    off = D2[np.triu_indices(len(idx), 1)]
    d2 = float(np.median(off))
    med = float(np.median(np.exp(-off / gamma)))
    scale = (f"the data's median squared distance is {d2:.3g} (over {off.size} sampled pairs), gamma={gamma:g}")
    if med < DEGENERATE_KERNEL:
        warnings.warn(f"gaussian kernel is numerically the identity (median off-diagonal entry {med:.3g}): {scale}; "
                      "every point looks like its own cluster and the scores are at chance level: raise gamma "
                      f"toward {d2:.3g}", RuntimeWarning, stacklevel=2)
    elif med > 1 - DEGENERATE_KERNEL:
        warnings.warn(f"gaussian kernel is numerically constant (median off-diagonal entry 1 - {1 - med:.3g}): "
                      f"{scale}; it carries almost no information about the data: lower gamma toward {d2:.3g}",
                      RuntimeWarning, stacklevel=2)
    return med, d2


def knn_graph(X, n_neighbors=15, *, random_state=0):
    """Approximate k nearest neighbours of every row (pynndescent).

    Returns ``(indices, distances)``, each (n, k); each row's first neighbour
    is the point itself at distance 0.
    """
    n = X.shape[0]
    if not 2 <= n_neighbors <= n:
        raise UserError(f"n_neighbors={n_neighbors} must be between 2 and n={n}")
    if n <= 4096:
        # exact search is cheap here and makes small runs independent of NN-descent's randomness
        from sklearn.neighbors import NearestNeighbors
        dist, ind = NearestNeighbors(n_neighbors=n_neighbors).fit(X).kneighbors(X)
    else:
        from pynndescent import NNDescent
        index = NNDescent(X, n_neighbors=n_neighbors, metric="euclidean",
                          random_state=random_state, n_jobs=1)
        ind, dist = index.neighbor_graph
    return self_first(ind, dist)


def self_first(ind, dist, row0=0):
    """Neighbour lists of rows ``row0 ..`` with each row's own point first at distance 0 (int64, float64).

    Makes the self-loop explicit whatever order ties came out in; where
    duplicates hid the point itself, it is put first and the farthest dropped.
    """
    ind = np.asarray(ind, dtype=np.int64)
    dist = np.asarray(dist, dtype=np.float64)
    me = row0 + np.arange(ind.shape[0])
    for r in np.flatnonzero(ind[:, 0] != me):
        row, i = ind[r], me[r]
        j = np.flatnonzero(row == i)
        if j.size:
            row[[0, j[0]]] = row[[j[0], 0]]
            dist[r, [0, j[0]]] = dist[r, [j[0], 0]]
        else:  # duplicates hid the point itself: put it first, drop the farthest
            ind[r, 1:] = row[:-1]
            dist[r, 1:] = dist[r, :-1]
            ind[r, 0] = i
            dist[r, 0] = 0.0
    return ind, dist


def knn_kernel(X, n_neighbors=15, gamma=1.0, *, random_state=0, dtype=np.float64):
    """Gaussian weights on the symmetrised kNN graph, as CSR (self-loops kept).

    ``K_ij = exp(-||x_i - x_j||^2 / gamma)`` when j is among the k nearest
    neighbours of i or i among those of j, else 0; ``K_ii = 1``.  The weight
    is a function of the distance only, so the union of the two directed
    edges carries one value and ``K`` is exactly symmetric.

    Warns when the graph has more than one connected component: spectral
    clustering then sees each component as at least one cluster.
    """
    if not gamma > 0:
        raise UserError(f"gamma must be > 0, got {gamma}")
    Xd = X.toarray() if sp.issparse(X) else np.asarray(X)
    ind, dist = knn_graph(Xd, n_neighbors, random_state=random_state)
    return kernel_from_neighbors(ind, dist, n_neighbors, gamma, dtype=dtype)


def kernel_from_neighbors(ind, dist, n_neighbors, gamma, *, dtype=np.float64):
    """:func:`knn_kernel` from given neighbour lists ``ind`` / ``dist`` (n, k), each row's own point first.

    Used by :func:`knn_kernel` and by the chunked kNN stage (:mod:`bigclust.knn_stage`),
    which finds the neighbours chunk by chunk; warns as :func:`knn_kernel` does.
    """
    from scipy.sparse.csgraph import connected_components

    from .affinity_numba import gaussian_weights

    if not gamma > 0:
        raise UserError(f"gamma must be > 0, got {gamma}")
    n = ind.shape[0]
    w = np.empty(dist.size)
    gaussian_weights(dist.ravel(), float(gamma), w)
    rows = np.repeat(np.arange(n), ind.shape[1])
    W = sp.csr_matrix((w, (rows, ind.ravel())), shape=(n, n))
    W.sum_duplicates()
    K = W.maximum(W.T).tocsr()
    K.sort_indices()
    ncomp, _ = connected_components(K, directed=False)
    if ncomp > 1:
        # which is to blame: the neighbour lists themselves, or weights that underflow to 0 for this γ
        A = sp.csr_matrix((np.ones(ind.size), (rows, ind.ravel())), shape=(n, n))
        ngraph, _ = connected_components(A, directed=False)
        d2 = float(np.median(dist[:, 1:] ** 2)) if dist.shape[1] > 1 else float("nan")
        if ncomp > ngraph:
            cause = (f"exp(-d^2/gamma) underflows to 0 on kNN edges: gamma={gamma:g} is too small for the "
                     f"median squared kNN distance {d2:.3g} (the neighbour lists alone give {ngraph}); raise gamma")
        else:
            cause = "the neighbour lists themselves are disconnected; raise n_neighbors"
        warnings.warn(f"kNN graph (k={n_neighbors}) has {ncomp} connected components: {cause}; clustering goes "
                      "on, each component adds an eigenvalue at the top of the spectrum",
                      RuntimeWarning, stacklevel=2)
    return K.astype(dtype)
