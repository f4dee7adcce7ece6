"""The kNN kernel max(W, W^T) built row by row equals scipy's COO -> CSR, transpose and maximum, bit for bit."""
import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.algo._affinity_numba import gaussian_weights
from bigclust.algo._knn_symmetric import symmetric_max
from bigclust.algo.affinity import kernel_from_neighbors


def _scipy(ind, w, dtype):
    """The formula as scipy states it (kernel_from_neighbors before the Numba build)."""
    n = ind.shape[0]
    rows = np.repeat(np.arange(n), ind.shape[1])
    W = sp.csr_matrix((w, (rows, ind.ravel())), shape=(n, n))
    W.sum_duplicates()
    K = W.maximum(W.T).tocsr()
    K.sort_indices()
    return K.astype(dtype)


def _lists(n, k, seed, hubs=False, dups=False):
    rng = np.random.default_rng(seed)
    ind = np.empty((n, k), np.int64)
    ind[:, 0] = np.arange(n)                       # each row's own point first, as the searches give them
    p = rng.random(n) ** (8 if hubs else 1)        # hubs: a few rows in very many lists (in-degree > 64)
    p /= p.sum()
    for i in range(n):
        others = rng.choice(n, k - 1, replace=dups, p=p)
        ind[i, 1:] = others
    dist = np.sort(rng.random((n, k)) * 3, axis=1)
    dist[:, 0] = 0
    return ind, dist


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("hubs", [False, True])
def test_same_csr_as_scipy(dtype, hubs):
    ind, dist = _lists(3000, 10, 0, hubs=hubs)
    w = np.empty(dist.size)
    gaussian_weights(dist.ravel(), 0.7, w)
    w[::97] = 0.0                                  # weights that underflow: no entry, as scipy drops them
    K, R = symmetric_max(ind, w, np.dtype(dtype)), _scipy(ind, w, dtype)
    if hubs:
        assert np.diff(R.indptr).max() > 64        # the mergesort path ran
    assert K.dtype == R.dtype and K.indices.dtype == R.indices.dtype and K.indptr.dtype == R.indptr.dtype
    assert np.array_equal(K.indptr, R.indptr) and np.array_equal(K.indices, R.indices)
    assert np.array_equal(K.data, R.data)
    assert K.has_sorted_indices and (abs(K - K.T)).max() == 0


def test_duplicates_in_a_list_are_summed_before_the_max():
    ind, dist = _lists(500, 8, 1, dups=True)
    w = np.empty(dist.size)
    gaussian_weights(dist.ravel(), 0.7, w)
    K, R = symmetric_max(ind, w, np.dtype(np.float64)), _scipy(ind, w, np.float64)
    assert np.array_equal(K.indices, R.indices)
    np.testing.assert_allclose(K.data, R.data, rtol=1e-15)   # a sum of two terms: the same either order


def test_kernel_from_neighbors_keeps_its_result():
    ind, dist = _lists(2000, 10, 2)
    K, gamma = kernel_from_neighbors(ind, dist, 10, "median", dtype=np.float32, return_gamma=True)
    w = np.empty(dist.size)
    gaussian_weights(dist.ravel(), gamma, w)
    R = _scipy(ind, w, np.float32)
    assert np.array_equal(K.indices, R.indices) and np.array_equal(K.data, R.data)
