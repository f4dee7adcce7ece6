"""Products and reductions over a data matrix (dense or CSR) through the Numba kernels.

Kept in one place so the in-memory drivers, the streamed blocks and the
bilinear kernel operators call exactly the same arithmetic.  The Numba
kernels are imported lazily (``import bigclust`` stays fast).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def kern():
    from bigclust.nmf import _numba

    return _numba


def csr_transpose(X):
    """``X^T`` as canonical CSR (the CSC of X, read row-wise).

    Column indices stay int32 when they fit (the products are memory-bound and
    read an index per nonzero); the row pointers are int64.
    """
    T = X.T.tocsr()
    T.sort_indices()
    small = T.shape[1] < 2 ** 31
    T.indices = T.indices.astype(np.int32 if small else np.int64, copy=False)
    T.indptr = T.indptr.astype(np.int64, copy=False)
    return T


def matmul(X, M, out=None):
    """``X M`` (r x k) for dense or CSR X (rows), M (c x k) float64; into ``out`` when given.

    A driver that iterates passes the same ``out`` every time: a fresh array of
    megabytes is fresh pages, and touching them costs about as much as the product.
    """
    M = np.ascontiguousarray(M, dtype=np.float64)
    if out is None:
        out = np.empty((X.shape[0], M.shape[1]))
    if sp.issparse(X):
        kern().csr_matmul(X.data, X.indices, X.indptr, M, out)
    else:
        kern().dense_matmul(X, M, out)
    return out


def dense_dot(A, M):
    """``A M`` for a dense non-negative kernel A (or a row block of one) by BLAS.

    The bilinear driver multiplies K by the factors of all restarts at once
    (n x r k): a dense product that BLAS runs near peak, where the row loop of
    :func:`matmul` is bound by reading A once per restart.
    """
    return np.dot(np.ascontiguousarray(A, dtype=np.float64), np.ascontiguousarray(M, dtype=np.float64))


def matmul_split(X, M):
    """``(X+ M, X- M)`` with X+ = max(X, 0), X- = max(-X, 0), in one pass."""
    M = np.ascontiguousarray(M, dtype=np.float64)
    outp = np.empty((X.shape[0], M.shape[1]))
    outm = np.empty_like(outp)
    if sp.issparse(X):
        kern().csr_matmul_split(X.data, X.indices, X.indptr, M, outp, outm)
    else:
        kern().dense_matmul_split(X, M, outp, outm)
    return outp, outm


def tmatmul(X, M, XT=None, out=None):
    """``X^T M`` (c x k); ``XT`` is the CSR transpose of a CSR X when the caller keeps one."""
    M = np.ascontiguousarray(M, dtype=np.float64)
    if sp.issparse(X):
        return matmul(XT if XT is not None else csr_transpose(X), M, out)
    if out is None:
        out = np.empty((X.shape[1], M.shape[1]))
    kern().dense_tmatmul(X, M, out)
    return out


def gram(F):
    """``F^T F`` summed over fixed row ranges (thread-count independent)."""
    k = F.shape[1]
    parts = np.empty((kern()._CHUNKS, k, k))
    kern().gram_parts(F, parts)
    return parts.sum(axis=0)


def sqnorm(X):
    """``||X||_F^2`` (float64)."""
    d = X.data if sp.issparse(X) else X.ravel()
    return float(np.dot(d, d))


#: HALS sweeps per row and factor update at most, and the stopping ratio of the extra sweeps
#: (``bigclust bench nmf``: fewer passes over X to reach scikit-learn's objective; see ``_numba.hals_rows``)
HALS_SWEEPS = 6
HALS_DELTA = 0.1


def step(solver, F, A, G, sweeps=None, old=True):
    """One linear-NMF update of factor F (INOUT) from numerator A and Gram matrix G of the other factor.

    ``sweeps`` (HALS only): sweeps per row at most, default :data:`HALS_SWEEPS`;
    1 is plain fast HALS (scikit-learn's ``solver="cd"``, iterate for iterate).
    Returns ``(F^T F, sum F_old o A, sum F_new o A)`` (new Gram, old and new cross terms);
    with ``old=False`` MU skips the old cross term (returned as 0.0).
    """
    K = kern()
    k = F.shape[1]
    gp = np.empty((K._CHUNKS, k, k))
    co = np.empty(K._CHUNKS)
    cn = np.empty(K._CHUNKS)
    if solver == "mu":
        K.mu_rows(F, A, F, np.ascontiguousarray(G), gp, co, cn, bool(old), True)
    else:
        K.hals_rows(F, A, np.ascontiguousarray(G), HALS_SWEEPS if sweeps is None else int(sweeps), HALS_DELTA,
                    gp, co, cn)
    return gp.sum(axis=0), float(co.sum()), float(cn.sum())


def mult_step(F, A, Lp, Sp, Lm=None, Sm=None, reductions=True):
    """Multiplicative update of F (INOUT); the split rules when ``Lm`` is given.

    See ``_numba.mu_rows`` and ``_numba.split_rows``.  Returns ``(F^T F, 0.0,
    sum F_new o A)`` (the old cross term is never needed here), or nothing
    with ``reductions=False``.
    """
    K = kern()
    k = F.shape[1]
    gp = np.empty((K._CHUNKS, k, k))
    co = np.empty(K._CHUNKS)
    cn = np.empty(K._CHUNKS)
    if Lm is not None:
        K.split_rows(F, A, Lp, np.ascontiguousarray(Sp), Lm, np.ascontiguousarray(Sm), gp, cn, bool(reductions))
    else:
        K.mu_rows(F, A, Lp, np.ascontiguousarray(Sp), gp, co, cn, False, bool(reductions))
    if reductions:
        return gp.sum(axis=0), 0.0, float(cn.sum())


def tdot(F, M):
    """``F^T M`` (k x q) for tall F (r x k), M (r x q), summed over fixed row ranges."""
    parts = np.empty((kern()._CHUNKS, F.shape[1], M.shape[1]))
    kern().tdot_parts(np.ascontiguousarray(F), np.ascontiguousarray(M), parts)
    return parts.sum(axis=0)
