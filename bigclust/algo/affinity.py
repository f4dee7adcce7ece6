"""Affinity (kernel) matrices from the rows of X.

Dense kernels (``gaussian``, ``linear``, ``cosine``, ``cosine2``) are built in
row blocks as a Dask array, so a kernel larger than memory streams straight
into zarr.  The ``knn`` affinity is a sparse CSR matrix: Gaussian weights on
the symmetrised k-nearest-neighbour graph (exact blocked search or an
approximate library, :mod:`bigclust.algo.knn`), self-loops kept.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import UserError
from bigclust.algo._knn_symmetric import kernel_from_weights, knn_pairs  # noqa: F401 (public names here)

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
    from bigclust.algo._affinity_numba import gaussian_from_gram, square_inplace

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


def dense_kernel(X, kind="gaussian", gamma="median", *, dtype=np.float64, block_bytes=64 << 20, lazy=True):
    """A dense kernel matrix as a lazy Dask array of row blocks (``lazy=False``: the same blocks into an ndarray).

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (n, d)
        Samples in rows (held in memory: n x d is small next to n x n).
    kind : {"gaussian", "linear", "cosine", "cosine2"}
        ``gaussian``: ``exp(-||x_i - x_j||^2 / gamma)`` (paper 000 Eq. 4);
        ``linear``: ``x_i . x_j``; ``cosine``: the normalised inner product;
        ``cosine2``: its square.
    gamma : float or "median", default "median"
        Gaussian width, > 0: a squared distance, the inverse of scikit-learn's
        rbf ``gamma`` (ignored by the other kinds).  ``"median"`` (the default,
        as ``[affinity] gamma``): the median squared distance of the pairs of
        rows (:func:`median_sq_distance`), which suits data of any scale.
    dtype : numpy dtype
        Storage type of the result; blocks are computed in float64.
    block_bytes : int, default 64 MiB
        Size of one row block of the result, which sets the rows per Dask chunk.
    lazy : bool, default True
        False: compute the blocks here, one after the other, into an ndarray (equal to the bit; Dask is not
        imported: an estimator's in-memory fit).

    Returns
    -------
    dask.array.Array, shape (n, n), chunks (rows, n); ndarray if ``lazy=False``
        Exactly symmetric, and the same to the last bit whatever ``block_bytes``
        (see :func:`_gram_rows`); rows per block are a multiple of
        :func:`gram_tile` when the budget allows one tile.

    Examples
    --------
    >>> import numpy as np
    >>> from bigclust.affinity import dense_kernel
    >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    >>> K = dense_kernel(X, gamma=1.0).compute()
    >>> K.shape
    (3, 3)
    >>> print(np.round(K, 3))
    [[1.    0.368 0.018]
     [0.368 1.    0.007]
     [0.018 0.007 1.   ]]
    """
    if kind not in DENSE_KINDS:
        raise UserError(f"unknown dense affinity {kind!r}; expected one of {', '.join(DENSE_KINDS)}")
    if kind == "gaussian":
        gamma = resolve_gamma(X, gamma)
    elif isinstance(gamma, str):
        gamma = 1.0                                   # unused by the kinds without a width
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
    if not lazy:
        K = np.empty((n, n), dtype=dtype)
        for r0 in range(0, n, rows):
            K[r0:r0 + rows] = _dense_block(X, sqn, r0, min(n, r0 + rows), T, kind, float(gamma), dtype)
        return K
    import dask
    import dask.array as da

    Xd = dask.delayed(X, pure=True)
    sq = dask.delayed(sqn, pure=True)
    blocks = []
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        blk = dask.delayed(_dense_block, pure=True)(Xd, sq, r0, r1, T, kind, float(gamma), dtype)
        blocks.append(da.from_delayed(blk, shape=(r1 - r0, n), dtype=dtype))
    return da.concatenate(blocks, axis=0)


#: pairs of the sample over which ``gamma = "median"`` is measured on a dense kernel of large n
MEDIAN_PAIRS = 1 << 20


def median_sq_distance(X, *, max_pairs=MEDIAN_PAIRS, seed=0):
    """Median squared Euclidean distance ``||x_i - x_j||^2`` over the pairs ``i < j`` of rows of X.

    What ``gamma = "median"`` means for a dense Gaussian kernel.  Exact when
    ``n (n - 1) / 2 <= max_pairs`` (n up to about 1450 by default); for larger
    n, over ``max_pairs`` pairs ``i != j`` drawn uniformly with ``seed``
    (the median of a million-pair sample is within a fraction of a percent of
    the exact one, and it is the same number on every run).

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (n, d), n >= 2
        Samples in rows.
    max_pairs : int
        Number of pairs above which the median is taken over a sample of pairs.
    seed : int
        Seed of that sample.

    Returns
    -------
    float
        The median squared distance.
    """
    n = X.shape[0]
    if n < 2:
        raise UserError(f"gamma = \"median\" needs at least 2 samples, got {n}")
    Xd = sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    sq = np.asarray(Xd.multiply(Xd).sum(axis=1)).ravel() if sp.issparse(Xd) else np.einsum("ij,ij->i", Xd, Xd)
    if n * (n - 1) // 2 <= max_pairs:
        parts = []
        step = max(1, (8 << 20) // (8 * n))           # row blocks of the distance matrix, ~8 MB each
        for r0 in range(0, n - 1, step):
            r1 = min(n, r0 + step)
            G = Xd[r0:r1] @ Xd.T
            G = G.toarray() if sp.issparse(G) else G
            D2 = np.maximum(sq[r0:r1, None] + sq[None, :] - 2 * G, 0.0)
            rows, cols = np.triu_indices(r1 - r0, 1, n - r0)
            parts.append(D2[rows, cols + r0])
        d2 = np.concatenate(parts)
    else:
        rng = np.random.default_rng(seed)
        i = rng.integers(0, n, max_pairs)
        j = (i + rng.integers(1, n, max_pairs)) % n      # j != i, uniform over the others
        d2 = np.empty(max_pairs)
        for s in range(0, max_pairs, 1 << 16):
            a, b = i[s:s + (1 << 16)], j[s:s + (1 << 16)]
            if sp.issparse(Xd):
                dot = np.asarray(Xd[a].multiply(Xd[b]).sum(axis=1)).ravel()
            else:
                dot = np.einsum("ij,ij->i", Xd[a], Xd[b])
            d2[s:s + a.size] = np.maximum(sq[a] + sq[b] - 2 * dot, 0.0)
    return _positive_median(d2, "the pairs of samples")


def _positive_median(d2, what):
    med = float(np.median(d2))
    if not med > 0:
        raise UserError(f"gamma = \"median\": the median squared distance over {what} is 0 (most of them are "
                        "duplicate rows); give gamma as a number")
    return med


def resolve_gamma(X, gamma, kind="gaussian"):
    """The Gaussian width to use: ``gamma`` itself, or for ``"median"`` the data's median squared distance.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (n, d)
        Samples in rows.
    gamma : float or "median"
        The width asked for.
    kind : {"gaussian", "knn"}
        ``"gaussian"``: ``"median"`` is measured over the pairs of rows (:func:`median_sq_distance`);
        ``"knn"``: it is returned as it is, since :func:`knn_kernel` measures it over the kNN pairs itself.

    Returns
    -------
    float or "median"
        The width.
    """
    if isinstance(gamma, str):
        if gamma != "median":
            raise UserError(f"gamma must be a number > 0 or \"median\", got {gamma!r}")
        return median_sq_distance(X) if kind != "knn" else gamma
    return gamma


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


def knn_graph(X, n_neighbors=15, *, random_state=0, method="auto", n_cells=0, n_probe=0):
    """The k nearest neighbours of every row, the point itself first.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        Samples in rows.
    n_neighbors : int
        k, the point itself included (2 <= k <= n).
    random_state : int
        Seed of the approximate searches.
    method : str
        The search of :func:`bigclust.algo.knn.knn_search`: ``"exact"``
        (blocked GEMM), ``"approx"``, ``"ivf"``, ``"ivf-rows"`` or a library name (``"pynndescent"``,
        ``"hnswlib"``, ``"faiss"``), or ``"auto"`` (exact while ``n^2 d`` is
        small, see :data:`bigclust.algo.knn.EXACT_WORK_LIMIT`).
    n_cells, n_probe : int
        Cells and cells searched of ``method="ivf"`` / ``"ivf-rows"`` (0: the default rules of
        :mod:`bigclust.algo.knn.ivf` / :mod:`bigclust.algo.knn.ivf_rows`).

    Returns
    -------
    indices : ndarray of int64, shape (n, k)
        Row i is ``i``, then its ``k - 1`` nearest other points by increasing distance.
    distances : ndarray of float64, shape (n, k)
        Their Euclidean distances (0 first; a duplicate of i at distance 0 may follow).
    """
    from bigclust.algo.knn import check_method, knn_search

    check_method(method)
    n = X.shape[0]
    if not 2 <= n_neighbors <= n:
        raise UserError(f"n_neighbors={n_neighbors} must be between 2 and n={n}")
    ind, d2 = knn_search(X, n_neighbors - 1, method, random_state=random_state, n_cells=n_cells, n_probe=n_probe)
    ind = np.hstack([np.arange(n, dtype=np.int64)[:, None], ind])
    dist = np.hstack([np.zeros((n, 1)), np.sqrt(d2)])
    return ind, dist


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


def knn_kernel(X, n_neighbors=15, gamma="median", *, random_state=0, dtype=np.float64, method="auto",
               return_gamma=False, n_cells=0, n_probe=0):
    """Gaussian weights on the symmetrised kNN graph, as CSR (self-loops kept).

    ``K_ij = exp(-||x_i - x_j||^2 / gamma)`` when j is among the k nearest
    neighbours of i or i among those of j, else 0; ``K_ii = 1``.  The weight
    is a function of the distance only, so the union of the two directed
    edges carries one value and ``K`` is exactly symmetric.  ``gamma`` is a
    squared distance (the inverse of scikit-learn's rbf ``gamma``);
    ``"median"`` (the default, as ``[affinity] gamma``) takes the median squared distance over the kNN pairs (each
    point to its ``n_neighbors - 1`` nearest others, self-loops left out).
    Warns when the graph has more than one connected component: spectral
    clustering then sees each component as at least one cluster.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (n, d)
        Samples in rows.
    n_neighbors : int, default 15
        Neighbours per point, the point itself included.
    gamma : float or "median", default "median"
        Gaussian width, a squared distance.
    random_state : int, default 0
        Seed of the approximate searches.
    dtype : numpy dtype
        Type of the weights.
    method : str, default "auto"
        The neighbour search of :func:`knn_graph` (exact or approximate, see :mod:`bigclust.algo.knn`).
    return_gamma : bool, default False
        Also return the width used.
    n_cells, n_probe : int, default 0
        Cells of ``method="ivf"`` (0: the default rule of :mod:`bigclust.algo.knn.ivf`).

    Returns
    -------
    K : scipy.sparse.csr_matrix, shape (n, n)
        The symmetric kernel.
    gamma : float
        The width used (only with ``return_gamma=True``).

    Examples
    --------
    >>> import numpy as np
    >>> from bigclust.affinity import knn_kernel
    >>> X = np.vstack([np.arange(6.0), np.zeros(6)]).T
    >>> K, gamma = knn_kernel(X, n_neighbors=2, return_gamma=True)
    >>> K.shape, K.nnz, gamma
    ((6, 6), 16, 1.0)
    >>> print(np.round(K[0].toarray(), 3))
    [[1.    0.368 0.    0.    0.    0.   ]]
    """
    gamma = _check_gamma(gamma)
    Xd = X.toarray() if sp.issparse(X) else np.asarray(X)
    ind, dist = knn_graph(Xd, n_neighbors, random_state=random_state, method=method, n_cells=n_cells,
                          n_probe=n_probe)
    K, gamma = kernel_from_neighbors(ind, dist, n_neighbors, gamma, dtype=dtype, return_gamma=True)
    return (K, gamma) if return_gamma else K


def _check_gamma(gamma):
    if isinstance(gamma, str):
        if gamma != "median":
            raise UserError(f"gamma must be a number > 0 or \"median\", got {gamma!r}")
    elif not gamma > 0:
        raise UserError(f"gamma must be > 0, got {gamma}")
    return gamma


def kernel_from_neighbors(ind, dist, n_neighbors, gamma, *, dtype=np.float64, return_gamma=False):
    """The kernel of :func:`knn_kernel` from given neighbour lists, each row's own point first.

    Used by :func:`knn_kernel` and by the chunked kNN stage (:mod:`bigclust.pipeline.stages.knn`),
    which finds the neighbours chunk by chunk; warns as :func:`knn_kernel` does.

    Parameters
    ----------
    ind : ndarray of int, shape (n, k)
        Neighbours of each row (as :func:`knn_graph` returns them).
    dist : ndarray of float, shape (n, k)
        Their distances.
    n_neighbors : int
        k, named in the messages.
    gamma : float or "median"
        Gaussian width; ``"median"``: over the pairs given.
    dtype : numpy dtype
        Type of the weights.
    return_gamma : bool, default False
        Also return the width used.

    Returns
    -------
    K : scipy.sparse.csr_matrix, shape (n, n)
        The symmetric kernel.
    gamma : float
        The width used (only with ``return_gamma=True``).
    """
    w, gamma = knn_weights(dist, n_neighbors, gamma)
    K = kernel_from_weights(knn_pairs(np.ascontiguousarray(ind)), w, n_neighbors, gamma, dtype=dtype,
                            neighbors=lambda: ind, distances=lambda: dist)
    return (K, gamma) if return_gamma else K


def knn_weights(dist, n_neighbors, gamma):
    """``(w, gamma)``: the Gaussian weights ``exp(-d^2 / gamma)`` of the pairs ``dist`` (n, k), flat float64, and
    the width used (``"median"``: over the pairs)."""
    from bigclust.algo._affinity_numba import gaussian_weights

    if _check_gamma(gamma) == "median":
        gamma = _positive_median(dist[:, 1:].ravel() ** 2, f"the {n_neighbors}-nearest-neighbour pairs")
    w = np.empty(dist.size)
    gaussian_weights(np.ravel(dist), float(gamma), w)
    return w, float(gamma)
