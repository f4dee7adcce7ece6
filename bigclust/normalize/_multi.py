"""Multiple BBS (paper 000, section V): one bi-stochastic G from m kernels.

Problem (Eq. 40 with the paper's ``Omega(alpha) = ||alpha||^2``, Eq. 44)::

    min_{G, alpha}  sum_i alpha_i D(G, K_i) + lam ||alpha||^2
    s.t. G >= 0, G = G^T, G1 = 1,  alpha >= 0, 1^T alpha = 1,

with the Euclidean Bregman divergence ``D(G, K) = 1/2 ||G - K||_F^2``
(``phi(x) = x^2 / 2``, Eq. 9).  Block coordinate descent:

* G-step (Eqs. 41-43): since ``sum alpha_i = 1``,
  ``sum_i alpha_i D(G, K_i) = D(G, sum_i alpha_i K_i) + const``, so
  ``G = BBS(sum_i alpha_i K_i)`` (an exact solver, so that the objective
  cannot increase).
* alpha-step (Eqs. 44-46): with ``g_i = D(G, K_i)``,
  ``alpha^T g + lam ||alpha||^2 = lam ||alpha + g / (2 lam)||^2 - ||g||^2 / (4 lam)``,
  so ``alpha = Proj_simplex(-g / (2 lam))`` (Euclidean projection, Duchi et
  al. 2008).  The paper's Eq. 46 is garbled in our copy; this is the
  completed square.  Note the 1/2 in D: with ``g_i = ||G - K_i||^2`` instead,
  the same alpha results from ``2 lam``.

Each outer iteration is exact in its block, so the objective is
non-increasing.  Starts from uniform alpha.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from bigclust.normalize import _bbs_dense, _bbs_sparse
from bigclust._util import progress
from bigclust.normalize._common import History, NormalizeInfo, check_int, check_tol, kernels, like_sparse
from bigclust.normalize.checks import check_dense, check_sparse
from bigclust._util.errors import DataError, UserError


def project_simplex(v):
    """Euclidean projection of ``v`` onto ``{a >= 0, sum(a) = 1}`` (Duchi et al., sort-based).

    With ``u`` sorted decreasingly and ``rho`` the largest ``j`` with
    ``u_j - (sum_{k<=j} u_k - 1) / j > 0``, the projection is
    ``max(v - theta, 0)``, ``theta = (sum_{k<=rho} u_k - 1) / rho``.

    Parameters
    ----------
    v : array-like
        A non-empty finite vector.

    Returns
    -------
    ndarray of float64
        The projection, flattened.
    """
    v = np.asarray(v, dtype=np.float64).ravel()
    if v.size == 0 or not np.all(np.isfinite(v)):
        raise DataError("project_simplex needs a non-empty finite vector")
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    j = np.arange(1, v.size + 1)
    rho = int(np.flatnonzero(u - css / j > 0)[-1]) + 1
    return np.maximum(v - css[rho - 1] / rho, 0.0)


def alpha_step(g, alpha, lam, objective):
    """The alpha-step ``Proj_simplex(-g / (2 lam))``; appends the objective, returns ``(alpha, max change)``."""
    new = project_simplex(-g / (2.0 * lam))
    objective.append(float(new @ g + lam * new @ new))
    return new, float(np.abs(new - alpha).max())


class _DenseBlocks:
    def __init__(self, Ks):
        checked = [check_dense(K, "MBBS") for K in Ks]
        self.Ks = [np.asarray(K, dtype=np.float64) for K, _, _ in checked]
        self.n = self.Ks[0].shape[0]
        self.buf = np.empty((self.n, self.n))

    def combine(self, alpha):
        np.multiply(self.Ks[0], alpha[0], out=self.buf)
        for a, K in zip(alpha[1:], self.Ks[1:]):
            self.buf += a * K
        return self.buf

    def solve(self, Kbar, solver, n_iter, mu0):
        hist = History(None, 0)
        if solver == "dual":
            return _bbs_dense.dual(Kbar, np.float64, n_iter, 1e-10, hist, mu0=mu0)
        if solver == "dykstra":
            return _bbs_dense.dykstra(Kbar, np.float64, n_iter, 1e-10, hist, m0=mu0)
        return _bbs_dense.alternating(Kbar, np.float64, 0.0, n_iter, None, hist)

    def divergences(self, G):
        out = np.empty(self.n)
        g = []
        for K in self.Ks:
            kernels().half_sqdist_rows(G, K, out)
            g.append(out.sum())
        return np.array(g)


class _SparseBlocks:
    """Kernels mapped onto the union of their patterns, so the support stays fixed."""

    def __init__(self, Ks):
        self.template = Ks[0]
        checked = [check_sparse(K, "MBBS")[0] for K in Ks]
        n = checked[0].shape[0]
        keys = [np.repeat(np.arange(n, dtype=np.int64), np.diff(K.indptr)) * n + K.indices for K in checked]
        union = np.unique(np.concatenate(keys))
        self.indices = (union % n).astype(checked[0].indices.dtype)
        self.indptr = np.searchsorted(union, np.arange(n + 1, dtype=np.int64) * n).astype(checked[0].indptr.dtype)
        self.vals = []
        for K, key in zip(checked, keys):
            v = np.zeros(union.size)
            v[np.searchsorted(union, key)] = K.data
            self.vals.append(v)
        self.shape = (n, n)

    def combine(self, alpha):
        data = sum(a * v for a, v in zip(alpha, self.vals))
        return sp.csr_matrix((data, self.indices, self.indptr), shape=self.shape)

    def solve(self, Kbar, solver, n_iter, mu0):
        hist = History(None, 0)
        if solver == "dual":
            return _bbs_sparse.dual(Kbar, Kbar, np.float64, n_iter, 1e-10, hist, mu0=mu0)
        if solver == "dykstra":
            return _bbs_sparse.dykstra(Kbar, Kbar, np.float64, n_iter, 1e-10, hist)
        return _bbs_sparse.alternating(Kbar, Kbar, np.float64, n_iter, None, hist)

    def divergences(self, G):
        return np.array([0.5 * np.sum((G.data - v) ** 2) for v in self.vals])


def mbbs(Ks, lam=1.0, n_outer=20, solver="dual", n_iter=100, tol=1e-6, return_info=False):
    """Multiple BBS: a bi-stochastic G from m symmetric kernels with learnt weights.

    Block coordinate descent on ``sum_i alpha_i D(G, K_i) + lam ||alpha||^2``
    with ``D(G, K) = 1/2 ||G - K||_F^2`` (module docstring): the G-step is the
    Euclidean BBS of ``sum_i alpha_i K_i``, the alpha-step
    ``alpha = Proj_simplex(-g / (2 lam))`` with ``g_i = D(G, K_i)``.

    Parameters
    ----------
    Ks : sequence of ndarray or scipy.sparse matrices, shape (n, n) each
        Symmetric finite kernels, all dense or all sparse (then G lives on the
        union of their patterns).
    lam : float > 0
        Weight of ``||alpha||^2``; large ``lam`` keeps alpha near uniform, small
        ``lam`` puts all weight on the kernel nearest G.  ``g`` scales like
        ``n`` to ``n^2`` times the squared kernel values: choose ``lam`` on that scale.
    n_outer : int
        Maximum number of outer (G, alpha) iterations.
    solver : {"dual", "dykstra", "alternating"}
        BBS solver of the G-step.  Only the exact solvers (dual, dykstra)
        guarantee a non-increasing objective; dual and dykstra are warm-started
        from the previous outer iteration's dual variable.
    n_iter : int
        Iteration budget of each G-step (Newton steps for dual, passes otherwise).
    tol : float
        Stop when ``max |alpha_new - alpha| < tol``.
    return_info : bool
        Also return a :class:`NormalizeInfo` with ``alpha``, ``alpha_history``
        (starting with the uniform weights) and ``objective_history``.

    Returns
    -------
    G : ndarray or sparse CSR
        The bi-stochastic matrix.
    info : NormalizeInfo
        Only with ``return_info=True`` (``info.alpha`` holds the kernel weights).
    """
    if isinstance(Ks, (np.ndarray, sp.spmatrix, sp.sparray)) or not isinstance(Ks, Sequence) or not Ks:
        raise UserError("mbbs needs a non-empty list of kernel matrices")
    if isinstance(lam, bool) or not isinstance(lam, (int, float, np.floating)) or not lam > 0:
        raise UserError(f"mbbs lam must be a positive number, got {lam!r}")
    if solver not in ("dual", "dykstra", "alternating"):
        raise UserError(f"unknown BBS solver {solver!r} (choose from alternating, dykstra, dual)")
    n_outer, n_iter, tol = check_int("n_outer", n_outer, 1), check_int("n_iter", n_iter, 1), check_tol(tol)
    kinds = {sp.issparse(K) for K in Ks}
    if len(kinds) != 1:
        raise UserError("mbbs kernels must be all dense or all sparse")
    shapes = {tuple(K.shape) for K in Ks}
    if len(shapes) != 1:
        raise DataError(f"mbbs kernels have different shapes: {sorted(shapes)}")
    blocks = _SparseBlocks(Ks) if kinds == {True} else _DenseBlocks(Ks)
    m = len(Ks)
    alpha = np.full(m, 1.0 / m)
    alphas, objective = [alpha.copy()], []
    mu, G, ginfo, converged, t = None, None, None, False, 0
    for t in progress.iterate(range(1, n_outer + 1), "MBBS (outer)"):
        G, ginfo = blocks.solve(blocks.combine(alpha), solver, n_iter, mu)
        mu = ginfo.mu
        alpha, change = alpha_step(blocks.divergences(G), alpha, lam, objective)
        alphas.append(alpha.copy())
        if tol is not None and change < tol:
            converged = True
            break
    if sp.issparse(G):
        G = like_sparse(blocks.template, G.data, G.indices, G.indptr, G.shape)
    info = NormalizeInfo(n_iter=t, converged=converged or tol is None, row_err=ginfo.row_err, kkt=ginfo.kkt,
                         method=f"mbbs/{solver}", mu=mu, alpha=alpha, alpha_history=alphas,
                         objective_history=objective, n_inner=ginfo.n_inner)
    return (G, info) if return_info else G
