"""kNN-SSC at scale (issue 29, item 4): the config path of pipelines/scale/mnist-1m-ssc.toml on small data.

The subspace stage reads the [preprocess] stage's PCA rows ([aksc] pca = 0, no second PCA), searches the
dictionary kNN by bigclust.algo.knn's inverted files when asked ([subspace] knn), solves the coefficients in
resumable chunks: the same labels as ``SubspaceClustering(regularizer="l1", n_neighbors=10, augment=None)`` on
the preprocessed rows, and a kill -9 mid-coefficients resumes to the uninterrupted result.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

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


def test_sigkill_mid_coefficients_then_resume(tmp_path):
    """A real kill -9 while the coefficient chunks run (after the ivf-rows dictionary kNN): the re-run
    computes only the missing chunks and ends where an uninterrupted run does."""
    script = tmp_path / "slow.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        from bigclust.subspace import _chunked as scale
        solve = scale.solve_chunk
        def slow(*a):
            time.sleep(0.5)
            return solve(*a)
        if sys.argv[2] == "slow":
            scale.solve_chunk = slow
        from bigclust.pipeline.runner import run
        run(sys.argv[1])
    """))
    env = {**os.environ, "PYTHONPATH": str(Path(resumable.__file__).parents[2])}
    subprocess.run([sys.executable, str(script), str(_config(tmp_path, "ivf-rows", "whole.zarr", "o1")), "plain"],
                   env=env, cwd=tmp_path, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    K_whole, _, lab_whole, g_whole, _ = _stage(tmp_path / "whole.zarr")
    cfg = _config(tmp_path, "ivf-rows", "k.zarr", "ok")
    proc = subprocess.Popen([sys.executable, str(script), str(cfg), "slow"], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work_root = tmp_path / "k.zarr" / "work"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        works = list(work_root.iterdir()) if work_root.exists() else []
        if works and len(resumable.chunks_done(works[0], "coef-")) >= 2:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    (work,) = work_root.iterdir()
    before = resumable.chunks_done(work, "coef-")
    total = -(-N_CLS * N_PER // CHUNK)
    assert 2 <= len(before) < total and "knn" in resumable.finished(work)
    assert Store(tmp_path / "k.zarr").stage_keys("subspace") == []      # nothing committed
    run(cfg)
    K, attrs, lab, g, _ = _stage(tmp_path / "k.zarr")
    assert attrs["coef_chunks"] == [total, total - len(before), len(before)]
    assert np.array_equal(g["coef"][...], g_whole["coef"][...]) and (K != K_whole).nnz == 0
    np.testing.assert_array_equal(lab, lab_whole)
