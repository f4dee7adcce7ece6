"""Shared pieces of the normalisers: the info record, input checks, labels,
the MB/MC history, a preconditioned CG and CSR plumbing.

Public functions validate here once; the private solvers assume checked,
canonical input (scikit-learn's split).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from bigclust._util.convergence import ConvergenceWarning
from bigclust._util.errors import DataError, UserError


class NormalizeConvergenceWarning(ConvergenceWarning):
    """A scaling or BBS solver stopped before reaching its tolerance."""


@dataclass
class NormalizeInfo:
    """What a normaliser did.

    Attributes
    ----------
    n_iter : int
        Iterations performed (passes over K for alternating / Dykstra /
        Sinkhorn / Ncut, Newton steps for ``dual``, outer iterations for MBBS).
    converged : bool
        ``row_err <= tol`` was reached (always True when no tolerance applies).
    row_err : float
        ``max_i |sum_j P_ij - 1|`` of the returned matrix (for the paper's
        alternating Sinkhorn variant, whose iterate is not symmetric, the larger
        of the row and column errors).
    kkt : dict or None
        KKT residuals of the exact Euclidean BBS problem (``dykstra``, ``dual``).
    history : list of (int, float, float)
        ``(iteration, MB, MC)`` every ``record_every`` iterations; MC is NaN
        when no labels were given.
    method : str
        ``"bbs/dual"``, ``"sk/symmetric"``, ...
    mu : ndarray or None
        Dual variable of the exact BBS solution, ``G = max(K + mu 1^T + 1 mu^T, 0)``,
        or the Sinkhorn scaling ``d`` (``P = diag(d) K diag(d)``).
    alpha, alpha_history, objective_history
        MBBS kernel weights, their trajectory and the objective after every
        outer iteration.
    n_inner : int
        Inner iterations (conjugate-gradient steps) summed over the run.
    """

    n_iter: int
    converged: bool
    row_err: float
    kkt: dict | None = None
    history: list = field(default_factory=list)
    method: str = ""
    mu: np.ndarray | None = None
    alpha: np.ndarray | None = None
    alpha_history: list = field(default_factory=list)
    objective_history: list = field(default_factory=list)
    n_inner: int = 0


#: below this many stored entries a CSR product runs serially: starting threads
#: would cost more than the product (it runs once per CG step)
PARALLEL_MIN_NNZ = 1 << 16


def kernels():
    """The dense Numba kernels, imported on first use so ``import bigclust`` stays fast."""
    from bigclust.normalize import _numba as normalize_numba

    return normalize_numba


def csr_kernels():
    """The CSR Numba kernels, imported on first use."""
    from bigclust.normalize import _csr_numba

    return _csr_numba


def norm2(x):
    """Euclidean norm without BLAS (see ``_csr_numba``: no BLAS threads between Numba regions)."""
    return float(np.sqrt(np.sum(x * x)))


# -- argument checks -------------------------------------------------------------


def check_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise UserError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def check_tol(tol):
    if tol is None:
        return None
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) or not tol > 0:
        raise UserError(f"tol must be a positive number or None, got {tol!r}")
    return float(tol)


def storage_dtype(dtype, default):
    if dtype is None:
        return np.dtype(default if np.dtype(default) in (np.float32, np.float64) else np.float64)
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise UserError(f"dtype must be float32 or float64, got {dt}")
    return dt


def labels(y, n):
    """Integer class codes 0..k-1 of ``y`` (None stays None)."""
    if y is None:
        return None
    y = np.asarray(y).ravel()
    if y.shape[0] != n:
        raise DataError(f"y has {y.shape[0]} labels but K has {n} rows")
    return np.unique(y, return_inverse=True)[1].astype(np.int64)


# -- matrix checks ---------------------------------------------------------------


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


def like_sparse(template, data, indices, indptr, shape):
    """A CSR result of the same scipy flavour (``csr_array`` / ``csr_matrix``) as the input."""
    cls = sp.csr_array if isinstance(template, sp.sparray) else sp.csr_matrix
    return cls((data, indices, indptr), shape=shape)


def row_ids(indptr):
    return np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))


# -- history and warnings ----------------------------------------------------------


class History:
    """``(iteration, MB, MC)`` records every ``every`` iterations (never at 0)."""

    def __init__(self, codes, every):
        self.codes = codes
        self.every = check_int("record_every", every, 0)
        self.rows = []

    def due(self, t):
        return self.every > 0 and t > 0 and t % self.every == 0

    @property
    def wants_classes(self):
        return self.codes is not None

    def add(self, t, rs, rc=None):
        mb = float(np.mean(np.abs(rs - 1.0)))
        mc = float(np.mean(np.abs(rc - 1.0))) if rc is not None else float("nan")
        self.rows.append((int(t), mb, mc))


def warn_not_converged(what, n_iter, err, tol):
    warnings.warn(f"{what} did not converge in {n_iter} iterations: max row-sum error "
                  f"{err:.3g} > tol {tol:.3g}", NormalizeConvergenceWarning, stacklevel=4)


# -- linear algebra -----------------------------------------------------------------


def pcg(matvec, b, x0, dinv, rtol, maxiter):
    """Jacobi-preconditioned conjugate gradients for a symmetric PSD operator.

    Stops when ``||b - A x||_2 <= rtol ||b||_2``; returns ``(x, iterations,
    converged)``.  For operators whose product is a heavy Numba pass (the dense
    on-the-fly Jacobian); CSR systems use the compiled ``_csr_numba.cg_csr``.
    Vector algebra avoids BLAS for the reason given there.
    """
    x = x0.copy()
    r = b - matvec(x) if np.any(x0) else b.copy()
    stop = rtol * norm2(b)
    if norm2(r) <= stop:
        return x, 0, True
    z = dinv * r
    p = z.copy()
    rz = np.sum(r * z)
    for it in range(1, maxiter + 1):
        q = matvec(p)
        pq = np.sum(p * q)
        if not pq > 0:  # direction in the null space: nothing more to gain
            return x, it, False
        a = rz / pq
        x += a * p
        r -= a * q
        if norm2(r) <= stop:
            return x, it, True
        z = dinv * r
        rz_new = np.sum(r * z)
        p *= rz_new / rz
        p += z
        rz = rz_new
    return x, maxiter, False
