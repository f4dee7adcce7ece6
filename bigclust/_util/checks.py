"""Argument checks shared by the algorithms of every layer: integers in a range and convergence tolerances.

One check, one message: ``k-means``, NMF and the normalisations (in memory
and out of core) validate ``tol`` here, so a tolerance means the same thing
everywhere.
"""
from __future__ import annotations

import math
import numbers

from bigclust._util.errors import UserError


def check_int(name, value, low, high=None) -> int:
    """``value`` as an int in ``[low, high]`` (``high`` None: no upper bound), else a one-line UserError."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise UserError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        rng = f">= {low}" if high is None else f"between {low} and {high}"
        raise UserError(f"{name}={value} must be {rng}")
    return int(value)


def check_tol(tol, *, none_ok=False):
    """A convergence tolerance: a finite real number >= 0 (0: run every iteration), as a float.

    ``none_ok``: None is allowed too (the normalisations: no tolerance, run
    ``n_iter`` iterations) and returned as None.
    """
    if tol is None and none_ok:
        return None
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not (math.isfinite(tol) and tol >= 0):
        what = "a finite number >= 0" + (" or None" if none_ok else "")
        raise UserError(f"tol must be {what}, got {tol!r}")
    return float(tol)


def dense_float64(X, where="X", shape="samples x features"):
    """``X`` as a C-contiguous float64 2-D array of numbers (a view when it already is one), else a DataError.

    ``shape`` names the axes in the message (NMF: ``"documents x terms"``). Finiteness is left to the
    caller, whose message says which row and what the method needs.
    """
    import numpy as np

    from bigclust._util.errors import DataError

    X = np.asarray(X)
    if X.ndim != 2:
        raise DataError(f"{where} must be 2-D ({shape}), got shape {X.shape}")
    if X.dtype.kind not in "fiub":
        raise DataError(f"{where} must be numeric, got dtype {X.dtype}")
    return np.ascontiguousarray(X, dtype=np.float64)
