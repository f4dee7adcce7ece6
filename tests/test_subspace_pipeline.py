"""The subspace family through the pipeline and as an estimator: the same labels as the library."""
import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from bigclust.estimators import SubspaceClustering
from bigclust.metrics import accuracy
from bigclust.pipeline import run
from bigclust.store import Store, read_matrix
from bigclust.subspace import subspace_clustering


@parametrize_with_checks([SubspaceClustering(n_init=2, n_neighbors=3)], expected_failed_checks=lambda est: {})
def test_sklearn_api(estimator, check):
    check(estimator)


def _union_of_subspaces(n_per=40, n_sub=4, dim=3, d=30, seed=0):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(size=(n_per, dim)) @ np.linalg.qr(rng.normal(size=(d, dim)))[0].T
                   for _ in range(n_sub)])
    return X.astype(np.float32).astype(np.float64), np.repeat(np.arange(n_sub), n_per)


@pytest.mark.parametrize("regularizer", ["l1", "l2"])
def test_pipeline_equals_library_and_estimator(tmp_path, make_config, regularizer):
    X, y = _union_of_subspaces()
    p = tmp_path / "subspaces.npz"
    np.savez(p, X=X, y=y)
    cfg = make_config(p, f'[aksc]\nregularizer = "{regularizer}"\nn_neighbors = 8\n')
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["aksc"]')
                   .replace("n_init = 5", "n_init = 5\nseed = 3").replace("gamma = 1.0", "")
                   .replace("[data]", "[preprocess]\nl2_normalize = false\n\n[data]"))
    (rec,) = run(cfg)
    s = Store(tmp_path / "store.zarr")
    (key,) = s.stage_keys("cluster")
    g = s.open("cluster", key)
    picked = read_matrix(g, "labels")[g.attrs["best"]]
    lib, W = subspace_clustering(X, 4, regularizer=regularizer, n_neighbors=8, n_init=5, random_state=3)
    np.testing.assert_array_equal(picked, lib)
    est = SubspaceClustering(4, regularizer=regularizer, n_neighbors=8, n_init=5, random_state=3).fit(X)
    np.testing.assert_array_equal(est.labels_, lib)
    assert accuracy(y, lib) == 1.0 and rec["acc_best_inertia"] == 1.0
    (wkey,) = s.stage_keys("subspace")
    np.testing.assert_allclose(read_matrix(s.open("subspace", wkey), "K").toarray(), W.toarray(), rtol=1e-12)
