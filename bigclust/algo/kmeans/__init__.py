"""k-means: Lloyd with many restarts, and mini-batch k-means for large or lazy data.

The papers "ran Matlab kmeans 100 times" and report the average and the
maximum of each metric over the restarts, so both functions return the labels
of every restart (:class:`KMeansResult`), not only the best one.

Randomness: ``random_state`` is turned into one
``uint64`` seed per restart up front, and the kernels draw from their own
per-restart generator, so labels depend only on the seed -- not on the number
of Numba threads, nor (for :func:`minibatch_kmeans`) on the chunking of a Dask
array.  Kernels live in :mod:`bigclust.algo.kmeans._numba`, imported lazily.
"""
from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from bigclust._util import progress
from bigclust._util.errors import DataError, UserError

INIT_METHODS = ("k-means++", "random")

# Rows per block of the final assignment pass over an in-memory array: bounds
# the float64 copy made per block (64k rows x 30 columns = 15 MB).
_FINAL_PASS_ROWS = 65536
# Mini-batch steps between checks for centres that attract almost no points.
_REASSIGN_EVERY = 10
# A Dask X up to this size is read once by mini-batch k-means: a uniform batch of 4096 rows touches
# nearly every row chunk, so each step read (and decompressed) the whole array again; the 1M x 10
# MNIST embedding (80 MB) took 0.25-1.9 s per step that way, 1.1 s to read once.
_READ_WHOLE_BYTES = 512 * 2**20


@dataclass
class KMeansResult:
    """Outcome of all restarts of a k-means run.

    Attributes
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
    from bigclust.algo.kmeans import _numba as kmeans_numba

    return kmeans_numba


def _is_lazy(X):
    """True for Dask (or Dask-like) arrays, which must be read block by block."""
    return hasattr(X, "compute") and hasattr(X, "chunks") and hasattr(X, "ndim")


def _as_float64(X, where="X"):
    """C-contiguous float64 copy/view of a 2-D numeric array, checked finite."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise DataError(f"{where} must be 2-D (samples x features), got shape {X.shape}")
    if X.dtype.kind not in "fiub":
        raise DataError(f"{where} must be numeric, got dtype {X.dtype}")
    X = np.ascontiguousarray(X, dtype=np.float64)
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


def _check_int(name, value, low, high=None):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise UserError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        rng = f">= {low}" if high is None else f"between {low} and {high}"
        raise UserError(f"{name}={value} must be {rng}")
    return int(value)


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


def _method_code(method):
    if method not in INIT_METHODS:
        raise UserError(f"init={method!r} must be one of {', '.join(INIT_METHODS)} or an array of centres")
    return 0 if method == "k-means++" else 1


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
    ndarray of float64, shape (len(seeds), k, d), or (k, d) for a scalar seed.
    """
    X = _as_float64(X)
    k = _check_k(n_clusters, X.shape[0])
    code = _method_code(method)
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
        code = _method_code(init)
        centers = np.empty((n_init, k, X.shape[1]))
        if sp.issparse(X):
            _kernels().init_centers_csr_kernel(X.data, X.indices, X.indptr, _row_sqnorms(X), k, seeds, code,
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


def _warn_empty(n_empty, n_init, what):
    if n_empty:
        warnings.warn(
            f"k-means: {n_empty} {what} cluster(s) re-seeded over {n_init} restart(s)",
            RuntimeWarning, stacklevel=3)


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


def kmeans(X, n_clusters, *, n_init=100, max_iter=1000, init="k-means++", tol=0.0, random_state=None):
    """Lloyd's k-means with independent restarts, in parallel over restarts.

    Parameters
    ----------
    X : array-like or scipy.sparse matrix, shape (n, d)
        In-memory data, e.g. a spectral embedding (float32 or float64;
        computed in float64).  Sparse data (tf-idf documents) stay sparse:
        distances come from ``||x||^2 - 2 x.c + ||c||^2`` in O(nnz k) per
        pass, centres are dense.
    n_clusters : int
        Number of clusters k, ``2 <= k <= n``.
    n_init : int
        Number of restarts (the papers use 100).
    max_iter : int
        Maximum assignment passes per restart.
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
    """
    X = _as_csr64(X) if sp.issparse(X) else _as_float64(X)
    n = X.shape[0]
    k = _check_k(n_clusters, n)
    n_init = _check_int("n_init", n_init, 1)
    max_iter = _check_int("max_iter", max_iter, 1)
    if not (isinstance(tol, numbers.Real) and tol >= 0):
        raise UserError(f"tol={tol!r} must be a non-negative number")
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
                    _kernels().lloyd_csr_kernel(X.data, X.indices, X.indptr, sq, centers[a:b], max_iter, tol,
                                                labels[a:b], inertia[a:b], n_iter[a:b], n_empty[a:b])
                else:
                    _kernels().lloyd_kernel(X, centers[a:b], max_iter, tol, labels[a:b], inertia[a:b], n_iter[a:b],
                                            n_empty[a:b])
            bar.update(b - a)
    best = int(np.argmin(inertia))
    total_empty = int(n_empty.sum())
    _warn_empty(total_empty, n_init, "empty")
    _warn_final_empty(labels, centers.shape[1])
    return KMeansResult(labels=labels, inertia=inertia, n_iter=n_iter, centers=centers[best].copy(),
                        best=best, n_empty_reseeded=total_empty)


def _row_sqnorms(X):
    """``||x_i||^2`` of the rows of a CSR matrix, in float64."""
    return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()


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


# ----------------------------------------------------------------------------- mini-batch


def _fetch_rows(X, idx):
    """Rows ``idx`` (sorted indices or a slice) of a NumPy, Dask or CSR array, as dense float64, checked finite.

    Only these rows are densified: a sparse ``X`` costs ``len(idx) x d`` floats here, whatever n.
    """
    rows = X[idx].compute() if _is_lazy(X) else X[idx]
    if sp.issparse(rows):
        rows = rows.toarray()
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    if not np.isfinite(rows).all():
        first = int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
        bad = idx.start + first if isinstance(idx, slice) else int(idx[first])
        raise DataError(f"X has non-finite values (first seen in row {bad}); k-means needs finite data")
    return rows


def _row_blocks(X):
    """``(start, stop)`` row ranges of the final pass: Dask's chunks, or fixed blocks.

    Sparse blocks are densified one at a time, so they hold at most about
    ``_FINAL_PASS_ROWS x 64`` floats (e.g. 167 rows of a 25000-term corpus).
    """
    if _is_lazy(X):
        bounds = np.cumsum((0,) + tuple(X.chunks[0]))
    else:
        rows = _FINAL_PASS_ROWS
        if sp.issparse(X):
            rows = max(1, _FINAL_PASS_ROWS * 64 // max(1, X.shape[1]))
        bounds = np.append(np.arange(0, X.shape[0], rows), X.shape[0])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _sample(rng, n, size):
    """Sorted row indices of a batch: ``size`` distinct rows, or all rows if ``size >= n``."""
    if size >= n:
        return np.arange(n)
    return np.sort(rng.choice(n, size=size, replace=False))


def _reassign(centers, counts, Xb, dist2, rng, tol):
    """Move centres with ``count < tol * max(count)`` onto far batch points; return how many.

    New positions are drawn from the batch with probability proportional to
    the squared distance to their centre (as scikit-learn does), and the moved
    centres get the smallest count of the others so that they are not moved
    again at once.
    """
    low = counts < tol * counts.max()
    if not low.any():
        return 0
    keep_min = counts[~low].min()
    moved = np.flatnonzero(low)[:Xb.shape[0]]  # a batch smaller than k cannot move them all
    w = dist2 / dist2.sum() if dist2.sum() > 0 else None
    if w is not None and np.count_nonzero(w) < moved.size:
        w = None
    picks = rng.choice(Xb.shape[0], size=moved.size, replace=False, p=w)
    centers[moved] = Xb[picks]
    counts[moved] = keep_min
    return int(moved.size)


def minibatch_kmeans(X, n_clusters, *, n_init=3, batch_size=4096, max_iter=100, init="k-means++",
                     random_state=None, reassign_tol=0.01, max_no_improvement=10, init_size=None):
    """Mini-batch k-means (Sculley 2010) on a NumPy array or a row-chunked Dask array.

    Only batches of rows are read while fitting; a Dask ``X`` larger than
    512 MiB is never loaded whole (a smaller one is read once, since every
    batch would touch nearly all of its chunks anyway).  All restarts see the
    same stream of batches (one read per step) and differ by their initial centres.  A final pass over ``X``, one block at
    a time, labels every point for every restart and measures the inertia
    that picks the best restart.

    Parameters
    ----------
    X : ndarray, dask.array.Array or scipy.sparse matrix, shape (n, d)
        Data; a Dask array should be chunked by rows.  Sparse data stay
        sparse: each batch (and each block of the final pass) is densified
        on its own, so memory is ``batch_size x d``, not ``n x d``.
    n_clusters : int
        Number of clusters k, ``2 <= k <= n``.
    n_init : int
        Number of restarts (initialisations).
    batch_size : int
        Rows per mini-batch (distinct rows drawn uniformly from all n).
    max_iter : int
        Maximum number of mini-batch steps per restart.
    init : {"k-means++", "random"} or ndarray, shape (n_init, k, d) or (k, d)
        Initialisation, run on a uniform sample of ``init_size`` rows, or
        explicit centres.
    random_state : None, int or numpy.random.RandomState
        Source of the seeds (batch stream, each restart's init and reseeds).
    reassign_tol : float in [0, 1)
        Every 10 steps, a centre whose point count is below ``reassign_tol``
        times the largest count is moved to a far point of the current batch
        (0 disables).  Moves are counted in ``n_empty_reseeded``.
    max_no_improvement : int or None
        Stop a restart when the exponentially smoothed batch inertia has not
        improved for this many steps (None: always run ``max_iter`` steps).
    init_size : int or None
        Rows sampled for the initialisation; default ``max(3 * batch_size,
        3 * k)`` capped at n.

    Returns
    -------
    KMeansResult
        ``labels`` of every restart from the final pass, the full-data
        ``inertia`` per restart, ``n_iter`` = steps taken per restart.

    Notes
    -----
    The learning rate of a centre is one over the number of points it has
    received, which makes it the running mean of those points; labels for a
    given seed do not depend on the chunking of ``X`` (batches are drawn from
    the global row range and the inertia is summed row by row in order).
    """
    kern = _kernels()
    if sp.issparse(X):
        X = sp.csr_matrix(X)  # row slicing; rows are densified batch by batch
    elif not _is_lazy(X):
        X = np.asarray(X)
    elif X.nbytes <= _READ_WHOLE_BYTES:
        X = np.asarray(X.compute())  # the same rows and values: labels do not change
    if X.ndim != 2:
        raise DataError(f"X must be 2-D (samples x features), got shape {X.shape}")
    if np.dtype(X.dtype).kind not in "fiub":
        raise DataError(f"X must be numeric, got dtype {X.dtype}")
    n, d = (int(s) for s in X.shape)
    k = _check_k(n_clusters, n)
    n_init = _check_int("n_init", n_init, 1)
    batch_size = _check_int("batch_size", batch_size, 1)
    max_iter = _check_int("max_iter", max_iter, 1)
    if not (isinstance(reassign_tol, numbers.Real) and 0 <= reassign_tol < 1):
        raise UserError(f"reassign_tol={reassign_tol!r} must be in [0, 1)")
    if max_no_improvement is not None:
        max_no_improvement = _check_int("max_no_improvement", max_no_improvement, 1)
    if init_size is None:
        init_size = min(n, max(3 * batch_size, 3 * k))
    init_size = _check_int("init_size", init_size, k, n)

    seeds = _draw_seeds(random_state, 2 * n_init + 1)
    stream = np.random.default_rng(int(seeds[0]))
    restart_rngs = [np.random.default_rng(int(s)) for s in seeds[n_init + 1:]]

    if isinstance(init, str):
        sample = _fetch_rows(X, _sample(stream, n, init_size))
    else:
        sample = np.empty((k, d))  # unused: explicit centres
    centers = _initial(sample, k, n_init, init, seeds[1:n_init + 1])

    counts = np.zeros((n_init, k))
    active = np.ones(n_init, dtype=bool)
    n_iter = np.zeros(n_init, dtype=np.int32)
    n_moved = 0
    b = min(batch_size, n)
    dist2 = np.empty((n_init, b))
    batch_inertia = np.empty(n_init)
    ewa = np.full(n_init, np.nan)
    best_ewa = np.full(n_init, np.inf)
    stale = np.zeros(n_init, dtype=np.int64)
    alpha = min(1.0, 2.0 * b / (n + 1))  # smoothing weight of the newest batch, as in scikit-learn
    for step in progress.iterate(range(1, max_iter + 1), "mini-batch k-means", unit="batch"):
        if not active.any():
            break
        Xb = _fetch_rows(X, _sample(stream, n, b))
        kern.minibatch_step_kernel(Xb, centers, counts, active, dist2, batch_inertia)
        for r in np.flatnonzero(active):
            n_iter[r] = step
            if reassign_tol > 0 and step % _REASSIGN_EVERY == 0:
                n_moved += _reassign(centers[r], counts[r], Xb, dist2[r], restart_rngs[r], reassign_tol)
            if max_no_improvement is None:
                continue
            mean = batch_inertia[r] / b
            ewa[r] = mean if np.isnan(ewa[r]) else (1 - alpha) * ewa[r] + alpha * mean
            if ewa[r] < best_ewa[r]:
                best_ewa[r], stale[r] = ewa[r], 0
            else:
                stale[r] += 1
                if stale[r] >= max_no_improvement:
                    active[r] = False

    labels = np.empty((n_init, n), dtype=np.int32)
    inertia = np.zeros(n_init)
    for start, stop in _row_blocks(X):
        block = _fetch_rows(X, slice(start, stop))
        lab = np.empty(stop - start, dtype=np.int32)
        d2 = np.empty(stop - start)
        for r in range(n_init):
            kern.assign_kernel(block, centers[r], lab, d2)
            labels[r, start:stop] = lab
            # Sequential running sum: the same total for any chunking of X.
            inertia[r] = kern.running_sum(d2, inertia[r])
    best = int(np.argmin(inertia))
    _warn_empty(n_moved, n_init, "starved")
    _warn_final_empty(labels, k)
    return KMeansResult(labels=labels, inertia=inertia, n_iter=n_iter, centers=centers[best].copy(),
                        best=best, n_empty_reseeded=n_moved)
