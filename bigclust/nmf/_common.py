"""Shared pieces of the NMF family: the info record, input checks, initialisation, labels.

Public functions (:mod:`bigclust.nmf`) validate here once; the private
drivers assume checked, canonical float64 input (scikit-learn's split).
"""
from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from bigclust._util.checks import check_int, check_tol, dense_float64  # noqa: F401  (the NMF modules take them from here)
from bigclust._util.convergence import ConvergenceWarning
from bigclust._util.errors import DataError, UserError


class NMFConvergenceWarning(ConvergenceWarning):
    """An NMF run stopped on ``max_iter`` before its relative objective change reached ``tol``."""


@dataclass
class NMFInfo:
    """What an NMF (or kernel k-means) run did.

    Parameters
    ----------
    objective : ndarray of float64
        Objective of the best restart: value at the initialisation, then after
        every iteration (``n_iter + 1`` values).  For linear NMF
        ``1/2 ||X - V U^T||^2``, for bilinear NMF ``1/2 ||phi(X) - phi(X) W V^T||^2``.
    n_iter : int
        Iterations of the best restart.
    converged : bool
        The best restart stopped on ``tol`` (not on ``max_iter``).
    best : int
        Index of the best restart (lowest final objective).
    objectives : ndarray of float64, shape (n_init,)
        Final objective of every restart.
    n_iters : ndarray of int, shape (n_init,)
        Iterations of every restart.
    method : str
        ``"linear/mu"``, ``"linear/hals"``, ``"bilinear/split"``,
        ``"bilinear/nonneg"``, ``"kernel-kmeans"``; ``+ncw`` when weighted.
    ncw_weights : ndarray or None
        ``d^(-1/2)`` per document when NCW was used.
    n_empty_reseeded : int
        Kernel k-means only: empty clusters re-seeded over all restarts.
    extra : dict
        Method-specific records; kernel k-means: ``"labels_all"`` (n_init, n),
        the labels of every restart.
    """

    objective: np.ndarray
    n_iter: int
    converged: bool
    best: int
    objectives: np.ndarray
    n_iters: np.ndarray
    method: str = ""
    ncw_weights: np.ndarray | None = None
    n_empty_reseeded: int = 0
    extra: dict = field(default_factory=dict)


SOLVERS = ("mu", "hals")
INITS = ("random", "nndsvd")


def check_components(k, n, what="X"):
    if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 1:
        raise UserError(f"n_components must be a positive integer, got {k!r}")
    if k > n:
        raise DataError(f"n_components={k} is larger than the number of documents ({n} rows of {what})")
    return int(k)


def _first_bad_row(indptr, pos):
    return int(np.searchsorted(indptr, pos, side="right") - 1)


def as_data(X, what="X", *, nonneg=True, model="linear NMF", row0=0):
    """X as float64 C-contiguous ndarray or canonical CSR (int64 row pointers), checked.

    CSR column indices stay int32 while the columns fit (the products read one
    index per nonzero and are memory-bound), int64 beyond.

    Raises a one-line DataError for a wrong shape, non-finite or (when
    ``nonneg``) negative entries, and for all-zero documents (rows), which no
    factorisation can place.  All-zero terms (columns) are harmless and kept.
    Row numbers in messages are offset by ``row0`` (the first row of a block).
    """
    if sp.issparse(X):
        if X.ndim != 2:
            raise DataError(f"{what} must be 2-D (documents x terms), got shape {X.shape}")
        X = sp.csr_matrix(X, dtype=np.float64, copy=True)
        X.sum_duplicates()
        X.eliminate_zeros()
        X.sort_indices()
        X.indices = X.indices.astype(np.int32 if X.shape[1] < 2 ** 31 else np.int64, copy=False)
        X.indptr = X.indptr.astype(np.int64)
        bad = np.flatnonzero(~np.isfinite(X.data))
        if bad.size:
            raise DataError(f"{what} has a non-finite entry in row {row0 + _first_bad_row(X.indptr, bad[0])}; "
                            f"{model} needs finite data")
        neg = np.flatnonzero(X.data < 0) if nonneg else np.empty(0)
        if neg.size:
            raise DataError(f"{what} has negative entries (first in row {row0 + _first_bad_row(X.indptr, neg[0])}); "
                            f"linear NMF needs X >= 0 — {USE_BILINEAR}")
        empty = np.flatnonzero(np.diff(X.indptr) == 0)
    else:
        from bigclust.nmf.ops import dense_row_counts

        X = dense_float64(X, what, "documents x terms")
        nnz, nonfinite, negative = dense_row_counts(X)
        if nonfinite.any():
            raise DataError(f"{what} has a non-finite entry in row {row0 + int(np.flatnonzero(nonfinite)[0])}; "
                            f"{model} needs finite data")
        if nonneg and negative.any():
            raise DataError(f"{what} has negative entries (first in row {row0 + int(np.flatnonzero(negative)[0])}); "
                            f"linear NMF needs X >= 0 — {USE_BILINEAR}")
        empty = np.flatnonzero(nnz == 0)
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise DataError(f"{what} is empty (shape {X.shape})")
    if empty.size:
        raise DataError(f"{what} has {empty.size} all-zero document(s) (first: row {row0 + int(empty[0])}); "
                        f"{model} cannot place them — drop them first (all-zero terms are harmless)")
    return X


def normalize_columns(F, norms):
    """Columns of F divided by ``norms`` (a zero norm leaves the column, which is then zero)."""
    safe = np.where(norms > 0, norms, 1.0)
    return F / safe


#: what to do with data of both signs: the estimator's parameter and the config's method
USE_BILINEAR = 'use the bilinear model (model="bilinear"; method binmf in a config)'


def labels_from(V, what="V"):
    """``argmax`` of V's rows (first on ties); warn when a row of V is all zero (it gets label 0)."""
    zero = ~(V > 0).any(axis=1)
    if zero.any():
        warnings.warn(f"NMF: {int(zero.sum())} document(s) have an all-zero row of {what} "
                      f"(first: row {int(np.flatnonzero(zero)[0])}); labelled 0", RuntimeWarning, stacklevel=4)
    return np.argmax(V, axis=1).astype(np.int32)


def warn_not_converged(what, kept_converged, n_not, n_init, max_iter, tol):
    """Warn when the restart kept (lowest objective) stopped on max_iter: restarts left behind do not
    matter to the result (scikit-learn's KMeans does not warn about them either)."""
    if not kept_converged and tol > 0:  # tol=0 asks for exactly max_iter iterations
        others = f"; {n_not} of {n_init} restarts did" if n_init > 1 else ""
        warnings.warn(f"{what}: the restart kept (lowest objective) reached max_iter={max_iter} before the "
                      f"relative objective change fell below tol={tol:g}{others}", NMFConvergenceWarning,
                      stacklevel=4)


def rel_change(prev, cur):
    return abs(prev - cur) / max(abs(prev), np.finfo(np.float64).tiny)


def pick_best(results, what, max_iter, tol):
    """Best restart (lowest final objective) and the info record."""
    finals = np.array([h[-1] for h, _, _ in results])
    best = int(np.argmin(finals))
    n_iters = np.array([it for _, it, _ in results], dtype=np.int64)
    h, it, conv = results[best]
    warn_not_converged(what, conv, sum(not c for _, _, c in results), len(results), max_iter, tol)
    return best, NMFInfo(objective=h, n_iter=int(it), converged=bool(conv), best=best, objectives=finals,
                         n_iters=n_iters)


def degrees_weights(d, what):
    """NCW weights ``d^(-1/2)`` of degrees d, or a one-line DataError naming the first row with ``d <= 0``."""
    bad = np.flatnonzero(~(d > 0))
    if bad.size:
        i = int(bad[0])
        raise DataError(f"NCW needs positive degrees d = K 1, but row {i} of {what} has d = {d[i]:.3g}")
    return 1.0 / np.sqrt(d)


def scale_rows(X, w):
    """Row i of X (dense or CSR) times ``w_i``, as a new array."""
    if sp.issparse(X):
        Y = X.copy()
        Y.data *= np.repeat(w, np.diff(Y.indptr))
        return Y
    return X * w[:, None]
