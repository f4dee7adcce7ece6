"""kNN-SSC at scale (issue 29, item 4): the config path of pipelines/scale/mnist-1m-ssc.toml on small data.

The subspace stage reads the [preprocess] stage's PCA rows ([aksc] pca = 0, no second PCA), searches the
dictionary kNN by bigclust.algo.knn's inverted files when asked ([subspace] knn), solves the coefficients in
resumable chunks: the same labels as ``SubspaceClustering(regularizer="l1", n_neighbors=10, augment=None)`` on
the preprocessed rows; the chunked ivf-rows dictionary kNN gives the one-call search's lists; a kill -9 in
the dictionary kNN or mid-coefficients resumes to the uninterrupted result.
"""
import textwrap

import numpy as np
from _kill import kill_mid_step, run_plain

from bigclust.pipeline import resumable
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store, read_matrix
from bigclust.subspace import build_dictionary, knn_dictionary

N_CLS, N_PER, CHUNK = 5, 600, 250


def _subspaces(seed=0):
    """3000 rows near 5 random 4-dimensional subspaces of R^60 (scaled, noisy): kNN-SSC's own setting."""
    rng = np.random.default_rng(seed)
    X, y = [], []
    for c in range(N_CLS):
        basis = np.linalg.qr(rng.standard_normal((60, 4)))[0]
        X.append((rng.standard_normal((N_PER, 4)) @ basis.T) * rng.uniform(0.5, 2, (N_PER, 1))
                 + rng.normal(0, 0.02, (N_PER, 60)))
        y.append(np.full(N_PER, c))
    return np.vstack(X).astype(np.float32), np.concatenate(y)


def _config(tmp_path, knn, store="store.zarr", out="out"):
    X, y = _subspaces()
    data = tmp_path / "subspaces.npz"
    if not data.exists():
        np.savez(data, X=X, y=y)
    cfg = tmp_path / f"{store}.toml"
    cfg.write_text(textwrap.dedent(f"""
        [data]
        path = "{data}"
        [preprocess]
        l2_normalize = true
        pca = 20
        [method]
        names = ["aksc"]
        [aksc]
        regularizer = "l1"
        n_neighbors = 10
        augment = "none"
        [subspace]
        chunk_cols = {CHUNK}
        knn = "{knn}"
        [cluster]
        n_clusters = {N_CLS}
        n_init = 10
        seed = 0
        [store]
        path = "{store}"
        [output]
        dir = "{out}"
        plots = false
        """))
    return cfg


def _stage(store_path):
    s = Store(store_path)
    (key,) = s.stage_keys("subspace")
    g = s.open("subspace", key)
    (ckey,) = s.stage_keys("cluster")
    cg = s.open("cluster", ckey)
    (pkey,) = s.stage_keys("preprocess")
    X = read_matrix(s.open("preprocess", pkey), "X")
    return read_matrix(g, "K"), dict(g.attrs), read_matrix(cg, "labels")[cg.attrs["best"]], g, X


def test_config_path_equals_estimator(tmp_path):
    """Preprocess PCA, then the chunked subspace stage = the estimator on the preprocessed rows, bit for bit."""
    from bigclust import SubspaceClustering

    recs = run(_config(tmp_path, "exact"))
    K, attrs, labels, _, X = _stage(tmp_path / "store.zarr")
    assert X.shape == (N_CLS * N_PER, 20) and attrs["pca_seconds"] < 1     # no PCA inside the stage
    assert attrs["coef_chunks"] == [-(-N_CLS * N_PER // CHUNK)] * 2 + [0]
    model = SubspaceClustering(N_CLS, regularizer="l1", n_neighbors=10, augment=None, n_init=10,
                               random_state=0).fit(np.asarray(X))
    assert (model.affinity_matrix_ != K).nnz == 0
    np.testing.assert_array_equal(model.labels_, labels)
    assert recs[0]["acc_best_inertia"] > 0.95


def test_ivf_dictionary_knn_close_to_exact():
    """The inverted-file searches give the exact supports on nearly every row (no augmentation: nothing to
    exclude but the row itself)."""
    X, _ = _subspaces()
    D = build_dictionary(X)
    exact = knn_dictionary(D, 10, method="exact")
    for method in ("ivf", "ivf-rows"):
        nb = knn_dictionary(D, 10, method=method)
        assert nb.shape == exact.shape and (nb != np.arange(len(nb))[:, None]).all()
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(nb, exact)])
        assert recall > 0.95, (method, recall)


def test_ivf_dictionary_knn_excludes_self_and_own_augmentations():
    """With augmented atoms the searched candidates are filtered as NN-descent's: never i or A(i)."""
    rng = np.random.default_rng(1)
    n, m = 300, 4
    X = rng.standard_normal((n, 10))
    Xa = np.repeat(X, m, axis=0) + 0.2 * rng.standard_normal((n * m, 10))
    D = build_dictionary(X, Xa, np.repeat(np.arange(n), m))
    ex = knn_dictionary(D, 10, method="exact")
    nb = knn_dictionary(D, 10, method="ivf-rows")
    for i in range(n):
        own = {i} | set(D.aug_idx[D.aug_ptr[i]:D.aug_ptr[i + 1]].tolist())
        assert len(set(nb[i].tolist())) == 10 and not (set(nb[i].tolist()) & own)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(nb.tolist(), ex.tolist())]) > 0.9


def test_chunked_dictionary_knn_equals_one_call(tmp_path):
    """The dictionary kNN in resumable chunks (here, and as tasks on a local cluster) = the one-call search,
    with and without augmented atoms, whatever the chunk size; a second call reuses every chunk."""
    import distributed

    from bigclust.subspace import _chunked as scale

    rng = np.random.default_rng(2)
    X, _ = _subspaces()
    Xa = np.repeat(X[:600], 3, axis=0) + 0.05 * rng.standard_normal((1800, X.shape[1]))
    cases = [(build_dictionary(X), 700), (build_dictionary(X[:600], Xa, np.repeat(np.arange(600), 3)), 333)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        for j, (D, c) in enumerate(cases):
            one = knn_dictionary(D, 10, method="ivf-rows", random_state=3)
            for where, cl in (("here", None), ("cluster", client)):
                work = tmp_path / f"{j}-{where}"
                resumable.open_work(work, {"case": j})
                nb = scale.knn_ivf_rows_chunked(D, 10, work, c, 3, client=cl)
                np.testing.assert_array_equal(nb, one)
                assert len(resumable.chunks_done(work, f"knn2c{c}-")) == -(-D.n_atoms // c)
            calls = []
            fast = scale.knn_pass_task
            scale.knn_pass_task = lambda *a: calls.append(a) or fast(*a)
            try:
                np.testing.assert_array_equal(scale.knn_ivf_rows_chunked(D, 10, work, c, 3), one)
            finally:
                scale.knn_pass_task = fast
            assert calls == []


def test_sigkill_mid_dictionary_knn_then_resume(tmp_path):
    """A real kill -9 while the chunked dictionary kNN runs: the re-run searches only the chunks without a
    marker and ends where an uninterrupted run does."""
    from bigclust.subspace import _chunked as scale

    run_plain(tmp_path, _config(tmp_path, "ivf-rows", "whole.zarr", "o1"))
    K_whole, _, lab_whole, g_whole, _ = _stage(tmp_path / "whole.zarr")
    cfg = _config(tmp_path, "ivf-rows", "k.zarr", "ok")
    work, before = kill_mid_step(tmp_path, cfg, "k.zarr", "knn_pass_task", f"knn0c{CHUNK}-")
    per_pass = -(-N_CLS * N_PER // CHUNK)
    assert 2 <= len(before) < per_pass and "knn-partition" in resumable.finished(work)
    assert "knn" not in resumable.finished(work) and Store(tmp_path / "k.zarr").stage_keys("subspace") == []
    calls = []
    fast = scale.knn_pass_task
    scale.knn_pass_task = lambda *a: calls.append(a) or fast(*a)
    try:
        run(cfg)
    finally:
        scale.knn_pass_task = fast
    assert len(calls) == 3 * per_pass - len(before)          # pass 0's missing chunks, then passes 1 and 2
    K, attrs, lab, g, _ = _stage(tmp_path / "k.zarr")
    assert np.array_equal(g["neighbors"][...], g_whole["neighbors"][...])
    assert np.array_equal(g["coef"][...], g_whole["coef"][...]) and (K != K_whole).nnz == 0
    np.testing.assert_array_equal(lab, lab_whole)


def test_sigkill_mid_coefficients_then_resume(tmp_path):
    """A real kill -9 while the coefficient chunks run (after the ivf-rows dictionary kNN): the re-run
    computes only the missing chunks and ends where an uninterrupted run does."""
    run_plain(tmp_path, _config(tmp_path, "ivf-rows", "whole.zarr", "o1"))
    K_whole, _, lab_whole, g_whole, _ = _stage(tmp_path / "whole.zarr")
    cfg = _config(tmp_path, "ivf-rows", "k.zarr", "ok")
    work, before = kill_mid_step(tmp_path, cfg, "k.zarr", "solve_chunk", "coef-")
    total = -(-N_CLS * N_PER // CHUNK)
    assert 2 <= len(before) < total and "knn" in resumable.finished(work)
    assert Store(tmp_path / "k.zarr").stage_keys("subspace") == []      # nothing committed
    run(cfg)
    K, attrs, lab, g, _ = _stage(tmp_path / "k.zarr")
    assert attrs["coef_chunks"] == [total, total - len(before), len(before)]
    assert np.array_equal(g["coef"][...], g_whole["coef"][...]) and (K != K_whole).nnz == 0
    np.testing.assert_array_equal(lab, lab_whole)
