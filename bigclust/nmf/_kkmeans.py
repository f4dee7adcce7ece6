"""Kernel k-means: :func:`kernel_kmeans` on a dense kernel in memory, :func:`kernel_kmeans_streamed` out of core.

Out of core the kernel stays in the store and is read in row blocks, with the same algorithm as :func:`kernel_kmeans` -- batch (Lloyd) kernel
k-means: every point is assigned against frozen cluster statistics, then the
statistics are rebuilt.  The distance of point i to cluster c is

    ``K_ii - 2 (K 1_c)_i / |c| + 1_c^T K 1_c / |c|^2``,

so an iteration needs ``F = K Z`` (n x k, Z the cluster indicator) and
``s_c = 1_c^T K 1_c = sum_{i in c} F_ic``.  Here F comes from one pass over
K's row blocks per iteration, for all restarts at once (each block row adds
its entries to the clusters of every restart: the restarts run in lockstep
and share every read of K; a restart that has converged drops out).  The
seeding needs columns of K (the seed points' kernel columns = F of the first
assignment): uniform seeds take one pass, k-means++ one pass per seed point
(k passes, the first shared with the validation pass).

The in-memory path runs the same steps on the same float64 values with one
difference: after the first rebuild, when at most n/4 points moved, it updates
F by the moved points' kernel rows instead of summing again (a streamed pass
would read all of K either way).  That changes F only by rounding, so the
labels are the same unless two distances tie to ~1e-15 and the objectives
agree to ~1e-13 relative (a test checks 1e-12 and equal labels).

Blocks are module-level tasks (``map_blocks(fn, args_list)``, e.g. Dask on a
cluster); each reads its own block through ``read_block``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util import progress
from bigclust._util.errors import DataError, UserError
from bigclust.nmf import ops
from bigclust.nmf._common import NMFInfo, check_int, degrees_weights
from bigclust.nmf.init import draw_seeds, seed_indices
from bigclust.nmf._linear import check_bounds, in_process

#: rows and columns compared to check the symmetry of a stored kernel
N_SYMMETRY_SAMPLES = 16


def _read(read_block, i, r0, r1, n):
    K = np.ascontiguousarray(read_block(i), dtype=np.float64)
    if K.shape != (r1 - r0, n):
        raise DataError(f"block {i} of K has shape {K.shape}, expected {(r1 - r0, n)} (rows {r0}:{r1})")
    return K


def block_scan(read_block, i, r0, r1, n, sample, degrees, picks):
    """Validation pass over block i (a task): non-finite entries, diagonal, degrees, sampled rows / columns.

    Returns ``(diag, d or None, K[r0:r1, sample], {row: K[row] for sampled rows here}, K[r0:r1, picks])``.
    """
    K = _read(read_block, i, r0, r1, n)
    bad = np.flatnonzero(~np.isfinite(K).all(axis=1))
    if bad.size:
        raise DataError(f"K has non-finite entries (row {r0 + int(bad[0])}); kernel k-means needs a finite K")
    rows = np.arange(r1 - r0)
    d = ops.dense_dot(K, np.ones((n, 1))).ravel() if degrees else None   # as KernelOp.degrees in memory
    mine = {int(j): K[j - r0].copy() for j in sample if r0 <= j < r1}
    return K[rows, rows + r0].copy(), d, K[:, sample].copy(), mine, K[:, picks].copy()


def block_columns(read_block, i, r0, r1, n, picks):
    """``K[r0:r1, picks]`` (a task): the seed points' columns."""
    return _read(read_block, i, r0, r1, n)[:, picks].copy()


def block_sums(read_block, i, r0, r1, n, labels, k, w):
    """``F`` rows ``r0:r1`` of every restart in ``labels`` (r, n) (a task): (b, r k)."""
    from bigclust.nmf import _kkmeans_numba as kern

    K = _read(read_block, i, r0, r1, n)
    out = np.empty((r1 - r0, labels.shape[0] * k))
    kern.kk_block_sums(K, w, r0, labels, k, out)
    return out


def _columns(mapper, fn, read_block, bounds, n, extra):
    args = [(read_block, b, s, e, n, *extra) for b, (s, e) in enumerate(zip(bounds[:-1], bounds[1:]))]
    return list(mapper(fn, args))


def kernel_kmeans_streamed(read_block, block_bounds, n_clusters, *, n_init=10, max_iter=300, init="k-means++",
                           random_state=None, ncw=False, map_blocks=None, return_info=False):
    # long: seeding passes, then the lockstep Lloyd passes over K's blocks, which share the per-restart
    # state (labels, sizes, F, active restarts); each block pass is already its own task
    # (block_scan, block_columns, block_sums)
    """Kernel k-means with a dense kernel read as row blocks: one pass over K per iteration for all restarts.

    Runs the batch (Lloyd) iteration of :func:`bigclust.nmf.kernel_kmeans` --
    the same seeds, steps, stops and empty-cluster rule -- with
    ``F = K Z`` summed from K's row blocks; labels equal the in-memory ones
    and objectives agree to rounding (see the module notes).

    Parameters
    ----------
    read_block : callable
        ``read_block(i)`` returns rows ``block_bounds[i]:block_bounds[i+1]`` of
        the symmetric kernel K (n x n) as an ndarray (any float dtype; used as
        float64).  Picklable (e.g. :class:`bigclust.pipeline.stored_rows.RowReader`) to run
        the blocks as Dask tasks.
    block_bounds : sequence of int
        Increasing row bounds starting at 0; the last one is n.
    n_clusters : int
        k, ``2 <= k <= n``.
    n_init, max_iter : int
        As in :func:`bigclust.nmf.kernel_kmeans`; all restarts share each pass.
    init : {"k-means++", "random"} or int array (n_init, k)
        As in :func:`bigclust.nmf.kernel_kmeans`.  k-means++ reads K once per
        seed point (k passes in all, the first also validates K); uniform or
        explicit seeds one pass.
    random_state : int, RandomState or None
        As in :func:`bigclust.nmf.kernel_kmeans`.
    ncw : bool
        Cluster on ``D^(-1/2) K D^(-1/2)``, ``d = K 1`` (the degrees come from
        the validation pass; the weights are applied inside the block kernel).
    map_blocks : callable or None
        ``map_blocks(fn, args_list)`` returns ``fn(*args)`` for each args in
        order (e.g. :func:`bigclust.algo.blocks.task_mapper`); default: here, one
        block at a time (one block of K in memory, plus F of every restart).
    return_info : bool
        Also return an :class:`NMFInfo`.

    Returns
    -------
    labels : ndarray of int32, shape (n,)
        Cluster of each row of K (the best restart's).
    objective : float
        The best restart's kernel k-means objective.
    info : NMFInfo
        Only with ``return_info=True``; ``extra["labels_all"]`` holds every
        restart's labels, ``extra["history"]`` the objective after every
        assignment of every restart (non-increasing for a PSD kernel) and
        ``extra["passes"]`` the passes over K.

    Raises
    ------
    DataError
        Non-finite K, a non-symmetric K (sampled rows against the same
        columns), a block of the wrong shape, or (``ncw``) a degree ``<= 0``.
    """
    from bigclust.algo.kmeans.draws import METHOD_RANDOM, method_code, warn_empty
    from bigclust.nmf import _kkmeans_numba as kern

    bounds = check_bounds(block_bounds)
    n = bounds[-1]
    if not isinstance(n_clusters, (int, np.integer)) or isinstance(n_clusters, bool) or not 2 <= n_clusters <= n:
        raise UserError(f"n_clusters={n_clusters} must be between 2 and n={n}")
    k = int(n_clusters)
    n_init = check_int("n_init", n_init, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    mapper = map_blocks if map_blocks is not None else in_process
    seeds = draw_seeds(random_state, n_init)
    idx = np.zeros((n_init, k), dtype=np.int64)
    states = np.empty(n_init, dtype=np.uint64)
    if isinstance(init, str):
        method = method_code(init)
        kern.kk_seed_start(seeds, n, k, method, idx, states)
        known = k if method == METHOD_RANDOM else 1          # seed points drawn so far (k-means++: the first)
    else:
        idx = seed_indices(init, n_init, k, n)
        known = k

    # pass 0: validate, diagonal, degrees (NCW), sampled rows/columns, the known seed points' columns
    sample = np.unique(np.linspace(0, n - 1, min(n, N_SYMMETRY_SAMPLES)).astype(np.int64))
    picks = np.unique(idx[:, :known])
    parts = _columns(mapper, block_scan, read_block, bounds, n, (sample, ncw, picks))
    raw_diag = np.concatenate([p[0] for p in parts])
    scols = np.concatenate([p[2] for p in parts])
    srows = {j: row for p in parts for j, row in p[3].items()}
    srows = np.stack([srows[int(j)] for j in sample])
    scale = max(float(np.abs(srows).max()), np.finfo(np.float64).tiny)
    if np.abs(scols.T - srows).max() > 1e-10 * scale:
        raise DataError("K is not symmetric (sampled rows differ from the same columns); kernel k-means needs "
                        "a symmetric kernel")
    w = degrees_weights(np.concatenate([p[1] for p in parts]), "K") if ncw else np.empty(0)
    kdiag = (w * raw_diag) * w if ncw else raw_diag       # the diagonal of w[:, None] * K * w[None, :]

    cols = np.empty((n_init, k, n))                       # K'[:, idx[r, c]]: F of the first assignment

    def take(raw, picks, js):
        for r in range(n_init):
            for j in js:
                col = raw[:, int(np.searchsorted(picks, idx[r, j]))]
                cols[r, j] = (w * col) * w[idx[r, j]] if ncw else col

    take(np.concatenate([p[4] for p in parts]), picks, range(known))
    del parts
    passes = 1
    d2 = np.empty((n_init, n))
    for j in range(known, k):                              # k-means++: one pass per further seed point
        for r in range(n_init):
            kern.kk_seed_dist(kdiag, cols[r, j - 1], idx[r, j - 1], d2[r], j == 1)
            idx[r, j] = kern.kk_seed_draw(d2[r], states[r:r + 1])
        picks = np.unique(idx[:, j])
        take(np.concatenate(_columns(mapper, block_columns, read_block, bounds, n, (picks,))), picks, [j])
        passes += 1

    F = [np.ascontiguousarray(cols[r].T) for r in range(n_init)]   # (n, k) per restart
    cols = d2 = None                                      # F holds the columns now
    s = [kdiag[idx[r]].copy() for r in range(n_init)]
    counts = np.ones((n_init, k), dtype=np.int64)
    labels = np.full((n_init, n), -1, dtype=np.int32)
    prev = np.empty(n, dtype=np.int32)
    dist = np.empty(n)
    obj = np.zeros(n_init)
    n_iter = np.zeros(n_init, dtype=np.int32)
    n_empty = np.zeros(n_init, dtype=np.int64)
    active = list(range(n_init))
    history = [[] for _ in range(n_init)]                 # objective of every assignment, per restart
    bar = progress.bar(max_iter, f"kernel k-means, K streamed in {len(bounds) - 1} blocks ({n_init} restarts)")
    it = 0
    while it < max_iter:
        it += 1
        moving = []
        for r in active:
            n_iter[r] = it
            changed, obj[r], ne = kern.kk_step(kdiag, F[r], s[r], counts[r], labels[r], prev, dist)
            n_empty[r] += ne
            history[r].append(float(obj[r]))
            if changed:
                moving.append(r)
        active = moving
        bar.update(1)
        if not active:
            break
        lab = np.ascontiguousarray(labels[active])
        rows = _columns(mapper, block_sums, read_block, bounds, n, (lab, k, w))
        passes += 1
        for q, r in enumerate(active):
            for (r0, r1), blk in zip(zip(bounds[:-1], bounds[1:]), rows):
                F[r][r0:r1] = blk[:, q * k:(q + 1) * k]
            kern.kk_cluster_sums(F[r], labels[r], s[r])
        del rows
    bar.close()
    for r in active:                                      # max_iter reached: assign to the last centres
        obj[r] = kern.kk_final(kdiag, F[r], s[r], counts[r], labels[r])
        history[r].append(float(obj[r]))
    best = int(np.argmin(obj))
    warn_empty(int(n_empty.sum()), n_init, "empty")
    info = NMFInfo(objective=np.array([obj[best]]), n_iter=int(n_iter[best]), converged=bool(n_iter[best] < max_iter),
                   best=best, objectives=obj, n_iters=n_iter.astype(np.int64), method="kernel-kmeans/streamed",
                   n_empty_reseeded=int(n_empty.sum()),
                   extra={"labels_all": labels, "passes": passes, "history": history})
    return (labels[best], float(obj[best]), info) if return_info else (labels[best], float(obj[best]))


# -- in memory ------------------------------------------------------------------------------


def kernel_kmeans(K, n_clusters, *, n_init=10, max_iter=300, init="k-means++", random_state=None,
                  return_info=False):
    """Kernel k-means: Lloyd's algorithm in the feature space of a dense kernel, restarts in parallel.

    ``||phi(x_i) - mu_c||^2 = K_ii - 2/|c| sum_{j in c} K_ij + 1/|c|^2 sum_{j,l in c} K_jl``.

    Parameters
    ----------
    K : ndarray, shape (n, n)
        Symmetric kernel (positive semidefinite for the distances to be ones).
    n_clusters : int
        k, ``2 <= k <= n``.
    n_init : int
        Restarts, run in parallel; the lowest objective wins.
    max_iter : int
        Assignment passes per restart (each O(n^2)).
    init : {"k-means++", "random"} or int array (n_init, k)
        Seed points: k-means++ D^2 sampling with feature-space distances, k
        distinct points uniformly, or explicit point indices per restart.
    random_state : None, int or numpy.random.RandomState
        Source of the per-restart seeds; labels are the same for a seed
        whatever the number of threads.
    return_info : bool
        Also return an :class:`NMFInfo` (``objective`` = final objective of
        the best restart; ``n_empty_reseeded``).

    Returns
    -------
    labels : ndarray of int32, shape (n,)
        Labels of the best restart.
    objective : float
        Its sum of squared feature-space distances to the cluster means.
    info : NMFInfo
        Only with ``return_info=True``.

    Notes
    -----
    Same steps, stops and empty-cluster rule as :func:`bigclust.algo.kmeans.kmeans`:
    an empty cluster takes the point farthest from its centre (counted, and
    reported by a RuntimeWarning).

    The update is batch (Lloyd): every point is assigned against frozen
    cluster statistics, then they are rebuilt.  :func:`kernel_kmeans_streamed`
    runs the same iteration with K read from a store in row blocks (one pass
    per iteration); it gives the same labels and objectives to rounding.
    """
    import numba

    from bigclust.algo.kmeans.draws import method_code, warn_empty
    from bigclust.normalize.checks import check_dense
    from bigclust.nmf import _kkmeans_numba as kern

    if sp.issparse(K):
        raise DataError("kernel k-means needs a dense K (n x n ndarray)")
    K, _, _ = check_dense(K, "kernel k-means")
    K = np.ascontiguousarray(K, dtype=np.float64)
    n = K.shape[0]
    if not isinstance(n_clusters, (int, np.integer)) or isinstance(n_clusters, bool) or not 2 <= n_clusters <= n:
        raise UserError(f"n_clusters={n_clusters} must be between 2 and n={n}")
    k = int(n_clusters)
    n_init = check_int("n_init", n_init, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    seeds = draw_seeds(random_state, n_init)
    if isinstance(init, str):
        idx = np.empty((n_init, k), dtype=np.int64)
        kern.kk_init(K, k, seeds, method_code(init), idx)
    else:
        idx = seed_indices(init, n_init, k, n)
    labels = np.empty((n_init, n), dtype=np.int32)
    obj = np.empty(n_init)
    n_iter = np.empty(n_init, dtype=np.int32)
    n_empty = np.zeros(n_init, dtype=np.int64)
    with numba.parallel_chunksize(1):
        kern.kk_lloyd(K, idx, max_iter, labels, obj, n_iter, n_empty)
    best = int(np.argmin(obj))
    warn_empty(int(n_empty.sum()), n_init, "empty")
    info = NMFInfo(objective=np.array([obj[best]]), n_iter=int(n_iter[best]), converged=bool(n_iter[best] < max_iter),
                   best=best, objectives=obj, n_iters=n_iter.astype(np.int64), method="kernel-kmeans",
                   n_empty_reseeded=int(n_empty.sum()), extra={"labels_all": labels})
    return (labels[best], float(obj[best]), info) if return_info else (labels[best], float(obj[best]))
