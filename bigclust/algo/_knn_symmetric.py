"""The symmetric kNN kernel ``max(W, W^T)`` from neighbour lists, built row by row (no n x n scipy temporaries)."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import UserError


def symmetric_max(ind, w, dtype):
    """``W.maximum(W.T)`` as a sorted CSR of ``dtype`` for the kNN weights ``W[i, ind[i, j]] = w[i k + j]``
    (duplicates in a list summed), built row by row in Numba.  scipy's COO -> CSR, transpose and maximum
    made the kNN stage's driver reach 8.0 GB at 8.1M rows x 10 neighbours; this holds each pair twice, as
    an int32 column and an int16 code of where its weight is in w (:func:`knn_pairs`), then the result.  The
    same values as scipy's: the max of two float64 sums, rounded once to ``dtype``."""
    return symmetric_from_pairs(knn_pairs(ind), w, dtype)


def knn_pairs(ind):
    """``(ptr, cols, code, k)``: every pair of the lists ``ind`` (n, k) placed in both of its rows' segments
    ``ptr[i]:ptr[i + 1]``, as a column and a code of where its weight is; the lists are not needed after."""
    from bigclust.algo._affinity_numba import knn_degrees, knn_scatter

    n, k = ind.shape
    if k >= 2**15:
        raise UserError(f"{k} neighbours per row: at most {2**15 - 1}")
    deg = np.zeros(n, np.int64)
    knn_degrees(ind, deg)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(deg, out=ptr[1:])
    del deg
    cols = np.empty(ptr[-1], np.int32 if n < 2**31 else np.int64)
    code = np.empty(ptr[-1], np.int16)
    knn_scatter(ind, ptr, cols, code)
    return ptr, cols, code, k


def symmetric_from_pairs(pairs, w, dtype):
    """:func:`symmetric_max` from its :func:`knn_pairs` and the weights."""
    from bigclust.algo._affinity_numba import knn_compact, knn_sort_count

    ptr, cols, code, k = pairs
    n = ptr.size - 1
    counts = np.empty(n, np.int64)
    knn_sort_count(ptr, cols, code, w, k, counts)
    nnz = int(counts.sum())
    itype = np.int32 if max(nnz, n) < 2**31 else np.int64   # as scipy picks for the same sizes
    indptr = np.zeros(n + 1, itype)
    np.cumsum(counts, out=indptr[1:])
    del counts
    indices, data = np.empty(nnz, itype), np.empty(nnz, dtype)
    knn_compact(ptr, cols, code, w, k, indptr, indices, data)
    K = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    K.has_sorted_indices = True
    return K


def kernel_from_weights(pairs, w, n_neighbors, gamma, *, dtype, neighbors, distances):
    """:func:`~bigclust.algo.affinity.kernel_from_neighbors` from the lists' :func:`knn_pairs` and their weights
    (:func:`~bigclust.algo.affinity.knn_weights`), so that a caller can let the lists and distances go before
    the kernel is built; ``neighbors()`` and ``distances()`` give them back, only for the message about a
    disconnected graph."""
    from scipy.sparse.csgraph import connected_components

    from bigclust.algo.spectral import components

    K = symmetric_from_pairs(pairs, w, np.dtype(dtype))
    n = K.shape[0]
    ncomp, _ = components(K)   # over K's own arrays: scipy's csgraph copies K to float64 and transposes it
    if ncomp > 1:
        # which is to blame: the neighbour lists themselves, or weights that underflow to 0 for this γ
        ind = neighbors()
        rows = np.repeat(np.arange(n), ind.shape[1])
        A = sp.csr_matrix((np.ones(ind.size), (rows, ind.ravel())), shape=(n, n))
        ngraph, _ = connected_components(A, directed=False)
        dist = distances()
        d2 = float(np.median(dist[:, 1:] ** 2)) if dist.shape[1] > 1 else float("nan")
        if ncomp > ngraph:
            cause = (f"exp(-d^2/gamma) underflows to 0 on kNN edges: gamma={gamma:g} is too small for the "
                     f"median squared kNN distance {d2:.3g} (the neighbour lists alone give {ngraph}); raise gamma")
        else:
            cause = "the neighbour lists themselves are disconnected; raise n_neighbors"
        warnings.warn(f"kNN graph (k={n_neighbors}) has {ncomp} connected components: {cause}; clustering goes "
                      "on, each component adds an eigenvalue at the top of the spectrum",
                      RuntimeWarning, stacklevel=3)
    return K
