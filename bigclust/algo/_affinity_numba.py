"""Numba kernels of :mod:`bigclust.algo.affinity`.

Serial and ``nogil``: they run inside Dask blocks, which supply the
parallelism (one level of parallelism per stage).
"""
import math

import numpy as np

from bigclust._util.jit import njit


@njit(nogil=True)
def gaussian_from_gram(G, sqn_rows, sqn_cols, row0, gamma):
    """Turn a Gram block into Gaussian kernel values, in place.

    INOUT G : (b, n) float — ``X[row0:row0+b] @ X.T`` on entry,
              ``exp(-||x_i - x_j||^2 / gamma)`` on exit.
    IN sqn_rows : (b,) squared norms of the block's rows.
    IN sqn_cols : (n,) squared norms of all rows.
    IN row0 : global index of the block's first row (its diagonal is set to
              exactly 1: the Gram identity loses the zero distance to rounding).
    """
    b, n = G.shape
    inv = 1.0 / gamma
    for i in range(b):
        si = sqn_rows[i]
        for j in range(n):
            d2 = si + sqn_cols[j] - 2.0 * G[i, j]
            if d2 < 0.0:  # rounding on near-duplicate points
                d2 = 0.0
            G[i, j] = math.exp(-d2 * inv)
        if 0 <= row0 + i < n:
            G[i, row0 + i] = 1.0


@njit(nogil=True)
def gaussian_weights(dist, gamma, out):
    """``out = exp(-dist**2 / gamma)`` for kNN distances (flat arrays)."""
    inv = 1.0 / gamma
    for t in range(dist.shape[0]):
        out[t] = math.exp(-dist[t] * dist[t] * inv)


@njit(nogil=True)
def square_inplace(G):
    """``G <- G * G`` (the cosine-square kernel)."""
    b, n = G.shape
    for i in range(b):
        for j in range(n):
            G[i, j] = G[i, j] * G[i, j]



@njit(nogil=True)
def knn_degrees(ind, deg):
    """IN/OUT ``deg[i]`` += the pairs of the lists ``ind`` (n, k) that touch row i (its own k and its in-degree)."""
    n, k = ind.shape
    for i in range(n):
        for j in range(k):
            deg[i] += 1
            deg[ind[i, j]] += 1


@njit(nogil=True)
def knn_scatter(ind, ptr, cols, code):
    """OUT each row's segment ``ptr[i]:ptr[i + 1]`` of the kNN pairs touching it, in list order: row i gets
    column ``ind[i, j]`` with code j (its own list's weight ``w[i, j]``) and row ``ind[i, j]`` gets column i
    with code ``-1 - j`` (the weight ``w[col, j]`` of the row that listed it).  A code, not a float64 weight:
    2 bytes a pair instead of 8."""
    n, k = ind.shape
    fill = ptr[:-1].copy()
    for i in range(n):
        for j in range(k):
            c = ind[i, j]
            p = fill[i]
            cols[p], code[p] = c, j
            fill[i] = p + 1
            p = fill[c]
            cols[p], code[p] = i, -1 - j
            fill[c] = p + 1


@njit(nogil=True)
def _pair_max(i, a, b, cols, code, w, k):
    """``(column, max(W_ij, W_ji), end)`` of the run of equal columns from a (sorted segment ending at b):
    W_ij sums row i's own weights for the column, W_ji the weights the column's row listed i with."""
    c, own, other = cols[a], 0.0, 0.0
    p = a
    while p < b and cols[p] == c:
        if code[p] >= 0:
            own += w[i * k + code[p]]
        else:
            other += w[c * k + (-1 - code[p])]
        p += 1
    return c, max(own, other), p


@njit(nogil=True)
def knn_sort_count(ptr, cols, code, w, k, counts):
    """IN/OUT each row's segment sorted by column (stable: list order within a column); ``counts[i]`` its
    columns with a non-zero ``max(W_ij, W_ji)`` (scipy's ``maximum`` drops zeros)."""
    n = ptr.shape[0] - 1
    for i in range(n):
        a, b = ptr[i], ptr[i + 1]
        if b - a > 64:   # a hub's in-degree: mergesort (stable) instead of insertion sort
            o = np.argsort(cols[a:b], kind="mergesort")
            cs, ks = cols[a:b][o], code[a:b][o]
            cols[a:b], code[a:b] = cs, ks
        else:
            for p in range(a + 1, b):
                c, t = cols[p], code[p]
                q = p - 1
                while q >= a and cols[q] > c:
                    cols[q + 1], code[q + 1] = cols[q], code[q]
                    q -= 1
                cols[q + 1], code[q + 1] = c, t
        m, p = 0, a
        while p < b:
            _, v, p = _pair_max(i, p, b, cols, code, w, k)
            m += v != 0.0
        counts[i] = m


@njit(nogil=True)
def knn_compact(ptr, cols, code, w, k, indptr, indices, data):
    """OUT the CSR arrays from the sorted segments (:func:`knn_sort_count`), values cast to ``data``'s type."""
    for i in range(ptr.shape[0] - 1):
        o, p, b = indptr[i], ptr[i], ptr[i + 1]
        while p < b:
            c, v, p = _pair_max(i, p, b, cols, code, w, k)
            if v != 0.0:
                indices[o], data[o] = c, v
                o += 1
