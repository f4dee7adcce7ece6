"""Linear NMF: :func:`linear_nmf` (dense or CSR X in memory), :func:`linear_nmf_streamed` (row blocks), their iterations.

Orientation: X is n documents x m terms, ``X ~ V U^T`` with V (n x k) the
document factor and U (m x k) the term factor; the paper's X is its
transpose (paper: ``X ~ U V^T``).

Update order, the same in memory and streamed: every iteration updates V
first (from ``X U`` and ``U^T U``), then U (from ``X^T V`` and ``V^T V`` of
the *new* V).  The V-step of a document needs only its own row of X, so a
streamed iteration is one pass over the row blocks: each block updates its
rows of V and contributes ``X_b^T V_b`` and ``V_b^T V_b``; U is updated after
the pass.  scikit-learn's ``NMF`` uses the same order (its W = our V first).
The objective after the iteration costs nothing extra:
``J = 1/2 (||X||^2 - 2 sum(U o X^T V) + sum(U^T U o V^T V))``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util import progress
from bigclust.nmf import ops
from bigclust.nmf._common import (INITS, SOLVERS, DataError, UserError, as_data, check_components, check_int, check_tol,
                                  labels_from, normalize_columns, pick_best, rel_change, scale_rows)
from bigclust.nmf.init import draw_seeds, explicit_init, nndsvd, random_factors


def objective(xx, cross, GU, GV):
    """``1/2 ||X - V U^T||^2 = 1/2 (||X||^2 - 2 tr(V^T X U) + tr(U^T U V^T V))``."""
    return 0.5 * (xx - 2.0 * cross + float(np.sum(GU * GV)))


def run_in_memory(X, XT, U, V, solver, max_iter, tol, xx, bar=None, sweeps=None):
    """Iterate from (U, V) (both INOUT); returns ``(objective history, n_iter, converged)``.

    ``bar``: a progress bar (:mod:`bigclust._util.progress`) advanced once per iteration;
    ``sweeps``: HALS sweeps per factor update at most (see :func:`ops.step`).
    """
    bar = bar if bar is not None else progress.NOBAR
    GU = ops.gram(U)
    GV = ops.gram(V)
    hist = []
    A = np.empty(V.shape)                           # reused: fresh pages every iteration cost time
    B = np.empty(U.shape)
    buf = ops.step_buffers(U.shape[1])
    for it in range(1, max_iter + 1):
        A = ops.matmul(X, U, A)                    # X U        (paper: X^T U)
        GV_new, c_old, _ = ops.step(solver, V, A, GU, sweeps, old=it == 1, buffers=buf)  # V-step   (3-3)
        if it == 1:
            hist.append(objective(xx, c_old, GU, GV))
        GV = GV_new
        B = ops.tmatmul(X, V, XT, B)               # X^T V      (paper: X V)
        GU, _, c_new = ops.step(solver, U, B, GV, sweeps, old=False, buffers=buf)  # U-step     (3-2)
        hist.append(objective(xx, c_new, GU, GV))
        bar.update(1)
        if rel_change(hist[-2], hist[-1]) < tol:
            return np.array(hist), it, True
    return np.array(hist), max_iter, False


# -- streamed --------------------------------------------------------------------------------------


def in_process(fn, args_list):
    """Default ``map_blocks`` hook: run ``fn(*args)`` for each block here, lazily and in order."""
    return (fn(*a) for a in args_list)


def _read(read_block, i, start, stop, n_features):
    Xb = read_block(i)
    shape = (stop - start, n_features)
    if tuple(Xb.shape) != shape:
        raise DataError(f"block {i} has shape {tuple(Xb.shape)}, expected {shape} (rows {start}:{stop})")
    return as_data(Xb, f"X (block {i})", row0=start)


def block_stats(read_block, i, start, stop, n_features):
    """Validate block i and return ``(||X_b||^2, sum of X_b)`` (a module-level task)."""
    Xb = _read(read_block, i, start, stop, n_features)
    total = float(Xb.sum())
    return ops.sqnorm(Xb), total


def block_step(read_block, i, start, stop, n_features, solver, states):
    """V-step of block i for every active restart (a module-level task).

    states : list of ``(U, U^T U, V_b)`` per restart (V_b is copied, not changed).
    Returns a list of ``(V_b new, X_b^T V_b new, V_b^T V_b new, sum V_b old o X_b U)``.
    """
    Xb = ops.product_form(_read(read_block, i, start, stop, n_features))
    XbT = ops.csr_transpose(Xb) if sp.issparse(Xb) else None
    out = []
    for U, GU, Vb in states:
        Vb = np.array(Vb, dtype=np.float64, order="C")
        A = ops.matmul(Xb, U)
        GVb, c_old, _ = ops.step(solver, Vb, A, GU)
        out.append((Vb, ops.tmatmul(Xb, Vb, XbT), GVb, c_old))
    return out


def check_bounds(bounds):
    b = np.asarray(bounds)
    if b.ndim != 1 or b.size < 2 or b.dtype.kind not in "iu" or b[0] != 0 or (np.diff(b) <= 0).any():
        raise UserError("block_bounds must be increasing integers starting at 0 (block i = rows "
                        "bounds[i]:bounds[i+1]), e.g. [0, 1000, 2000, n]")
    return [int(v) for v in b]


def run_streamed(read_block, bounds, n_features, inits, solver, max_iter, tol, xx, map_blocks):
    """Streamed iterations of every restart (one pass over X per iteration for all of them).

    inits : list of ``[U, V]`` per restart (INOUT).  Returns per restart
    ``(history, n_iter, converged)``.
    """
    r = len(inits)
    GU = [ops.gram(U) for U, _ in inits]
    GV = [ops.gram(V) for _, V in inits]
    hist = [[] for _ in range(r)]
    n_iter = [0] * r
    done = [False] * r
    conv = [False] * r
    blocks = list(zip(bounds[:-1], bounds[1:]))
    for it in progress.iterate(range(1, max_iter + 1), f"linear NMF, streamed ({r} restarts)"):
        active = [j for j in range(r) if not done[j]]
        if not active:
            break
        args = [(read_block, b, s, e, n_features, solver,
                 [(inits[j][0], GU[j], inits[j][1][s:e]) for j in active]) for b, (s, e) in enumerate(blocks)]
        B = {j: 0.0 for j in active}
        GVn = {j: 0.0 for j in active}
        cold = {j: 0.0 for j in active}
        for (s, e), res in zip(blocks, map_blocks(block_step, args)):
            for j, (Vb, Bb, Gb, cb) in zip(active, res):
                inits[j][1][s:e] = Vb
                B[j] = B[j] + Bb
                GVn[j] = GVn[j] + Gb
                cold[j] += cb
        for j in active:
            if it == 1:
                hist[j].append(objective(xx, cold[j], GU[j], GV[j]))
            GV[j] = GVn[j]
            GU[j], _, c_new = ops.step(solver, inits[j][0], np.ascontiguousarray(B[j]), GV[j])
            hist[j].append(objective(xx, c_new, GU[j], GV[j]))
            n_iter[j] = it
            if rel_change(hist[j][-2], hist[j][-1]) < tol:
                done[j] = conv[j] = True
    return [(np.array(hist[j]), n_iter[j], conv[j]) for j in range(r)]


# -- drivers ----------------------------------------------------------------------------------


def _check_solver(solver):
    if solver not in SOLVERS:
        raise UserError(f"solver={solver!r} must be one of {', '.join(SOLVERS)}")
    return solver


def _normalize_linear(U, V):
    """(3-4, 3-5): unit-norm columns of U; V's columns scaled by the norms of U before the scaling."""
    norms = np.sqrt(np.sum(U * U, axis=0))
    return normalize_columns(U, norms), V * norms


def linear_nmf(X, n_components, *, solver="mu", init="random", n_init=10, max_iter=500, tol=1e-5,
               random_state=None, ncw=False, return_info=False):
    # over 80 lines by its numpydoc docstring (53 lines); the code is 31
    """Linear NMF clustering: ``min 1/2 ||X - V U^T||^2`` with U, V >= 0 (paper 001, 3-1..3-5).

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (n, m)
        Documents as rows, non-negative (e.g. tf-idf).  Sparse X stays sparse:
        each iteration costs O(nnz k) (a transposed copy of X is kept).  So
        does a dense X with at most a third of its entries nonzero (images);
        a denser one is multiplied by BLAS.
    n_components : int
        Number of clusters k (``k <= n``).
    solver : {"mu", "hals"}
        ``"mu"``: multiplicative updates (3-2, 3-3), denominators guarded by
        ``EPS = 1e-300``.  ``"hals"``: fast HALS (exact coordinate descent),
        up to ``ops.HALS_SWEEPS`` sweeps per row from each ``X U`` / ``X^T V``
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

    Examples
    --------
    >>> import numpy as np
    >>> from bigclust.nmf import linear_nmf
    >>> X = np.array([[3.0, 2.0, 0.0, 0.0], [2.0, 3.0, 0.0, 0.0], [4.0, 4.0, 0.0, 1.0],
    ...               [0.0, 0.0, 3.0, 2.0], [0.0, 1.0, 2.0, 3.0], [0.0, 0.0, 4.0, 4.0]])
    >>> labels, U, V = linear_nmf(X, 2, n_init=3, max_iter=200, random_state=0)
    >>> bool(len(set(labels[:3])) == len(set(labels[3:])) == 1 and labels[0] != labels[3])
    True
    >>> U.shape, V.shape, np.round(np.linalg.norm(U, axis=0), 6).tolist()
    ((4, 2), (6, 2), [1.0, 1.0])
    """
    from bigclust.nmf._bilinear import ncw_weights

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
        X = scale_rows(X, w)
    seeds = draw_seeds(random_state, n_init)
    inits = _linear_inits(X, k, init, n_init, seeds, X.shape, float(X.sum()) if isinstance(init, str) else 0.0)
    xx = ops.sqnorm(X)
    X = ops.product_form(X)       # after ||X||^2 and the initialisation, which stay those of X as given
    XT = ops.csr_transpose(X) if sp.issparse(X) else None
    results, factors = [], []
    with progress.bar(n_init * max_iter, f"linear NMF ({n_init} restarts)") as bar:
        for U, V in inits:
            results.append(run_in_memory(X, XT, U, V, solver, max_iter, tol, xx, bar))
            factors.append((U, V))
            bar.update(max_iter - results[-1][1])  # a converged restart leaves the rest of its budget
    best, info = pick_best(results, "linear NMF", max_iter, tol)
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
    n_components, solver : int, {"mu", "hals"}
        As in :func:`linear_nmf`.  V (n x k per restart) is held in memory.
    init : "random" or tuple (U0, V0)
        ``"nndsvd"`` needs the whole X and is not offered here.
    n_init, max_iter, tol, random_state : int, int, float, int or None
        As in :func:`linear_nmf`.
    map_blocks : callable or None
        ``map_blocks(fn, args_list)`` returns an iterable of ``fn(*args)`` for
        each ``args`` in order, e.g. Dask tasks.  ``fn`` is a module-level
        function (picklable); the default runs the blocks here, one at a time.
        ``fn`` calls the parallel (prange) kernels: run as tasks, give each
        worker one Numba thread (one level of parallelism: tasks or threads, not both).
    return_info : bool
        Also return an :class:`NMFInfo`.

    Returns
    -------
    labels, U, V[, info]
        As in :func:`linear_nmf`.
    """
    bounds = check_bounds(block_bounds)
    n = bounds[-1]
    m = check_int("n_features", n_features, 1)
    k = check_components(n_components, n)
    solver = _check_solver(solver)
    n_init = check_int("n_init", n_init, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    tol = check_tol(tol)
    if isinstance(init, str) and init == "nndsvd":
        raise UserError("init='nndsvd' needs the whole X; the streamed NMF takes 'random' or (U0, V0)")
    mapper = map_blocks if map_blocks is not None else in_process
    args = [(read_block, b, s, e, m) for b, (s, e) in enumerate(zip(bounds[:-1], bounds[1:]))]
    xx, total = 0.0, 0.0
    for bxx, btot in mapper(block_stats, args):
        xx += bxx
        total += btot
    seeds = draw_seeds(random_state, n_init)
    inits = _linear_inits(None, k, init, n_init, seeds, (n, m), total)
    results = run_streamed(read_block, bounds, m, inits, solver, max_iter, tol, xx, mapper)
    best, info = pick_best(results, "streamed linear NMF", max_iter, tol)
    info.method = f"linear/{solver}/streamed"
    U, V = _normalize_linear(*inits[best])
    labels = labels_from(V)
    return (labels, U, V, info) if return_info else (labels, U, V)
