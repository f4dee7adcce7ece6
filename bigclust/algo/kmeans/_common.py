"""What Lloyd and mini-batch k-means share: the result record, input checks, seeds and initial centres.

The Numba kernels are imported on first use (:func:`_kernels`, :func:`_csr_kernels`),
so importing :mod:`bigclust.algo.kmeans` does not load Numba.
"""
from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from bigclust._util.checks import dense_float64
from bigclust._util.errors import DataError, UserError

INIT_METHODS = ("k-means++", "random")


@dataclass
class KMeansResult:
    """Outcome of all restarts of a k-means run.

    Parameters
    ----------
    labels : ndarray of int32, shape (n_init, n)
        Cluster labels of every restart.
    inertia : ndarray of float64, shape (n_init,)
        Sum of squared distances of the points to their centres, per restart.
    n_iter : ndarray of int32, shape (n_init,)
        Lloyd assignment passes (or mini-batch steps) per restart.
    centers : ndarray of float64, shape (k, d)
        Centres of the best restart (lowest inertia).
    best : int
        Index of the best restart.
    n_empty_reseeded : int
        Empty (or, in mini-batch, starved) clusters re-seeded, summed over
        all restarts.
    """

    labels: np.ndarray
    inertia: np.ndarray
    n_iter: np.ndarray
    centers: np.ndarray
    best: int
    n_empty_reseeded: int


def _kernels():
    """The dense-row kernels (:mod:`bigclust.algo.kmeans._numba`), imported on first use."""
    from bigclust.algo.kmeans import _numba

    return _numba


def _csr_kernels():
    """The CSR-row kernels (:mod:`bigclust.algo.kmeans._numba_csr`), imported on first use."""
    from bigclust.algo.kmeans import _numba_csr

    return _numba_csr


def _is_lazy(X):
    """True for Dask (or Dask-like) arrays, which must be read block by block."""
    return hasattr(X, "compute") and hasattr(X, "chunks") and hasattr(X, "ndim")


def _as_float64(X, where="X"):
    """C-contiguous float64 copy/view of a 2-D numeric array, checked finite."""
    X = dense_float64(X, where)
    if not np.isfinite(X).all():
        bad = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
        raise DataError(f"{where} has non-finite values (first in row {bad}); k-means needs finite data")
    return X


def _as_csr64(X):
    """CSR float64 copy with int64 indices, sorted and without stored zeros, checked finite."""
    X = sp.csr_matrix(X, dtype=np.float64, copy=True)
    if not np.isfinite(X.data).all():
        bad = int(np.searchsorted(X.indptr, np.flatnonzero(~np.isfinite(X.data))[0], side="right") - 1)
        raise DataError(f"X has non-finite values (first in row {bad}); k-means needs finite data")
    X.sum_duplicates()
    X.eliminate_zeros()
    X.sort_indices()
    X.indices = X.indices.astype(np.int64)
    X.indptr = X.indptr.astype(np.int64)
    return X


def _check_k(n_clusters, n):
    if (not isinstance(n_clusters, numbers.Integral) or isinstance(n_clusters, bool)
            or not 2 <= n_clusters <= n):
        raise UserError(f"n_clusters={n_clusters} must be between 2 and n={n}")
    return int(n_clusters)


def _n_distinct_rows(X, at_least):
    """Number of distinct rows of X, or any number >= ``at_least`` once that many are seen."""
    if sp.issparse(X):  # canonical CSR (:func:`_as_csr64`): a row is its (indices, values) bytes
        seen = set()
        for a, b in zip(X.indptr[:-1], X.indptr[1:]):
            seen.add((X.indices[a:b].tobytes(), (X.data[a:b] + 0.0).tobytes()))
            if len(seen) >= at_least:
                break
        return len(seen)

    def count(rows):
        rows = np.ascontiguousarray(rows + 0.0)  # + 0.0 turns -0.0 into 0.0 before comparing bytes
        return np.unique(rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1])))).shape[0]

    head = count(X[:4 * at_least])  # usually enough: avoids sorting all rows
    return head if head >= at_least else count(X)


def _draw_seeds(random_state, size):
    """One uint64 seed per stream, drawn from ``random_state`` at the boundary."""
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    return rs.randint(0, 2**64, size=size, dtype=np.uint64)


def init_centers(X, n_clusters, seeds, method="k-means++"):
    """Initial centres drawn from the rows of ``X``, one set per seed.

    Parameters
    ----------
    X : array-like, shape (n, d)
        Data (converted to float64).
    n_clusters : int
        Number of centres k, ``2 <= k <= n``.
    seeds : int or sequence of int
        Non-negative seeds below 2**64; each gives one independent set of
        centres from a splitmix64 stream (the same whatever the thread count).
    method : {"k-means++", "random"}
        ``"k-means++"``: D^2 sampling (Arthur & Vassilvitskii 2007), without
        the greedy trials; ``"random"``: k distinct rows chosen uniformly.

    Returns
    -------
    ndarray of float64, shape (len(seeds), k, d), or (k, d) for a scalar seed
        The initial centres.
    """
    X = _as_float64(X)
    k = _check_k(n_clusters, X.shape[0])
    from bigclust.algo.kmeans.draws import method_code

    code = method_code(method)
    scalar = np.ndim(seeds) == 0
    seeds_arr = np.atleast_1d(np.asarray(seeds))
    if seeds_arr.ndim != 1 or seeds_arr.size == 0 or seeds_arr.dtype.kind not in "iu":
        raise UserError("seeds must be a non-negative integer or a non-empty 1-D sequence of them")
    if seeds_arr.dtype.kind == "i" and (seeds_arr < 0).any():
        raise UserError("seeds must be non-negative")
    seeds_arr = seeds_arr.astype(np.uint64)
    centers = np.empty((seeds_arr.size, k, X.shape[1]))
    _kernels().init_centers_kernel(X, k, seeds_arr, code, centers)
    return centers[0] if scalar else centers


def _initial(X, k, n_init, init, seeds):
    """Initial centres, shape (n_init, k, d), from a method name or an array."""
    if isinstance(init, str):
        from bigclust.algo.kmeans.draws import method_code

        code = method_code(init)
        centers = np.empty((n_init, k, X.shape[1]))
        if sp.issparse(X):
            _csr_kernels().init_centers_csr_kernel(X.data, X.indices, X.indptr, _row_sqnorms(X), k, seeds, code,
                                               centers)
        else:
            _kernels().init_centers_kernel(X, k, seeds, code, centers)
        return centers
    init = np.asarray(init, dtype=np.float64)
    if init.ndim == 2:
        init = init[None]
    if init.ndim != 3 or init.shape[1:] != (k, X.shape[1]):
        raise UserError(
            f"init array must have shape (n_init, {k}, {X.shape[1]}) or ({k}, {X.shape[1]}), got {np.shape(init)}")
    if init.shape[0] != n_init:
        raise UserError(f"init array holds {init.shape[0]} restart(s) but n_init={n_init}; pass n_init={init.shape[0]}")
    if not np.isfinite(init).all():
        raise DataError("init array has non-finite centres")
    return np.array(init, order="C")


def _warn_final_empty(labels, k):
    """Warn if a restart ends with an empty cluster (possible after a max_iter or tol stop)."""
    r = labels.shape[0]
    codes = (np.arange(r, dtype=np.int64)[:, None] * k + labels).ravel()
    sizes = np.bincount(codes, minlength=r * k).reshape(r, k)
    bad = int((sizes == 0).any(axis=1).sum())
    if bad:
        warnings.warn(f"k-means: {bad} of {r} restart(s) end with an empty cluster "
                      f"(stopped by max_iter or tol before re-seeding took effect)",
                      RuntimeWarning, stacklevel=3)


def _row_sqnorms(X):
    """``||x_i||^2`` of the rows of a CSR matrix, in float64."""
    return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
