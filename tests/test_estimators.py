"""scikit-learn estimators: the API checks, and the same labels as the pipeline for the same data and seed."""
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.utils.estimator_checks import parametrize_with_checks

from bigclust.estimators import SpectralClustering
from bigclust.algo.metrics import accuracy
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store, read_matrix

from conftest import blobs

# Every scikit-learn check runs; none is expected to fail.  (check_array_api_input skips itself
# unless SCIPY_ARRAY_API is set: the pipeline stores NumPy data in zarr, not array-API arrays.)
EXPECTED_FAILED = {}


@parametrize_with_checks([SpectralClustering(n_init=2)], expected_failed_checks=lambda est: EXPECTED_FAILED)
def test_sklearn_api(estimator, check):
    check(estimator)


def _picked_labels(store_path):
    s = Store(store_path)
    (key,) = s.stage_keys("cluster")
    g = s.open("cluster", key)
    return read_matrix(g, "labels")[g.attrs["best"]]


@pytest.mark.parametrize("normalization, extra", [
    ("bbs", '[bbs]\nsolver = "dual"\n'), ("sk", '[sk]\nn_iter = 200\n'), ("ncut", ""), ("ra", ""), ("rc", "")])
def test_labels_equal_the_pipeline(tmp_path, make_config, normalization, extra):
    X, y = blobs(n=240, k=4, d=6, seed=3, sep=3.0)
    p = tmp_path / "d.npz"
    np.savez(p, X=X, y=y)
    cfg = make_config(p, extra)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', f'names = ["{normalization}"]')
                   .replace("n_init = 5", "n_init = 7\nseed = 11\nmax_iter = 300"))
    run(cfg)
    est = SpectralClustering(4, gamma=1.0, normalization=normalization, solver="dual",
                             n_iter=200 if normalization == "sk" else 1000, l2_normalize=True,
                             n_init=7, random_state=11)
    labels = est.fit_predict(X)
    np.testing.assert_array_equal(labels, _picked_labels(tmp_path / "store.zarr"))
    # ratio cut is the weakest criterion (paper 001 finds it so too); it still beats chance (0.25) by far
    assert accuracy(y, labels) > (0.7 if normalization == "rc" else 0.95)
    assert est.embedding_.shape == (240, 4) and est.affinity_matrix_.shape == (240, 240)


def test_dense_sparse_and_dask_input_agree():
    X, y = blobs(n=200, k=3, d=5, seed=1)
    kw = dict(n_clusters=3, gamma=2.0, affinity="knn", n_neighbors=12, random_state=0, n_init=4)
    a = SpectralClustering(**kw).fit(X)
    b = SpectralClustering(**kw).fit(sp.csr_matrix(X))
    c = SpectralClustering(**kw).fit(da.from_array(X, chunks=(37, 5)))
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.labels_, c.labels_)
    assert sp.issparse(a.affinity_matrix_) and a.normalization_info_["row_err"] < 1e-8
    assert accuracy(y, a.labels_) > 0.95


def test_dask_array_over_max_memory_goes_out_of_core():
    # 300 x 300 float64 K and G = 1.44 MB > 500 KB: streamed in row blocks, same labels as in memory
    X, y = blobs(n=300, k=3, d=5, seed=2)
    kw = dict(n_clusters=3, gamma=2.0, normalization="bbs", solver="alternating", n_iter=40, random_state=0, n_init=3)
    mem = SpectralClustering(**kw).fit(X)
    ooc = SpectralClustering(max_memory="500KB", **kw).fit(da.from_array(X, chunks=(64, 5)))
    assert ooc.normalization_info_["out_of_core"] and not mem.normalization_info_["out_of_core"]
    assert ooc.affinity_matrix_ is None and mem.affinity_matrix_ is not None
    np.testing.assert_array_equal(mem.labels_, ooc.labels_)
    np.testing.assert_allclose(mem.embedding_, ooc.embedding_, atol=1e-8)


def test_bad_parameters_are_value_errors():
    X, _ = blobs(n=50)
    for bad in (dict(affinity="rbf"), dict(normalization="pca"), dict(n_clusters=0), dict(n_clusters=50),
                dict(gamma=-1.0), dict(solver="newton"), dict(max_memory="lots")):
        (name,) = bad
        with pytest.raises(ValueError, match=f"^SpectralClustering: {name}"):   # estimator and parameter named
            SpectralClustering(**{"n_clusters": 3, **bad}).fit(X)


def test_estimators_are_found_through_the_families_registrations():
    import bigclust
    from bigclust import estimators
    from bigclust.nmf.estimator import NMFClustering
    from bigclust.normalize.estimator import SpectralClustering as Spectral
    from bigclust.subspace.estimator import SubspaceClustering
    assert bigclust.SpectralClustering is estimators.SpectralClustering is Spectral is SpectralClustering
    assert bigclust.NMFClustering is NMFClustering and bigclust.SubspaceClustering is SubspaceClustering
    assert estimators.ESTIMATORS["NMFClustering"] == "bigclust.nmf.estimator"
    with pytest.raises(AttributeError, match="has no attribute 'KMeansClustering'"):
        estimators.KMeansClustering
