"""IVF kNN (bigclust.algo.knn.ivf): exact when every cell is probed, high recall with few, deterministic, and
resumable chunk by chunk in the kNN stage."""
import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.algo.knn import ivf as knn_ivf
from bigclust.pipeline import resumable
from bigclust.algo.affinity import kernel_from_neighbors
from bigclust._util.errors import UserError
from bigclust.algo.knn import knn_exact, knn_search, recall
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store, read_matrix

from conftest import blobs
from test_knn_resume import _affinity, _config, _data, CHUNK, GAMMA, K_NN, N

# the small IVF graphs of the stage tests may split into components (a warning the tests do not check)
pytestmark = pytest.mark.filterwarnings("ignore:kNN graph")


def _noisy(n=1200, k=12, d=8, seed=1):
    X, _ = blobs(n=n, k=k, d=d, seed=seed, sep=3.0)
    return X + np.random.default_rng(seed).normal(0, 0.1, X.shape).astype(np.float32)  # no distance ties


def _brute(X, k):
    """The k nearest other rows by a plain NumPy distance matrix."""
    X = X.astype(np.float64)
    D2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(D2, np.inf)
    ind = np.argsort(D2, axis=1, kind="stable")[:, :k]
    return ind, np.take_along_axis(D2, ind, 1)


def test_all_cells_probed_equals_exact():
    X = _noisy(n=600)
    ref_i, ref_d = _brute(X, 7)
    ind, d2 = knn_ivf.knn_ivf(X, 7, n_cells=9, n_probe=9, random_state=4)
    np.testing.assert_array_equal(ind, ref_i)
    np.testing.assert_allclose(d2, ref_d, rtol=1e-10)
    i2, _ = knn_search(X, 7, "ivf", n_cells=9, n_probe=9)
    np.testing.assert_array_equal(i2, ref_i)


def test_few_probes_high_recall_and_only_probed_cells():
    X = _noisy()
    ref, _ = knn_exact(X, 10)
    C, P = 30, 4
    ind, _ = knn_ivf.knn_ivf(X, 10, n_cells=C, n_probe=P, random_state=0)
    r = recall(ind, ref)
    assert 0.9 <= r
    # every neighbour found lies in one of the probed cells of its query's cell
    _, cell, probes = knn_ivf.ivf_partition(X, C, P, random_state=0)
    allowed = np.zeros((C, C), bool)
    allowed[np.arange(C)[:, None], probes] = True
    assert allowed[cell[:, None], cell[ind]].all()
    # nprobe = 1 searches each cell only: a lower recall than 4 probes (the probing does something)
    ind1, _ = knn_ivf.knn_ivf(X, 10, n_cells=C, n_probe=1, random_state=0)
    assert recall(ind1, ref) < r


def test_partition_is_lloyd_and_probes_are_nearest_centroids():
    X = _noisy(n=800)
    cent, cell, probes = knn_ivf.ivf_partition(X, 10, 3, random_state=2)
    D = ((X[:, None, :].astype(np.float64) - cent[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(cell, D.argmin(1))
    Dc = ((cent[:, None] - cent[None]) ** 2).sum(-1)
    np.fill_diagonal(Dc, -1)  # itself first
    np.testing.assert_array_equal(probes, np.argsort(Dc, axis=1, kind="stable")[:, :3])


def test_deterministic_for_a_seed():
    X = _noisy(n=900)
    a = knn_ivf.knn_ivf_lists(X, 6, n_cells=20, n_probe=3, random_state=7)
    b = knn_ivf.knn_ivf_lists(X, 6, n_cells=20, n_probe=3, random_state=7)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c1 = knn_ivf.ivf_partition(X, 20, 3, random_state=7)[1]
    c2 = knn_ivf.ivf_partition(X, 20, 3, random_state=8)[1]
    assert (c1 != c2).any()


def test_small_cells_widen_and_self_first():
    X = _noisy(n=200)
    ind, dist = knn_ivf.knn_ivf_lists(X, 12, n_cells=100, n_probe=1, random_state=0)
    assert (ind[:, 0] == np.arange(200)).all() and (dist[:, 0] == 0).all()
    assert all(len(set(r)) == 12 for r in ind)                  # 12 distinct rows although cells hold ~2
    assert (np.diff(dist[:, 1:], axis=1) >= 0).all()


def test_defaults_and_errors():
    assert knn_ivf.resolve(70000) == (273, knn_ivf.DEFAULT_PROBE)
    assert knn_ivf.resolve(1_000_000) == (3906, 137)  # nprobe grows as sqrt(n): recall held near 0.98
    assert knn_ivf.resolve(5) == (knn_ivf.default_cells(5), min(knn_ivf.default_cells(5), knn_ivf.DEFAULT_PROBE))
    with pytest.raises(UserError, match="ivf_probe"):
        knn_ivf.resolve(100, 10, 11)
    with pytest.raises(UserError, match="ivf_cells"):
        knn_ivf.resolve(100, 101, 1)


def _ivf_config(make_config, p, **kw):
    cfg = _config(make_config, p, **kw)
    cfg.write_text(cfg.read_text().replace(f"knn_chunk_rows = {kw.get('chunk', CHUNK)}",
                                           f'knn_chunk_rows = {kw.get("chunk", CHUNK)}\nknn = "ivf"\n'
                                           "ivf_cells = 16\nivf_probe = 5"))
    return cfg


def _stage_input(store_path):
    s = Store(store_path)
    (key,) = s.stage_keys("preprocess")
    return np.asarray(read_matrix(s.open("preprocess", key), "X"))


def test_stage_equals_one_call_and_resumes_only_missing_chunks(tmp_path, make_config, monkeypatch):
    p, _ = _data(tmp_path)
    run(_ivf_config(make_config, p, store="whole.zarr", out="o1"))
    K_whole, nbr_whole, attrs = _affinity(tmp_path / "whole.zarr")
    assert attrs["params"]["search"] == "ivf" and attrs["params"]["knn"] == "ivf"
    X = _stage_input(tmp_path / "whole.zarr")
    ind, dist = knn_ivf.knn_ivf_lists(X, K_NN, n_cells=16, n_probe=5, random_state=attrs["params"]["seed"])
    np.testing.assert_array_equal(nbr_whole, ind)               # chunks = one call
    np.testing.assert_array_equal(K_whole.toarray(), kernel_from_neighbors(ind, dist, K_NN, GAMMA,
                                                                             dtype=K_whole.dtype).toarray())
    total = attrs["knn_chunks"][0]
    assert total >= 5 and attrs["knn_chunks"] == [total, total, 0]

    search, partition, calls = knn_ivf.search_cells, knn_ivf.ivf_partition, []

    def failing(X, k, order, off, probes, cells):  # the run dies after 3 chunks (as a kill would)
        if len(calls) == 3:
            raise KeyboardInterrupt("killed")
        calls.append(cells.start)
        return search(X, k, order, off, probes, cells)

    monkeypatch.setattr(knn_ivf, "search_cells", failing)
    cfg = _ivf_config(make_config, p, store="part.zarr", out="o2")
    with pytest.raises(KeyboardInterrupt, match="^killed$"):   # the injected kill, no other
        run(cfg)
    store = tmp_path / "part.zarr"
    assert Store(store).stage_keys("affinity") == []
    (work,) = (store / "work").iterdir()
    assert resumable.chunks_done(work) == {0, 1, 2} and (work / "partition").exists()

    recomputed, parts = [], []
    monkeypatch.setattr(knn_ivf, "search_cells",
                        lambda X, k, o, off, pr, cells: recomputed.append(cells.start) or search(X, k, o, off, pr, cells))
    monkeypatch.setattr(knn_ivf, "ivf_partition", lambda *a, **kw: parts.append(1) or partition(*a, **kw))
    run(cfg)
    K, nbr, attrs = _affinity(store)
    assert parts == []                                          # the stored partition was reused
    assert len(recomputed) == total - 3 and not set(recomputed) & set(calls)
    assert attrs["knn_chunks"] == [total, total - 3, 3] and attrs["knn_chunks_computed"] == list(range(3, total))
    np.testing.assert_array_equal(nbr, nbr_whole)
    assert (K != K_whole).nnz == 0 and sp.issparse(K)
    assert not (store / "work" / f"affinity-{attrs['key']}").exists()


def test_stage_in_one_call_equals_chunked(tmp_path, make_config):
    p, _ = _data(tmp_path)
    run(_ivf_config(make_config, p, store="a.zarr", out="o1"))
    run(_ivf_config(make_config, p, store="b.zarr", out="o2", chunk=0))
    K1, n1, _ = _affinity(tmp_path / "a.zarr")
    s = Store(tmp_path / "b.zarr")
    (key,) = s.stage_keys("affinity")
    g = s.open("affinity", key)
    K2, a2 = read_matrix(g, "K"), dict(g.attrs)
    assert a2["params"]["knn"] == "ivf" and a2["params"].get("search") is None
    assert (K1 != K2).nnz == 0 and n1.shape == (N, K_NN)
