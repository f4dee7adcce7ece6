"""The subspace family through the pipeline and as an estimator: the same labels as the library."""
import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from bigclust.estimators import SubspaceClustering
from bigclust.algo.metrics import accuracy
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store, read_matrix
from bigclust.subspace import subspace_clustering


@parametrize_with_checks([SubspaceClustering(n_init=2, n_neighbors=3)], expected_failed_checks=lambda est: {})
def test_sklearn_api(estimator, check):
    check(estimator)


def _union_of_subspaces(n_per=40, n_sub=4, dim=3, d=30, seed=0):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(size=(n_per, dim)) @ np.linalg.qr(rng.normal(size=(d, dim)))[0].T
                   for _ in range(n_sub)])
    return X.astype(np.float32).astype(np.float64), np.repeat(np.arange(n_sub), n_per)


def _aksc_config(make_config, data, aksc, seed):
    """A config running only ``aksc`` (its section body given) on raw rows, ``[cluster] seed = seed``."""
    cfg = make_config(data, f"[aksc]\n{aksc}")
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["aksc"]')
                   .replace("n_init = 5", f"n_init = 5\nseed = {seed}").replace("gamma = 1.0", "")
                   .replace("l2_normalize = true", "l2_normalize = false"))
    return cfg


@pytest.mark.parametrize("regularizer", ["l1", "l2"])
def test_pipeline_equals_library_and_estimator(tmp_path, make_config, regularizer):
    X, y = _union_of_subspaces()
    p = tmp_path / "subspaces.npz"
    np.savez(p, X=X, y=y)
    cfg = _aksc_config(make_config, p, f'regularizer = "{regularizer}"\nn_neighbors = 8\n', "3")
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


@pytest.mark.parametrize("augment, n_solves", [("coil20_flip", 1), ("coil20_rotscale", 2)])
def test_trials_share_the_solve_only_when_the_augmentation_draws_nothing(tmp_path, make_config, augment, n_solves):
    # 32 x 32 images (COIL-20's layout) of 4 smooth patterns with noise: the mirror image is the same for every
    # seed, rotations and scalings are drawn per seed
    rng = np.random.default_rng(0)
    u = np.linspace(0, 1, 32)
    base = [np.outer(np.sin((c + 1) * np.pi * u), np.cos((c + 2) * u)) + u[:, None] * c for c in range(4)]
    X = np.vstack([(base[c] + 0.05 * rng.normal(size=(32, 32))).ravel(order="F") for c in range(4) for _ in range(12)])
    y = np.repeat(np.arange(4), 12)
    p = tmp_path / "images.npz"
    np.savez(p, X=X, y=y)
    cfg = _aksc_config(make_config, p, f'regularizer = "l2"\nn_neighbors = 5\naugment = "{augment}"\n', "[0, 1]")
    recs = run(cfg)
    s = Store(tmp_path / "store.zarr")
    assert len(recs) == 2 and len(s.stage_keys("subspace")) == n_solves
    assert len(s.stage_keys("cluster")) == 2                         # each trial its own k-means starts
    from bigclust.subspace import subspace_affinity
    W0, W1 = (subspace_affinity(X, regularizer="l2", n_neighbors=5, augment=augment, random_state=r) for r in (0, 1))
    assert (abs(W0 - W1).max() == 0) == (n_solves == 1)              # why sharing is right for {flip} only
