"""Euclidean BBS on a dense kernel: alternating projection, Dykstra, dual Newton.

All three work from validated, C-contiguous, symmetric K (``_common.check_dense``)
and cost one fused pass over an n x n array per iteration.

Alternating projection (paper 000, Alg. 1).  For symmetric G with ``r = G1``
and ``S = 1^T G 1`` the projection onto ``{G = G^T, G1 = 1}`` is
``G + (1 + S/n)/n 11^T - (r 1^T + 1 r^T)/n`` (Eq. 20), the projection onto
``{G >= 0}`` is ``max(G, 0)``; :func:`bbs_alt_pass` does both and the new row
sums in one sweep.  It reaches a feasible point, not the nearest one.

Dykstra.  Dykstra's method needs no correction for the affine set (its
correction lies in the set's normal space and vanishes under the next
projection) and keeps ``Q = min(Y + Q, 0)`` for the cone.  Writing
``Z = Y + Q`` one sees ``X = max(Z, 0)``, ``Q = min(Z, 0)`` and
``Z <- Z + u 1^T + 1 u^T`` with ``u = c/2 - r/n``, ``c = (1 + S/n)/n`` and
``r`` the row sums of ``X = max(Z, 0)``.  Starting from ``Z = K`` (the cone
step first: Dykstra's limit does not depend on the order of the two sets)
every iterate is therefore ``Z = K + m 1^T + 1 m^T`` with ``m`` the sum of the
``u``'s, so Dykstra runs on the vector ``m`` with a *read-only* pass over K
(:func:`bbs_dual_rowsums`) -- half the memory traffic of Alg. 1 and no n x n
state besides K.  ``G = max(K + m 1^T + 1 m^T, 0)`` is formed once at the end.
The fixed point has ``r = 1``, i.e. ``m`` solves the dual equations below.
In fact the step is ``-(nI + 11^T)^{-1} F(m)`` with ``F = r - 1``: a dual
gradient step preconditioned by ``nI + 11^T``, which majorises the dual
Hessian ``J`` (see ``_newton``), so it decreases the dual objective from any
start (MBBS warm-starts it) -- exact in the limit, but linear and slow when
the active set is small, since then ``J`` is far below its majorant.

Dual.  Semismooth Newton on ``F(mu) = G(mu) 1 - 1`` (see ``_newton``).
"""
from __future__ import annotations

import numpy as np

from bigclust._util import progress
from bigclust.normalize._common import PARALLEL_MIN_NNZ, NormalizeInfo, csr_kernels, kernels, pcg, warn_not_converged
from bigclust.normalize._newton import newton

#: an active set at most this dense is listed (CSR) for the CG products
ACTIVE_CSR_FRACTION = 0.3


def alternating(K, dt, asym, n_iter, tol, hist):
    """Paper 000, Alg. 1: alternate the two projections from ``G = K``."""
    nb = kernels()
    n = K.shape[0]
    G = np.array(K, dtype=dt, order="C", copy=True)
    if asym > 0:  # tolerated round-off asymmetry: make it exact, the formula assumes it
        G += G.T
        G *= 0.5
    r = G.sum(axis=1, dtype=np.float64)
    r_new = np.empty(n)
    rc = np.empty(n) if hist.wants_classes else None
    t, err, converged = 0, float(np.abs(r - 1.0).max()), False
    with progress.bar(n_iter, "BBS (alternating)") as bar:
        for t in range(1, n_iter + 1):
            _alt_step(nb, G, r, r_new, rc, hist, t)
            r, r_new = r_new, r
            err = float(np.abs(r - 1.0).max())
            bar.update(1)
            if hist.due(t):
                hist.add(t, r, rc)
            if tol is not None and err <= tol:
                converged = True
                break
    if tol is not None and not converged:
        warn_not_converged("BBS (alternating)", t, err, tol)
    info = NormalizeInfo(n_iter=t, converged=converged or tol is None, row_err=err,
                         history=hist.rows, method="bbs/alternating")
    return G, info


def _alt_step(nb, G, r, r_new, rc, hist, t):
    if hist.due(t) and rc is not None:
        nb.bbs_alt_pass_class(G, r, r.sum(), 0, hist.codes, r_new, rc)
    else:
        nb.bbs_alt_pass(G, r, r.sum(), 0, r_new)


def _class_sums(K, mu, codes):
    n = K.shape[0]
    r, rc = np.empty(n), np.empty(n)
    kernels().bbs_dual_rowsums_class(K, mu, 0, codes, r, rc)
    return r, rc


def dykstra(K, dt, n_iter, tol, hist, m0=None):
    """Dykstra's projections in the ``K + m 1^T + 1 m^T`` form (module docstring)."""
    nb = kernels()
    n = K.shape[0]
    m = np.zeros(n) if m0 is None else np.array(m0, dtype=np.float64)
    r = np.empty(n)
    nb.bbs_dual_rowsums(K, m, 0, r)
    t, err, converged = 0, float(np.abs(r - 1.0).max()), False
    if tol is not None and err <= tol:
        converged = True
    else:
        bar = progress.bar(n_iter, "BBS (dykstra)")
        for t in range(1, n_iter + 1):
            bar.update(1)
            c = (1.0 + r.sum() / n) / n
            m += 0.5 * c - r / n
            if hist.due(t) and hist.wants_classes:
                r, rc = _class_sums(K, m, hist.codes)
            else:
                nb.bbs_dual_rowsums(K, m, 0, r)
                rc = None
            err = float(np.abs(r - 1.0).max())
            if hist.due(t):
                hist.add(t, r, rc)
            if tol is not None and err <= tol:
                converged = True
                break
        bar.close()
    if tol is not None and not converged:
        warn_not_converged("BBS (dykstra)", t, err, tol)
    G, info = _finish(K, m, dt, "bbs/dykstra")
    info.n_iter, info.converged, info.history = t, converged or tol is None, hist.rows
    return G, info


def dual(K, dt, n_iter, tol, hist, mu0=None, jvp="auto"):
    """Semismooth Newton on the dual; ``jvp`` forces "csr" or "dense" products (tests)."""
    nb = kernels()
    n = K.shape[0]
    if mu0 is None:
        # the affine projection of K: P(K) = K + u 1^T + 1 u^T, u = c/2 - r/n
        r = K.sum(axis=1, dtype=np.float64)
        mu0 = 0.5 * (1.0 + r.sum() / n) / n - r / n
    kdiag = np.ascontiguousarray(np.diagonal(K), dtype=np.float64)
    r_, sq_, cnt_ = np.empty(n), np.empty(n), np.empty(n, dtype=np.int64)

    def evaluate(mu):
        nb.bbs_dual_eval(K, mu, 0, r_, sq_, cnt_)
        return r_.copy(), sq_.copy(), cnt_.copy()

    def jacobian(mu, cnt):
        diag = cnt + (kdiag + 2.0 * mu > 0.0)
        nnz = int(cnt.sum())
        if jvp == "csr" or (jvp == "auto" and nnz <= ACTIVE_CSR_FRACTION * n * n):
            # list the active set once; every CG product is then O(nnz), in compiled CG
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(cnt, out=indptr[1:])
            indices = np.empty(nnz, dtype=np.int32 if n < 2**31 else np.int64)
            nb.bbs_dual_active_fill(K, mu, indptr, indices)

            def solve(rhs, eps, rtol, maxiter):
                x = np.zeros(n)
                it, _ = csr_kernels().cg_csr(indptr[:-1], indptr[1:], indices, eps, rhs, x, 1.0 / (diag + eps),
                                             rtol, maxiter, nnz >= PARALLEL_MIN_NNZ)
                return x, it
        else:  # a dense active set: recompute it from K in every product instead
            out = np.empty(n)

            def solve(rhs, eps, rtol, maxiter):
                def matvec(v):
                    nb.bbs_dual_jvp(K, mu, v, out)
                    return out + eps * v
                x, it, _ = pcg(matvec, rhs, np.zeros(n), 1.0 / (diag + eps), rtol, maxiter)
                return x, it
        return solve

    mu, k, converged, err, n_cg = newton(evaluate, jacobian, mu0, tol, n_iter, hist,
                                         lambda mu: _class_sums(K, mu, hist.codes))
    if not converged:
        warn_not_converged("BBS (dual Newton)", k, err, tol)
    G, info = _finish(K, mu, dt, "bbs/dual")
    info.n_iter, info.converged, info.history, info.n_inner = k, converged, hist.rows, n_cg
    return G, info


def _finish(K, mu, dt, method):
    """Form ``G = max(K + mu 1^T + 1 mu^T, 0)`` and its KKT residuals."""
    nb = kernels()
    n = K.shape[0]
    G = np.empty((n, n), dtype=dt)
    r = np.empty(n)
    nb.bbs_dual_form(K, mu, 0, G, r)
    lam_min, comp = np.empty(n), np.empty(n)
    nb.bbs_kkt_rows(K, G, mu, 0, lam_min, comp)
    err = float(np.abs(r - 1.0).max())
    kkt = {"primal_row_err": err, "primal_min": float(G.min()),
           "dual_feasibility": float(max(0.0, -lam_min.min())), "complementarity": float(comp.max())}
    return G, NormalizeInfo(n_iter=0, converged=True, row_err=err, kkt=kkt, method=method, mu=mu)
