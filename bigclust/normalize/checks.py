"""Checks of a similarity matrix K, dense or CSR, in one kernel sweep: shape, finiteness, symmetry, signs.

Every normalisation validates its input here, and so do the kernel methods of
:mod:`bigclust.nmf` (bilinear NMF, kernel k-means): one set of rules and
messages for "a similarity matrix".
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import DataError
from bigclust.normalize._common import kernels


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


def check_sparse(K, what, *, nonneg=False, positive_rows=None):
    """Validate a scipy.sparse similarity matrix; the support is the stored pattern.

    Returns ``(K, rowsums)`` with K a canonical CSR copy (sorted indices, no
    duplicates, float32/float64 data, int32/int64 indices) whose pattern and
    values are symmetric.  Explicit zeros are kept: they are part of the support.
    """
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] == 0:
        raise DataError(f"K must be a non-empty square matrix, got shape {K.shape}")
    K = sp.csr_matrix(K, dtype=_float_dtype(K.dtype), copy=True)
    K.sum_duplicates()
    K.sort_indices()
    n = K.shape[0]
    bad = np.flatnonzero(~np.isfinite(K.data))
    if bad.size:
        row = int(np.searchsorted(K.indptr, bad[0], side="right") - 1)
        raise DataError(f"K has a non-finite entry at ({row}, {K.indices[bad[0]]}); {what} needs a finite K")
    T = K.T.tocsr()
    T.sort_indices()
    if not (np.array_equal(K.indptr, T.indptr) and np.array_equal(K.indices, T.indices)):
        raise DataError("K's sparsity pattern is not symmetric (an entry is stored at (i, j) but not at "
                        f"(j, i)); {what} works on a symmetric support: symmetrise K or eliminate_zeros()")
    asym = float(np.abs(K.data - T.data).max(initial=0.0))
    full = np.diff(K.indptr) > 0  # reduceat needs non-empty segments
    starts = K.indptr[:-1][full]
    lo, hi, rs = np.zeros(n), np.zeros(n), np.zeros(n)
    if starts.size:
        lo[full] = np.minimum.reduceat(K.data, starts)
        hi[full] = np.maximum.reduceat(K.data, starts)
        rs[full] = np.add.reduceat(K.data.astype(np.float64), starts)
    _check_values(what, asym, lo, hi, rs, K.dtype, nonneg, positive_rows)
    return K, rs
