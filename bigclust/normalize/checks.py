"""Checks of a similarity matrix K, dense or CSR, in one kernel sweep: shape, finiteness, symmetry, signs.

Every normalisation validates its input here, and so do the kernel methods of
:mod:`bigclust.nmf` (bilinear NMF, kernel k-means): one set of rules and
messages for "a similarity matrix".
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import DataError
from bigclust.normalize._common import csr_kernels, kernels


def _float_dtype(dt):
    if dt.kind == "c":
        raise DataError("K is complex; a similarity matrix must be real")
    return dt if dt in (np.float32, np.float64) else np.dtype(np.float64)


def check_dense(K, what, *, nonneg=False, positive_rows=None):
    """Validate a dense similarity matrix in one kernel sweep.

    Returns ``(K, rowsums, asym)``: K as a C-contiguous float32/float64 array
    (no copy when it already is one), its float64 row sums and ``max |K - K^T|``.
    ``positive_rows`` is the message tail used when a row sums to <= 0.
    """
    K = np.asarray(K)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] == 0:
        raise DataError(f"K must be a non-empty square matrix, got shape {K.shape}")
    K = K.astype(_float_dtype(K.dtype), copy=False)
    if not K.flags.c_contiguous:
        # a symmetric Fortran-ordered K equals its (C-ordered) transpose view
        K = K.T if K.flags.f_contiguous else np.ascontiguousarray(K)
    n = K.shape[0]
    rs, lo, hi = np.empty(n), np.empty(n), np.empty(n)
    bad = np.empty(n, dtype=np.int64)
    asym = np.empty((n + 63) // 64)
    kernels().dense_check(K, rs, lo, hi, bad, asym)
    rows = np.flatnonzero(bad >= 0)
    if rows.size:
        raise DataError(f"K has a non-finite entry at ({rows[0]}, {bad[rows[0]]}); {what} needs a finite K")
    _check_values(what, float(asym.max(initial=0.0)), lo, hi, rs, K.dtype, nonneg, positive_rows)
    return K, rs, float(asym.max(initial=0.0))


def _check_values(what, asym, lo, hi, rs, dtype, nonneg, positive_rows):
    scale = max(float(np.abs(lo).max()), float(np.abs(hi).max()), np.finfo(np.float64).tiny)
    if asym > 64 * np.finfo(dtype).eps * scale:
        raise DataError(f"K is not symmetric (max |K - K^T| = {asym:.3g}); {what} needs a symmetric K")
    if nonneg and lo.min() < 0:
        i = int(np.argmin(lo))
        raise DataError(f"K has negative entries (min {lo[i]:.3g} in row {i}); {what} needs K >= 0")
    if positive_rows is not None:
        zero = np.flatnonzero(~(rs > 0))
        if zero.size:
            kind = "zero" if lo[zero[0]] >= 0 else "non-positive-sum"
            raise DataError(f"K has a {kind} row (row {zero[0]}): {positive_rows}")


def check_sparse(K, what, *, nonneg=False, positive_rows=None, copy=True):
    """Validate a scipy.sparse similarity matrix; the support is the stored pattern.

    Returns ``(K, rowsums)`` with K a canonical CSR matrix (sorted indices, no
    duplicates, float32/float64 data, int32/int64 indices) whose pattern and
    values are symmetric.  Explicit zeros are kept: they are part of the support.
    ``copy=False`` lets a caller that only reads K share the input's arrays when
    nothing needs to change (at 8M rows a copy of K is about a gigabyte).
    """
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] == 0:
        raise DataError(f"K must be a non-empty square matrix, got shape {K.shape}")
    K = _canonical_csr(K, _float_dtype(K.dtype), copy)
    n = K.shape[0]
    ck = csr_kernels()
    bad = ck.first_nonfinite(K.data)
    if bad >= 0:
        row = int(np.searchsorted(K.indptr, bad, side="right") - 1)
        raise DataError(f"K has a non-finite entry at ({row}, {K.indices[bad]}); {what} needs a finite K")
    # a mirror search instead of K.T: the transpose would be a second copy of K
    worst, missing = np.zeros(ck._CHUNKS), np.zeros(ck._CHUNKS, dtype=np.int64)
    ck.csr_symmetry(K.data, K.indices, K.indptr, worst, missing)
    if missing.any():
        raise DataError("K's sparsity pattern is not symmetric (an entry is stored at (i, j) but not at "
                        f"(j, i)); {what} works on a symmetric support: symmetrise K or eliminate_zeros()")
    asym = float(worst.max())
    full = np.diff(K.indptr) > 0  # reduceat needs non-empty segments
    lo, hi = np.zeros(n), np.zeros(n)
    if full.any():
        starts = K.indptr[:-1][full]
        lo[full] = np.minimum.reduceat(K.data, starts)
        hi[full] = np.maximum.reduceat(K.data, starts)
    rs = _row_sums(K, full)
    _check_values(what, asym, lo, hi, rs, K.dtype, nonneg, positive_rows)
    return K, rs


#: stored entries per block of row sums: bounds the float64 copy of K.data
_ROWSUM_BLOCK = 1 << 20


def _row_sums(K, full):
    """``np.add.reduceat(K.data.astype(float64), starts)`` block by block of rows, with the same bits.

    reduceat sums each segment on its own, with NumPy's reduction loop (which
    need not add in stored order, so a compiled loop could not be trusted to
    match it); cutting between rows therefore changes nothing, and the float64
    copy of the whole of K.data (8 bytes per entry) is never made.
    """
    n, indptr = K.shape[0], K.indptr
    rs = np.zeros(n)
    a = 0
    while a < n:
        b = min(n, int(np.searchsorted(indptr, int(indptr[a]) + _ROWSUM_BLOCK, side="right")) - 1)
        b = max(b, a + 1)
        f = full[a:b]
        if f.any():
            base = indptr[a]
            seg = K.data[base:indptr[b]].astype(np.float64)
            rs[a:b][f] = np.add.reduceat(seg, indptr[a:b][f] - base)
        a = b
    return rs


def _canonical_csr(K, dtype, copy):
    """K as a canonical ``csr_matrix``; without ``copy``, sharing the input's arrays when it already is one."""
    if not copy and K.format == "csr" and K.dtype == dtype:
        # the copy path's steps without its copies: K.copy() rebuilds K from its three arrays (a csr_matrix
        # narrows int64 indices there when they fit), then csr_matrix shares them; same arrays, same dtypes.
        # The rebuilt object has no cached canonical flag, so the test below reads the indices, as
        # sum_duplicates / sort_indices on a fresh copy would.
        C = sp.csr_matrix(type(K)((K.data, K.indices, K.indptr), shape=K.shape, copy=False), copy=False)
        if C.has_canonical_format:
            return C
    C = sp.csr_matrix(K, dtype=dtype, copy=True)
    C.sum_duplicates()
    C.sort_indices()
    return C
