"""Checks of estimator parameters and ``y``, the scikit-learn way.

Every check names the estimator and its parameter (never a config key), accepts NumPy scalars
(``np.int64(3)`` from a parameter grid is an integer) and returns a plain Python value, which is
what the pipeline's config validation expects.  Raised as :class:`bigclust._util.errors.UserError`, a
ValueError, as scikit-learn's estimator checks want.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from bigclust._util.errors import UserError


def _fail(est, name, expect, value):
    if isinstance(value, np.generic):
        value = value.item()        # 2.0, not np.float64(2.0)
    raise UserError(f"{type(est).__name__}: {name} must be {expect}, got {value!r}")


def integer(est, name, low=None, high=None, *, expect=None) -> int:
    """``getattr(est, name)`` as an int in ``[low, high]`` (bools refused)."""
    v = getattr(est, name)
    ok = isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
    if not ok or (low is not None and v < low) or (high is not None and v > high):
        if expect is None:
            expect = "an integer" + (f" >= {low}" if low is not None else "") \
                + (f" and <= {high}" if high is not None else "")
        _fail(est, name, expect, v)
    return int(v)


def real(est, name, low=None, *, strict=False) -> float:
    """``getattr(est, name)`` as a finite float ``>= low`` (``> low`` with ``strict``)."""
    v = getattr(est, name)
    ok = isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and math.isfinite(v)
    if ok and low is not None:
        ok = v > low if strict else v >= low
    if not ok:
        _fail(est, name, "a finite number" + (f" {'>' if strict else '>='} {low:g}" if low is not None else ""), v)
    return float(v)


def boolean(est, name) -> bool:
    """``getattr(est, name)`` as a bool: True / False (or NumPy's); strings such as ``"no"`` are refused."""
    v = getattr(est, name)
    if not isinstance(v, (bool, np.bool_)):
        _fail(est, name, "True or False", v)
    return bool(v)


def choice(est, name, options):
    """``getattr(est, name)``, one of ``options`` (``None`` may be one of them)."""
    v = getattr(est, name)
    if not any(v is o if o is None else (isinstance(v, str) and v == o) for o in options):
        _fail(est, name, "one of " + ", ".join(map(repr, options)), v)
    return v


def gamma(est, name="gamma"):
    """A Gaussian width: a number > 0 or ``"median"``."""
    v = getattr(est, name)
    if isinstance(v, str):
        if v != "median":
            _fail(est, name, 'a number > 0 or "median"', v)
        return v
    return real(est, name, 0.0, strict=True)


def max_memory(est):
    """``"4GB"``, ``"512MiB"`` or a number of bytes."""
    from bigclust._util.plan import parse_bytes
    v = est.max_memory
    if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)):
        v = int(v)
    try:
        if not isinstance(v, (str, int)) or parse_bytes(v) <= 0:
            raise ValueError
    except ValueError:
        _fail(est, "max_memory", 'a size like "4GB" or "512MiB", or a number of bytes > 0', v)
    return v


def scheduler(est):
    v = est.scheduler
    if v is not None and not isinstance(v, str):
        _fail(est, "scheduler", 'None or a dask.distributed address like "tcp://host:8786"', v)
    return v


def n_clusters(est, n) -> int:
    """``n_clusters`` between 1 and ``n_samples - 1`` (1 itself puts every sample in one cluster)."""
    k = integer(est, "n_clusters", 1)
    if k > 1 and k >= n:
        raise UserError(f"{type(est).__name__}: n_clusters={k} must be below n_samples={n}")
    return k


def semi_labels(est, y, n):
    """``y`` of ``fit(X, y)`` for AkS-SC: ``(codes 0..K-1 with -1 kept, classes)``, or ``(None, None)``.

    None, a fully labelled or a fully unlabelled ``y`` means clustering (a fully labelled ``y`` is ignored,
    as clusterers ignore it).  Labels must be integers (integral floats such as ``-1.0`` included), one per
    sample; anything else is an error rather than a silent fall-back to clustering.
    """
    if y is None:
        return None, None
    name = type(est).__name__
    y = np.asarray(y)
    if y.ndim != 1:
        raise UserError(f"{name}: y must be 1-D (one label per sample, -1 = unlabelled), got shape {y.shape}")
    if y.shape[0] != n:
        raise UserError(f"{name}: y has {y.shape[0]} labels but X has {n} samples")
    if y.dtype.kind == "O":         # Python ints in an object array are integer labels all the same
        y = np.asarray(y.tolist())
    if y.dtype.kind not in "iuf":
        raise UserError(f"{name}: Unknown label type: y must hold integer class labels with -1 for unlabelled "
                        f"samples, got dtype {y.dtype}")
    if y.dtype.kind == "f":
        bad = ~np.isfinite(y) | (y != np.round(y))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise UserError(f"{name}: y must hold integer class labels with -1 for unlabelled samples; "
                            f"y[{i}] = {y[i].item()!r}")
        y = y.astype(np.int64)
    lab = y != -1
    if lab.all() or not lab.any():
        return None, None
    classes = np.unique(y[lab])
    k = integer(est, "n_clusters", 1)
    if classes.size != k:
        raise UserError(f"{name}: y labels samples of {classes.size} classes but n_clusters={k}: AkS-SC needs at "
                        "least one labelled sample in every cluster (set n_clusters to the number of labelled "
                        "classes)")
    codes = np.full(n, -1, dtype=np.int64)
    codes[lab] = np.searchsorted(classes, y[lab])
    return codes, classes


def subspace_shapes(est, aksc: dict, n: int, d: int):
    """The data-shape checks a SubspaceClustering fit would meet in the pipeline, for ``n_clusters=1``,
    which skips it: an image layout of d pixels where one is used, and ``pca <= min(n, d)``."""
    from bigclust.algo.preprocess import check_pca_components
    from bigclust.subspace.augment import PRESETS, image_shape_of
    name = aksc["image"] if aksc["image"] != "auto" else aksc["augment"]
    try:   # the pipeline's own checks, named for the estimator
        if name in PRESETS and (aksc["features"] == "scattering" or aksc["augment"] not in ("none", "interpolate")):
            image_shape_of(PRESETS[name]["image_shape"], d)
        if aksc["pca"]:
            check_pca_components(aksc["pca"], n, d)
    except UserError as e:
        raise type(e)(f"{type(est).__name__}: {e}") from None
