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


def _index_dtype(n_cols):
    """int32 column indices while they fit (the products are memory-bound and read one per nonzero)."""
    return np.int32 if n_cols < 2 ** 31 else np.int64


def csr_transpose(X):
    """``X^T`` of a canonical CSR X as canonical CSR (its rows sorted), by one counting sort in Numba.

    Column indices stay int32 when they fit; the row pointers are int64.
    """
    r, c = X.shape
    indptr_t = np.zeros(c + 1, dtype=np.int64)
    indices_t = np.empty(X.nnz, dtype=_index_dtype(r))
    data_t = np.empty(X.nnz, dtype=X.data.dtype)
    kern().csr_transpose_into(X.indptr, X.indices, X.data, indptr_t, indices_t, data_t)
    return _csr(data_t, indices_t, indptr_t, (c, r))


def _csr(data, indices, indptr, shape):
    """A CSR matrix of exactly these arrays (scipy's constructor would cast both index arrays to one dtype)."""
    C = sp.csr_matrix(shape, dtype=data.dtype)
    C.data, C.indices, C.indptr = data, indices, indptr
    return C


def matmul(X, M, out=None):
    """``X M`` (r x k) for dense or CSR X (rows), M (c x k) float64; into ``out`` when given.

    A driver that iterates passes the same ``out`` every time: a fresh array of
    megabytes is fresh pages, and touching them costs about as much as the product.
    A dense X goes to BLAS (dgemm); one with few nonzeros is better turned into
    CSR once by the caller (:func:`product_form`).
    """
    M = np.ascontiguousarray(M, dtype=np.float64)
    if out is None:
        out = np.empty((X.shape[0], M.shape[1]))
    if sp.issparse(X):
        kern().csr_matmul(X.data, X.indices, X.indptr, M, out)
    else:
        np.dot(X, M, out=out)
    return out


#: a dense X with at most this share of nonzeros is multiplied as CSR (:func:`product_form`).  Measured on the
#: MNIST test digits (19 % nonzero, k = 10, one thread): CSR's two products took 0.42-0.46x the time of
#: dgemm's, i.e. a nonzero costs CSR about 2.3 times what an entry costs dgemm: CSR pays up to about 40 %
CSR_BELOW = 1 / 3


def product_form(X):
    """X as the products want it: a dense X with at most :data:`CSR_BELOW` nonzeros as canonical CSR.

    The CSR kernels sum each entry over the nonzeros in column order, as a dense row loop that skips
    zeros does: the products are those of such a loop bit for bit, at the cost of the nonzeros only.
    Two parallel passes over X (count, fill): scipy's conversion took 6 times as long.
    """
    if sp.issparse(X) or X.size == 0:
        return X
    counts = dense_row_counts(X)[0]
    nnz = int(counts.sum())
    if nnz > CSR_BELOW * X.size:
        return X
    indptr = np.zeros(X.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.empty(nnz, dtype=_index_dtype(X.shape[1]))
    data = np.empty(nnz, dtype=X.dtype)
    kern().dense_to_csr(X, indptr, indices, data)
    return _csr(data, indices, indptr, X.shape)


def dense_row_counts(X):
    """``(nonzeros, non-finite entries, negative entries)`` per row of a dense float64 X, in one parallel pass."""
    out = np.empty((3, X.shape[0]), dtype=np.int64)
    kern().dense_row_nnz(X, out[0], out[1], out[2])
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
    """``X^T M`` (c x k); ``XT`` is the CSR transpose of a CSR X when the caller keeps one.

    A dense X goes to BLAS as its transpose (no copy: dgemm reads X transposed).
    """
    M = np.ascontiguousarray(M, dtype=np.float64)
    if sp.issparse(X):
        return matmul(XT if XT is not None else csr_transpose(X), M, out)
    if out is None:
        out = np.empty((X.shape[1], M.shape[1]))
    np.dot(X.T, M, out=out)
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


def step_buffers(k):
    """The reduction partials :func:`step` writes for k components: a driver allocates them once per run."""
    n = kern()._CHUNKS
    return np.empty((n, k, k)), np.empty(n), np.empty(n)


def step(solver, F, A, G, sweeps=None, old=True, buffers=None):
    """One linear-NMF update of factor F (INOUT) from numerator A and Gram matrix G of the other factor.

    ``sweeps`` (HALS only): sweeps per row at most, default :data:`HALS_SWEEPS`;
    1 is plain fast HALS (scikit-learn's ``solver="cd"``, iterate for iterate).
    ``buffers``: :func:`step_buffers` of F's k, reused (k = 20: the partials are 200 KB, fresh pages every call).
    Returns ``(F^T F, sum F_old o A, sum F_new o A)`` (new Gram, old and new cross terms);
    with ``old=False`` MU skips the old cross term (returned as 0.0).
    """
    K = kern()
    gp, co, cn = buffers if buffers is not None else step_buffers(F.shape[1])
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
