"""Row-wise preprocessing: standardisation, L2 normalisation, PCA, and text weighting (tf-idf).

All functions take a dense ndarray or a scipy.sparse matrix with samples in
rows and return the same kind of object; they are applied per row chunk by the
pipeline, so none of them may look at more than one row at a time unless it
says so (PCA, idf and the standardisation need global statistics, computed in a first pass).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .errors import DataError


def l2_normalize(X, *, copy=True, row_offset=0):
    """Scale every row to unit Euclidean norm (papers 000 and 002).

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (n, d)
        Samples in rows.
    copy : bool
        Work on a copy (default) or in place for dense float input.
    row_offset : int
        Index of the first row of ``X`` in the whole data set, used only to
        name the offending row in the error message when ``X`` is a chunk.

    Returns
    -------
    ndarray or sparse matrix of the same shape with unit-norm rows.

    Raises
    ------
    DataError
        If a row is all zeros: it has no direction, and silently leaving it
        at zero would give it zero similarity to everything except itself.
    """
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.result_type(X.dtype, np.float32), copy=copy)
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    else:
        X = np.array(X, dtype=np.result_type(X.dtype, np.float32), copy=copy)
        norms = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64))
    zero = np.flatnonzero(norms == 0)
    if zero.size:
        raise DataError(
            f"{zero.size} all-zero row(s) cannot be L2-normalised "
            f"(first: row {row_offset + int(zero[0])}); drop them or disable [preprocess] l2_normalize")
    inv = (1.0 / norms).astype(X.dtype)
    if sp.issparse(X):
        X = sp.csr_matrix(sp.diags(inv) @ X)
    else:
        X *= inv[:, None]
    return X


def pca_fit(X, n_components, *, random_state=0):
    """Fit PCA on the rows of ``X`` and return ``(mean, components)``.

    Uses a randomized SVD of the centred data (Halko et al.) so that a wide
    ``X`` never builds a d x d covariance; ``components`` has shape
    (n_components, d) with orthonormal rows.
    """
    from sklearn.utils.extmath import randomized_svd

    if not 1 <= n_components <= min(X.shape):
        raise DataError(f"PCA n_components={n_components} must be in [1, {min(X.shape)}]")
    Xd = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    mean = Xd.mean(axis=0)
    _, _, vt = randomized_svd(Xd - mean, n_components, random_state=random_state)
    return mean, vt


def pca_transform(X, mean, components):
    """Project rows of ``X`` onto the PCA ``components`` (after centring)."""
    Xd = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    return ((Xd - mean) @ components.T).astype(np.float32 if Xd.dtype == np.float32 else np.float64)


_TFIDF_LOCAL = ("tf", "binary", "augmented", "log")
_TFIDF_GLOBAL = ("none", "idf")


def tfidf(X, local="tf", global_="idf", normalize=True, idf=None):
    """Weight a document-term count matrix: ``a_ij = L(x_ij) G(j)``, rows optionally unit length.

    The 4 x 2 x 2 schemes of paper 001 ("weighted term-frequency vector"),
    documents in rows:

    - local ``L``: ``"tf"`` the raw count; ``"binary"`` 1 if the term occurs;
      ``"augmented"`` ``0.5 + 0.5 tf / tf_max`` with ``tf_max`` the largest
      count in the document; ``"log"`` ``log(1 + tf)`` (the paper's form,
      not SMART's ``1 + log tf``).  All four are applied to the stored
      non-zeros only: an absent term keeps weight 0 (the paper is silent
      there, and 0.5 everywhere would make every document dense).
    - global ``G``: ``"none"`` 1; ``"idf"`` ``log(n / n_j)``, ``n`` documents,
      ``n_j`` of them containing term j.  A term in no document gets 0 (it
      has nothing to weight; ``log(n / 0)`` would be infinite).
    - ``normalize``: divide each row by its Euclidean length; all-zero rows
      stay zero (`l2_normalize` is the function that refuses them).

    Parameters
    ----------
    X : scipy.sparse matrix or ndarray, shape (n_docs, n_terms)
        Non-negative term counts.
    local : {"tf", "binary", "augmented", "log"}
    global_ : {"none", "idf"}
    normalize : bool
    idf : ndarray (n_terms,) or None
        Global weights to use instead of computing them from ``X``: pass the
        vector returned for the whole corpus (or its first chunk) to weight
        further chunks identically.  Ignored when ``global_="none"``.

    Returns
    -------
    Xw : scipy.sparse.csr_matrix float32 (ndarray float32 for dense input)
    idf : ndarray float64 (n_terms,)
        The global weights used (ones for ``global_="none"``).

    Raises
    ------
    DataError
        For an unknown scheme name, negative counts, or an ``idf`` of the
        wrong length.
    """
    if local not in _TFIDF_LOCAL:
        raise DataError(f"unknown tf-idf local weight {local!r}; allowed: {', '.join(_TFIDF_LOCAL)}")
    if global_ not in _TFIDF_GLOBAL:
        raise DataError(f"unknown tf-idf global weight {global_!r}; allowed: {', '.join(_TFIDF_GLOBAL)}")
    dense_in = not sp.issparse(X)
    Xw = sp.csr_matrix(np.asarray(X) if dense_in else X, dtype=np.float64, copy=True)
    if Xw.ndim != 2:
        raise DataError(f"tf-idf needs a 2-D document-term matrix, got shape {Xw.shape}")
    Xw.eliminate_zeros()            # stored zeros are absent terms, not occurrences
    n, d = Xw.shape
    data = Xw.data
    if data.size and data.min() < 0:
        raise DataError(f"tf-idf needs non-negative term counts; the smallest is {data.min():g}")
    rows = np.repeat(np.arange(n), np.diff(Xw.indptr))
    if local == "binary":
        data[:] = 1.0
    elif local == "log":
        np.log1p(data, out=data)
    elif local == "augmented":
        tf_max = np.zeros(n)
        np.maximum.at(tf_max, rows, data)
        data[:] = 0.5 + 0.5 * data / tf_max[rows]
    if global_ == "none":
        idf = np.ones(d)
    else:
        if idf is None:
            df = np.bincount(Xw.indices, minlength=d)
            idf = np.zeros(d)
            np.log(n / np.maximum(df, 1), out=idf, where=df > 0)
        else:
            idf = np.asarray(idf, dtype=np.float64)
            if idf.shape != (d,):
                raise DataError(f"idf has shape {idf.shape}, expected ({d},) for {d} terms")
        data *= idf[Xw.indices]
    if normalize:
        norms = np.sqrt(np.bincount(rows, weights=data * data, minlength=n))
        inv = np.zeros(n)
        np.divide(1.0, norms, out=inv, where=norms > 0)
        data *= inv[rows]
    Xw = sp.csr_matrix(Xw, dtype=np.float32)
    return (Xw.toarray() if dense_in else Xw), idf


def _moments(X):
    """``(rows, mean, sum of squared deviations)`` per column of one block, in float64."""
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        n = X.shape[0]
        mean = np.asarray(X.sum(axis=0)).ravel() / max(n, 1)
        sq = np.asarray(X.multiply(X).sum(axis=0)).ravel()
        return n, mean, np.maximum(sq - n * mean * mean, 0.0)   # sparse blocks: sums, no dense copy
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0) if X.shape[0] else np.zeros(X.shape[1])
    return X.shape[0], mean, ((X - mean) ** 2).sum(axis=0)


def standardize_fit(blocks):
    """Per-column mean and scale (population standard deviation) over row blocks, streamed.

    The per-block moments are merged with Chan et al.'s pairwise update, so
    no block is held after its pass and large column means do not cancel the
    variance (as ``E[x^2] - E[x]^2`` would).  A column of zero variance gets
    scale 1 (it stays constant), as in scikit-learn's ``StandardScaler``.

    Parameters
    ----------
    blocks : iterable of ndarray or scipy.sparse matrix
        The rows, in blocks of any size with the same columns.

    Returns
    -------
    mean, scale : ndarray float64 (d,)
    """
    n, mean, m2 = 0, None, None
    for blk in blocks:
        nb, mb, m2b = _moments(blk)
        if nb == 0:
            continue
        if mean is None:
            n, mean, m2 = nb, mb, m2b
            continue
        delta = mb - mean
        tot = n + nb
        mean = mean + delta * (nb / tot)
        m2 = m2 + m2b + delta * delta * (n * nb / tot)
        n = tot
    if mean is None:
        raise DataError("cannot standardize: the data have no rows")
    scale = np.sqrt(m2 / n)
    # a constant column (up to rounding of its mean) keeps scale 1, as scikit-learn's StandardScaler does
    tiny = 10 * np.finfo(np.float64).eps * np.maximum(np.abs(mean), 1.0)
    scale[scale <= tiny] = 1.0
    return mean, scale


def standardize(X, mean, scale):
    """Rows of ``X`` with zero mean and unit variance per column (``(x - mean) / scale``).

    Sparse ``X`` is only scaled (``x / scale``): subtracting the mean would
    make every entry non-zero; its columns get unit variance, not zero mean
    (scikit-learn's ``StandardScaler(with_mean=False)``).  Returns float32
    for float32 input, float64 otherwise.
    """
    inv = 1.0 / np.asarray(scale, dtype=np.float64)
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.result_type(X.dtype, np.float32), copy=True)
        X.data *= inv[X.indices].astype(X.dtype)
        return X
    dtype = np.float32 if np.asarray(X).dtype == np.float32 else np.float64
    return ((np.asarray(X, dtype=np.float64) - mean) * inv).astype(dtype)
