"""Row hashes for counting distinct rows: one fused pass in Numba (:func:`bigclust.pipeline.checks.n_distinct_rows`).

The hash of a row is ``sum_j (bits(x_j) * GOLD + 1) * w_j`` in wrapping 64-bit arithmetic (``bits`` the
float32 pattern of the entry, ``w`` random odd weights per column); the NumPy form made five uint64
temporaries of the block (0.3-0.45 s of an estimator's 1 s fixed cost on 10000 x 784); here every entry is
read once, with the largest deviation from a reference row computed in the same pass.  Numba's unsigned
multiplication and addition wrap as NumPy's do, so the hashes are the same integers.
"""
import numpy as np

from bigclust._util.jit import njit

GOLD = np.uint64(0x9E3779B97F4A7C15)


@njit
def dense_row_hashes(X, w, ref, out):
    """``out[i]`` = hash of row i of the float32 block X (n, d); returns max |X - ref| (float64)."""
    bits = X.view(np.uint32)
    one = np.uint64(1)
    dev = 0.0
    for i in range(X.shape[0]):
        h = np.uint64(0)
        for j in range(X.shape[1]):
            h += (np.uint64(bits[i, j]) * GOLD + one) * w[j]
            diff = abs(np.float64(X[i, j]) - ref[j])
            if not diff <= dev:        # a larger deviation, or NaN (which np.max would propagate)
                dev = diff if diff == diff else np.inf
        out[i] = h
    return dev


@njit
def csr_row_hashes(indptr, indices, data, w, out):
    """``out[i]`` = hash of row i of a CSR matrix with float32 ``data`` (the same hash as a dense row's
    over its non-zeros)."""
    bits = data.view(np.uint32)
    one = np.uint64(1)
    for i in range(indptr.size - 1):
        h = np.uint64(0)
        for p in range(indptr[i], indptr[i + 1]):
            h += (np.uint64(bits[p]) * GOLD + one) * w[indices[p]]
        out[i] = h
