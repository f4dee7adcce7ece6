"""Ak-SC at scale (bigclust.subspace._chunked): chunked = in memory, distributed = local, kill -9 then resume."""
import numpy as np
import pytest
import scipy.sparse as sp
from _kill import kill_mid_step, run_plain

from bigclust.pipeline import resumable
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store, read_matrix
from bigclust.subspace import build_dictionary, knn_dictionary, self_expression, ssc_lambda
from bigclust.subspace import _chunked as scale

N_PER, N_CLS, CHUNK = 40, 3, 16


def _digits(seed=0):
    """Small 28x28 'digits': per class a smooth template (a few Gaussian strokes) with noisy copies."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:28, 0:28]
    X, y = [], []
    for c in range(N_CLS):
        centres = rng.uniform(7, 21, size=(4, 2))
        tmpl = sum(np.exp(-((yy - a) ** 2 + (xx - b) ** 2) / 12.0) for a, b in centres)
        for _ in range(N_PER):
            shift = rng.integers(-1, 2, size=2)
            img = np.roll(tmpl, tuple(shift), axis=(0, 1)) * rng.uniform(0.8, 1.2) + rng.normal(0, 0.05, (28, 28))
            X.append(np.clip(img, 0, None).ravel())
            y.append(c)
    return np.asarray(X, dtype=np.float32), np.asarray(y)


def _config(make_config, p, store, out, chunk_cols, extra=""):
    cfg = make_config(p, f'[aksc]\nregularizer = "l1"\nn_neighbors = 6\naugment = "mnist"\npca = 12\n'
                         f'[subspace]\nchunk_cols = {chunk_cols}\naugment_chunk_rows = 25\n{extra}',
                      name=f"{store}.toml")
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["aksc"]')
                   .replace("n_init = 5", "n_init = 5\nseed = 2").replace("gamma = 1.0", "")
                   .replace('path = "store.zarr"', f'path = "{store}"').replace('dir = "out"', f'dir = "{out}"')
                   .replace("l2_normalize = true", "l2_normalize = false"))
    return cfg


def _data(tmp_path):
    X, y = _digits()
    p = tmp_path / "digits.npz"
    np.savez(p, X=X, y=y)
    return p


def _stage(store_path):
    s = Store(store_path)
    (key,) = s.stage_keys("subspace")
    g = s.open("subspace", key)
    (ckey,) = s.stage_keys("cluster")
    cg = s.open("cluster", ckey)
    return read_matrix(g, "K"), dict(g.attrs), read_matrix(cg, "labels")[cg.attrs["best"]], g


def test_chunk_coefficients_equal_in_memory_bit_for_bit(tmp_path):
    """The chunked solver on gathered atoms = self_expression on the whole dictionary, to the bit."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(90, 10))
    Xa = X.repeat(3, axis=0) + rng.normal(0, 0.3, (270, 10))
    D = build_dictionary(X, Xa, np.repeat(np.arange(90), 3))
    nb = knn_dictionary(D, 7, method="exact")
    for reg in ("l1", "l2"):
        lam = ssc_lambda(None, D, nb) if reg == "l1" else 0.05
        C_ref = self_expression(None, D, nb, reg, lam)
        coef, its, conv, computed = scale.coefficients_chunked(D, nb, reg, lam, 16, tmp_path / reg)
        assert computed == list(range(6)) and conv.all()
        C = sp.csc_matrix((coef.ravel(), (nb.ravel(), np.repeat(np.arange(90), 7))), shape=C_ref.shape)
        assert (C != C_ref).nnz == 0                               # exactly the same floats
        assert abs(C_ref).sum() > 0 and (C_ref[np.arange(90), np.arange(90)] == 0).all()
        # a second call with the same work folder reuses every chunk
        again = scale.coefficients_chunked(D, nb, reg, lam, 16, tmp_path / reg)
        assert again[3] == [] and np.array_equal(again[0], coef)


def test_chunked_pipeline_equals_in_memory_pipeline(tmp_path, make_config):
    p = _data(tmp_path)
    run(_config(make_config, p, "mem.zarr", "o1", 0))
    run(_config(make_config, p, "chk.zarr", "o2", CHUNK))
    K0, a0, lab0, _ = _stage(tmp_path / "mem.zarr")
    K1, a1, lab1, g1 = _stage(tmp_path / "chk.zarr")
    total = -(-N_PER * N_CLS // CHUNK)
    assert a1["coef_chunks"] == [total, total, 0] and a1["n_atoms"] == 11 * N_PER * N_CLS
    assert a0["key"] == a1["key"]                                 # chunk_cols is not part of the key
    # the features are the same PCA up to the order of float additions: W agrees to rounding
    assert K0.nnz == K1.nnz and np.array_equal(K0.indices, K1.indices)
    np.testing.assert_allclose(K1.toarray(), K0.toarray(), rtol=1e-7, atol=1e-10)
    np.testing.assert_array_equal(lab0, lab1)
    nb = g1["neighbors"][...]
    origin = np.repeat(np.arange(N_PER * N_CLS), 10) + N_PER * N_CLS
    own = np.arange(nb.shape[0])
    assert not (nb == own[:, None]).any()                          # never itself ...
    assert not any(np.isin(nb[i], np.flatnonzero(origin == i + N_PER * N_CLS) + N_PER * N_CLS).any()
                   for i in own)                                  # ... nor its own augmentations
    assert not (tmp_path / "chk.zarr" / "work" / f"subspace-{a1['key']}").exists()
    # both paths record every step's wall and CPU seconds and peak RSS, the embed stage its normalisation's
    # and eigenvectors', and the report carries them
    import json
    for out, attrs, steps in (("o1", a0, ("augment", "features", "knn", "coef", "fold")),
                              ("o2", a1, ("augment", "pca", "features", "knn", "coef", "fold"))):
        (rec,) = json.loads((tmp_path / out / "results.json").read_text())
        s = Store(tmp_path / ("mem.zarr" if out == "o1" else "chk.zarr"))
        (ekey,) = s.stage_keys("embed")
        emb = dict(s.open("embed", ekey).attrs)          # the embed stage's: normalise, then eigenvectors
        for step, at in [(st, attrs) for st in steps] + [("normalize", emb), ("eigen", emb)]:
            for what in ("seconds", "cpu_seconds", "peak_rss_mb"):
                assert at[f"{step}_{what}"] >= 0 and rec[f"{step}_{what}"] == at[f"{step}_{what}"]
        assert emb["eigen_peak_rss_mb"] >= emb["normalize_peak_rss_mb"] > 0


def test_distributed_equals_local(tmp_path, make_config):
    distributed = pytest.importorskip("distributed")
    p = _data(tmp_path)
    run(_config(make_config, p, "loc.zarr", "o1", CHUNK))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        run(_config(make_config, p, "dist.zarr", "o2", CHUNK), scheduler=cluster.scheduler_address)
    K1, _, lab1, g1 = _stage(tmp_path / "loc.zarr")
    K2, a2, lab2, g2 = _stage(tmp_path / "dist.zarr")
    assert (K1 != K2).nnz == 0 and np.array_equal(g1["coef"][...], g2["coef"][...])
    np.testing.assert_array_equal(lab1, lab2)
    assert a2["coef_chunks"][1] == a2["coef_chunks"][0]


def test_sigkill_mid_coefficients_then_resume(tmp_path, make_config):
    """A real kill -9 while the coefficient chunks run: the re-run computes only the missing chunks."""
    p = _data(tmp_path)
    run_plain(tmp_path, _config(make_config, p, "whole.zarr", "o1", CHUNK))
    K_whole, _, lab_whole, g_whole = _stage(tmp_path / "whole.zarr")
    cfg = _config(make_config, p, "k.zarr", "ok", CHUNK)
    work, before = kill_mid_step(tmp_path, cfg, "k.zarr", "solve_chunk", "coef-", timeout=240)
    total = -(-N_PER * N_CLS // CHUNK)
    assert 2 <= len(before) < total and "knn" in resumable.finished(work)
    assert Store(tmp_path / "k.zarr").stage_keys("subspace") == []      # nothing committed
    run(cfg)
    K, attrs, lab, g = _stage(tmp_path / "k.zarr")
    assert attrs["coef_chunks"] == [total, total - len(before), len(before)]
    assert set(attrs["coef_chunks_computed"]) == set(range(total)) - before
    assert np.array_equal(g["coef"][...], g_whole["coef"][...]) and (K != K_whole).nnz == 0
    np.testing.assert_array_equal(lab, lab_whole)


def test_chunked_refuses_lrr(tmp_path, make_config):
    from bigclust._util.errors import UserError
    p = _data(tmp_path)
    cfg = _config(make_config, p, "lrr.zarr", "o", CHUNK)
    cfg.write_text(cfg.read_text().replace('regularizer = "l1"', 'regularizer = "nuclear"'))
    with pytest.raises(UserError, match="chunk_cols"):
        run(cfg)
