"""The data side of the estimators: input checks, the array source the pipeline ingests, all-zero rows.

NumPy and scipy.sparse input is checked by scikit-learn's ``validate_data``
(NaN, inf, strings, too few samples, feature names).  A Dask array stays lazy:
its checks run while it is read block by block, with messages in the same
words (``X contains NaN or infinity (first in row 7)``).
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import DataError

#: the pipeline stores data as float32; a finite float64 beyond this would become inf there
F32_MAX = float(np.finfo(np.float32).max)


def _is_dask(X):
    return hasattr(X, "dask") and hasattr(X, "compute")


def _validate(est, X):
    try:                               # scikit-learn >= 1.6
        from sklearn.utils.validation import validate_data
        return validate_data(est, X, accept_sparse="csr", dtype=[np.float64, np.float32], ensure_min_samples=2)
    except ImportError:                # 1.4, 1.5: the estimator method of the same name
        return est._validate_data(X, accept_sparse="csr", dtype=[np.float64, np.float32], ensure_min_samples=2)


def _check_X(est, X):
    """NumPy / scipy.sparse / Dask input, checked the scikit-learn way (Dask arrays stay lazy)."""
    if _is_dask(X):
        if X.ndim != 2:
            raise ValueError(f"Expected a 2D array, got a {X.ndim}D Dask array")
        n = X.shape[0]
        if n is None or any(c != c for c in X.shape):
            raise ValueError("Dask array with unknown chunk sizes; call X.compute_chunk_sizes() first")
        if n < 2:
            raise ValueError(f"Found array with {n} sample(s) (shape={tuple(X.shape)}) while a minimum of 2 is "
                             "required.")
        est.__dict__.pop("feature_names_in_", None)
        est.n_features_in_ = X.shape[1]
        return X
    X = _validate(est, X)
    _check_float32_range(X, 0)
    return X


def _not_finite(row, who=None):
    return DataError(("" if who is None else f"{who}: ") + f"X contains NaN or infinity (first in row {row})")


def _beyond_float32(row, who=None):
    return DataError(("" if who is None else f"{who}: ") + f"X has values beyond the float32 range (first in row "
                     f"{row}; data are stored as float32): rescale X")


def _first_bad_row(blk, bad_values):
    if sp.issparse(blk):
        return int(np.searchsorted(blk.indptr, np.flatnonzero(bad_values)[0], side="right") - 1)
    return int(np.flatnonzero(bad_values.reshape(blk.shape).any(axis=1))[0])


def _check_float32_range(blk, r0):
    """Refuse finite values that float32 storage would turn into inf (a clearer error than "NaN or inf")."""
    vals = blk.data if sp.issparse(blk) else np.asarray(blk)
    if vals.dtype == np.float64 and vals.size and np.abs(vals).max() > F32_MAX:
        raise _beyond_float32(r0 + _first_bad_row(blk, np.abs(vals) > F32_MAX))


def array_source(X, chunk_rows, y=None):
    """A :class:`bigclust.datasets.Source` over an in-memory or Dask array (unlabelled: y = -1 unless given).

    Every block is checked for NaN / inf and for the float32 range before it is cast (a Dask array is
    computed here, one block at a time).
    """
    from bigclust.datasets import DatasetInfo, Source

    n, d = X.shape
    info = DatasetInfo("array", "array given to fit", int(n), int(d), 0, bool(sp.issparse(X)), ())
    dask_array = _is_dask(X)

    def blocks(hint):
        step = max(1, int(hint))
        for r0 in range(0, n, step):
            blk = X[r0:r0 + step]
            if dask_array:
                blk = blk.compute()
                vals = blk.data if sp.issparse(blk) else np.asarray(blk)
                if vals.dtype.kind == "f" and not np.isfinite(vals).all():
                    raise _not_finite(r0 + _first_bad_row(blk, ~np.isfinite(vals)))
                _check_float32_range(blk, r0)
            blk = sp.csr_matrix(blk, dtype=np.float32) if sp.issparse(blk) else np.asarray(blk, dtype=np.float32)
            yield blk, (np.full(blk.shape[0], -1, dtype=np.int64) if y is None else y[r0:r0 + blk.shape[0]])

    return Source(info, blocks)


def in_estimator_words(msg, params):
    """A pipeline message in an estimator's words: ``[store] max_memory`` -> ``max_memory`` when that key
    is one of the estimator's ``params`` (an estimator user never wrote the config it was built into)."""
    return re.sub(r"(?:--[\w-]+ or )?\[(\w+)\] (\w+)", lambda m: m.group(2) if m.group(2) in params else m.group(0),
                  msg)


def _abs_row_stats(b):
    """``(rows, 2)``: sum and max of |x| per row of a block (NumPy or scipy.sparse)."""
    a = abs(b)
    if sp.issparse(a):
        return np.stack([np.asarray(a.sum(axis=1)).ravel(), a.max(axis=1).toarray().ravel()], axis=1)
    return np.stack([a.sum(axis=1), a.max(axis=1)], axis=1)


def drop_zero_rows(X, k, who, what, fate="labelled -1"):
    """``(keep mask or None, X without its all-zero rows)``: such a row cannot be placed (label -1, as noise).

    A Dask array is scanned once, block by block, for the mask (n booleans) and stays lazy; a row
    with NaN or inf is an error here (its absolute sum is not finite), not an all-zero row.
    """
    if _is_dask(X):
        # one pass, per block, so that blocks may be scipy.sparse matrices too (dask's own reductions call
        # numpy keywords scipy.sparse does not take); per column block: [sum |x|, max |x|] of each row
        nb = len(X.chunks[1])
        st = np.asarray(X.map_blocks(_abs_row_stats, dtype=np.float64, chunks=(X.chunks[0], (2,) * nb),
                                     meta=np.empty((0, 0))).compute())
        s, top = st[:, 0::2].sum(axis=1), st[:, 1::2].max(axis=1)
        if not np.isfinite(s).all():
            raise _not_finite(int(np.flatnonzero(~np.isfinite(s))[0]), who)
        if X.dtype == np.float64 and (top > F32_MAX).any():   # here, while row numbers are still X's own
            raise _beyond_float32(int(np.flatnonzero(top > F32_MAX)[0]), who)
        keep = s > 0
    else:
        keep = np.asarray((abs(X) if sp.issparse(X) else np.abs(X)).sum(axis=1)).ravel() > 0
    if keep.all():
        return None, X
    if keep.sum() <= max(k, 2):
        raise ValueError(f"{who}: X has {int((~keep).sum())} all-zero rows and only {int(keep.sum())} others; "
                         f"n_clusters={k} needs more non-zero {what}s")
    warnings.warn(f"{who}: {int((~keep).sum())} all-zero {what}(s) (first: row {int(np.flatnonzero(~keep)[0])}) "
                  f"cannot be placed; {fate}", RuntimeWarning, stacklevel=user_stacklevel())
    return keep, X[np.flatnonzero(keep)]


def user_stacklevel():
    """The ``stacklevel`` that makes a warning point at the first caller outside bigclust.

    For the function that calls :func:`warnings.warn`: a fit reached through
    ``fit_predict``, a scikit-learn ``Pipeline`` or directly gets the user's line either way.
    """
    import sklearn
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # bigclust/: the families' too
    # contextlib: frames of warnings_at_caller's exit; sklearn: a Pipeline / GridSearchCV calling our fit
    skip = (here, os.path.abspath(contextlib.__file__), os.path.dirname(os.path.abspath(sklearn.__file__)) + os.sep)
    f, level = sys._getframe(1), 1
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(skip):
        f, level = f.f_back, level + 1
    return level


@contextlib.contextmanager
def warnings_at_caller():
    """Re-issue the warnings of the block once each (by category and text) at the user's line.

    The pipeline's stages warn from deep inside bigclust (and some warn once per stage that
    meets the same condition); an estimator user wants one warning per fit, pointing at their call.
    The filters in force still apply when the warnings are re-issued (``error`` still raises).
    Only in the main thread: ``warnings.catch_warnings`` swaps process-wide state, and two fits in
    threads that overlapped would leave the recording on and swallow every later warning.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield
            finally:
                pending = list(caught)
    finally:
        seen = set()
        for w in pending:
            key = (w.category, str(w.message))
            if key not in seen:
                seen.add(key)
                warnings.warn(w.message, stacklevel=user_stacklevel())


def _expand_rows(keep, a, fill=0.0, dtype=np.float64):
    """Rows of the kept rows back to all rows (``fill`` for the dropped ones; labels: -1, int64)."""
    if keep is None or a is None:
        return a
    out = np.full((keep.size,) + a.shape[1:], fill, dtype=dtype)
    out[keep] = a
    return out


def _expand_square(keep, K):
    """An n' x n' affinity over the kept rows back to n x n: empty rows and columns for the dropped ones."""
    if keep is None or K is None:
        return K
    idx = np.flatnonzero(keep)
    if sp.issparse(K):
        K = K.tocoo()
        return sp.csr_matrix((K.data, (idx[K.row], idx[K.col])), shape=(keep.size, keep.size))
    out = np.zeros((keep.size, keep.size), dtype=K.dtype)
    out[np.ix_(idx, idx)] = K
    return out
