"""Kernels against plain NumPy/SciPy references; block and chunk invariance."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.spatial.distance import cdist

from bigclust.algo.affinity import dense_kernel, knn_graph, knn_kernel
from bigclust._util.errors import UserError


@pytest.fixture
def X():
    rng = np.random.default_rng(3)
    return rng.normal(size=(57, 6))


@pytest.mark.parametrize("gamma", [0.25, 1.0, 1024.0])
def test_gaussian_matches_cdist(X, gamma):
    ref = np.exp(-cdist(X, X, "sqeuclidean") / gamma)
    K = dense_kernel(X, "gaussian", gamma).compute()
    np.testing.assert_allclose(K, ref, rtol=1e-12, atol=1e-14)
    assert np.all(np.diag(K) == 1.0)


def test_blocks_do_not_change_values(X):
    one = dense_kernel(X, "gaussian", 2.0).compute()
    many = dense_kernel(X, "gaussian", 2.0, block_bytes=57 * 8 * 5)  # 5 rows per block
    assert len(many.chunks[0]) == 12
    np.testing.assert_array_equal(many.compute(), one)


@pytest.mark.parametrize("kind", ["gaussian", "linear", "cosine2"])
def test_dense_kernel_exactly_symmetric_and_chunk_free(kind):
    # n spans several Gram tiles with a ragged last one; blocks of one tile, of
    # two tiles, and smaller than a tile must all give the same bits
    from bigclust.algo.affinity import gram_tile

    X = np.random.default_rng(5).normal(size=(1100, 30))
    T = gram_tile(1100)
    assert T == 256 and 1100 % T
    one = dense_kernel(X, kind, 3.0).compute()
    assert np.array_equal(one, one.T)
    for rows in (T, 2 * T, 100):
        many = dense_kernel(X, kind, 3.0, block_bytes=1100 * 8 * rows)
        assert many.chunks[0][0] == rows
        np.testing.assert_array_equal(many.compute(), one)


def test_other_kernels(X):
    nrm = X / np.linalg.norm(X, axis=1, keepdims=True)
    np.testing.assert_allclose(dense_kernel(X, "linear").compute(), X @ X.T, rtol=1e-12)
    np.testing.assert_allclose(dense_kernel(X, "cosine").compute(), nrm @ nrm.T, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dense_kernel(X, "cosine2").compute(), (nrm @ nrm.T) ** 2, rtol=1e-12, atol=1e-15)


def test_sparse_input_equals_dense(X):
    Xs = sp.csr_matrix(np.where(np.abs(X) > 0.7, X, 0))
    np.testing.assert_allclose(dense_kernel(Xs, "gaussian", 1.5).compute(),
                               dense_kernel(Xs.toarray(), "gaussian", 1.5).compute(), rtol=1e-12)


def test_float32_storage(X):
    K = dense_kernel(X, "gaussian", 1.0, dtype=np.float32).compute()
    assert K.dtype == np.float32
    np.testing.assert_allclose(K, np.exp(-cdist(X, X, "sqeuclidean")), rtol=1e-6)


def test_gamma_must_be_positive(X):
    with pytest.raises(UserError, match="gamma must be > 0"):
        dense_kernel(X, "gaussian", 0.0)


def test_knn_kernel_matches_bruteforce(X):
    k, gamma = 5, 2.0
    D = cdist(X, X, "sqeuclidean")
    nn = np.argsort(D, axis=1, kind="stable")[:, :k]
    mask = np.zeros_like(D, dtype=bool)
    mask[np.repeat(np.arange(len(X)), k), nn.ravel()] = True
    mask |= mask.T
    ref = np.where(mask, np.exp(-D / gamma), 0.0)
    K = knn_kernel(X, k, gamma)
    assert sp.isspmatrix_csr(K) or sp.issparse(K)
    np.testing.assert_allclose(K.toarray(), ref, rtol=1e-10, atol=1e-14)
    assert np.all(K.diagonal() == 1.0)
    assert abs(K - K.T).max() == 0


def test_knn_self_first_and_k_bounds(X):
    ind, dist = knn_graph(X, 4)
    assert np.all(ind[:, 0] == np.arange(len(X))) and np.all(dist[:, 0] == 0)
    with pytest.raises(UserError, match="n_neighbors"):
        knn_graph(X, len(X) + 1)


def test_knn_pynndescent_path_is_close_to_exact():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5000, 8)).astype(np.float32)
    ind, _ = knn_graph(X, 10)
    ref = np.argsort(cdist(X[:200], X, "sqeuclidean"), axis=1)[:, :10]
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ind[:200], ref)])
    assert recall > 0.95


def test_disconnected_knn_warns():
    X = np.vstack([np.zeros((10, 2)), np.full((10, 2), 100.0)]) + np.random.default_rng(1).normal(0, .1, (20, 2))
    with pytest.warns(RuntimeWarning, match="2 connected components"):
        knn_kernel(X, 3, 1.0)
