"""Lloyd's k-means with many restarts (the papers' "Matlab kmeans 100 times"), and nearest-centre assignment.

Restarts run in parallel in one Numba kernel (dense or CSR rows), each from
its own seed, so labels depend only on ``random_state``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util import progress
from bigclust._util.checks import check_int, check_tol
from bigclust._util.errors import DataError, UserError
from bigclust.algo.kmeans._common import (KMeansResult, _as_csr64, _as_float64, _check_k, _csr_kernels, _draw_seeds,
                                          _initial, _kernels, _n_distinct_rows, _row_sqnorms, _warn_final_empty)


def kmeans(X, n_clusters, *, n_init=10, max_iter=300, init="k-means++", tol=0.0, random_state=None):
    """Cluster by Lloyd's k-means with independent restarts, in parallel over restarts.

    Parameters
    ----------
    X : array-like or scipy.sparse matrix, shape (n, d)
        In-memory data, e.g. a spectral embedding (float32 or float64;
        computed in float64).  Sparse data (tf-idf documents) stay sparse:
        distances come from ``||x||^2 - 2 x.c + ||c||^2`` in O(nnz k) per
        pass, centres are dense.
    n_clusters : int
        Number of clusters k, ``2 <= k <= n``.
    n_init : int, default 10
        Number of restarts (the papers use 100).  The defaults are ``[cluster] n_init`` / ``max_iter``'s
        (scikit-learn's).
    max_iter : int, default 300
        Maximum assignment passes per restart (the papers' configs: 1000).
    init : {"k-means++", "random"} or ndarray, shape (n_init, k, d) or (k, d)
        Initialisation method, or explicit initial centres per restart
        (their leading dimension must equal ``n_init``).
    tol : float
        Stop a restart when the summed squared centre shift is ``<= tol``;
        independently of it, a restart stops when no label changes.
    random_state : None, int or numpy.random.RandomState
        Source of the per-restart seeds.

    Returns
    -------
    KMeansResult
        Labels, inertia and iterations of every restart, and the centres of
        the best one.

    Raises
    ------
    UserError
        For an out-of-range parameter or a malformed ``init`` array.
    DataError
        If X is not 2-D and finite, or has fewer than k distinct rows.

    Notes
    -----
    Every iteration assigns each point to its nearest centre (first on ties)
    and accumulates the new means in the same pass.  A cluster left empty
    takes the point farthest from its centre (MATLAB's EmptyAction
    'singleton'); such events are counted and reported by a RuntimeWarning.
    If a restart stops on ``max_iter`` or ``tol`` a final assignment makes
    its labels and inertia match the returned centres.

    Examples
    --------
    >>> import numpy as np
    >>> from bigclust.kmeans import kmeans
    >>> X = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
    >>> res = kmeans(X, 2, n_init=3, random_state=0)
    >>> labels = res.labels[res.best]
    >>> bool(labels[0] == labels[1] != labels[2] == labels[3]), float(res.inertia[res.best])
    (True, 1.0)
    >>> print(res.centers[np.argsort(res.centers[:, 0])])
    [[ 0.   0.5]
     [10.   0.5]]
    """
    X = _as_csr64(X) if sp.issparse(X) else _as_float64(X)
    n = X.shape[0]
    k = _check_k(n_clusters, n)
    n_init = check_int("n_init", n_init, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    tol = check_tol(tol)
    distinct = _n_distinct_rows(X, k)
    if distinct < k:
        # Nearest-centre assignment then always leaves a cluster empty, and
        # re-seeding would cycle until max_iter.
        raise DataError(f"X has only {distinct} distinct rows, fewer than n_clusters={k}")
    seeds = _draw_seeds(random_state, n_init)
    centers = _initial(X, k, n_init, init, seeds)
    return _lloyd(X, centers, max_iter, float(tol))


def _lloyd(X, centers, max_iter, tol):
    """Validated-input core of :func:`kmeans`; ``centers`` (r, k, d) is overwritten."""
    import numba

    from bigclust.algo.kmeans.draws import warn_empty  # a Numba module: loaded with the kernels

    n_init = centers.shape[0]
    labels = np.empty((n_init, X.shape[0]), dtype=np.int32)
    inertia = np.empty(n_init)
    n_iter = np.empty(n_init, dtype=np.int32)
    n_empty = np.zeros(n_init, dtype=np.int64)
    sq = _row_sqnorms(X) if sp.issparse(X) else None
    # Restarts are independent: with a progress bar they run in slices of restarts (one kernel call
    # each, the bar advancing in between), with the same results as one call over all of them.
    # A slice holds several restarts per thread so that the parallel loop stays busy.
    pieces = progress.slices(n_init, n_pieces=20, at_least=2 * numba.get_num_threads())
    with progress.bar(n_init, "k-means restarts", "restart") as bar:
        for a, b in pieces:
            # Restarts take very different numbers of iterations: hand them out one
            # at a time instead of in equal static slices.
            with numba.parallel_chunksize(1):
                if sq is not None:
                    _csr_kernels().lloyd_csr_kernel(X.data, X.indices, X.indptr, sq, centers[a:b], max_iter, tol,
                                                labels[a:b], inertia[a:b], n_iter[a:b], n_empty[a:b])
                else:
                    _kernels().lloyd_kernel(X, centers[a:b], max_iter, tol, labels[a:b], inertia[a:b], n_iter[a:b],
                                            n_empty[a:b])
            bar.update(b - a)
    best = int(np.argmin(inertia))
    total_empty = int(n_empty.sum())
    warn_empty(total_empty, n_init, "empty")
    _warn_final_empty(labels, centers.shape[1])
    return KMeansResult(labels=labels, inertia=inertia, n_iter=n_iter, centers=centers[best].copy(),
                        best=best, n_empty_reseeded=total_empty)


def assign(X, centers):
    """Nearest centre of every row of ``X``.

    Parameters
    ----------
    X : array-like, shape (n, d)
        Points (converted to float64).
    centers : array-like, shape (k, d)
        Centres.

    Returns
    -------
    labels : ndarray of int32, shape (n,)
        Index of the nearest centre (the first one on ties).
    dist2 : ndarray of float64, shape (n,)
        Squared Euclidean distance to that centre.
    """
    X = _as_float64(X)
    C = _as_float64(centers, where="centers")
    if C.shape[1] != X.shape[1] or C.shape[0] == 0:
        raise UserError(f"centers of shape {C.shape} do not match X with {X.shape[1]} columns")
    labels = np.empty(X.shape[0], dtype=np.int32)
    dist2 = np.empty(X.shape[0])
    _kernels().assign_kernel(X, C, labels, dist2)
    return labels, dist2
