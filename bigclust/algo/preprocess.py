"""Row-wise preprocessing: standardisation, L2 normalisation, PCA, and text weighting (tf-idf).

All functions take a dense ndarray or a scipy.sparse matrix with samples in
rows and return the same kind of object; they are applied per row chunk by the
pipeline, so none of them may look at more than one row at a time unless it
says so (PCA, idf and the standardisation need global statistics, computed in a first pass).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import DataError


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


def _row_chunks(X, chunk_rows):
    """Row chunks of an ndarray, sparse matrix or row-sliceable object as ``(start, chunk)``; Dask: None."""
    if hasattr(X, "to_delayed"):
        return None
    # a generator: one chunk alive at a time (the input may be rows read on demand from zarr)
    return ((r0, X[r0:r0 + chunk_rows]) for r0 in range(0, X.shape[0], chunk_rows))


def _pass(X, fn, chunk_rows, *args):
    """``sum(fn(chunk, *args))`` over the row chunks of X: one pass over the data.

    A Dask array is summed by a pairwise tree of delayed partial results (run
    by whatever scheduler is active, one chunk per task); anything else is
    sliced into ``chunk_rows`` rows here.  Only a chunk and the partial sums
    are alive at a time.
    """
    chunks = _row_chunks(X, chunk_rows)
    if chunks is not None:
        total = None
        for _, C in chunks:
            part = fn(C, *args)
            total = part if total is None else total + part
        return total
    import dask

    parts = [dask.delayed(fn, pure=True)(blk, *args) for blk in X.to_delayed().ravel()]
    while len(parts) > 1:
        parts = [dask.delayed(np.add, pure=True)(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return dask.compute(parts[0])[0]


def _col_sums(C):
    s = np.asarray(C.sum(axis=0), dtype=np.float64).ravel() if sp.issparse(C) else \
        np.asarray(C).sum(axis=0, dtype=np.float64)
    return np.concatenate([s, [C.shape[0]]])


def _cov_times(C, mean, Q):
    """``Cc^T (Cc Q)`` for the centred chunk ``Cc = C - 1 mean^T``, without forming Cc.

    ``Cc Q = C Q - 1 (mean^T Q)`` and ``Cc^T W = C^T W - mean (1^T W)``: a
    sparse chunk stays sparse, a dense one is never shifted in place.
    """
    # float32 data is multiplied in float32 (half the GEMM time, no float64 copy of the chunk);
    # the d x l partial sums across chunks are accumulated in float64
    dt = np.float32 if C.dtype == np.float32 else np.float64
    if not sp.issparse(C):
        C = np.asarray(C, dtype=dt)
    W = np.asarray(C @ Q.astype(dt), dtype=np.float64) - mean @ Q
    return np.asarray(C.T @ W.astype(dt), dtype=np.float64) - np.outer(mean, W.sum(axis=0))


def check_pca_components(n_components, n, d):
    """PCA to ``n_components`` of an (n, d) matrix is possible (a DataError naming the pca setting otherwise)."""
    if not 1 <= n_components <= min(n, d):
        raise DataError(f"PCA n_components={n_components} (the pca setting) must be in [1, {min(n, d)}], "
                        f"at most min(n_samples, n_features) = min({n}, {d})")


#: the covariance solver's largest number of features: its d x d float64 sums take 8 d^2 bytes (128 MB here)
COVARIANCE_MAX_FEATURES = 4096
PCA_SOLVERS = ("randomized", "covariance", "auto")


def pca_fit(X, n_components, *, solver="randomized", random_state=0, n_oversamples=10, n_iter=6, chunk_rows=4096,
            return_variance=False):
    """Fit PCA on the rows of ``X`` in passes over row chunks; return ``(mean, components)``.

    Parameters
    ----------
    X : ndarray, scipy.sparse matrix or dask.array.Array, shape (n, d)
        Samples in rows; a Dask array is read chunk by chunk (its own row
        chunks), each chunk's partial sums a task, summed pairwise.
    n_components : int
        ``1 <= n_components <= min(n, d)``.
    solver : {"randomized", "covariance", "auto"}
        ``"covariance"``: exact, in one pass (:func:`pca_fit_streamed`: the d x d
        covariance summed over chunks, then its eigenvectors), dense X only
        and at most :data:`COVARIANCE_MAX_FEATURES` features.  ``"randomized"``:
        ``n_iter + 2`` passes of a randomised range finder with power
        iterations (Halko, Martinsson & Tropp 2011), for sparse X or many
        features.  ``"auto"``: covariance where it applies, else randomised.
    random_state : int
        Seed of the randomised solver's Gaussian test matrix.
    n_oversamples : int
        Randomised solver: extra columns of the subspace (accuracy of the last components).
    n_iter : int
        Randomised solver: power iterations; each multiplies the subspace by the
        covariance, so the error of component i shrinks like ``(s_{l+1} / s_i)^(2 n_iter + 2)``.
    chunk_rows : int
        Rows per chunk for in-memory input.
    return_variance : bool
        Also return the explained variances (eigenvalues of the covariance
        ``Xc^T Xc / (n - 1)``) of the components.

    Returns
    -------
    mean : ndarray float64 (d,)
    components : ndarray float64 (n_components, d)
        Orthonormal rows, in decreasing order of variance, each signed so
        that its entry of largest magnitude is positive (scikit-learn's
        ``svd_flip`` on ``V``).
    variance : ndarray float64 (n_components,), if ``return_variance``
    """
    n, d = X.shape
    check_pca_components(n_components, n, d)
    if solver not in PCA_SOLVERS:
        raise DataError(f"unknown PCA solver {solver!r}; allowed: {', '.join(PCA_SOLVERS)}")
    if hasattr(X, "rechunk"):
        X = X.rechunk({1: -1})          # whole rows per block
    dense_ok = not sp.issparse(X) and d <= COVARIANCE_MAX_FEATURES
    if solver == "covariance" and not dense_ok:
        raise DataError(f"the covariance PCA solver needs dense data of at most {COVARIANCE_MAX_FEATURES} "
                        "features; use solver='randomized'")
    if solver == "randomized" or not dense_ok:
        return _pca_randomized(X, n_components, random_state=random_state, n_oversamples=n_oversamples,
                               n_iter=n_iter, chunk_rows=chunk_rows, return_variance=return_variance)
    chunks = X if hasattr(X, "to_delayed") else (C for _, C in _row_chunks(X, chunk_rows))
    return pca_fit_streamed(chunks, n_components, return_variance=return_variance)


def _shifted_gram(C, shift, transform=None):
    """``[vec(B^T B), column sums of B, rows]`` (float64) of one chunk ``B = transform(C) - shift``.

    The product is one GEMM in float32 for any input but float64 (uint8
    pixels are converted here, chunk by chunk), summed across chunks in
    float64.  The shift (the first chunk's mean) keeps the sums small, so
    removing the mean at the end cancels no digits (measured on mnist-1m: the
    subspace within 3e-4 degrees of a float64 computation).
    """
    C = transform(C) if transform is not None else C
    C = np.asarray(C)
    dt = np.float64 if C.dtype == np.float64 else np.float32
    B = C.astype(dt, copy=False) - shift.astype(dt)
    G = B.T @ B
    return np.concatenate([G.ravel().astype(np.float64), B.sum(axis=0, dtype=np.float64), [B.shape[0]]])


def _chunk_mean(C, transform=None):
    C = np.asarray(transform(C) if transform is not None else C)
    return C.mean(axis=0, dtype=np.float64) if C.shape[0] else None


def pca_fit_streamed(chunks, n_components, *, transform=None, return_variance=False):
    """Exact PCA in one pass over row chunks: the covariance summed chunk by chunk, then its eigenvectors.

    Cost: one GEMM of ``2 d^2`` flops per row (float32 for any input but
    float64) and ``8 d^2`` bytes of sums, whatever n: linear in n, memory
    independent of it.  No centred copy is made; the result does not depend
    on how the rows are chunked (up to rounding).

    Parameters
    ----------
    chunks : iterable of array-like, callable returning one, or dask.array.Array
        The rows, in chunks of any size with the same d columns (uint8 or any
        real dtype; sparse is not accepted).  A callable is called once: pass
        ``lambda: (make_chunk(i) for i in range(m))`` to generate chunks on the
        fly (augmented copies).  A Dask array's row blocks are tasks, each
        returning its partial sums, summed pairwise on the scheduler.
    n_components : int
        Components kept, ``1 <= n_components <= min(n, d)``.
    transform : callable, optional
        Applied to every chunk first (e.g. :func:`l2_normalize`); with a Dask
        array, map it over the blocks instead.
    return_variance : bool
        Also return the explained variances (eigenvalues of ``Xc^T Xc / (n - 1)``).

    Returns
    -------
    mean, components[, variance]
        As :func:`pca_fit`.
    """
    if callable(chunks) and not hasattr(chunks, "to_delayed"):
        chunks = chunks()
    if hasattr(chunks, "to_delayed"):
        import dask

        X = chunks.rechunk({1: -1})
        shift = np.asarray(dask.compute(dask.delayed(_chunk_mean)(X.to_delayed().ravel()[0]))[0])
        tot = _pass(X, _shifted_gram, 0, shift)
    else:
        tot, shift = None, None
        for C in chunks:
            if shift is None:
                shift = _chunk_mean(C, transform)
                if shift is None:
                    continue
            part = _shifted_gram(C, shift, transform)
            tot = part if tot is None else tot + part
        if tot is None:
            raise DataError("PCA: the data have no rows")
    d = shift.size
    n = int(tot[-1])
    check_pca_components(n_components, n, d)
    S, s = tot[:d * d].reshape(d, d), tot[d * d:d * d + d]
    dm = s / n                                    # mean of the shifted rows
    cov = (S - n * np.outer(dm, dm)) / max(1, n - 1)
    # one BLAS thread: a d x d eigh is small (784: 0.12 CPU s), two OpenBLAS threads spin-wait on a busy
    # machine (6.3 CPU s under load) and give other last bits than one, so the components would depend on
    # the machine's thread count
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=1, user_api="blas"):
        w, V = np.linalg.eigh((cov + cov.T) / 2)
    order = np.argsort(w)[::-1][:n_components]
    return _finish(shift + dm, V[:, order].T.copy(), np.maximum(w[order], 0), return_variance)


def _finish(mean, comps, variance, return_variance):
    """Sign every component so that its entry of largest magnitude is positive (``svd_flip``); the result tuple."""
    big = np.argmax(np.abs(comps), axis=1)
    comps *= np.sign(comps[np.arange(comps.shape[0]), big])[:, None]
    return (mean, comps, variance) if return_variance else (mean, comps)


def _qr_q(M):
    """Q of the QR of a thin d x l matrix, on one BLAS thread.

    A d x (k + p) QR is too small to share: on two OpenBLAS threads of a busy machine it spin-waits (up to
    34 s wall against 0.04 s on one thread at d = 784; 0.16-2.8 s against 0.002-0.03 s for 784 x 60 at load
    19), and the result is the same bits (checked on dense and sparse inputs of four shapes).
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return np.linalg.qr(M)[0]


def _pca_randomized(X, n_components, *, random_state=0, n_oversamples=10, n_iter=6, chunk_rows=4096,
                    return_variance=False):
    """The randomised solver of :func:`pca_fit`: a range finder with ``n_iter`` power iterations.

    Halko, Martinsson & Tropp (2011), Alg. 4.4 applied to ``Xc^T Xc``, then
    Rayleigh-Ritz on the subspace found; ``n_iter + 2`` passes, each
    accumulating a d x l product, ``l = n_components + n_oversamples``.  The
    centring is implicit (:func:`_cov_times`).  Kept for sparse data and for
    many features, where the d x d covariance would not fit.
    """
    n, d = X.shape
    check_pca_components(n_components, n, d)
    l = min(d, n_components + max(0, int(n_oversamples)))
    if hasattr(X, "rechunk"):
        X = X.rechunk({1: -1})          # whole rows per block
    sums = _pass(X, _col_sums, chunk_rows)
    mean = sums[:-1] / sums[-1]
    rng = np.random.default_rng(random_state)
    Q = _qr_q(rng.standard_normal((d, l)))
    for _ in range(max(0, int(n_iter))):
        Q = _qr_q(_pass(X, _cov_times, chunk_rows, mean, Q))
    B = _pass(X, _cov_times, chunk_rows, mean, Q)   # C Q, C = Xc^T Xc
    T = Q.T @ B
    w, U = np.linalg.eigh((T + T.T) / 2)
    order = np.argsort(w)[::-1][:n_components]
    comps = (Q @ U[:, order]).T
    return _finish(mean, comps, np.maximum(w[order], 0) / max(1, n - 1), return_variance)


def pca_transform(X, mean, components):
    """Project rows of ``X`` onto the PCA ``components`` after centring: ``X V^T - mean V^T``.

    Works on one chunk (dense or sparse) without shifting it; float32 input
    gives float32 output.
    """
    Xd = X if sp.issparse(X) else np.asarray(X)
    out = np.asarray(Xd @ components.T, dtype=np.float64) - mean @ components.T
    return out.astype(np.float32 if Xd.dtype == np.float32 else np.float64)


_TFIDF_LOCAL = ("tf", "binary", "augmented", "log")
_TFIDF_GLOBAL = ("none", "idf")


def tfidf(X, local="tf", global_="idf", normalize=True, idf=None):
    # over 80 lines by its numpydoc docstring (41 lines); the code is 42
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
