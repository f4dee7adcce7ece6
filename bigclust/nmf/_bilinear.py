"""Bilinear (kernel) NMF = concept factorisation: kernel operators and the driver.

Orientation: the paper's ``X ~ X W V^T`` with X (m x n, documents as
columns) and ``K = X^T X``; with our documents as rows this is
``X^T ~ X^T W V^T`` and ``K = X X^T`` (n x n), or any symmetric kernel.
W (n x k) and V (n x k) are both indexed by documents.

Objective ``J = 1/2 ||phi(X) - phi(X) W V^T||^2
= 1/2 (tr K - 2 tr(V^T K W) + tr(V^T V W^T K W))``.

Update order (the paper's): W first (3-12 / 3-13) from ``K V`` and
``K+- W (V^T V)``, then V (3-14 / 3-15) from ``K W`` and ``V (W^T K+- W)``
with the new W.  Per iteration the kernel is applied twice: to V (before the
W-step) and to the new W (for the V-step; it is reused by the next W-step).

Rules are chosen from the kernel: any negative entry (or, for the linear
kernel, any negative entry of X) gives the split rules (3-12, 3-14) with
``K = K+ - K-``; otherwise the simplified rules (3-13, 3-15).  The split
need not be the element-wise one for monotonicity: any symmetric K+, K- >= 0
with ``K = K+ - K-`` admits the same auxiliary function.  Dense and CSR
kernels use the element-wise split ``K+ = max(K, 0)``.  The linear kernel on
an X with negative entries, ``X = X+ - X-``, uses
``K+ = X+ X+^T + X- X-^T`` and ``K- = X+ X-^T + X- X+^T``, so that K is never
formed (all products O(nnz k)).
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util import progress
from bigclust.nmf import _ops
from bigclust.nmf._common import rel_change


class KernelOp:
    """``K M`` (or ``K+ M, K- M``) for a kernel given densely, as CSR, or as ``X X^T``.

    ``w`` (n,) optional NCW weights: the operator is then ``diag(w) K diag(w)``.
    """

    def __init__(self, kind, A, w=None):
        self.kind = kind
        self.w = w
        if kind == "linear":
            self.X = A
            neg = (A.data < 0).any() if sp.issparse(A) else (A < 0).any()
            self.split = bool(neg)
            if self.split:
                if sp.issparse(A):
                    self.Xp, self.Xm = A.maximum(0).tocsr(), (-A).maximum(0).tocsr()
                    for Z in (self.Xp, self.Xm):
                        Z.indices = Z.indices.astype(np.int64)
                        Z.indptr = Z.indptr.astype(np.int64)
                    self.XpT, self.XmT = _ops.csr_transpose(self.Xp), _ops.csr_transpose(self.Xm)
                else:
                    self.Xp, self.Xm = np.maximum(A, 0), np.maximum(-A, 0)
                    self.XpT = self.XmT = None
            else:
                self.XT = _ops.csr_transpose(A) if sp.issparse(A) else None
            diag = np.asarray(A.multiply(A).sum(axis=1)).ravel() if sp.issparse(A) else np.einsum("ij,ij->i", A, A)
        else:
            self.K = A
            self.split = bool((A.data < 0).any() if sp.issparse(A) else (A < 0).any())
            diag = A.diagonal() if sp.issparse(A) else np.diagonal(A).copy()
        self.trace = float(np.sum(diag * w * w)) if w is not None else float(np.sum(diag))

    @property
    def n(self):
        return (self.X if self.kind == "linear" else self.K).shape[0]

    def prod(self, M):
        """``(K+ M, K- M)`` for the split rules, ``(K M, None)`` otherwise."""
        w = self.w
        Y = np.ascontiguousarray(M * w[:, None]) if w is not None else np.ascontiguousarray(M)
        if self.kind == "linear":
            if not self.split:
                P, N = _ops.matmul(self.X, _ops.tmatmul(self.X, Y, self.XT)), None
            else:
                ap, am = _ops.tmatmul(self.Xp, Y, self.XpT), _ops.tmatmul(self.Xm, Y, self.XmT)
                P = _ops.matmul(self.Xp, ap) + _ops.matmul(self.Xm, am)
                N = _ops.matmul(self.Xp, am) + _ops.matmul(self.Xm, ap)
        elif self.split:
            P, N = _ops.matmul_split(self.K, Y)
        elif sp.issparse(self.K):
            P, N = _ops.matmul(self.K, Y), None
        else:
            P, N = _ops.dense_dot(self.K, Y), None
        if w is not None:
            P *= w[:, None]
            if N is not None:
                N *= w[:, None]
        return P, N

    def degrees(self):
        """``d = K 1`` (for the linear kernel ``X (X^T 1)``, K never formed)."""
        P, N = self.prod(np.ones((self.n, 1)))
        return (P - N if N is not None else P).ravel()


class StoredKernel:
    """A dense symmetric kernel left in the store: ``read_block(i)`` gives rows ``bounds[i]:bounds[i+1]``."""

    def __init__(self, read_block, bounds):
        self.read_block, self.bounds = read_block, [int(b) for b in bounds]
        self.shape = (self.bounds[-1], self.bounds[-1])

    def blocks(self):
        for i, (r0, r1) in enumerate(zip(self.bounds[:-1], self.bounds[1:])):
            yield r0, r1, np.ascontiguousarray(self.read_block(i), dtype=np.float64)


class StoredKernelOp(KernelOp):
    """:class:`KernelOp` of a :class:`StoredKernel`: every product streams K's row blocks once.

    Each row of ``K M`` comes from the same row kernel as in memory, on the
    same float64 values, so the iterates equal the in-memory ones.  One first
    pass reads the diagonal (trace), looks for negative entries (which choose
    the rules), all-zero rows, non-finite values, and compares 16 sampled rows
    with the same columns (symmetry).
    """

    def __init__(self, K: StoredKernel, w=None):
        from bigclust._util.errors import DataError

        self.kind, self.Ks, self.w = "stored", K, w
        n = K.shape[0]
        idx = np.unique(np.linspace(0, n - 1, min(n, 16)).astype(np.int64))
        diag, cols, rows, neg = np.empty(n), np.empty((n, idx.size)), np.empty((idx.size, n)), False
        for r0, r1, blk in K.blocks():
            if not np.isfinite(blk).all():
                raise DataError(f"K has non-finite entries (rows {r0}..{r1 - 1}); bilinear NMF needs a finite K")
            zero = np.flatnonzero(~(blk != 0).any(axis=1))
            if zero.size:
                raise DataError(f"K has an all-zero row (row {r0 + int(zero[0])}); bilinear NMF cannot place that "
                                "document — drop it first")
            neg |= bool((blk < 0).any())
            diag[r0:r1] = blk[np.arange(r1 - r0), np.arange(r0, r1)]
            cols[r0:r1] = blk[:, idx]
            mine = (idx >= r0) & (idx < r1)
            rows[mine] = blk[idx[mine] - r0]
        scale = max(float(np.abs(rows).max()), np.finfo(np.float64).tiny)
        if np.abs(cols.T - rows).max() > 1e-10 * scale:
            raise DataError("K is not symmetric (sampled rows differ from the same columns); bilinear NMF needs a "
                            "symmetric kernel")
        self.split = neg
        self.trace = float(np.sum(diag * w * w)) if w is not None else float(np.sum(diag))
        self._diag = diag

    @property
    def n(self):
        return self.Ks.shape[0]

    def prod(self, M):
        w = self.w
        Y = np.ascontiguousarray(M * w[:, None]) if w is not None else np.ascontiguousarray(M, dtype=np.float64)
        P = np.empty((self.n, Y.shape[1]))
        N = np.empty_like(P) if self.split else None
        for r0, r1, blk in self.Ks.blocks():
            if self.split:
                P[r0:r1], N[r0:r1] = _ops.matmul_split(blk, Y)
            else:
                P[r0:r1] = _ops.dense_dot(blk, Y)
        if w is not None:
            P *= w[:, None]
            if N is not None:
                N *= w[:, None]
        return P, N


def objective(trace, cross, GV, B):
    """``1/2 (tr K - 2 tr(V^T K W) + tr(V^T V W^T K W))``."""
    return 0.5 * (trace - 2.0 * cross + float(np.sum(GV * B)))


def scale_init(op, W, V):
    """Scale V by the best scalar for the initial pair (one application of K); returns the scale."""
    P, N = op.prod(W)
    KW = P - N if N is not None else P
    t = float(np.sum(V * KW))
    s = float(np.sum(_ops.gram(V) * _ops.tdot(W, KW)))
    if t > 0 and s > 0:
        V *= t / s
        return t / s
    return 1.0


def run(op, W, V, max_iter, tol, *, simplified=False, bar=None):
    """Iterate from (W, V) (both INOUT); returns ``(history, n_iter, converged, B = W^T K W)``.

    ``simplified=True`` forces the rules (3-13, 3-15) on any kernel (only for
    demonstrating that they break non-negativity on a mixed-sign kernel).
    """
    return run_many(op, [(W, V)], max_iter, tol, simplified=simplified, bar=bar)[0]


def _cols(P, j, k):
    return None if P is None else np.ascontiguousarray(P[:, j * k:(j + 1) * k])


def run_many(op, pairs, max_iter, tol, *, simplified=False, bar=None):
    """Iterate every restart of ``pairs`` (list of (W, V), INOUT) in lockstep.

    Each application of K serves all active restarts at once: ``K [V_1 .. V_r]``
    reads K once (a dense kernel: one BLAS product, compute-bound instead of
    one memory-bound pass over n^2 entries per restart; a stored kernel: one
    pass over its row blocks).  Column j of ``K M`` depends on column j of M
    only, so every restart follows the iterates it would follow alone.
    Returns ``(history, n_iter, converged, B)`` per restart; a restart stops on
    its own tolerance or when its objective stops being finite.
    """
    split = op.split and not simplified
    bar = bar if bar is not None else progress.NOBAR  # advanced once per iteration
    r = len(pairs)
    k = pairs[0][0].shape[1]
    GV = [_ops.gram(V) for _, V in pairs]
    P, N = op.prod(np.hstack([V for _, V in pairs] + [W for W, _ in pairs]))
    KVp = [_cols(P, j, k) for j in range(r)]
    KVm = [_cols(N, j, k) for j in range(r)]
    KWp = [_cols(P, r + j, k) for j in range(r)]
    KWm = [_cols(N, r + j, k) for j in range(r)]
    hist = [[] for _ in range(r)]
    B = [None] * r
    n_iter = [0] * r
    conv = [False] * r
    active = list(range(r))
    for it in range(1, max_iter + 1):
        if it > 1:
            P, N = op.prod(np.hstack([pairs[j][1] for j in active]))
            for a, j in enumerate(active):
                KVp[j], KVm[j] = _cols(P, a, k), _cols(N, a, k)
        for j in active:
            W = pairs[j][0]
            KV = KVp[j] - KVm[j] if KVm[j] is not None else KVp[j]
            if it == 1:
                KW = KWp[j] - KWm[j] if KWm[j] is not None else KWp[j]
                hist[j].append(objective(op.trace, float(np.sum(pairs[j][1] * KW)), GV[j], _ops.tdot(W, KW)))
            # W-step (3-12; 3-13 when K >= 0): P+- = K+- W (V^T V)
            if split:
                _ops.mult_step(W, KV, KWp[j], GV[j], KWm[j], GV[j], reductions=False)
            else:
                _ops.mult_step(W, KV, KWp[j] - KWm[j] if KWm[j] is not None else KWp[j], GV[j], reductions=False)
        # V-step (3-14; 3-15 when K >= 0): Q+- = V (W^T K+- W), new W
        P, N = op.prod(np.hstack([pairs[j][0] for j in active]))
        still = []
        for a, j in enumerate(active):
            W, V = pairs[j]
            KWp[j], KWm[j] = _cols(P, a, k), _cols(N, a, k)
            Bp = _ops.tdot(W, KWp[j])
            Bm = _ops.tdot(W, KWm[j]) if KWm[j] is not None else None
            KW = KWp[j] - KWm[j] if KWm[j] is not None else KWp[j]
            B[j] = Bp - Bm if Bm is not None else Bp
            if split:
                GV[j], _, c_new = _ops.mult_step(V, KW, V, Bp, V, Bm)
            else:
                GV[j], _, c_new = _ops.mult_step(V, KW, V, B[j])
            hist[j].append(objective(op.trace, c_new, GV[j], B[j]))
            n_iter[j] = it
            if not np.isfinite(hist[j][-1]):  # an indefinite kernel: unbounded below, the factors overflow
                continue
            if rel_change(hist[j][-2], hist[j][-1]) < tol:
                conv[j] = True
                continue
            still.append(j)
        active = still
        bar.update(1)
        if not active:
            bar.update(max_iter - it)
            break
    return [(np.array(hist[j]), n_iter[j], conv[j], B[j]) for j in range(r)]


def normalize(W, V, B):
    """(3-16, 3-17): ``s = sqrt(diag(W^T K W))``, ``V <- V diag(s)``, ``W <- W diag(s)^-1``.

    A column with ``s = 0`` (W^T K W's diagonal can only vanish for a zero
    column of phi(X) W) keeps its W and gets a zero V column: ``X W V^T`` is unchanged.
    """
    d = np.diagonal(B).copy()
    if (d < 0).any():
        warnings.warn("bilinear NMF: diag(W^T K W) has negative entries (K is not positive semidefinite); "
                      "they are treated as 0 in the normalisation", RuntimeWarning, stacklevel=4)
    s = np.sqrt(np.maximum(d, 0.0))
    return W / np.where(s > 0, s, 1.0), V * s
