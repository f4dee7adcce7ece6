"""Streamed randomised PCA against scikit-learn's full-SVD PCA."""
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition import PCA

from bigclust._util.errors import DataError
from bigclust.algo.preprocess import pca_fit, pca_transform


@pytest.fixture(scope="module")
def data():
    """Rank-6 signal with a clear spectral gap, small noise, and a large offset (centring must be exact)."""
    rng = np.random.default_rng(0)
    n, d, p = 900, 40, 6
    U = rng.normal(size=(n, p))
    V = np.linalg.qr(rng.normal(size=(d, p)))[0].T
    X = (U * np.array([12.0, 9, 7, 5, 4, 3])) @ V + 0.05 * rng.normal(size=(n, d)) + 100.0
    return X, PCA(p, svd_solver="full").fit(X)


def _same_up_to_sign(A, B, tol):
    signs = np.sign(np.sum(A * B, axis=1))
    assert np.all(signs != 0)
    np.testing.assert_allclose(A * signs[:, None], B, atol=tol, rtol=0)
    return signs


@pytest.mark.parametrize("kind, chunk", [("dense", 4096), ("dense", 128), ("dense", 77), ("sparse", 100),
                                         ("dask", 200), ("dask", 61)])
def test_streamed_pca_equals_full_svd(data, kind, chunk):
    X, ref = data
    Xin = {"dense": X, "sparse": sp.csr_matrix(X), "dask": da.from_array(X, chunks=(chunk, X.shape[1]))}[kind]
    mean, comps, var = pca_fit(Xin, 6, chunk_rows=chunk, return_variance=True)
    np.testing.assert_allclose(mean, ref.mean_, rtol=1e-12)
    signs = _same_up_to_sign(comps, ref.components_, 1e-9)
    np.testing.assert_allclose(var, ref.explained_variance_, rtol=1e-9)
    Z = pca_transform(X, mean, comps)
    np.testing.assert_allclose(Z * signs, ref.transform(X), atol=1e-8)
    assert np.allclose(comps @ comps.T, np.eye(6), atol=1e-12)


def test_same_result_whatever_the_chunks(data):
    X, _ = data
    a = pca_fit(X, 4, chunk_rows=900)[1]
    b = pca_fit(X, 4, chunk_rows=50)[1]
    np.testing.assert_allclose(a, b, atol=1e-10)


def test_transform_keeps_float32_and_bounds(data):
    X, _ = data
    mean, comps = pca_fit(X, 3)
    assert pca_transform(X.astype(np.float32), mean, comps).dtype == np.float32
    with pytest.raises(DataError, match="n_components"):
        pca_fit(X, 41)


def test_pipeline_preprocess_pca_streams_and_equals_in_memory(tmp_path, make_config):
    from conftest import blobs

    from bigclust.pipeline.runner import run
    from bigclust.algo.preprocess import l2_normalize
    from bigclust.pipeline.store import Store, read_matrix

    X, y = blobs(n=150, d=5)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    cfg = make_config(tmp_path / "d.npz", '[preprocess]\npca = 3\n')
    cfg.write_text(cfg.read_text().replace('[data]\n', '[data]\nchunk_rows = 40\n'))   # several chunks
    recs = run(cfg)
    assert recs[0]["acc_avg"] == pytest.approx(1.0)
    s = Store(tmp_path / "store.zarr")
    (key,) = s.stage_keys("preprocess")
    Z = np.asarray(read_matrix(s.open("preprocess", key), "X"))
    Xn = l2_normalize(X).astype(np.float64)
    ref = PCA(3, svd_solver="full").fit(Xn)
    signs = np.sign(np.sum(Z * ref.transform(Xn), axis=0))
    np.testing.assert_allclose(Z * signs, ref.transform(Xn), atol=1e-5)


@pytest.mark.parametrize("kind, chunk", [("dense", 4096), ("dense", 77), ("dask", 61)])
def test_covariance_solver_equals_full_svd(data, kind, chunk):
    X, ref = data
    Xin = {"dense": X, "dask": da.from_array(X, chunks=(chunk, X.shape[1]))}[kind]
    mean, comps, var = pca_fit(Xin, 6, solver="covariance", chunk_rows=chunk, return_variance=True)
    np.testing.assert_allclose(mean, ref.mean_, rtol=1e-12)
    _same_up_to_sign(comps, ref.components_, 1e-9)
    np.testing.assert_allclose(var, ref.explained_variance_, rtol=1e-9)
    assert pca_fit(Xin, 6, solver="auto", chunk_rows=chunk)[1] == pytest.approx(comps, abs=1e-12)


def test_streamed_pca_takes_chunks_of_any_source(data):
    """Generators, callables, a transform per chunk and uint8 chunks (float32 products, float64 sums)."""
    from bigclust.algo.preprocess import l2_normalize, pca_fit_streamed

    X, ref = data
    gen = (X[a:a + 100] for a in range(0, 900, 100))
    m1, c1 = pca_fit_streamed(gen, 6)
    m2, c2 = pca_fit_streamed(lambda: (X[a:a + 250] for a in range(0, 900, 250)), 6)
    np.testing.assert_allclose(m1, ref.mean_, rtol=1e-12)
    _same_up_to_sign(c1, ref.components_, 1e-9)
    np.testing.assert_allclose(c2, c1, atol=1e-9)
    U8 = np.random.default_rng(1).integers(0, 256, (700, 30)).astype(np.uint8)
    ref8 = PCA(4, svd_solver="full").fit(l2_normalize(U8.astype(np.float64)))
    mean, comps, var = pca_fit_streamed([U8[:300], U8[300:]], 4, transform=l2_normalize, return_variance=True)
    np.testing.assert_allclose(mean, ref8.mean_, atol=1e-7)
    _same_up_to_sign(comps, ref8.components_, 1e-4)
    np.testing.assert_allclose(var, ref8.explained_variance_, rtol=1e-4)
    with pytest.raises(DataError, match="no rows"):
        pca_fit_streamed(iter([]), 2)


def test_solver_choice_errors(data):
    X, _ = data
    with pytest.raises(DataError, match="covariance PCA solver needs dense"):
        pca_fit(sp.csr_matrix(X), 3, solver="covariance")
    with pytest.raises(DataError, match="unknown PCA solver"):
        pca_fit(X, 3, solver="svd")
    # auto on sparse data: the randomised solver
    np.testing.assert_allclose(pca_fit(sp.csr_matrix(X), 3, solver="auto")[1], pca_fit(X, 3)[1], atol=1e-9)
