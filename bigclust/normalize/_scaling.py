"""Diagonal scalings: Sinkhorn-Knopp (= BBS with the KL divergence), Ncut, RA.

Sinkhorn-Knopp (paper 000, section I.B and II.B).  The KL-nearest symmetric
bi-stochastic matrix is ``P = diag(d) K diag(d)`` (Eq. 31).  Two iterations:

* ``"symmetric"`` (default): ``d <- sqrt(d / (K d))``, the geometric mean of
  ``d`` and the row normaliser ``1 / (K d)``; its fixed points satisfy
  ``d_i (K d)_i = 1``.  One read of K per iteration, and the row sums of the
  current P come free with the product: ``P 1 = d * (K d)``.
* ``"alternating"``: the paper's procedure, one normalisation per iteration,
  rows first (as in its 3 x 3 example), then columns, ...:
  ``P = diag(u) K diag(v)`` with ``u <- 1 / (K v)`` then ``v <- 1 / (K u)``.
  The iterate is symmetric only in the limit (``u`` and ``v`` agree up to a
  constant factor there).

Iterated Ncut (Zass and Shashua).  ``K_{t+1} = D_t^{-1/2} K_t D_t^{-1/2}`` with
``D_t = diag(K_t 1)``.  Writing ``K_t = diag(d) K diag(d)`` gives
``d <- d / sqrt(d * (K d)) = sqrt(d / (K d))``: *the same update* as the
symmetric Sinkhorn iteration, started from ``d = 1``.  One Ncut step is
therefore one symmetric Sinkhorn step, and iterated Ncut is symmetric SK.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util import progress
from bigclust.normalize._common import (History, NormalizeInfo, check_int, check_tol, csr_kernels, kernels, labels,
                                        like_sparse, warn_not_converged)
from bigclust.normalize.checks import check_dense, check_sparse
from bigclust._util.errors import DataError, UserError


class _DenseOp:
    def __init__(self, K):
        self.K, self.n = K, K.shape[0]

    def matvec(self, d):
        out = np.empty(self.n)
        kernels().sk_matvec_block(self.K, d, out)
        return out

    def class_matvec(self, d, codes):
        out, outc = np.empty(self.n), np.empty(self.n)
        kernels().sk_matvec_class_block(self.K, d, codes, 0, out, outc)
        return out, outc

    def form(self, u, v):
        P = np.empty_like(self.K)
        r = np.empty(self.n)
        kernels().sk_form(self.K, u, v, 0, P, r)
        return P, r


class _SparseOp:
    def __init__(self, template, K):
        self.template, self.K, self.n = template, K, K.shape[0]

    def matvec(self, d):
        K = self.K
        if K.dtype != np.float32:
            return np.asarray(K @ d, dtype=np.float64)
        # scipy multiplies a float32 K by a float64 d through a float64 copy of K's values (0.9 GB a product
        # at 8.1M rows); this kernel widens each value as it reads it: the same sums, the same bits
        from bigclust.algo.spectral import csr_product
        return csr_product(K, d)

    def class_matvec(self, d, codes):
        K = self.K
        out, outc = np.empty(self.n), np.empty(self.n)
        csr_kernels().csr_class_sums(K.data * d[K.indices], K.indices, K.indptr, codes, 0, out, outc)
        return out, outc

    def form(self, u, v):
        K = self.K
        data, r = np.empty_like(K.data), np.empty(self.n)
        csr_kernels().csr_scale_form(K.data, K.indices, K.indptr, u, v, data, r)
        return like_sparse(self.template, data, K.indices.copy(), K.indptr.copy(), K.shape), r


def _positive(w, t, what):
    if not np.all(w > 0) or not np.all(np.isfinite(w)):
        i = int(np.flatnonzero(~(w > 0) | ~np.isfinite(w))[0])
        raise DataError(f"{what} broke down at iteration {t} (K d = {w[i]:.3g} in row {i}): "
                        "K has no total support")


def _symmetric(op, n_iter, tol, hist, what):
    with progress.bar(n_iter, what) as bar:
        return _symmetric_loop(op, n_iter, tol, hist, what, bar)


def _symmetric_loop(op, n_iter, tol, hist, what, bar):
    d = np.ones(op.n)
    Kd, Kdc = op.matvec(d), None
    t, converged = 0, False
    while True:
        r = d * Kd
        err = float(np.abs(r - 1.0).max())
        if hist.due(t):
            hist.add(t, r, d * Kdc if Kdc is not None else None)
        if tol is not None and err <= tol:
            converged = True
            break
        if t == n_iter:
            break
        _positive(Kd, t, what)
        d = np.sqrt(d / Kd)
        t += 1
        bar.update(1)
        if hist.due(t) and hist.wants_classes:
            Kd, Kdc = op.class_matvec(d, hist.codes)
        else:
            Kd, Kdc = op.matvec(d), None
    P, r = op.form(d, d)
    return P, d, t, converged, float(np.abs(r - 1.0).max())


def _alternating(op, n_iter, tol, hist, what):
    with progress.bar(n_iter, what) as bar:
        return _alternating_loop(op, n_iter, tol, hist, what, bar)


def _alternating_loop(op, n_iter, tol, hist, what, bar):
    u, v = np.ones(op.n), np.ones(op.n)
    w = op.matvec(v)  # invariant: w = K v for even t (rows to fix next), K u for odd t
    t, converged = 0, False
    while True:
        err = float(np.abs((u if t % 2 == 0 else v) * w - 1.0).max())
        if hist.due(t):
            if hist.wants_classes:
                rs, rc = op.class_matvec(v, hist.codes)
                hist.add(t, u * rs, u * rc)
            else:
                hist.add(t, u * (w if t % 2 == 0 else op.matvec(v)))
        if tol is not None and err <= tol:
            converged = True
            break
        if t == n_iter:
            break
        _positive(w, t, what)
        if t % 2 == 0:
            u = 1.0 / w  # row normalisation
        else:
            v = 1.0 / w  # column normalisation (K symmetric: K^T u = K u)
        t += 1
        bar.update(1)
        w = op.matvec(u if t % 2 == 1 else v)
    P, _ = op.form(u, v)
    return P, None, t, converged, err


def _prepare(K, what, nonneg, y, positive_rows):
    if sp.issparse(K):
        # K is only read (products and the final form), so it may share the caller's arrays
        Kc, _ = check_sparse(K, what, nonneg=nonneg, positive_rows=positive_rows, copy=False)
        return _SparseOp(K, Kc), labels(y, Kc.shape[0])
    Kc, _, _ = check_dense(K, what, nonneg=nonneg, positive_rows=positive_rows)
    return _DenseOp(Kc), labels(y, Kc.shape[0])


def sinkhorn(K, n_iter=1000, tol=None, *, y=None, record_every=0, return_info=False, variant="symmetric"):
    """Sinkhorn-Knopp scaling: the KL-nearest symmetric bi-stochastic ``diag(d) K diag(d)``.

    Parameters
    ----------
    K : ndarray or scipy.sparse matrix, shape (n, n)
        Symmetric, finite, ``K >= 0`` with positive row sums (and total support
        for the scaling to exist).  Sparse K is scaled on its stored pattern.
    n_iter : int
        Maximum number of iterations (passes over K; one normalisation each
        for ``variant="alternating"``).
    tol : float or None
        Stop when the max row-sum error of the current P is ``<= tol``; None
        runs all ``n_iter`` iterations.
    y : array-like, optional
        Class labels for the MC history.
    record_every : int
        Record ``(iteration, MB, MC)`` every that many iterations (0: never).
    return_info : bool
        Also return a :class:`NormalizeInfo` (``info.mu`` holds ``d``).
    variant : {"symmetric", "alternating"}
        ``d <- sqrt(d / (K d))`` or the paper's row/column normalisations.

    Returns
    -------
    P : ndarray or scipy.sparse matrix
        Same kind as K (float32 stays float32).
    info : NormalizeInfo
        Only with ``return_info=True``.

    Examples
    --------
    >>> import numpy as np
    >>> from bigclust.normalize import sinkhorn
    >>> K = np.array([[1.0, 0.8, 0.1], [0.8, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> P = sinkhorn(K, tol=1e-12)
    >>> print(np.round(P.sum(axis=1), 6))
    [1. 1. 1.]
    >>> print(np.round(P, 3))
    [[0.532 0.402 0.066]
     [0.402 0.474 0.124]
     [0.066 0.124 0.81 ]]
    """
    if variant not in ("symmetric", "alternating"):
        raise UserError(f"sinkhorn variant must be 'symmetric' or 'alternating', got {variant!r}")
    n_iter, tol = check_int("n_iter", n_iter, 0), check_tol(tol)
    op, codes = _prepare(K, "Sinkhorn scaling", True, y, "Sinkhorn scaling does not exist")
    hist = History(codes, record_every)
    run = _symmetric if variant == "symmetric" else _alternating
    P, d, t, converged, err = run(op, n_iter, tol, hist, "Sinkhorn scaling")
    if tol is not None and not converged:
        warn_not_converged(f"Sinkhorn ({variant})", t, err, tol)
    info = NormalizeInfo(n_iter=t, converged=converged or tol is None, row_err=err, history=hist.rows,
                         method=f"sk/{variant}", mu=d)
    return (P, info) if return_info else P


def ncut(K, n_iter=1, *, y=None, record_every=0, return_info=False):
    """Normalised-cut scaling ``D^{-1/2} K D^{-1/2}``, ``D = diag(K 1)``, applied ``n_iter`` times.

    ``n_iter > 1`` is the iterated Ncut of Zass and Shashua, which tends to a
    bi-stochastic matrix; it is exactly the symmetric Sinkhorn iteration
    (module docstring), so it shares that code path.

    Parameters
    ----------
    K : ndarray or scipy.sparse matrix, shape (n, n)
        Symmetric and finite with positive row sums (and ``K >= 0`` when ``n_iter > 1``).
    n_iter : int, default 1
        Number of times the scaling is applied.
    y : array-like, optional
        Class labels for the MC history.
    record_every : int
        Record ``(iteration, MB, MC)`` every that many iterations (0: never).
    return_info : bool
        Also return a :class:`NormalizeInfo` (``info.mu`` holds the scaling).

    Returns
    -------
    P : ndarray or scipy.sparse matrix
        Same kind as K.
    info : NormalizeInfo
        Only with ``return_info=True``.

    Examples
    --------
    >>> import numpy as np
    >>> from bigclust.normalize import ncut
    >>> K = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 2.0], [0.0, 2.0, 2.0]])
    >>> print(np.round(ncut(K), 3))
    [[0.5   0.354 0.   ]
     [0.354 0.25  0.5  ]
     [0.    0.5   0.5  ]]
    """
    n_iter = check_int("n_iter", n_iter, 1)
    op, codes = _prepare(K, "Ncut", n_iter > 1, y, "Ncut's D^{-1/2} needs positive row sums")
    hist = History(codes, record_every)
    P, d, t, _, err = _symmetric(op, n_iter, None, hist, "iterated Ncut")
    info = NormalizeInfo(n_iter=t, converged=True, row_err=err, history=hist.rows, method="ncut", mu=d)
    return (P, info) if return_info else P


def ra(K, *, y=None, record_every=0, return_info=False):
    """Ratio association: K itself, unnormalised (for uniform dispatch).

    Parameters
    ----------
    K : ndarray or scipy.sparse matrix, shape (n, n)
        The kernel, returned as it is.
    y, record_every : optional
        Accepted for the uniform call signature and ignored (there are no iterations).
    return_info : bool
        Also return a :class:`NormalizeInfo`; its ``row_err`` is K's own row-sum error.

    Returns
    -------
    K : ndarray or scipy.sparse matrix
        K itself.
    info : NormalizeInfo
        Only with ``return_info=True``.
    """
    if not return_info:
        return K
    r = np.asarray(K.sum(axis=1), dtype=np.float64).ravel()
    info = NormalizeInfo(n_iter=0, converged=True, row_err=float(np.abs(r - 1.0).max()), method="ra")
    return K, info


def rc(K, *, y=None, record_every=0, return_info=False):
    """Ratio cut (paper 001's RC): ``P = K - D``, ``D = diag(K 1)``.

    The *largest* eigenvectors of P are the *smallest* of the unnormalised Laplacian ``L = D - K``, so the
    spectral step is the same as for every other normalisation.

    Parameters
    ----------
    K : ndarray or scipy.sparse matrix, shape (n, n)
        The kernel, with finite row sums.
    y, record_every : optional
        As in :func:`ra`: ignored.
    return_info : bool
        Also return a :class:`NormalizeInfo`.

    Returns
    -------
    P : ndarray or scipy.sparse.csr_matrix
        Same kind as K (dense or CSR), float64.
    info : NormalizeInfo
        Only with ``return_info=True``.
    """
    d = np.asarray(K.sum(axis=1), dtype=np.float64).ravel()
    if not np.all(np.isfinite(d)):
        raise DataError("K has non-finite row sums; RC needs a finite K")
    if sp.issparse(K):
        P = (sp.csr_matrix(K, dtype=np.float64) - sp.diags(d)).tocsr()
    else:
        P = np.array(K, dtype=np.float64)
        P[np.diag_indices_from(P)] -= d
    if not return_info:
        return P
    return P, NormalizeInfo(n_iter=0, converged=True, row_err=float(np.abs(d - 1.0).max()), method="rc")
