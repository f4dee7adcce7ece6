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


def _dense_block(Xb, X, sqn, row0, kind, gamma, dtype):
    """One row block of a dense kernel (runs inside a Dask task)."""
    from .affinity_numba import gaussian_from_gram, square_inplace

    G = Xb @ X.T  # sparse text stays sparse here; only the (b, n) block is dense
    G = np.ascontiguousarray(G.toarray() if sp.issparse(G) else G, dtype=np.float64)
    if kind == "gaussian":
        gaussian_from_gram(G, sqn[row0:row0 + G.shape[0]], sqn, row0, gamma)
    elif kind in ("cosine", "cosine2"):
        inv = 1.0 / np.sqrt(np.maximum(sqn, np.finfo(np.float64).tiny))
        G *= inv[row0:row0 + G.shape[0], None]
        G *= inv[None, :]
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
    rows = block_rows(n, dtype.itemsize, block_bytes)
    Xd = dask.delayed(X, pure=True)
    sq = dask.delayed(sqn, pure=True)
    blocks = []
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        blk = dask.delayed(_dense_block, pure=True)(X[r0:r1], Xd, sq, r0, kind, float(gamma), dtype)
        blocks.append(da.from_delayed(blk, shape=(r1 - r0, n), dtype=dtype))
    return da.concatenate(blocks, axis=0)


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
    ind = np.asarray(ind, dtype=np.int64)
    dist = np.asarray(dist, dtype=np.float64)
    # make the self-loop explicit whatever order ties came out in
    for i in np.flatnonzero(ind[:, 0] != np.arange(n)):
        row = ind[i]
        j = np.flatnonzero(row == i)
        if j.size:
            row[[0, j[0]]] = row[[j[0], 0]]
            dist[i, [0, j[0]]] = dist[i, [j[0], 0]]
        else:  # duplicates hid the point itself: put it first, drop the farthest
            ind[i, 1:] = row[:-1]
            dist[i, 1:] = dist[i, :-1]
            ind[i, 0] = i
            dist[i, 0] = 0.0
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
    from scipy.sparse.csgraph import connected_components

    from .affinity_numba import gaussian_weights

    if not gamma > 0:
        raise UserError(f"gamma must be > 0, got {gamma}")
    Xd = X.toarray() if sp.issparse(X) else np.asarray(X)
    n = Xd.shape[0]
    ind, dist = knn_graph(Xd, n_neighbors, random_state=random_state)
    w = np.empty(dist.size)
    gaussian_weights(dist.ravel(), float(gamma), w)
    rows = np.repeat(np.arange(n), ind.shape[1])
    W = sp.csr_matrix((w, (rows, ind.ravel())), shape=(n, n))
    W.sum_duplicates()
    K = W.maximum(W.T).tocsr()
    K.sort_indices()
    ncomp, _ = connected_components(K, directed=False)
    if ncomp > 1:
        warnings.warn(f"kNN graph (k={n_neighbors}) has {ncomp} connected components; "
                      "increase n_neighbors for a connected affinity", RuntimeWarning, stacklevel=2)
    return K.astype(dtype)
