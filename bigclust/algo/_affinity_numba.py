"""Numba kernels of :mod:`bigclust.algo.affinity`.

Serial and ``nogil``: they run inside Dask blocks, which supply the
parallelism (one level of parallelism per stage).
"""
import math

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
