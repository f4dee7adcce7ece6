"""Clustering quality against ground truth: accuracy (Hungarian), NMI, error rate.

Every score is computed from the contingency table ``N[i, j]`` = number of
samples of class ``i`` put in cluster ``j``.  Labels may be any values (ints,
strings); a class or cluster is identified only by equality of labels, so all
scores are invariant to renaming either labelling.

:func:`batch_scores` scores the labels of many k-means restarts against the
same ground truth at once (the papers report the average and the maximum over
100 restarts), building all the tables with one ``np.bincount``.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from bigclust._util.errors import UserError

NORMS = ("sqrt", "max", "arithmetic")

# Above this many cells the batched table of batch_scores is built row by row
# instead (it only happens with absurd numbers of distinct labels).
_MAX_BATCH_CELLS = 50_000_000


def _check_pair(y_true, y_pred):
    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    if y_true.ndim != 1 or y_pred.ndim != 1:
        raise UserError(
            f"labels must be 1-D, got y_true with shape {y_true.shape} and y_pred with shape {y_pred.shape}")
    if y_true.shape[0] != y_pred.shape[0]:
        raise UserError(f"y_true has {y_true.shape[0]} labels but y_pred has {y_pred.shape[0]}")
    if y_true.shape[0] == 0:
        raise UserError("cannot score an empty labelling (0 samples)")
    return y_true, y_pred


def _check_norm(norm):
    if norm not in NORMS:
        raise UserError(f"NMI norm={norm!r} must be one of {', '.join(NORMS)}")


def _codes(labels):
    """Map labels to dense codes ``0..m-1``; return ``(codes, m)``.

    Non-negative integer labels with a small maximum are used as they are
    (empty codes only add zero columns, which no score sees), which avoids the
    sort inside ``np.unique`` for the common case of k-means output.
    """
    if labels.dtype.kind in "iub" and labels.size:
        lo, hi = int(labels.min()), int(labels.max())
        if lo >= 0 and hi < 2 * labels.shape[-1] + 64:
            return labels.astype(np.intp, copy=False), hi + 1
    uniq, inv = np.unique(labels, return_inverse=True)
    return inv.reshape(labels.shape).astype(np.intp, copy=False), uniq.shape[0]


def contingency(y_true, y_pred):
    """Dense contingency table of two labellings.

    Parameters
    ----------
    y_true, y_pred : array-like, shape (n,)
        Class and cluster labels (any comparable values).

    Returns
    -------
    ndarray of int64, shape (n_classes, n_clusters)
        ``N[i, j]`` = number of samples with the i-th smallest class label and
        the j-th smallest cluster label; only labels that occur get a row or
        column.
    """
    y_true, y_pred = _check_pair(y_true, y_pred)
    _, ct = np.unique(y_true, return_inverse=True)
    uk, ck = np.unique(y_pred, return_inverse=True)
    n_classes = int(ct.max()) + 1
    table = np.bincount(ct.ravel() * uk.shape[0] + ck.ravel(), minlength=n_classes * uk.shape[0])
    return table.reshape(n_classes, uk.shape[0]).astype(np.int64, copy=False)


def _matched(table):
    """Samples on the best one-to-one matching of the table's rows and columns."""
    rows, cols = linear_sum_assignment(table, maximize=True)
    return int(table[rows, cols].sum())


def accuracy(y_true, y_pred):
    """Clustering accuracy: fraction correct under the best cluster-to-class matching.

    Clusters and classes are matched one to one so as to maximise the number
    of correctly labelled samples (Hungarian algorithm on the contingency
    table).  With more clusters than classes the unmatched clusters count as
    wrong, and vice versa.

    Parameters
    ----------
    y_true, y_pred : array-like, shape (n,)
        Class and cluster labels (any values; only equality matters).

    Returns
    -------
    float in [0, 1]
        The fraction of samples whose cluster is matched to their class.

    Examples
    --------
    >>> from bigclust.metrics import accuracy
    >>> accuracy([0, 0, 1, 1, 2, 2], [1, 1, 0, 0, 0, 2])
    0.8333333333333334
    """
    table = contingency(y_true, y_pred)
    return _matched(table) / float(table.sum())


def error_rate(y_true, y_pred):
    """Clustering error rate, ``1 - accuracy(y_true, y_pred)``.

    Parameters
    ----------
    y_true, y_pred : array-like, shape (n,)
        Class and cluster labels.

    Returns
    -------
    float in [0, 1]
        The fraction of samples whose cluster is not matched to their class.
    """
    return 1.0 - accuracy(y_true, y_pred)


def _xlogx_sum(p, axis):
    """``sum(p * log(p))`` along ``axis`` with ``0 log 0 = 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(axis=axis)


def _nmi_from_tables(tables, norm):
    """NMI of a stack of contingency tables, shape (r, n_classes, n_clusters)."""
    tables = tables.astype(np.float64)
    n = tables.sum(axis=(1, 2))
    p = tables / n[:, None, None]
    a = p.sum(axis=2)
    b = p.sum(axis=1)
    h_c = -_xlogx_sum(a, axis=1)
    h_k = -_xlogx_sum(b, axis=1)
    # a single group has entropy exactly 0: its rounded marginal can sum to 1 - 1e-16, an entropy of
    # 1e-16 that made NMI = 1e-16 / sqrt(1e-16 H) = 1e-8 (only these cases change, to the bit)
    h_c[np.count_nonzero(tables.sum(axis=2), axis=1) == 1] = 0.0
    h_k[np.count_nonzero(tables.sum(axis=1), axis=1) == 1] = 0.0
    # MI = sum p_ij log(p_ij / (a_i b_j)) = sum p log p - sum a log a - sum b log b
    mi = _xlogx_sum(p.reshape(p.shape[0], -1), axis=1) + h_c + h_k
    mi = np.maximum(mi, 0.0)  # rounding can make an independent pair slightly negative
    mi[np.minimum(h_c, h_k) == 0] = 0.0  # I(C; K) <= min(H(C), H(K))
    if norm == "sqrt":
        den = np.sqrt(h_c * h_k)
    elif norm == "max":
        den = np.maximum(h_c, h_k)
    else:
        den = 0.5 * (h_c + h_k)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den > 0, mi / np.where(den > 0, den, 1.0), 0.0)
    # Both entropies zero means both labellings put everything in one group:
    # the partitions are identical, which scores 1 (the sklearn convention).
    out[(h_c == 0) & (h_k == 0)] = 1.0
    return np.minimum(out, 1.0)


def nmi(y_true, y_pred, norm="sqrt"):
    """Normalised mutual information of two labellings.

    ``NMI = I(C; K) / normaliser`` with entropies in nats, where the
    normaliser is

    - ``"sqrt"``: ``sqrt(H(C) H(K))`` (paper 000, Eq. 35; sklearn's
      ``average_method="geometric"``),
    - ``"max"``: ``max(H(C), H(K))`` (paper 001),
    - ``"arithmetic"``: ``(H(C) + H(K)) / 2`` (sklearn's default).

    Parameters
    ----------
    y_true, y_pred : array-like, shape (n,)
        Class and cluster labels (any values; only equality matters).
    norm : {"sqrt", "max", "arithmetic"}
        Normaliser of the mutual information.

    Returns
    -------
    float in [0, 1]
        1 for identical partitions, 0 for independent ones.

    Notes
    -----
    Degenerate cases, where the normaliser can be zero: if both labellings
    have a single group (``H(C) = H(K) = 0``) the partitions are identical
    and the score is 1.0; if only one of them has a single group the mutual
    information is 0 and the score is 0.0 (for ``"sqrt"`` this defines 0/0
    as 0).  These are sklearn's conventions.

    Examples
    --------
    >>> from bigclust.metrics import nmi
    >>> nmi([0, 0, 1, 1], [5, 5, 7, 7])
    1.0
    >>> round(nmi([0, 0, 1, 1, 2, 2], [1, 1, 0, 0, 0, 2]), 4)
    0.7403
    """
    _check_norm(norm)
    table = contingency(y_true, y_pred)
    return float(_nmi_from_tables(table[None], norm)[0])


def batch_scores(y_true, labels_2d, norm="sqrt"):
    """Accuracy and NMI of many labellings (e.g. one per k-means restart).

    Parameters
    ----------
    y_true : array-like, shape (n,)
        Class labels.
    labels_2d : array-like, shape (r, n)
        One cluster labelling per row.
    norm : {"sqrt", "max", "arithmetic"}
        NMI normaliser, as in :func:`nmi`.

    Returns
    -------
    acc, nmi : ndarray of float64, shape (r,)
        ``acc[i] == accuracy(y_true, labels_2d[i])`` and
        ``nmi[i] == nmi(y_true, labels_2d[i], norm)``.
    """
    _check_norm(norm)
    y_true = np.asarray(y_true)
    labels_2d = np.asarray(labels_2d)
    if labels_2d.ndim != 2:
        raise UserError(f"labels_2d must be 2-D (restarts x samples), got shape {labels_2d.shape}")
    if labels_2d.shape[0] == 0:
        raise UserError("labels_2d has no rows to score")
    _check_pair(y_true, labels_2d[0])
    r, n = labels_2d.shape
    ct, n_classes = _codes(y_true)
    ck, n_clusters = _codes(labels_2d)
    cells = n_classes * n_clusters
    if r * cells > _MAX_BATCH_CELLS:
        acc = np.array([accuracy(y_true, row) for row in labels_2d])
        nm = np.array([nmi(y_true, row, norm) for row in labels_2d])
        return acc, nm
    # One code per (restart, class, cluster) triple; one bincount builds all tables.
    code = (np.arange(r, dtype=np.intp)[:, None] * cells + ct[None, :] * n_clusters + ck).ravel()
    tables = np.bincount(code, minlength=r * cells).reshape(r, n_classes, n_clusters)
    acc = np.array([_matched(t) for t in tables], dtype=np.float64) / n
    return acc, _nmi_from_tables(tables, norm)
