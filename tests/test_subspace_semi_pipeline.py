"""AkS-SC through the pipeline (``[aksc] semi_supervised``) and the estimator (``fit(X, y)`` with -1 marks):
the same labels as the library function :func:`bigclust.subspace.aks_sc` on the same (float32-stored) data."""
import numpy as np
import pytest

from bigclust._util.errors import UserError
from bigclust.estimators import SubspaceClustering
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store, read_matrix
from bigclust.subspace import aks_sc, interpolate
from bigclust.subspace.plugin import draw_labelled


def _union(n_per=30, n_sub=4, dim=3, d=30, seed=1):
    rng = np.random.default_rng(seed)
    bases = [np.linalg.qr(rng.normal(size=(d, dim)))[0] for _ in range(n_sub)]
    X = np.vstack([rng.normal(size=(n_per, dim)) @ B.T for B in bases]) + 0.01 * rng.normal(size=(n_per * n_sub, d))
    perm = rng.permutation(n_per * n_sub)                 # classes interleaved: no ordering to lean on
    # stored as float32 by the pipeline: compare on the same values
    return X[perm].astype(np.float32).astype(np.float64), np.repeat(np.arange(n_sub), n_per)[perm]


def _semi_config(folder, path, aksc):
    from conftest import write_config
    folder.mkdir(exist_ok=True)
    cfg = write_config(folder, path, "[aksc]\n" + aksc)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["aksc"]')
                   .replace("n_init = 5", "n_init = 5\nseed = 4").replace("gamma = 1.0", "")
                   .replace("l2_normalize = true", "l2_normalize = false"))
    return cfg


def test_draw_labelled_is_seeded_per_class_and_checks_class_sizes():
    y = np.repeat(np.arange(3), 5)
    a, b = draw_labelled(y, 2, 0), draw_labelled(y, 2, 0)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, draw_labelled(y, 2, 1))
    assert np.array_equal(np.bincount(a[a >= 0]), [2, 2, 2]) and np.all(a[a >= 0] == y[a >= 0])
    with pytest.raises(ValueError, match="class 0 has 5 labelled sample") as e:
        draw_labelled(y, 6, 0)
    assert "\n" not in str(e.value)


def test_pipeline_draws_labels_and_equals_library(tmp_path):
    X, y = _union()
    p = tmp_path / "subspaces.npz"
    np.savez(p, X=X, y=y)
    cfg = _semi_config(tmp_path, p, 'semi_supervised = true\nlabelled_per_class = 3\nn_neighbors = 8\n'
                                       'augment = "interpolate"\nn_interpolate = 15\n')
    (rec,) = run(cfg)
    s = Store(tmp_path / "store.zarr")
    (key,) = s.stage_keys("semisup")
    g = s.open("semisup", key)
    got = read_matrix(g, "labels")[0]
    known = draw_labelled(y, 3, 4)
    np.testing.assert_array_equal(np.sort(read_matrix(g, "labelled")), np.flatnonzero(known >= 0))
    Xa, origin, _ = interpolate(X, known, 15, n_mix=2, weights="uniform", random_state=4)
    lib = aks_sc(X, known, X_aug=Xa, origin=origin, n_neighbors=8, gamma=0.1, random_state=4)
    np.testing.assert_array_equal(got, lib)
    assert rec["acc_best_inertia"] == 1.0 and rec["n_labelled"] == 12 and rec["err_unlabelled"] == 0.0
    assert "seed" not in rec                                      # one seed: nothing to tell apart
    md = (tmp_path / "out" / "results.md").read_text()           # what is scored, in the table people read
    assert "| n_labelled | err_unlabelled |" in md and "err_unlabelled: error rate over the others" in md
    assert rec["F_min_entry"] > -1e-8 and rec["F_max_row_err"] < 1e-6
    F = read_matrix(g, "F")
    assert F.shape == (X.shape[0], 4) and np.all(F >= 0) and np.allclose(F.sum(axis=1), 1.0)


def test_estimator_with_unlabelled_marks_equals_library():
    X, y = _union(seed=3)
    yl = np.full(y.size, -1)
    rng = np.random.default_rng(0)
    for c in range(4):
        yl[rng.choice(np.flatnonzero(y == c), 2, replace=False)] = c
    labels_in = np.where(yl >= 0, 10 + 5 * yl, -1)        # arbitrary class values, mapped back in labels_
    est = SubspaceClustering(4, n_neighbors=8, augment="interpolate", n_interpolate=10, random_state=7)
    est.fit(X, labels_in)
    Xa, origin, _ = interpolate(X, yl, 10, n_mix=2, weights="uniform", random_state=7)
    lib = aks_sc(X, yl, X_aug=Xa, origin=origin, n_neighbors=8, random_state=7)
    np.testing.assert_array_equal(est.labels_, 10 + 5 * lib)
    np.testing.assert_array_equal(est.classes_, [10, 15, 20, 25])
    assert np.mean(lib == y) == 1.0
    assert est.label_distributions_.shape == (y.size, 4) and est.embedding_ is None
    W = est.affinity_matrix_
    assert W.shape == (y.size, y.size) and abs(W - W.T).max() < 1e-12 and W.diagonal().max() == 0
    # without -1 marks y is ignored (a clusterer's convention): the unsupervised fit
    un = SubspaceClustering(4, n_neighbors=8, n_init=3, random_state=7)
    np.testing.assert_array_equal(un.fit(X, y).labels_, SubspaceClustering(4, n_neighbors=8, n_init=3,
                                                                             random_state=7).fit(X).labels_)


def test_semi_supervised_bad_input_is_one_line(tmp_path):
    X, y = _union()
    yl = np.full(y.size, -1)
    yl[:3] = y[:3]
    n_lab = np.unique(y[:3]).size
    with pytest.raises(ValueError, match=f"labels samples of {n_lab} classes but n_clusters=4") as e:
        SubspaceClustering(4, n_neighbors=8).fit(X, yl)
    assert "\n" not in str(e.value)
    p = tmp_path / "subspaces.npz"
    np.savez(p, X=X, y=y)
    for i, (aksc, msg) in enumerate((('labelled_per_class = 31\nsemi_supervised = true\n', "class 0 has 30 labelled"),
                      ('labelled_per_class = 3\n', "need semi_supervised = true"),
                      ('semi_supervised = true\nn_neighbors = 0\n', "n_neighbors >= 1"),
                      ('semi_supervised = true\nn_neighbors = 8\n', "every one of the 120 samples has a label"))):
        cfg = _semi_config(tmp_path / str(i), p, aksc)
        with pytest.raises(ValueError, match=msg) as e:
            run(cfg)
        assert "\n" not in str(e.value) and str(e.value).startswith(f"{cfg}: ")   # which config, as before work
    assert issubclass(UserError, ValueError)


def test_records_of_swept_seeds_name_their_seed(tmp_path):
    X, y = _union()
    p = tmp_path / "subspaces.npz"
    np.savez(p, X=X, y=y)
    cfg = _semi_config(tmp_path / "run", p, 'n_neighbors = 8\n')
    cfg.write_text(cfg.read_text().replace("seed = 4", "seed = [4, 5]"))
    recs = run(cfg)
    assert [r["seed"] for r in recs] == [4, 5]
    md = (tmp_path / "run" / "out" / "results.md").read_text()
    assert "| method | params | seed |" in md
