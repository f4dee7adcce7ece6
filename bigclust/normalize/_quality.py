"""Quality of a (nearly) bi-stochastic matrix, paper 000 Eqs. 32-33.

``MB = (1/n) sum_i |sum_j P_ij - 1|`` measures the distance from
bi-stochasticity; ``MC = (1/n) sum_i |sum_{j: y_j = y_i} P_ij - 1|`` how far
each row's within-class mass is from the whole unit (lower is better for
both).  Both need only per-row partial sums, so they stream: compute
:func:`quality_partial` on every row block and combine with
:func:`quality_from_sums`.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust.normalize._common import csr_kernels, kernels, labels
from bigclust._util.errors import DataError


def _partial(P_block, codes, row0):
    b = P_block.shape[0]
    rs, rc = np.empty(b), np.empty(b)
    if sp.issparse(P_block):
        P = sp.csr_matrix(P_block)
        P.sum_duplicates()
        data = P.data if P.data.dtype in (np.float32, np.float64) else P.data.astype(np.float64)
        csr_kernels().csr_class_sums(data, P.indices, P.indptr, codes, row0, rs, rc)
    else:
        P = np.asarray(P_block)
        P = np.ascontiguousarray(P, dtype=P.dtype if P.dtype in (np.float32, np.float64) else np.float64)
        kernels().quality_block(P, codes, row0, rs, rc)
    return rs, rc


def quality_partial(P_block, y, row0=0):
    """Row sums and same-class row sums of rows ``row0 .. row0+b-1`` of P.

    Parameters
    ----------
    P_block : ndarray or scipy.sparse matrix, shape (b, n)
        Consecutive rows of P.
    y : array-like, shape (n,)
        Class labels of all n samples (any dtype).
    row0 : int
        Index of the block's first row.

    Returns
    -------
    rs, rc : ndarray (b,) float64
        ``sum_j P_ij`` and ``sum_{j: y_j = y_i} P_ij`` (float64 accumulation).
    """
    if not sp.issparse(P_block):
        P_block = np.asarray(P_block)
    if P_block.ndim != 2:
        raise DataError(f"P block must be 2-D, got shape {P_block.shape}")
    n, b = P_block.shape[1], P_block.shape[0]
    codes = labels(y, n)
    if row0 < 0 or row0 + b > n:
        raise DataError(f"row block {row0}..{row0 + b - 1} lies outside rows 0..{n - 1}")
    return _partial(P_block, codes, int(row0))


def quality_from_sums(rs, rc):
    """``(MB, MC)`` from the concatenated row sums and same-class row sums of all rows."""
    rs, rc = np.asarray(rs, dtype=np.float64), np.asarray(rc, dtype=np.float64)
    return float(np.mean(np.abs(rs - 1.0))), float(np.mean(np.abs(rc - 1.0)))


def quality(P, y):
    """Bi-stochasticity MB and clustering potential MC of P (paper 000, Eqs. 32-33).

    Parameters
    ----------
    P : ndarray or scipy.sparse matrix, shape (n, n)
        A normalised kernel.
    y : array-like, shape (n,), or None
        True class labels.  None: MB only (MC would equal it), MC is NaN.

    Returns
    -------
    MB : float
        Bi-stochasticity (Eq. 32).
    MC : float
        Clustering potential (Eq. 33).
    """
    if not sp.issparse(P):
        P = np.asarray(P)
    if P.ndim != 2 or P.shape[0] != P.shape[1]:
        raise DataError(f"P must be a square matrix, got shape {P.shape}")
    if y is None:
        return quality_from_sums(*quality_partial(P, np.zeros(P.shape[0], np.int64), 0))[0], float("nan")
    return quality_from_sums(*quality_partial(P, y, 0))
