"""Euclidean BBS restricted to the support E of a sparse kernel (O(nnz) per pass).

The problem is ``min ||G - K||_F^2`` over symmetric G supported on E (the stored
pattern of K; entries outside E stay 0) with ``G1 = 1`` and ``G >= 0``.

Projection onto the affine set within the support.  The nearest symmetric,
E-supported A' with ``A'1 = 1`` to a symmetric E-supported A is **not** the
dense formula of Alg. 1 applied to the stored entries (that would move mass
onto the missing entries and then drop it).  Its KKT conditions give
``A'_ij = A_ij + mu_i + mu_j`` on E, and the row sums then require

    (D + A_E) mu = 1 - A 1,

with ``D = diag(|E_i|)`` and ``A_E`` the 0/1 adjacency of E (a stored diagonal
entry counts in both, i.e. twice): a linear system with the *signless
Laplacian* of the support graph, solved here by Jacobi-preconditioned CG,
warm-started from the previous iteration's solution when that is the better
start.  For the complete pattern ``D + A_E = nI + 11^T`` and the solution is
the closed form of Alg. 1 (``mu_i + mu_j = (1 + S/n)/n - (r_i + r_j)/n``).
The system is singular exactly on bipartite components of E, where it is
solvable only if such a component admits unit row sums at all.

Dykstra and the dual Newton method carry over with ``K + mu 1^T + 1 mu^T``
read on E only (same derivations as the dense module).

Self-loops (:func:`self_loop_support`).  In a dense kernel the diagonal is one
entry of n in its row; in a kNN kernel it is one of about k, and the largest
(``K_ii = 1``, the distance of a point to itself being 0).  The restricted
problem then lets a point far from its neighbours put its whole unit mass on
``G_ii``: with the self-loop stored, ``G_ii = 1 + 2 mu_i`` needs only
``mu_i ~ 0`` while the edges to its (well-connected, strongly negative ``mu_j``)
neighbours clip to 0, and the point becomes an isolated component.  Each such
row adds an eigenvalue 1 at the top of P's spectrum.  Without the diagonal in
the support, a row can only reach its unit sum through its edges, so ``mu_i``
rises until some of them are positive (a row can never be empty).
"""
from __future__ import annotations

import warnings

import numpy as np

from bigclust.normalize._common import (PARALLEL_MIN_NNZ, NormalizeConvergenceWarning, NormalizeInfo, csr_kernels, like_sparse,
                      norm2, row_ids, warn_not_converged)
from bigclust.normalize._newton import newton
from bigclust._util import progress
from bigclust._util.errors import DataError


def self_loop_support(K, mode):
    """K with its stored diagonal kept, removed from the support, or capped (canonical CSR in, CSR out).

    ``"keep"``: K unchanged.  ``"drop"``: the diagonal is not part of the
    support (``G_ii = 0``), except in a row whose only stored entry is its
    diagonal (an isolated point: its own unit mass is the only feasible row).
    ``"cap"``: ``K_ii = min(K_ii, max_{j != i} K_ij)`` -- a point is no more
    similar to itself than to its nearest neighbour.  Off-diagonal entries are
    never touched.
    """
    if mode == "keep":
        return K
    rows = row_ids(K.indptr)
    on_diag = K.indices == rows
    if not on_diag.any():
        return K
    off = np.bincount(rows[~on_diag], minlength=K.shape[0])
    if mode == "zero":
        data = K.data.copy()
        data[on_diag] = 0.0
        return type(K)((data, K.indices, K.indptr), shape=K.shape)
    if mode == "cap":
        data = K.data.copy()
        top = np.full(K.shape[0], -np.inf)
        np.maximum.at(top, rows[~on_diag], data[~on_diag])
        d = np.flatnonzero(on_diag)
        lim = top[rows[d]]
        data[d] = np.where(np.isfinite(lim), np.minimum(data[d], lim), data[d])
        return type(K)((data, K.indices, K.indptr), shape=K.shape)
    keep = ~on_diag | (off[rows] == 0)
    indptr = np.zeros(K.shape[0] + 1, dtype=K.indptr.dtype)
    np.cumsum(np.bincount(rows[keep], minlength=K.shape[0]), out=indptr[1:])
    return type(K)((K.data[keep], K.indices[keep], indptr), shape=K.shape)


class Support:
    """The support graph E of a canonical CSR K and its signless Laplacian solver."""

    def __init__(self, K):
        self.K = K
        self.n = K.shape[0]
        self.indptr, self.indices = K.indptr, K.indices
        empty = np.flatnonzero(np.diff(self.indptr) == 0)
        if empty.size:
            raise DataError(f"K has an empty row (row {empty[0]}): no bi-stochastic matrix is supported "
                            "on K's sparsity pattern")
        rows = row_ids(self.indptr)
        self.rows = rows
        self.diag_stored = np.zeros(self.n, dtype=bool)
        self.diag_stored[rows[self.indices == rows]] = True
        self.kdiag = np.asarray(K.diagonal(), dtype=np.float64)
        self.diag = np.diff(self.indptr) + self.diag_stored
        self.parallel = self.indices.shape[0] >= PARALLEL_MIN_NNZ
        self.n_cg = 0
        self._warned = False
        self._none = np.empty(0)  # mu is not read for the plain pattern

    def cg(self, rhs, x, mu, active, shift, dinv, rtol, maxiter):
        """Compiled CG on ``(L + shift I) x = rhs``; ``x`` is the start and the result."""
        it, ok = csr_kernels().cg_csr(self.indptr, self.indices, self.K.data, mu, active, shift, rhs, x, dinv,
                                      rtol, maxiter, self.parallel)
        self.n_cg += it
        return ok

    def solve(self, b, x_prev=None):
        """``(D + A_E) x = b`` (the support projection) by CG from the better of 0 and ``x_prev``."""
        x = np.zeros(self.n)
        if x_prev is not None:
            out = np.empty(self.n)
            csr_kernels().csr_jvp_serial(self.indptr, self.indices, self.K.data, self._none, False, x_prev, out)
            if norm2(b - out) < norm2(b):
                x = x_prev.copy()
        ok = self.cg(b, x, self._none, False, 0.0, 1.0 / self.diag, 1e-12, max(100, min(10 * self.n, 5000)))
        if not ok and not self._warned:
            self._warned = True
            warnings.warn("sparse BBS: the support projection's CG did not reach its tolerance (the support "
                          "graph may have a bipartite component that admits no unit row sums)",
                          NormalizeConvergenceWarning, stacklevel=4)
        return x

    def evaluate(self, data, mu):
        n = self.n
        r, sq, cnt = np.empty(n), np.empty(n), np.empty(n, dtype=np.int64)
        csr_kernels().csr_dual_eval(data, self.indices, self.indptr, mu, r, sq, cnt)
        return r, sq, cnt

    def class_sums(self, data, codes):
        r, rc = np.empty(self.n), np.empty(self.n)
        csr_kernels().csr_class_sums(data, self.indices, self.indptr, codes, 0, r, rc)
        return r, rc

    def dual_class_sums(self, mu, codes):
        out = np.empty(self.K.data.shape[0])
        csr_kernels().csr_dual_form(self.K.data, self.indices, self.indptr, mu, out, np.empty(self.n))
        return self.class_sums(out, codes)


def alternating(template, K, dt, n_iter, tol, hist):
    """Alg. 1 within the support: support projection (CG), then clip, fused."""
    sup = Support(K)
    data = K.data.astype(dt, copy=True)
    r = np.bincount(sup.rows, weights=data, minlength=sup.n)
    mu = None
    t, err, converged = 0, float(np.abs(r - 1.0).max()), False
    for t in progress.iterate(range(1, n_iter + 1), "sparse BBS (alternating)"):
        mu = sup.solve(1.0 - r, mu)
        csr_kernels().csr_dual_form(data, sup.indices, sup.indptr, mu, data, r)  # in place: Alg. 1 on E
        err = float(np.abs(r - 1.0).max())
        if hist.due(t):
            hist.add(t, r, sup.class_sums(data, hist.codes)[1] if hist.wants_classes else None)
        if tol is not None and err <= tol:
            converged = True
            break
    if tol is not None and not converged:
        warn_not_converged("sparse BBS (alternating)", t, err, tol)
    G = like_sparse(template, data, sup.indices.copy(), sup.indptr.copy(), K.shape)
    return G, NormalizeInfo(n_iter=t, converged=converged or tol is None, row_err=err, history=hist.rows,
                            method="bbs/alternating", n_inner=sup.n_cg)


def dykstra(template, K, dt, n_iter, tol, hist):
    """Dykstra in the ``K + m 1^T + 1 m^T`` form, each step a support projection."""
    sup = Support(K)
    m = np.zeros(sup.n)
    r = sup.evaluate(K.data, m)[0]
    delta = None
    t, err, converged = 0, float(np.abs(r - 1.0).max()), False
    if tol is not None and err <= tol:
        converged = True
    else:
        for t in progress.iterate(range(1, n_iter + 1), "sparse BBS (dykstra)"):
            delta = sup.solve(1.0 - r, delta)
            m += delta
            r = sup.evaluate(K.data, m)[0]
            err = float(np.abs(r - 1.0).max())
            if hist.due(t):
                hist.add(t, r, sup.dual_class_sums(m, hist.codes)[1] if hist.wants_classes else None)
            if tol is not None and err <= tol:
                converged = True
                break
    if tol is not None and not converged:
        warn_not_converged("sparse BBS (dykstra)", t, err, tol)
    G, info = _finish(template, sup, m, dt, "bbs/dykstra")
    info.n_iter, info.converged, info.history = t, converged or tol is None, hist.rows
    return G, info


def dual(template, K, dt, n_iter, tol, hist, mu0=None):
    """Semismooth Newton on the dual with the active set read from K's stored entries."""
    sup = Support(K)
    if mu0 is None:  # the support projection of K itself
        mu0 = sup.solve(1.0 - np.bincount(sup.rows, weights=K.data, minlength=sup.n))

    def jacobian(mu, cnt):
        diag = cnt + (sup.diag_stored & (sup.kdiag + 2.0 * mu > 0.0))

        def solve(rhs, eps, rtol, maxiter):
            x = np.zeros(sup.n)
            n0 = sup.n_cg
            sup.cg(rhs, x, mu, True, eps, 1.0 / (diag + eps), rtol, maxiter)
            return x, sup.n_cg - n0
        return solve

    mu, k, converged, err, n_cg = newton(lambda mu: sup.evaluate(K.data, mu), jacobian, mu0, tol, n_iter,
                                         hist, lambda mu: sup.dual_class_sums(mu, hist.codes))
    if not converged:
        warn_not_converged("sparse BBS (dual Newton)", k, err, tol)
    G, info = _finish(template, sup, mu, dt, "bbs/dual")
    info.n_iter, info.converged, info.history, info.n_inner = k, converged, hist.rows, sup.n_cg
    return G, info


def _finish(template, sup, mu, dt, method):
    K = sup.K
    data = np.empty(K.data.shape[0], dtype=dt)
    r = np.empty(sup.n)
    csr_kernels().csr_dual_form(K.data, sup.indices, sup.indptr, mu, data, r)
    g = data.astype(np.float64)
    lam = g - (K.data + (mu[sup.rows] + mu[sup.indices]))
    err = float(np.abs(r - 1.0).max())
    kkt = {"primal_row_err": err, "primal_min": float(g.min(initial=0.0)),
           "dual_feasibility": float(max(0.0, -lam.min(initial=0.0))),
           "complementarity": float(np.abs(lam * g).max(initial=0.0))}
    G = like_sparse(template, data, sup.indices.copy(), sup.indptr.copy(), K.shape)
    return G, NormalizeInfo(n_iter=0, converged=True, row_err=err, kkt=kkt, method=method, mu=mu,
                            n_inner=sup.n_cg)
