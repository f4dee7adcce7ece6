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

Scale (issue 28).  The dual's Newton steps (about 5 to 1e-6) and CG iterations
per step do not grow with n on kNN kernels; what grew was the cost of an entry:
gathers of ``mu[j]`` across rows far apart miss the cache once the n-vectors
outgrow it.  So a large K is solved renumbered in breadth-first order, each
evaluation lists its active set in the same pass (the CG then reads 4-byte
indices and one vector, in fused passes), the starting support projection is
solved only to ``START_RTOL``, and G and its KKT residuals are formed in one
pass on K's own numbering.

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
from contextlib import contextmanager

import numpy as np

from bigclust.normalize._common import (PARALLEL_MIN_NNZ, NormalizeConvergenceWarning, NormalizeInfo, csr_kernels, like_sparse,
                      norm2, row_ids, warn_not_converged)
from bigclust.normalize._newton import newton
from bigclust.algo.renumber import local_order
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
    if mode == "zero":  # the default: one compiled pass, no nnz-long row ids
        data = K.data.copy()
        csr_kernels().csr_zero_diagonal(data, K.indices, K.indptr)
        return type(K)((data, K.indices, K.indptr), shape=K.shape)
    rows = row_ids(K.indptr)
    on_diag = K.indices == rows
    if not on_diag.any():
        return K
    off = np.bincount(rows[~on_diag], minlength=K.shape[0])
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


@contextmanager
def zeroed_diagonal(K):
    """K with its stored diagonal set to 0 in place (``self_loops="zero"`` without a copy of K's values), put
    back on leaving (also after an error): K is as it was, bit for bit."""
    stored = np.empty(K.shape[0], dtype=np.bool_)
    value = np.empty(K.shape[0], dtype=K.data.dtype)
    csr_kernels().csr_diagonal(K.data, K.indices, K.indptr, stored, value)
    csr_kernels().csr_zero_diagonal(K.data, K.indices, K.indptr)
    try:
        yield K
    finally:
        csr_kernels().csr_set_diagonal(K.data, K.indices, K.indptr, stored, value)


#: relative CG residual of the support projection that starts the dual Newton method: the start only has to
#: be near the solution (measured on kNN kernels of 70k to 1M rows: the Newton steps do not change)
START_RTOL = 1e-3


#: rows from which the dual Newton method works on K renumbered in breadth-first order (its n-vectors then
#: outgrow a core's cache, and gathers of far-apart rows miss it: about 1.5x fewer CPU seconds at 1M rows)
REORDER_MIN_ROWS = 1 << 16


def _check_rows(K):
    empty = np.flatnonzero(np.diff(K.indptr) == 0)
    if empty.size:
        raise DataError(f"K has an empty row (row {empty[0]}): no bi-stochastic matrix is supported "
                        "on K's sparsity pattern")


def _local_order(K):
    """``(P K P^T, order)`` with rows in breadth-first order (:func:`bigclust.algo.renumber.local_order`),
    or ``(K, None)`` below REORDER_MIN_ROWS or when K is in that order already.

    The embed stage hands over a K it renumbered so, with sorted rows: then
    the breadth-first order is the identity, and the copy it would make holds
    K's own arrays (a gigabyte at 8.1M rows) -- K itself serves, same bits.
    """
    if K.shape[0] < REORDER_MIN_ROWS:
        return K, None
    A, order = local_order(K, unless_ordered=True)
    return (K, None) if order is None else (type(K)((A.data, A.indices, A.indptr), shape=K.shape), order)


class Support:
    """The support graph E of a CSR K (symmetric pattern, rows in any order) and its signless Laplacian solver."""

    def __init__(self, K):
        self.K = K
        self.n = K.shape[0]
        self.indptr, self.indices = K.indptr, K.indices
        _check_rows(K)
        self.diag_stored = np.empty(self.n, dtype=np.bool_)
        self.kdiag = np.empty(self.n, dtype=K.data.dtype)   # K's values (float32: half the bytes), widened where read
        csr_kernels().csr_diagonal(K.data, self.indices, self.indptr, self.diag_stored, self.kdiag)
        self.parallel = self.indices.shape[0] >= PARALLEL_MIN_NNZ
        self.n_cg = 0
        self._warned = False

    def row_sums(self, data):
        r = np.empty(self.n)
        csr_kernels().csr_row_sums(data, self.indptr, r)
        return r

    def cg(self, stop, indices, rhs, x, shift, dinv, rtol, maxiter):
        """Compiled CG on ``(L + shift I) x = rhs``, row i of the graph ``indices[indptr[i]:stop[i]]``.

        ``x`` is the start and the result.
        """
        it, ok = csr_kernels().cg_csr(self.indptr[:-1], stop, indices, shift, rhs, x, dinv, rtol, maxiter,
                                      self.parallel)
        self.n_cg += it
        return ok

    def solve(self, b, x_prev=None, rtol=1e-12):
        """``(D + A_E) x = b`` (the support projection) by CG from the better of 0 and ``x_prev``."""
        x = np.zeros(self.n)
        if x_prev is not None:
            out = np.empty(self.n)
            csr_kernels().pattern_matvec(self.indptr[:-1], self.indptr[1:], self.indices, 0.0, x_prev, out)
            if norm2(b - out) < norm2(b):
                x = x_prev.copy()
        diag = np.diff(self.indptr) + self.diag_stored  # made per solve: the dual Newton steps do not need it
        ok = self.cg(self.indptr[1:], self.indices, b, x, 0.0, 1.0 / diag, rtol,
                     max(100, min(10 * self.n, 5000)))
        if not ok and not self._warned:
            self._warned = True
            warnings.warn("sparse BBS: the support projection's CG did not reach its tolerance (the support "
                          "graph may have a bipartite component that admits no unit row sums)",
                          NormalizeConvergenceWarning, stacklevel=4)
        return x

    def evaluate(self, data, mu, lst=None):
        """Row sums, sums of squares and active counts at ``mu`` (and, into ``lst``, the active set).

        With ``lst`` (nnz,) the active set is listed in it for :meth:`cg`: row
        i's active columns are ``lst[indptr[i]:indptr[i] + cnt[i]]``.
        """
        n = self.n
        r, sq, cnt = np.empty(n), np.empty(n), np.empty(n, dtype=self.indptr.dtype)   # counts <= nnz
        listing = lst is not None
        lst = lst if listing else np.empty(0, dtype=self.indices.dtype)
        csr_kernels().csr_dual_eval(data, self.indices, self.indptr, mu, r, sq, cnt, lst, listing)
        return r, sq, cnt

    def class_sums(self, data, codes):
        r, rc = np.empty(self.n), np.empty(self.n)
        csr_kernels().csr_class_sums(data, self.indices, self.indptr, codes, 0, r, rc)
        return r, rc

    def dual_class_sums(self, mu, codes):
        r, rc = np.empty(self.n), np.empty(self.n)
        csr_kernels().csr_dual_class_sums(self.K.data, self.indices, self.indptr, mu, codes, r, rc)
        return r, rc


def alternating(template, K, dt, n_iter, tol, hist, scratch=False):
    """Alg. 1 within the support: support projection (CG), then clip, fused.

    ``scratch``: K's values are the caller's own copy; they become the iterate (no second copy).
    """
    sup = Support(K)
    data = K.data if scratch and K.data.dtype == dt else K.data.astype(dt, copy=True)
    r = sup.row_sums(data)
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


def dykstra(template, K, dt, n_iter, tol, hist, scratch=False):
    """Dykstra in the ``K + m 1^T + 1 m^T`` form, each step a support projection (``scratch``: as :func:`dual`)."""
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
    G, info = _finish(template, K, m, dt, "bbs/dykstra", sup.n_cg, scratch)
    info.n_iter, info.converged, info.history = t, converged or tol is None, hist.rows
    return G, info


def dual(template, K, dt, n_iter, tol, hist, mu0=None, scratch=False):
    """Semismooth Newton on the dual; each step lists its active set once for the CG products.

    Large K is solved renumbered (:func:`_local_order`); ``mu`` comes back in
    K's numbering and G is formed on K itself.  ``scratch``: K's values are the
    caller's own copy (``self_loop_support`` made it), overwritten by G's.  G's
    indices go into the active-set buffer, which is free by then: besides K,
    the solve holds that buffer and n-vectors only.
    """
    _check_rows(K)  # before renumbering, so that a message names K's own row
    Kp, order = _local_order(K)
    sup = Support(Kp)
    codes = hist.codes if order is None or hist.codes is None else hist.codes[order]

    # every evaluation lists its active set: the one that accepts a step hands it to that step's CG.  One
    # buffer serves all: newton() solves at a point before it evaluates any trial point, and the last
    # point it evaluated is always the one it goes on from (nnz indices fewer in memory at 8M rows)
    lst = np.empty(Kp.indices.shape[0], dtype=Kp.indices.dtype)

    def evaluate(mu):
        return sup.evaluate(Kp.data, mu, lst)   # the state is the active counts; the active set is in lst

    def jacobian(mu, cnt):
        def solve(rhs, eps, rtol, maxiter):
            # the diagonal and the active rows' ends exist during this CG only (two n-vectors fewer besides
            # every evaluated point); the same numbers as 1.0 / (diag + eps)
            dinv = cnt + (sup.diag_stored & (sup.kdiag + 2.0 * mu > 0.0)) + eps
            np.divide(1.0, dinv, out=dinv)
            x = np.zeros(sup.n)
            n0 = sup.n_cg
            sup.cg(sup.indptr[:-1] + cnt, lst, rhs, x, eps, dinv, rtol, maxiter)
            return x, sup.n_cg - n0
        return solve

    # the start passed as a temporary: newton() holds its own copy only
    mu, k, converged, err, n_cg = newton(evaluate, jacobian, _start(sup, Kp, mu0, order), tol, n_iter,
                                         hist, lambda mu: sup.dual_class_sums(mu, codes))
    if not converged:
        warn_not_converged("sparse BBS (dual Newton)", k, err, tol)
    if order is not None:
        mu_p, mu = mu, np.empty_like(mu)
        mu[order] = mu_p
    G, info = _finish(template, K, mu, dt, "bbs/dual", sup.n_cg, scratch, lst)
    info.n_iter, info.converged, info.history = k, converged, hist.rows
    return G, info


def _start(sup, Kp, mu0, order):
    """The Newton start: the support projection of K itself, solved only as far as a start needs, or ``mu0``
    (K's numbering) renumbered."""
    if mu0 is None:
        return sup.solve(1.0 - sup.row_sums(Kp.data), rtol=START_RTOL)
    return mu0 if order is None else np.asarray(mu0, dtype=np.float64)[order]


def _finish(template, K, mu, dt, method, n_cg, scratch=False, indices=None):
    """``G = max(K + mu 1^T + 1 mu^T, 0)`` on E and its KKT residuals, in one compiled pass.

    ``scratch``: G's values overwrite K's (the caller's own copy) when the dtypes
    agree; ``indices``: a free buffer of K's index dtype that receives G's indices.
    """
    data = K.data if scratch and K.data.dtype == dt else np.empty(K.data.shape[0], dtype=dt)
    r = np.empty(K.shape[0])
    stats = np.zeros((3, csr_kernels()._CHUNKS))
    csr_kernels().csr_dual_finish(K.data, K.indices, K.indptr, mu, data, r, stats)
    err = float(np.abs(r - 1.0).max())
    kkt = {"primal_row_err": err, "primal_min": float(stats[0].min()),
           "dual_feasibility": float(max(0.0, -stats[1].min())), "complementarity": float(stats[2].max())}
    if indices is not None and indices.dtype == K.indices.dtype and indices.shape == K.indices.shape:
        np.copyto(indices, K.indices)
    else:
        indices = K.indices.copy()
    G = like_sparse(template, data, indices, K.indptr.copy(), K.shape)
    return G, NormalizeInfo(n_iter=0, converged=True, row_err=err, kkt=kkt, method=method, mu=mu,
                            n_inner=n_cg)
