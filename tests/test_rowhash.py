"""The fused row hashes of ``n_distinct_rows`` equal the NumPy formula they replace, integer for integer."""
import numpy as np
import scipy.sparse as sp

from bigclust._util.rowhash import GOLD, csr_row_hashes, dense_row_hashes


def _numpy_dense(X, w):
    blk = X.view(np.uint32).astype(np.uint64)
    return ((blk * GOLD + np.uint64(1)) * w).sum(axis=1, dtype=np.uint64)


def test_dense_hashes_and_deviation_equal_numpy():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 37)).astype(np.float32)
    X[5] = X[9]                                        # a duplicate row hashes equal
    w = rng.integers(1, 2**63, size=37, dtype=np.uint64) | np.uint64(1)
    ref = X[0].astype(np.float64)
    h = np.empty(300, np.uint64)
    dev = dense_row_hashes(X, w, ref, h)
    assert np.array_equal(h, _numpy_dense(X, w)) and h[5] == h[9]
    assert dev == float(np.abs(X - ref).max())
    X[3, 4] = np.nan
    assert dense_row_hashes(X, w, ref, h) == np.inf    # NaN is never "all rows equal"


def test_csr_hashes_equal_numpy_add_at():
    rng = np.random.default_rng(1)
    S = sp.random(200, 50, density=0.1, format="csr", random_state=2, dtype=np.float32)
    S.data[:] = rng.standard_normal(S.nnz)
    w = rng.integers(1, 2**63, size=50, dtype=np.uint64) | np.uint64(1)
    v = S.data.view(np.uint32).astype(np.uint64)
    ref = np.zeros(200, np.uint64)
    np.add.at(ref, np.repeat(np.arange(200), np.diff(S.indptr)), (v * GOLD + np.uint64(1)) * w[S.indices])
    h = np.empty(200, np.uint64)
    csr_row_hashes(S.indptr, S.indices, S.data, w, h)
    assert np.array_equal(h, ref)
