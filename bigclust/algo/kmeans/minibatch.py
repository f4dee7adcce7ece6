"""Mini-batch k-means (Sculley 2010) for data too large to sweep: NumPy, CSR or a row-chunked Dask array.

Only batches of rows are read while fitting, then one final assignment pass
reads X block by block; the draws come from the per-restart seeds, so the
labels do not depend on the chunking of a Dask array.
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp

from bigclust._util import progress
from bigclust._util.checks import check_int
from bigclust._util.errors import DataError, UserError
from bigclust.algo.kmeans._common import (KMeansResult, _check_k, _draw_seeds, _initial, _is_lazy, _kernels,
                                          _warn_final_empty)


# Rows per block of the final assignment pass over an in-memory array: bounds
# the float64 copy made per block (64k rows x 30 columns = 15 MB).
_FINAL_PASS_ROWS = 65536
# Mini-batch steps between checks for centres that attract almost no points.
_REASSIGN_EVERY = 10
# A Dask X up to this size is read once by mini-batch k-means: a uniform batch of 4096 rows touches
# nearly every row chunk, so each step read (and decompressed) the whole array again; the 1M x 10
# MNIST embedding (80 MB) took 0.25-1.9 s per step that way, 1.1 s to read once.
_READ_WHOLE_BYTES = 512 * 2**20


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
    # long: validation, then one loop of steps over per-restart state (centres, counts, generators, no-improvement
    # counters) that every part reads and writes; split, each piece would take and return all of it
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
    from bigclust.algo.kmeans.draws import warn_empty  # a Numba module: loaded with the kernels

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
    n_init = check_int("n_init", n_init, 1)
    batch_size = check_int("batch_size", batch_size, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    if not (isinstance(reassign_tol, numbers.Real) and 0 <= reassign_tol < 1):
        raise UserError(f"reassign_tol={reassign_tol!r} must be in [0, 1)")
    if max_no_improvement is not None:
        max_no_improvement = check_int("max_no_improvement", max_no_improvement, 1)
    if init_size is None:
        init_size = min(n, max(3 * batch_size, 3 * k))
    init_size = check_int("init_size", init_size, k, n)

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
    warn_empty(n_moved, n_init, "starved")
    _warn_final_empty(labels, k)
    return KMeansResult(labels=labels, inertia=inertia, n_iter=n_iter, centers=centers[best].copy(),
                        best=best, n_empty_reseeded=n_moved)
