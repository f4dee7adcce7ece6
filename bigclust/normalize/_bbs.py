"""The entry points that choose a solver: :func:`bbs` (dense or sparse, three solvers) and :func:`normalize` by name.

The solvers themselves are in ``_bbs_dense`` and ``_bbs_sparse``; RA, Ncut
and Sinkhorn in ``_scaling``.
"""
from __future__ import annotations

import inspect
from contextlib import nullcontext

import scipy.sparse as sp

from bigclust._util.errors import UserError
from bigclust.normalize._common import History, check_int, check_tol, labels, storage_dtype
from bigclust.normalize._scaling import ncut, ra, sinkhorn
from bigclust.normalize.checks import check_dense, check_sparse


SOLVERS = ("alternating", "dykstra", "dual")
SELF_LOOPS = ("keep", "zero", "drop", "cap")  # sparse BBS: what the support does with K's diagonal

#: default stopping tolerance of the dual Newton solver (max row-sum error)
DUAL_TOL = 1e-10


def bbs(K, solver="dual", n_iter=1000, tol=None, *, y=None, record_every=0, return_info=False,
        dtype=None, self_loops="zero", copy=True):
    # over 80 lines only by its numpydoc docstring; the body is a dispatch of ~30 lines
    """Euclidean Bregmanian bi-stochastication (paper 000, problem 10).

    Finds a symmetric, non-negative G with unit row sums close to K in the
    Frobenius norm.

    Parameters
    ----------
    K : ndarray or scipy.sparse matrix, shape (n, n)
        Symmetric and finite (signs are free).  For sparse K, G is restricted
        to K's stored pattern E (explicit zeros included; the pattern must be
        symmetric) and every pass costs O(nnz); the alternating and Dykstra
        steps also project onto the affine set *within the support*, which
        means solving ``(D + A_E) mu = 1 - G1`` (signless Laplacian of E) by a
        warm-started CG, O(nnz) per CG step -- see
        :mod:`bigclust.normalize._bbs_sparse`.
    solver : {"dual", "alternating", "dykstra"}, default "dual"
        The pipeline's ``[bbs] solver`` and the estimator's default (one declaration:
        :class:`bigclust.normalize.plugin.BBSParams`).  ``"alternating"``: the paper's Alg. 1, projections onto
        ``{G = G^T, G1 = 1}`` and ``{G >= 0}`` alternated from ``G = K``, one
        fused in-place pass per iteration; reaches a feasible point, not the
        nearest one.  ``"dykstra"``: Dykstra's corrected projections, which
        converge to the exact minimiser ``argmin ||G - K||_F``; run on the
        equivalent dual vector with read-only passes over K.  ``"dual"``:
        semismooth Newton on ``sum_j max(K_ij + mu_i + mu_j, 0) = 1`` (exact
        minimiser ``G = max(K + mu 1^T + 1 mu^T, 0)``, ~10-20 steps).
    n_iter : int
        Iterations (passes over K) for alternating/dykstra; maximum Newton
        steps for dual.
    tol : float or None
        Stop when ``max_i |sum_j G_ij - 1| <= tol``.  None runs all ``n_iter``
        iterations for alternating/dykstra and means ``1e-10`` for dual.
    y : array-like, optional
        Class labels, for MC in the history.
    record_every : int
        Record ``(iteration, MB, MC)`` every that many iterations (0: never).
        MB is free; MC costs one fused class-sum pass per record.
    return_info : bool
        Also return a :class:`NormalizeInfo` (``info.mu`` and ``info.kkt`` for
        the exact solvers).
    dtype : {None, float32, float64}
        Storage type of G (accumulations are always float64); None keeps a
        float32 K in float32 and makes everything else float64.
    self_loops : {"zero", "keep", "drop", "cap"}, default "zero"
        Sparse K only: what the support does with K's stored diagonal.
        ``"zero"`` (the default, as ``[bbs] self_loops``) keeps the diagonal in
        the support as slack with no similarity (``K_ii = 0``);
        ``"keep"`` projects onto K's pattern as it is; ``"drop"`` removes the
        diagonal from the support (``G_ii = 0``; a row holding only its
        diagonal keeps it); ``"cap"`` lowers ``K_ii`` to the row's largest
        off-diagonal entry.  On a kNN kernel the self-loop is the largest of
        about k entries of its row and lets outlying points keep their whole
        mass on the diagonal, cut off from the graph (see
        :mod:`bigclust.normalize._bbs_sparse`); the pipeline's ``[bbs]
        self_loops`` chooses.  Ignored for dense K (one entry of n per row).
    copy : bool, default True
        Sparse K, ``self_loops="zero"``: False sets K's stored diagonal to 0
        in place for the solve and puts it back after (also after an error),
        instead of solving on a copy of K's values (0.4 GB at 8.1M rows x 13
        entries, float32); K is unchanged on return.  Not for a K that another
        thread reads meanwhile, nor a read-only one (then a copy is made).

    Returns
    -------
    G : ndarray, or CSR sparse matrix on K's pattern
        The bi-stochastic matrix.
    info : NormalizeInfo
        What the solver did (only with ``return_info=True``).

    Raises
    ------
    DataError
        K not square, not finite, not symmetric; sparse K with an asymmetric
        pattern or an empty row.
    UserError
        Unknown solver, bad ``n_iter`` / ``tol`` / ``dtype``.

    Examples
    --------
    >>> import numpy as np
    >>> from bigclust.normalize import bbs
    >>> K = np.array([[1.0, 0.8, 0.1], [0.8, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> G, info = bbs(K, return_info=True)
    >>> print(np.round(G.sum(axis=1), 6), info.converged)
    [1. 1. 1.] True
    >>> print(np.round(G, 3))
    [[0.6 0.4 0. ]
     [0.4 0.6 0. ]
     [0.  0.  1. ]]
    """
    if solver not in SOLVERS:
        raise UserError(f"unknown BBS solver {solver!r} (choose from {', '.join(SOLVERS)})")
    if self_loops not in SELF_LOOPS:
        raise UserError(f"unknown self_loops {self_loops!r} (choose from {', '.join(SELF_LOOPS)})")
    n_iter, tol = check_int("n_iter", n_iter, 0), check_tol(tol)
    if solver == "dual" and tol is None:
        tol = DUAL_TOL
    if sp.issparse(K):
        from bigclust.normalize import _bbs_sparse as impl

        # the solvers only read K: a canonical input is shared, not copied (a gigabyte at 8M rows).  The
        # self-loop support's own copy of the values (the default "zero") is scratch: G's values go there;
        # with copy=False there is no such copy (K's diagonal is zeroed for the solve) and G's values are new
        Ks = check_sparse(K, "BBS", copy=False)[0]   # not its row sums: one n-vector fewer in the solve
        inplace = self_loops == "zero" and not copy and Ks.data.flags.writeable
        with impl.zeroed_diagonal(Ks) if inplace else nullcontext(impl.self_loop_support(Ks, self_loops)) as Kc:
            scratch = Kc.data is not Ks.data
            del Ks
            dt = storage_dtype(dtype, Kc.dtype)
            hist = History(labels(y, Kc.shape[0]), record_every)
            if solver == "alternating":
                G, info = impl.alternating(K, Kc, dt, n_iter, tol, hist, scratch)
            elif solver == "dykstra":
                G, info = impl.dykstra(K, Kc, dt, n_iter, tol, hist, scratch)
            else:
                G, info = impl.dual(K, Kc, dt, n_iter, tol, hist, scratch=scratch)
    else:
        from bigclust.normalize import _bbs_dense as impl

        Kc, _, asym = check_dense(K, "BBS")
        dt = storage_dtype(dtype, Kc.dtype)
        hist = History(labels(y, Kc.shape[0]), record_every)
        if solver == "alternating":
            G, info = impl.alternating(Kc, dt, asym, n_iter, tol, hist)
        elif solver == "dykstra":
            G, info = impl.dykstra(Kc, dt, n_iter, tol, hist)
        else:
            G, info = impl.dual(Kc, dt, n_iter, tol, hist)
    return (G, info) if return_info else G


METHODS = {"ra": ra, "ncut": ncut, "sk": sinkhorn, "sinkhorn": sinkhorn, "bbs": bbs}


def normalize(K, method, **params):
    """Normalise K by the method's name, for the pipeline: ``"ra"``, ``"ncut"``, ``"sk"``, ``"bbs"``.

    Parameters
    ----------
    K : ndarray or scipy.sparse matrix, shape (n, n)
        The kernel.
    method : {"ra", "ncut", "sk", "sinkhorn", "bbs"}
        The normalisation (``"sk"`` and ``"sinkhorn"`` are one).
    **params
        Go to the named function unchanged (``y``, ``record_every`` and ``return_info`` are accepted by all of
        them); an unknown method or a parameter the method does not take raises
        :class:`~bigclust._util.errors.UserError`.

    Returns
    -------
    P or (P, info)
        What the named function returns.
    """
    try:
        fn = METHODS[method]
    except (KeyError, TypeError):
        raise UserError(f"unknown normalisation method {method!r} (choose from ra, ncut, sk, bbs)") from None
    accepted = set(inspect.signature(fn).parameters) - {"K"}
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise UserError(f"normalisation {method!r} does not take {', '.join(unknown)} "
                        f"(it takes {', '.join(sorted(accepted))})")
    return fn(K, **params)
