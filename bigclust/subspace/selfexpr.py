"""Self-expressive coefficients on a dictionary (paper 002, Eq. 6: Ak-SC).

For every sample x_i (unit norm) and its support N_i (k atoms of the unit-norm
dictionary D), with A = D[N_i]^T:

* SSC (``regularizer="l1"``): ``min_c 1/2 ||x_i - A c||^2 + lam ||c||_1`` by
  ADMM, one independent problem per column (:func:`bigclust.subspace._numba.admm_columns`);
* LSR (``"l2"``): ``min_c 1/2 ||x_i - A c||^2 + lam/2 ||c||^2``, closed form
  ``c = (A^T A + lam I)^{-1} A^T x_i`` (the ``lam/2`` makes the closed form
  the one above);
* LRR (``"nuclear"``): nuclear norm of the whole coefficient matrix, see
  :mod:`bigclust.subspace.lrr`.

``neighbors=None`` means the full dictionary (every admissible atom: all
other samples and, with augmentation, their copies -- paper scale only).
For the full dictionary the per-column Gram matrices are replaced by one
shared (N, N) Gram matrix: SSC runs the same ADMM in matrix form with the
excluded entries (i itself, A(i)) held at zero in the z-step (the classical
SSC code's ``diag(Z) = 0``), LSR uses the exact constrained closed form.

Choice of lam for SSC (the paper's values are lost in the extracted text):
by default ``lam = mu / alpha`` with ``mu = min_i ||A_i^T x_i||_inf``
(Elhamifar & Vidal 2013, Eq. 14, restricted to each column's own support).
For ``lam >= ||A_i^T x_i||_inf`` column i is all zero, so ``alpha > 1`` keeps
every column non-trivial; ``alpha = 20`` is Elhamifar & Vidal's default for
face/motion data.  A float ``lam`` is used as is (absolute).
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util import progress
from bigclust._util.errors import DataError, UserError
from bigclust.subspace._common import ConvergenceWarning, assemble
from bigclust.subspace.dictionary import Dictionary, _unit_rows

REGULARIZERS = ("l1", "l2", "nuclear")

#: defaults (see the module and function docstrings for the reasons)
ALPHA = 20.0
LAM_L2 = 0.05
LAM_NUCLEAR = 0.05
EPS_ABS = 1e-6
EPS_REL = 1e-5
MAX_ITER = 5000
RHO_L1 = 0.1
RELAX = 1.8


def _kernels():
    from bigclust.subspace import _numba
    return _numba


def _samples(X, dictionary):
    if not isinstance(dictionary, Dictionary):
        raise UserError("dictionary must come from bigclust.subspace.build_dictionary")
    if X is None:
        return dictionary.atoms[:dictionary.n]
    Xu = _unit_rows(X, "X")
    if Xu.shape != (dictionary.n, dictionary.atoms.shape[1]):
        raise DataError(f"X has shape {Xu.shape} but the dictionary has {dictionary.n} originals of "
                        f"{dictionary.atoms.shape[1]} features")
    return np.ascontiguousarray(Xu)


def _check_neighbors(neighbors, dictionary):
    nb = np.asarray(neighbors)
    if nb.ndim != 2 or nb.shape[0] != dictionary.n or nb.shape[1] < 1:
        raise DataError(f"neighbors must be (n={dictionary.n}, k), got shape {nb.shape}")
    if not np.issubdtype(nb.dtype, np.integer) or nb.min() < 0 or nb.max() >= dictionary.n_atoms:
        raise DataError(f"neighbors must be atom indices in [0, {dictionary.n_atoms})")
    return np.ascontiguousarray(nb, dtype=np.int64)


def _pos(name, v):
    if not (isinstance(v, numbers.Real) and v > 0 and np.isfinite(v)):
        raise UserError(f"{name}={v!r} must be a positive number")
    return float(v)


def ssc_lambda(X, dictionary, neighbors, alpha=ALPHA):
    """Compute ``lam = min_i ||A_i^T x_i||_inf / alpha`` (Elhamifar & Vidal's rule on the kNN supports).

    Parameters
    ----------
    X : array-like (n, d) or None
        As in :func:`self_expression`.
    dictionary : Dictionary
        From :func:`build_dictionary`.
    neighbors : ndarray (n, k) or None
        As in :func:`self_expression`.
    alpha : float
        The divisor.

    Returns
    -------
    float
        The l1 weight.
    """
    alpha = _pos("alpha", alpha)
    Xs = _samples(X, dictionary)
    if neighbors is None:
        S = Xs @ dictionary.atoms.T
        S[_excluded_mask(dictionary).T.toarray()] = 0.0
        mu = np.abs(S).max(axis=1).min()
    else:
        nb = _check_neighbors(neighbors, dictionary)
        mu = np.inf
        step = max(1, (32 << 20) // (8 * nb.shape[1] * Xs.shape[1]))     # gathered atoms <= 32 MB
        for r0 in range(0, nb.shape[0], step):
            blk = np.einsum("ikd,id->ik", dictionary.atoms[nb[r0:r0 + step]], Xs[r0:r0 + step])
            mu = min(mu, float(np.abs(blk).max(axis=1).min()))
    if not mu > 0:
        raise DataError("some sample is orthogonal to all its atoms: no l1 regularisation leaves it non-zero")
    return float(mu) / alpha


def self_expression(X, dictionary, neighbors, regularizer="l1", lam=None, *, alpha=ALPHA, rho=None,
                    eps_abs=EPS_ABS, eps_rel=EPS_REL, max_iter=MAX_ITER, adaptive_rho=True, relax=RELAX,
                    thresholds=None, return_info=False, **lrr_options):
    # over 80 lines by its numpydoc docstring (59 lines); the code is one dispatch per regularizer
    """Self-expressive coefficient matrix of the originals over the dictionary.

    Parameters
    ----------
    X : array-like (n, d) or None
        Samples to represent (rows are scaled to unit norm); None = the
        dictionary's own originals (the usual case).
    dictionary : Dictionary
        From :func:`build_dictionary`.
    neighbors : ndarray (n, k) of atom indices, or None
        Supports N_i (from :func:`knn_dictionary`); None = full dictionary.
    regularizer : {"l1", "l2", "nuclear"}
        SSC, LSR or LRR.
    lam : float or None
        Regularisation weight.  None: l1 -> ``min_i ||A_i^T x_i||_inf / alpha``;
        l2 -> 0.05; nuclear -> 0.05 (see Notes).
    alpha : float
        Divisor of the automatic l1 weight (default 20).
    rho : float or None
        Initial ADMM penalty.  None: 0.1 for l1 (RHO_L1; residual balancing
        adapts it -- on COIL-20 and on synthetic subspaces with k = 50 it
        took about half the iterations of rho = 1, the mean eigenvalue of a
        unit-atom Gram matrix), ``lam`` for LRR's inexact ALM (whose penalty
        then grows by ``eta`` per iteration).
    eps_abs, eps_rel : float
        Boyd et al.'s absolute / relative tolerances of the primal and dual
        residual tests (defaults 1e-6, 1e-5).
    max_iter : int
        ADMM iterations per column (default 5000; columns that stop there
        are counted and reported in one warning).
    adaptive_rho : bool
        Residual balancing of rho (Boyd 3.4.1), factorisation recomputed only
        when rho changes.
    relax : float in (0, 2)
        Over-relaxation of the ADMM (Boyd 3.4.3); default 1.8 (half the
        iterations of plain ADMM, 1.0, for the same solution; see
        :func:`bigclust.subspace._numba.admm_one`).
    thresholds : ndarray (n, k) or None
        Per-entry l1 weights replacing ``lam`` (AkS-SSC's ``lam + gamma Theta``).
    return_info : bool
        Also return a dict (lam, iterations, converged, ...).
    **lrr_options
        Passed to :func:`bigclust.subspace.lrr.lrr` for ``"nuclear"``.

    Returns
    -------
    C : scipy.sparse.csc_matrix (N, n)
        Row = dictionary atom, column = sample; exact zeros are not stored.
    info : dict
        Only with ``return_info``.

    Notes
    -----
    Defaults for l2 and nuclear (the paper's values are lost): with unit-norm
    atoms the k x k Gram matrix has trace k and its largest eigenvalues are
    O(1)-O(k); ``lam = 0.05`` damps directions whose eigenvalue is below
    ~0.05 (noise directions of nearly collinear neighbours) while leaving the
    dominant ones almost unregularised.  LSR on COIL-20 was insensitive to
    lam in [0.01, 0.2] in our runs.
    """
    if regularizer not in REGULARIZERS:
        raise UserError(f"unknown regularizer {regularizer!r}; expected one of {', '.join(REGULARIZERS)}")
    Xs = _samples(X, dictionary)
    nb = None if neighbors is None else _check_neighbors(neighbors, dictionary)
    if regularizer == "nuclear":
        from bigclust.subspace.lrr import lrr
        lam = LAM_NUCLEAR if lam is None else _pos("lam", lam)
        return lrr(Xs, dictionary, nb, lam, rho=rho, max_iter=max_iter, return_info=return_info, **lrr_options)
    if lrr_options:
        raise UserError(f"{regularizer} does not take {', '.join(sorted(lrr_options))}")
    if regularizer == "l2":
        lam = LAM_L2 if lam is None else _pos("lam", lam)
        if nb is None:
            C = _lsr_full(Xs, dictionary, lam)
            info = dict(lam=lam, n_iter=np.zeros(dictionary.n, dtype=np.int64), converged=True)
        else:
            out = np.empty(nb.shape)
            _kernels().ridge_columns(dictionary.atoms, Xs, nb, lam, out)
            C = assemble(nb, out, dictionary)
            info = dict(lam=lam, n_iter=np.zeros(dictionary.n, dtype=np.int64), converged=True)
        return (C, info) if return_info else C
    # l1
    rho = RHO_L1 if rho is None else _pos("rho", rho)
    eps_abs = _pos("eps_abs", eps_abs)
    eps_rel = float(eps_rel)
    if not (isinstance(max_iter, numbers.Integral) and max_iter >= 1):
        raise UserError(f"max_iter={max_iter!r} must be a positive int")
    if not (isinstance(relax, numbers.Real) and 0 < relax < 2):
        raise UserError(f"relax={relax!r} must be in (0, 2)")
    if thresholds is None:
        lam = ssc_lambda(Xs, dictionary, nb, alpha) if lam is None else _pos("lam", lam)
    if nb is None:
        if thresholds is not None:
            raise UserError("per-entry thresholds need kNN supports (neighbors)")
        C, its, conv = _ssc_full(Xs, dictionary, lam, rho, eps_abs, eps_rel, int(max_iter),
                                 adaptive_rho, float(relax))
    else:
        thr = np.full(nb.shape, lam) if thresholds is None else np.ascontiguousarray(thresholds, dtype=np.float64)
        if thr.shape != nb.shape or not np.all(thr >= 0):
            raise DataError(f"thresholds must be non-negative with the shape of neighbors {nb.shape}")
        C, its, conv = admm_knn(Xs, dictionary.atoms, nb, thr, 0.0, rho, eps_abs, eps_rel, int(max_iter),
                                adaptive_rho, float(relax))
        C = assemble(nb, C, dictionary)
    n_bad = int((~conv).sum())
    if n_bad:
        warnings.warn(f"ADMM: {n_bad} of {dictionary.n} columns reached max_iter={max_iter} before the "
                      f"primal and dual residuals fell below their tolerances", ConvergenceWarning, stacklevel=2)
    info = dict(lam=lam, n_iter=its, converged=conv, rho=rho)
    return (C, info) if return_info else C


def admm_knn(Xs, D, nb, thr, ridge, rho, eps_abs, eps_rel, max_iter, adaptive=True, relax=RELAX):
    """Validated-input core: per-column ADMM, returns (coef (n, k), iterations, converged)."""
    n, k = nb.shape
    out = np.empty((n, k))
    its = np.empty(n, dtype=np.int64)
    conv = np.empty(n, dtype=np.bool_)
    D = np.ascontiguousarray(D, dtype=np.float64)
    Xs = np.ascontiguousarray(Xs, dtype=np.float64)
    # columns are independent problems: with a progress bar they run in chunks of columns (one kernel
    # call each, the bar advancing in between), with the same results as one call over all of them
    with progress.bar(n, "ADMM (columns)", "col") as bar:
        for a, b in progress.slices(n, n_pieces=50, at_least=256):
            _kernels().admm_columns(D, Xs[a:b], nb[a:b], thr[a:b], float(ridge), float(rho), float(eps_abs),
                                    float(eps_rel), int(max_iter), bool(adaptive), float(relax), out[a:b], its[a:b],
                                    conv[a:b])
            bar.update(b - a)
    return out, its, conv


def _excluded_mask(dictionary):
    """Binary CSR (N, n): atom a is excluded for sample i (a is i or in A(i))."""
    return dictionary.owners_matrix().astype(bool)


def _ssc_full(Xs, dictionary, lam, rho, eps_abs, eps_rel, max_iter, adaptive=True, relax=RELAX):
    """Matrix-form SSC ADMM on the whole dictionary, shared factorisation (paper scale only)."""
    from scipy.linalg import cho_factor, cho_solve
    D = dictionary.atoms
    N, n = D.shape[0], dictionary.n
    G = D @ D.T
    fac = cho_factor(G + rho * np.eye(N), check_finite=False)
    B = D @ Xs.T
    mask = _excluded_mask(dictionary).toarray()
    Z = np.zeros((N, n))
    U = np.zeros((N, n))
    sq = np.sqrt(N * n)
    conv = False
    it = 0
    while it < max_iter:
        it += 1
        Cm = cho_solve(fac, B + rho * Z - U, check_finite=False)
        Zp = Z
        Ch = relax * Cm + (1.0 - relax) * Zp       # over-relaxation, as the per-column kernel
        V = Ch + U / rho
        Z = np.sign(V) * np.maximum(np.abs(V) - lam / rho, 0.0)
        Z[mask] = 0.0
        U = U + rho * (Ch - Z)
        r = np.linalg.norm(Cm - Z)
        s = rho * np.linalg.norm(Z - Zp)
        if r <= sq * eps_abs + eps_rel * max(np.linalg.norm(Cm), np.linalg.norm(Z)) and \
                s <= sq * eps_abs + eps_rel * np.linalg.norm(U):
            conv = True
            break
        if adaptive and it % 10 == 0 and (r > 10 * s or s > 10 * r):
            # residual balancing (Boyd 3.4.1); U is the unscaled dual, so only the factor changes
            rho = rho * 2.0 if r > 10 * s else rho * 0.5
            fac = cho_factor(G + rho * np.eye(N), check_finite=False)
    C = sp.csc_matrix(Z)
    C.eliminate_zeros()
    return C, np.full(n, it, dtype=np.int64), np.full(n, conv)


def _lsr_full(Xs, dictionary, lam):
    """Exact LSR on the whole dictionary with c_E = 0 (E = i and A(i)).

    With P = (G + lam I)^{-1}: c = P b - P[:, E] P[E, E]^{-1} (P b)[E]
    (Lagrange multipliers of the equality constraints); for E = {i} and
    D = X this is Lu et al.'s ``c = e_i - P e_i / P_ii`` with the diagonal 0.
    """
    D = dictionary.atoms
    N, n = D.shape[0], dictionary.n
    P = np.linalg.inv(D @ D.T + lam * np.eye(N))
    PB = P @ (D @ Xs.T)
    mask = _excluded_mask(dictionary).tocsc()
    Cd = PB.copy()
    for i in range(n):
        E = mask.indices[mask.indptr[i]:mask.indptr[i + 1]]
        eta = np.linalg.solve(P[np.ix_(E, E)], PB[E, i])
        Cd[:, i] -= P[:, E] @ eta
        Cd[E, i] = 0.0
    C = sp.csc_matrix(Cd)
    C.eliminate_zeros()
    return C
