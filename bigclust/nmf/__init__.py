"""NMF clustering (paper 001): linear NMF, bilinear (kernel) NMF, NCW weighting, kernel k-means.

Orientation.  The paper's data matrix X is m x n (terms x documents, one
document per *column*) and its models are ``X ~ U V^T`` (linear) and
``X ~ X W V^T`` (bilinear, ``K = X^T X``).  Our data have documents as
*rows*: X is n x m, so the linear model reads ``X ~ V U^T`` with V (n x k)
the document factor and U (m x k) the term factor, and the linear kernel is
``K = X X^T`` (n x n).  Equation numbers (3-1)..(3-17) refer to the paper;
the formulas in comments keep the paper's names.

Functions
---------
linear_nmf            J = 1/2 ||X - V U^T||^2 by multiplicative updates or HALS (dense or CSR X)
linear_nmf_streamed   the same iterates with X read as row blocks, one pass per iteration
bilinear_nmf          concept factorisation on a kernel (dense, CSR kNN, or the linear kernel unformed)
ncw_weights           d^(-1/2), d = K 1, of the normalised-cut weighting
ncw_vectors           rows of X scaled by d^(-1/2) (NCW for k-means on X)
kernel_kmeans         Lloyd in feature space on a dense kernel, restarts in parallel
kernel_kmeans_streamed  the same with K read as row blocks, one pass per iteration (out of core)

Every clustering function returns ``labels`` plus its factors, and an
:class:`NMFInfo` as well with ``return_info=True``.  Kernels live in
:mod:`bigclust.nmf._numba` and are imported on first use.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util import progress
from bigclust._util.errors import DataError, UserError
from bigclust.nmf._common import (INITS, SOLVERS, NMFConvergenceWarning, NMFInfo, as_data, check_components, check_int,
                      check_tol, draw_seeds, explicit_init, labels_from, nndsvd, normalize_columns,
                      random_factors, seed_indices, warn_not_converged)
from bigclust.nmf._kkmeans import kernel_kmeans_streamed

__all__ = ["NMFConvergenceWarning", "NMFInfo", "bilinear_nmf", "kernel_kmeans", "kernel_kmeans_streamed", "linear_nmf",
           "linear_nmf_streamed", "ncw_vectors", "ncw_weights"]

KERNELS = ("linear", "precomputed")


def _check_solver(solver):
    if solver not in SOLVERS:
        raise UserError(f"solver={solver!r} must be one of {', '.join(SOLVERS)}")
    return solver


def _normalize_linear(U, V):
    """(3-4, 3-5): unit-norm columns of U; V's columns scaled by the norms of U before the scaling."""
    norms = np.sqrt(np.sum(U * U, axis=0))
    return normalize_columns(U, norms), V * norms


def _pick(results, what, max_iter, tol):
    """Best restart (lowest final objective) and the info record."""
    finals = np.array([h[-1] for h, _, _ in results])
    best = int(np.argmin(finals))
    n_iters = np.array([it for _, it, _ in results], dtype=np.int64)
    h, it, conv = results[best]
    warn_not_converged(what, conv, sum(not c for _, _, c in results), len(results), max_iter, tol)
    return best, NMFInfo(objective=h, n_iter=int(it), converged=bool(conv), best=best, objectives=finals,
                         n_iters=n_iters)


def _degrees_weights(d, what):
    bad = np.flatnonzero(~(d > 0))
    if bad.size:
        i = int(bad[0])
        raise DataError(f"NCW needs positive degrees d = K 1, but row {i} of {what} has d = {d[i]:.3g}")
    return 1.0 / np.sqrt(d)


def ncw_weights(X, *, kernel="linear"):
    """Normalised-cut weights ``d^(-1/2)`` with ``d = K 1`` of the affinity in use.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix
        Documents as rows (n x m) for ``kernel="linear"``; a symmetric kernel
        (n x n, dense or CSR) for ``kernel="precomputed"``.
    kernel : {"linear", "precomputed"}
        For the linear kernel ``d = X (X^T 1)``: ``X X^T`` is never formed.

    Returns
    -------
    ndarray of float64, shape (n,)

    Raises
    ------
    DataError
        When some ``d_i <= 0`` (the message names the first such row).
    """
    op = _kernel_op(X, kernel)
    return _degrees_weights(op.degrees(), "K" if kernel == "precomputed" else "X X^T")


def ncw_vectors(X):
    """NCW-weighted documents ``D^(-1/2) X`` for K-means (or any method) on X, ``d = X X^T 1``.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (n, m)
        Documents as rows.

    Returns
    -------
    ndarray or CSR matrix (float64), shape (n, m)
        Row i of X times ``d_i^(-1/2)`` (the paper scales columns).
    """
    X = as_data(X, nonneg=False, model="NCW")
    w = ncw_weights(X)
    return _scale_rows(X, w)


def _scale_rows(X, w):
    if sp.issparse(X):
        Y = X.copy()
        Y.data *= np.repeat(w, np.diff(Y.indptr))
        return Y
    return X * w[:, None]


def linear_nmf(X, n_components, *, solver="mu", init="random", n_init=10, max_iter=500, tol=1e-5,
               random_state=None, ncw=False, return_info=False):
    """Linear NMF clustering: ``min 1/2 ||X - V U^T||^2`` with U, V >= 0 (paper 001, 3-1..3-5).

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (n, m)
        Documents as rows, non-negative (e.g. tf-idf).  Sparse X stays sparse:
        each iteration costs O(nnz k) (a transposed copy of X is kept).
    n_components : int
        Number of clusters k (``k <= n``).
    solver : {"mu", "hals"}
        ``"mu"``: multiplicative updates (3-2, 3-3), denominators guarded by
        ``EPS = 1e-300``.  ``"hals"``: fast HALS (exact coordinate descent),
        up to ``_ops.HALS_SWEEPS`` sweeps per row from each ``X U`` / ``X^T V``
        (accelerated HALS; the same fixed points, J never increases).
        Both update V first, then U (see :mod:`bigclust.nmf._linear`).
    init : {"random", "nndsvd"} or tuple (U0, V0)
        ``"random"``: ``sqrt(mean(X)/k) |N(0, 1)|`` per restart.  ``"nndsvd"``:
        NNDSVD with zeros filled by mean(X) for the first restart, random for
        the others.  A tuple gives explicit factors, shape (m, k) and (n, k)
        (or with a leading n_init axis); they are copied.
    n_init : int
        Restarts; the one with the lowest final objective is returned.
    max_iter : int
        Iterations per restart (one V-step and one U-step each).
    tol : float
        Stop when ``|J_prev - J| / J_prev < tol``.
    random_state : None, int or numpy.random.RandomState
        Source of the per-restart seeds.
    ncw : bool
        Normalised-cut weighting: factorise ``D^(-1/2) X`` with ``d = X X^T 1``
        (computed as ``X (X^T 1)``).
    return_info : bool
        Also return an :class:`NMFInfo`.

    Returns
    -------
    labels : ndarray of int32, shape (n,)
        ``argmax`` of each row of the normalised V.
    U : ndarray, shape (m, k)
        Term factor with unit-norm columns (3-5).
    V : ndarray, shape (n, k)
        Document factor, scaled by the norms of U (3-4); ``V U^T`` is unchanged.
    info : NMFInfo
        Only with ``return_info=True``.

    Raises
    ------
    DataError
        X not 2-D, not finite, with negative entries or all-zero documents,
        or ``n_components > n``.
    UserError
        A parameter out of range.
    """
    from bigclust.nmf import _linear, _ops

    X = as_data(X)
    n, m = X.shape
    k = check_components(n_components, n)
    solver = _check_solver(solver)
    n_init = check_int("n_init", n_init, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    tol = check_tol(tol)
    w = None
    if ncw:
        w = ncw_weights(X)
        X = _scale_rows(X, w)
    seeds = draw_seeds(random_state, n_init)
    inits = _linear_inits(X, k, init, n_init, seeds, X.shape, float(X.sum()))
    XT = _ops.csr_transpose(X) if sp.issparse(X) else None
    xx = _ops.sqnorm(X)
    results, factors = [], []
    with progress.bar(n_init * max_iter, f"linear NMF ({n_init} restarts)") as bar:
        for U, V in inits:
            results.append(_linear.run_in_memory(X, XT, U, V, solver, max_iter, tol, xx, bar))
            factors.append((U, V))
            bar.update(max_iter - results[-1][1])  # a converged restart leaves the rest of its budget
    best, info = _pick(results, "linear NMF", max_iter, tol)
    info.method = f"linear/{solver}" + ("+ncw" if ncw else "")
    info.ncw_weights = w
    U, V = _normalize_linear(*factors[best])
    labels = labels_from(V)
    return (labels, U, V, info) if return_info else (labels, U, V)


def _linear_inits(X, k, init, n_init, seeds, shape, total):
    """Initial (U, V) per restart; ``total`` = sum of X (the random scale), X only for NNDSVD."""
    n, m = shape
    if isinstance(init, str):
        if init not in INITS:
            raise UserError(f"init={init!r} must be one of {', '.join(INITS)} or a tuple (U0, V0)")
        mean = total / (n * m)
        scale = np.sqrt(mean / k)
        out = [random_factors(s, [(m, k), (n, k)], scale) for s in seeds]   # U first, then V
        if init == "nndsvd":
            out[0] = list(nndsvd(X, k, seeds[0], mean))
        return out
    return [list(p) for p in explicit_init(init, n_init, [(m, k), (n, k)], ["U0", "V0"])]


def linear_nmf_streamed(read_block, block_bounds, n_features, n_components, *, solver="mu", init="random",
                        n_init=1, max_iter=500, tol=1e-5, random_state=None, map_blocks=None, return_info=False):
    """Linear NMF with X read as row blocks: one pass over X per iteration for all restarts.

    Gives the iterates of :func:`linear_nmf` (same update order: V then U)
    up to rounding, for any block boundaries.

    Parameters
    ----------
    read_block : callable
        ``read_block(i)`` returns block i (rows ``block_bounds[i]:block_bounds[i+1]``
        of X) as an ndarray or a scipy.sparse matrix; it is called once per
        block per iteration, plus one validation pass.
    block_bounds : sequence of int
        Increasing row bounds starting at 0; the last one is n.
    n_features : int
        m, the number of columns of X.
    n_components, solver, n_init, max_iter, tol, random_state, return_info
        As in :func:`linear_nmf`.  V (n x k per restart) is held in memory.
    init : "random" or tuple (U0, V0)
        ``"nndsvd"`` needs the whole X and is not offered here.
    map_blocks : callable or None
        ``map_blocks(fn, args_list)`` returns an iterable of ``fn(*args)`` for
        each ``args`` in order, e.g. Dask tasks.  ``fn`` is a module-level
        function (picklable); the default runs the blocks here, one at a time.
        ``fn`` calls the parallel (prange) kernels: run as tasks, give each
        worker one Numba thread (one level of parallelism: tasks or threads, not both).

    Returns
    -------
    labels, U, V[, info]
        As in :func:`linear_nmf`.
    """
    from bigclust.nmf import _linear

    bounds = _linear.check_bounds(block_bounds)
    n = bounds[-1]
    m = check_int("n_features", n_features, 1)
    k = check_components(n_components, n)
    solver = _check_solver(solver)
    n_init = check_int("n_init", n_init, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    tol = check_tol(tol)
    if isinstance(init, str) and init == "nndsvd":
        raise UserError("init='nndsvd' needs the whole X; the streamed NMF takes 'random' or (U0, V0)")
    mapper = map_blocks if map_blocks is not None else _linear.in_process
    args = [(read_block, b, s, e, m) for b, (s, e) in enumerate(zip(bounds[:-1], bounds[1:]))]
    xx, total = 0.0, 0.0
    for bxx, btot in mapper(_linear.block_stats, args):
        xx += bxx
        total += btot
    seeds = draw_seeds(random_state, n_init)
    inits = _linear_inits(None, k, init, n_init, seeds, (n, m), total)
    results = _linear.run_streamed(read_block, bounds, m, inits, solver, max_iter, tol, xx, mapper)
    best, info = _pick(results, "streamed linear NMF", max_iter, tol)
    info.method = f"linear/{solver}/streamed"
    U, V = _normalize_linear(*inits[best])
    labels = labels_from(V)
    return (labels, U, V, info) if return_info else (labels, U, V)


def _kernel_op(A, kernel, w=None):
    from bigclust.nmf._bilinear import KernelOp, StoredKernel, StoredKernelOp

    if isinstance(A, StoredKernel):
        return StoredKernelOp(A, w)

    if kernel == "linear":
        X = as_data(A, nonneg=False, model="bilinear NMF")
        return KernelOp("linear", X, w)
    if kernel != "precomputed":
        raise UserError(f"kernel={kernel!r} must be one of {', '.join(KERNELS)}")
    from bigclust.normalize._common import check_dense, check_sparse

    if sp.issparse(A):
        K, rs = check_sparse(A, "bilinear NMF")
        K = sp.csr_matrix(K, dtype=np.float64)
        K.indices = K.indices.astype(np.int64)
        K.indptr = K.indptr.astype(np.int64)
        zero = np.flatnonzero(np.diff(K.indptr) == 0)
        if not zero.size:
            zero = np.flatnonzero(~np.logical_or.reduceat(K.data != 0, K.indptr[:-1]))
    else:
        K, rs, _ = check_dense(A, "bilinear NMF")
        K = np.ascontiguousarray(K, dtype=np.float64)
        zero = np.flatnonzero(~(K != 0).any(axis=1))
    if zero.size:
        raise DataError(f"K has {zero.size} all-zero row(s) (first: row {int(zero[0])}); bilinear NMF cannot "
                        f"place those documents — drop them first")
    return KernelOp("precomputed", K, w)


def bilinear_nmf(X, n_components, *, kernel="linear", init="random", n_init=10, max_iter=500, tol=1e-5,
                 random_state=None, ncw=False, return_info=False):
    """Bilinear NMF (concept factorisation): ``min 1/2 ||phi(X) - phi(X) W V^T||^2``, W, V >= 0.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix
        ``kernel="linear"``: documents as rows (n x m), any sign; K = X X^T is
        never formed (products ``X (X^T M)``, O(nnz k)).  ``kernel="precomputed"``:
        a symmetric kernel K (n x n), dense or CSR (e.g. a kNN affinity; only
        its stored entries are used, O(nnz k) per product).
    n_components : int
        Number of clusters k (``k <= n``).
    kernel : {"linear", "precomputed"}
    init : "random" or tuple (W0, V0)
        ``"random"``: ``|N(0, 1)|`` factors, V scaled by the best scalar for
        the pair.  A tuple: explicit (n, k) factors (or with a leading n_init axis).
    n_init, max_iter, tol, random_state, return_info
        As in :func:`linear_nmf`.
    ncw : bool
        Normalised-cut weighting: factorise ``D^(-1/2) K D^(-1/2)``, ``d = K 1``
        (``X (X^T 1)`` for the linear kernel), applied inside the products.

    Returns
    -------
    labels : ndarray of int32, shape (n,)
        ``argmax`` of each row of the normalised V.
    W : ndarray, shape (n, k)
        Concept weights, ``diag(W^T K W) = 1`` after (3-17).
    V : ndarray, shape (n, k)
        Memberships scaled by ``sqrt(diag(W^T K W))`` (3-16); ``W V^T`` is unchanged.
    info : NMFInfo
        Only with ``return_info=True``; ``method`` says which rules ran.

    Notes
    -----
    A kernel with any negative entry gets the split rules (3-12, 3-14),
    otherwise the simplified ones (3-13, 3-15).  The objective is
    non-increasing under both and bounded below for a positive semidefinite
    kernel; for an indefinite kernel it may fall below zero (a warning says
    so) or diverge (a DataError).

    Raises
    ------
    DataError
        Non-finite input, a non-symmetric kernel, an all-zero document (row of
        K or X), ``n_components > n``, (with ``ncw``) a degree ``d_i <= 0``, or
        an indefinite kernel on which the iteration diverges.
    """
    from bigclust.nmf import _bilinear

    op = _kernel_op(X, kernel)
    n = op.n
    k = check_components(n_components, n, "K" if kernel == "precomputed" else "X")
    n_init = check_int("n_init", n_init, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    tol = check_tol(tol)
    if ncw:
        op.w = _degrees_weights(op.degrees(), "K" if kernel == "precomputed" else "X X^T")
        op.trace = float(np.sum(_diag(op) * op.w ** 2))
    seeds = draw_seeds(random_state, n_init)
    if isinstance(init, str):
        if init != "random":
            raise UserError(f"init={init!r} must be 'random' or a tuple (W0, V0)")
        inits = []
        for s in seeds:
            W, V = random_factors(s, [(n, k), (n, k)], 1.0)
            _bilinear.scale_init(op, W, V)
            inits.append((W, V))
    else:
        inits = explicit_init(init, n_init, [(n, k), (n, k)], ["W0", "V0"])
    results, Bs = [], []
    bar = progress.bar(max_iter, f"bilinear NMF ({n_init} restarts in lockstep)")
    with np.errstate(over="ignore", invalid="ignore"):
        runs = _bilinear.run_many(op, inits, max_iter, tol, bar=bar)   # all restarts share each pass over K
    for r, (h, it, conv, B) in enumerate(runs):
        if not np.isfinite(h[-1]):
            raise DataError(f"bilinear NMF diverged (restart {r}, iteration {it}): the objective is unbounded "
                            f"below, so K is not positive semidefinite — use a PSD kernel")
        results.append((h, it, conv))
        Bs.append(B)
    bar.close()
    best, info = _pick(results, "bilinear NMF", max_iter, tol)
    if info.objective.min() < -1e-9 * max(abs(op.trace), 1e-300):
        import warnings

        warnings.warn("bilinear NMF: the objective fell below zero — the kernel is not positive semidefinite, "
                      "so the objective is unbounded below", RuntimeWarning, stacklevel=2)
    info.method = "bilinear/" + ("split" if op.split else "nonneg") + ("+ncw" if ncw else "")
    info.ncw_weights = op.w
    W, V = _bilinear.normalize(*inits[best], Bs[best])
    labels = labels_from(V)
    return (labels, W, V, info) if return_info else (labels, W, V)


def _diag(op):
    if op.kind == "stored":
        return op._diag
    if op.kind == "linear":
        X = op.X
        return np.asarray(X.multiply(X).sum(axis=1)).ravel() if sp.issparse(X) else np.einsum("ij,ij->i", X, X)
    return op.K.diagonal() if sp.issparse(op.K) else np.diagonal(op.K).copy()


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

    from bigclust.algo.kmeans import _method_code, _warn_empty
    from bigclust.normalize._common import check_dense
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
        kern.kk_init(K, k, seeds, _method_code(init), idx)
    else:
        idx = seed_indices(init, n_init, k, n)
    labels = np.empty((n_init, n), dtype=np.int32)
    obj = np.empty(n_init)
    n_iter = np.empty(n_init, dtype=np.int32)
    n_empty = np.zeros(n_init, dtype=np.int64)
    with numba.parallel_chunksize(1):
        kern.kk_lloyd(K, idx, max_iter, labels, obj, n_iter, n_empty)
    best = int(np.argmin(obj))
    _warn_empty(int(n_empty.sum()), n_init, "empty")
    info = NMFInfo(objective=np.array([obj[best]]), n_iter=int(n_iter[best]), converged=bool(n_iter[best] < max_iter),
                   best=best, objectives=obj, n_iters=n_iter.astype(np.int64), method="kernel-kmeans",
                   n_empty_reseeded=int(n_empty.sum()), extra={"labels_all": labels})
    return (labels[best], float(obj[best]), info) if return_info else (labels[best], float(obj[best]))
