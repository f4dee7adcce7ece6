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

from bigclust._util.checks import check_tol as _check_tol
from bigclust._util.convergence import ConvergenceWarning
from bigclust._util.errors import DataError, UserError


class NormalizeConvergenceWarning(ConvergenceWarning):
    """A scaling or BBS solver stopped before reaching its tolerance."""


@dataclass
class NormalizeInfo:
    """What a normaliser did.

    Parameters
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
    alpha, alpha_history, objective_history : ndarray or list, optional
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
    """A stopping tolerance >= 0, or None (no test: run ``n_iter`` iterations); the one check of bigclust."""
    return _check_tol(tol, none_ok=True)


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
        self.add_errors(t, rs - 1.0, rc)

    def add_errors(self, t, F, rc=None):
        """:meth:`add` from the row errors ``F = rs - 1`` (the Newton loop keeps those, not ``rs``)."""
        mb = float(np.mean(np.abs(F)))
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
