"""Bilinear (kernel) NMF = concept factorisation: kernel operators, :func:`bilinear_nmf`, NCW weighting.

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
from bigclust.nmf import ops
from bigclust._util.errors import DataError, UserError
from bigclust.nmf._common import (as_data, check_components, check_int, check_tol, degrees_weights, labels_from,
                                  pick_best, rel_change, scale_rows)
from bigclust.nmf.init import draw_seeds, explicit_init, random_factors


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
                    self.XpT, self.XmT = ops.csr_transpose(self.Xp), ops.csr_transpose(self.Xm)
                else:
                    self.Xp, self.Xm = np.maximum(A, 0), np.maximum(-A, 0)
                    self.XpT = self.XmT = None
            else:
                self.XT = ops.csr_transpose(A) if sp.issparse(A) else None
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
                P, N = ops.matmul(self.X, ops.tmatmul(self.X, Y, self.XT)), None
            else:
                ap, am = ops.tmatmul(self.Xp, Y, self.XpT), ops.tmatmul(self.Xm, Y, self.XmT)
                P = ops.matmul(self.Xp, ap) + ops.matmul(self.Xm, am)
                N = ops.matmul(self.Xp, am) + ops.matmul(self.Xm, ap)
        elif self.split:
            P, N = ops.matmul_split(self.K, Y)
        elif sp.issparse(self.K):
            P, N = ops.matmul(self.K, Y), None
        else:
            P, N = ops.dense_dot(self.K, Y), None
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
                P[r0:r1], N[r0:r1] = ops.matmul_split(blk, Y)
            else:
                P[r0:r1] = ops.dense_dot(blk, Y)
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
    s = float(np.sum(ops.gram(V) * ops.tdot(W, KW)))
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
    GV = [ops.gram(V) for _, V in pairs]
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
                hist[j].append(objective(op.trace, float(np.sum(pairs[j][1] * KW)), GV[j], ops.tdot(W, KW)))
            # W-step (3-12; 3-13 when K >= 0): P+- = K+- W (V^T V)
            if split:
                ops.mult_step(W, KV, KWp[j], GV[j], KWm[j], GV[j], reductions=False)
            else:
                ops.mult_step(W, KV, KWp[j] - KWm[j] if KWm[j] is not None else KWp[j], GV[j], reductions=False)
        # V-step (3-14; 3-15 when K >= 0): Q+- = V (W^T K+- W), new W
        P, N = op.prod(np.hstack([pairs[j][0] for j in active]))
        still = []
        for a, j in enumerate(active):
            W, V = pairs[j]
            KWp[j], KWm[j] = _cols(P, a, k), _cols(N, a, k)
            Bp = ops.tdot(W, KWp[j])
            Bm = ops.tdot(W, KWm[j]) if KWm[j] is not None else None
            KW = KWp[j] - KWm[j] if KWm[j] is not None else KWp[j]
            B[j] = Bp - Bm if Bm is not None else Bp
            if split:
                GV[j], _, c_new = ops.mult_step(V, KW, V, Bp, V, Bm)
            else:
                GV[j], _, c_new = ops.mult_step(V, KW, V, B[j])
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


# -- NCW weights and the driver ------------------------------------------------------------


KERNELS = ("linear", "precomputed")


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
        The weights ``d^(-1/2)``.

    Raises
    ------
    DataError
        When some ``d_i <= 0`` (the message names the first such row).
    """
    op = _kernel_op(X, kernel)
    return degrees_weights(op.degrees(), "K" if kernel == "precomputed" else "X X^T")


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
    return scale_rows(X, w)


def _diag(op):
    if op.kind == "stored":
        return op._diag
    if op.kind == "linear":
        X = op.X
        return np.asarray(X.multiply(X).sum(axis=1)).ravel() if sp.issparse(X) else np.einsum("ij,ij->i", X, X)
    return op.K.diagonal() if sp.issparse(op.K) else np.diagonal(op.K).copy()


def _kernel_op(A, kernel, w=None):
    if isinstance(A, StoredKernel):
        return StoredKernelOp(A, w)

    if kernel == "linear":
        X = as_data(A, nonneg=False, model="bilinear NMF")
        return KernelOp("linear", X, w)
    if kernel != "precomputed":
        raise UserError(f"kernel={kernel!r} must be one of {', '.join(KERNELS)}")
    from bigclust.normalize.checks import check_dense, check_sparse

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
    # over 80 lines by its numpydoc docstring (47 lines); the code is 44
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
        What X is: documents, or the kernel K itself.
    init : "random" or tuple (W0, V0)
        ``"random"``: ``|N(0, 1)|`` factors, V scaled by the best scalar for
        the pair.  A tuple: explicit (n, k) factors (or with a leading n_init axis).
    n_init, max_iter, tol, random_state : int, int, float, int or None
        As in :func:`linear_nmf`.
    ncw : bool
        Normalised-cut weighting: factorise ``D^(-1/2) K D^(-1/2)``, ``d = K 1``
        (``X (X^T 1)`` for the linear kernel), applied inside the products.
    return_info : bool
        Also return an :class:`NMFInfo`.

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

    Raises
    ------
    DataError
        Non-finite input, a non-symmetric kernel, an all-zero document (row of
        K or X), ``n_components > n``, (with ``ncw``) a degree ``d_i <= 0``, or
        an indefinite kernel on which the iteration diverges.

    Notes
    -----
    A kernel with any negative entry gets the split rules (3-12, 3-14),
    otherwise the simplified ones (3-13, 3-15).  The objective is
    non-increasing under both and bounded below for a positive semidefinite
    kernel; for an indefinite kernel it may fall below zero (a warning says
    so) or diverge (a DataError).
    """
    op = _kernel_op(X, kernel)
    n = op.n
    k = check_components(n_components, n, "K" if kernel == "precomputed" else "X")
    n_init = check_int("n_init", n_init, 1)
    max_iter = check_int("max_iter", max_iter, 1)
    tol = check_tol(tol)
    if ncw:
        op.w = degrees_weights(op.degrees(), "K" if kernel == "precomputed" else "X X^T")
        op.trace = float(np.sum(_diag(op) * op.w ** 2))
    seeds = draw_seeds(random_state, n_init)
    if isinstance(init, str):
        if init != "random":
            raise UserError(f"init={init!r} must be 'random' or a tuple (W0, V0)")
        inits = []
        for s in seeds:
            W, V = random_factors(s, [(n, k), (n, k)], 1.0)
            scale_init(op, W, V)
            inits.append((W, V))
    else:
        inits = explicit_init(init, n_init, [(n, k), (n, k)], ["W0", "V0"])
    results, Bs = [], []
    bar = progress.bar(max_iter, f"bilinear NMF ({n_init} restarts in lockstep)")
    with np.errstate(over="ignore", invalid="ignore"):
        runs = run_many(op, inits, max_iter, tol, bar=bar)   # all restarts share each pass over K
    for r, (h, it, conv, B) in enumerate(runs):
        if not np.isfinite(h[-1]):
            raise DataError(f"bilinear NMF diverged (restart {r}, iteration {it}): the objective is unbounded "
                            f"below, so K is not positive semidefinite — use a PSD kernel")
        results.append((h, it, conv))
        Bs.append(B)
    bar.close()
    best, info = pick_best(results, "bilinear NMF", max_iter, tol)
    if info.objective.min() < -1e-9 * max(abs(op.trace), 1e-300):
        import warnings

        warnings.warn("bilinear NMF: the objective fell below zero — the kernel is not positive semidefinite, "
                      "so the objective is unbounded below", RuntimeWarning, stacklevel=2)
    info.method = "bilinear/" + ("split" if op.split else "nonneg") + ("+ncw" if ncw else "")
    info.ncw_weights = op.w
    W, V = normalize(*inits[best], Bs[best])
    labels = labels_from(V)
    return (labels, W, V, info) if return_info else (labels, W, V)
