"""kNN by IVF with per-row probes (bigclust.algo.knn.ivf_rows): exact when every cell is probed, high recall with
few, the same lists in one call, in chunks and after a kill, and a projected search of high-dimensional rows."""
import numpy as np
import pytest

from bigclust.algo.knn import ivf_rows, knn_exact, knn_search, recall, resolve_method
from bigclust.pipeline import resumable
from bigclust.pipeline.runner import run

from conftest import blobs
from test_knn_resume import _affinity, _config, _data, CHUNK, K_NN
from test_knn_ivf import _brute, _noisy, _stage_input

# the small graphs of the stage tests may split into components (a warning the tests do not check)
pytestmark = pytest.mark.filterwarnings("ignore:kNN graph")


def test_all_cells_probed_equals_exact():
    X = _noisy(n=600)
    ref_i, ref_d = _brute(X, 7)
    ind, d2 = ivf_rows.knn_ivf_rows(X, 7, n_cells=9, n_probe=9, refine=0, random_state=4)
    np.testing.assert_array_equal(ind, ref_i)
    np.testing.assert_allclose(d2, ref_d, rtol=1e-6)
    i2, _ = knn_search(X, 7, "ivf-rows", n_cells=9, n_probe=9)
    np.testing.assert_array_equal(i2, ref_i)


def test_few_probes_high_recall_and_refine_helps():
    X = _noisy(n=3000, k=30, d=10)
    ref, _ = knn_exact(X, 10)
    r0 = recall(ivf_rows.knn_ivf_rows(X, 10, n_cells=60, n_probe=2, refine=0)[0], ref)
    r1 = recall(ivf_rows.knn_ivf_rows(X, 10, n_cells=60, n_probe=2, refine=1)[0], ref)
    r4 = recall(ivf_rows.knn_ivf_rows(X, 10, n_cells=60, n_probe=6, refine=1)[0], ref)
    assert 0.6 < r0 < r1 <= r4 and r4 >= 0.97


def test_partition_cells_are_nearest_centroids_and_sorted():
    X = _noisy(n=2000, k=20, d=6)
    part = ivf_rows.partition(X, 40, random_state=1)
    C = part.cent.shape[0]
    assert abs(C - 40) <= 5 and part.off[0] == 0 and part.off[-1] == X.shape[0]
    np.testing.assert_array_equal(np.sort(part.order), np.arange(X.shape[0]))
    cell = part.cell_of(0, X.shape[0])
    D = ((X[part.order][:, None, :].astype(np.float64) - part.cent[None]) ** 2).sum(-1)
    assert (D.argmin(1) == cell).mean() > 0.98        # the two-level assignment finds the nearest centroid
    np.testing.assert_array_equal(part.graph[:, 0], np.arange(C))  # every centroid's own cell first


def test_chunks_give_the_same_lists_and_seed_decides():
    X = _noisy(n=1500)
    part = ivf_rows.partition(X, 20, random_state=3)
    Xs = X[part.order]
    whole = ivf_rows.search_rows(Xs, part, 6, 0, 1500, 3)
    parts = [ivf_rows.search_rows(Xs, part, 6, a, min(1500, a + 170), 3) for a in range(0, 1500, 170)]
    np.testing.assert_array_equal(whole[0], np.vstack([p[0] for p in parts]))
    np.testing.assert_array_equal(whole[1], np.vstack([p[1] for p in parts]))
    a = ivf_rows.knn_ivf_rows_lists(X, 6, n_cells=20, n_probe=3, random_state=7)
    b = ivf_rows.knn_ivf_rows_lists(X, 6, n_cells=20, n_probe=3, random_state=7, block=100)
    np.testing.assert_array_equal(a[0], b[0])
    assert (a[0][:, 0] == np.arange(1500)).all()      # each row's own id first


def test_permute_rows_in_place():
    X = np.random.default_rng(0).normal(size=(1000, 5)).astype(np.float32)
    order = np.random.default_rng(1).permutation(1000)
    Y = X.copy()
    ivf_rows.sort_rows(Y, ivf_rows.Partition(None, None, order, None))
    np.testing.assert_array_equal(Y, X[order])


def test_tiny_inputs_and_duplicates():
    X = np.zeros((12, 3), np.float32)                 # every distance 0: lists still of k other rows
    ind, d2 = ivf_rows.knn_ivf_rows(X, 4)
    assert (ind != np.arange(12)[:, None]).all() and (d2 == 0).all()
    X = _noisy(n=40, k=4, d=3)
    ind, _ = ivf_rows.knn_ivf_rows(X, 5, n_cells=20, n_probe=1, refine=0)  # 2-row cells: widened as needed
    assert (ind >= 0).all() and (ind != np.arange(40)[:, None]).all()


def test_high_dimensional_rows_are_projected_and_reranked(monkeypatch):
    rng = np.random.default_rng(2)
    latent, _ = blobs(n=2500, k=10, d=12, seed=2, sep=2.0)   # 200-d rows near a 12-d subspace
    X = (latent @ rng.normal(size=(12, 200)) + rng.normal(0, 0.01, (2500, 200))).astype(np.float32)
    ref, _ = knn_exact(X, 10)
    seen = []
    project = ivf_rows.project
    monkeypatch.setattr(ivf_rows, "project", lambda *a, **kw: seen.append(project(*a, **kw)[1]) or project(*a, **kw))
    ind, d2 = ivf_rows.knn_ivf_rows(X, 10)
    assert seen[0] > 0.99 and recall(ind, ref) >= 0.97
    exact_d = ((X[ind].astype(np.float64) - X[:, None, :]) ** 2).sum(-1)
    np.testing.assert_allclose(d2, exact_d, rtol=1e-9)   # distances of the full rows, not the projection
    # isotropic noise in 200-d: 64 components hold too little; the rows are searched as they are
    Y = rng.normal(size=(1500, 200)).astype(np.float32)
    ind, _ = ivf_rows.knn_ivf_rows(Y, 5)
    assert seen[-1] < ivf_rows.PROJECT_MIN_VARIANCE and recall(ind, knn_exact(Y, 5)[0]) >= 0.9


def test_projected_search_of_a_tiny_input_fills_every_list():
    rng = np.random.default_rng(5)
    X = (rng.normal(size=(60, 5)) @ rng.normal(size=(5, 200)) + rng.normal(0, 0.01, (60, 200))).astype(np.float32)
    ref, _ = knn_exact(X, 5)
    for refine in (0, 1):   # 2-row cells, one probed: widened to more cells, then filled exactly
        ind, d2 = ivf_rows.knn_ivf_rows(X, 5, n_cells=30, n_probe=1, refine=refine)
        assert (ind >= 0).all() and (ind != np.arange(60)[:, None]).all() and recall(ind, ref) >= 0.97
        assert (np.diff(d2, axis=1) >= 0).all()


def test_auto_means_ivf_rows_above_the_exact_limit():
    assert resolve_method("auto", 3000, 50) == "exact"
    assert resolve_method("auto", 70000, 50) == "ivf-rows"
    assert resolve_method("auto", 70000, 784) == "ivf-rows"   # on its principal components, reranked


def _rows_config(make_config, p, **kw):
    cfg = _config(make_config, p, **kw)
    cfg.write_text(cfg.read_text().replace(f"knn_chunk_rows = {kw.get('chunk', CHUNK)}",
                                           f'knn_chunk_rows = {kw.get("chunk", CHUNK)}\nknn = "ivf-rows"\n'
                                           "ivf_cells = 16\nivf_probe = 3"))
    return cfg


def test_stage_equals_one_call_and_resumes_inside_a_pass(tmp_path, make_config, monkeypatch):
    p, _ = _data(tmp_path)
    run(_rows_config(make_config, p, store="whole.zarr", out="o1"))
    K_whole, nbr_whole, attrs = _affinity(tmp_path / "whole.zarr")
    assert attrs["params"]["search"] == "ivf-rows" and attrs["params"]["knn"] == "ivf-rows"
    X = _stage_input(tmp_path / "whole.zarr")
    ind, _ = ivf_rows.knn_ivf_rows_lists(X, K_NN, n_cells=16, n_probe=3, random_state=attrs["params"]["seed"])
    np.testing.assert_array_equal(nbr_whole, ind)               # chunks and passes = one call
    total, per_pass = attrs["knn_chunks"][0], -(-X.shape[0] // CHUNK)
    assert total == (ivf_rows.DEFAULT_REFINE + 1) * per_pass and attrs["knn_chunks"] == [total, total, 0]

    refine, calls = ivf_rows.refine_rows, []

    def failing(Xs, nbr, p0, p1):  # the run dies in the refine pass after 2 chunks (as a kill would)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        calls.append(p0)
        return refine(Xs, nbr, p0, p1)

    monkeypatch.setattr(ivf_rows, "refine_rows", failing)
    cfg = _rows_config(make_config, p, store="part.zarr", out="o2")
    with pytest.raises(KeyboardInterrupt, match="^killed$"):
        run(cfg)
    (work,) = (tmp_path / "part.zarr" / "work").iterdir()
    assert resumable.chunks_done(work, "p1_") == {0, 1} and (work / "partition").exists()
    parts, search = [], ivf_rows.search_rows
    monkeypatch.setattr(ivf_rows, "refine_rows", refine)
    monkeypatch.setattr(ivf_rows, "partition", lambda *a, **kw: parts.append(1))   # must not run again
    monkeypatch.setattr(ivf_rows, "search_rows", lambda *a: parts.append(2) or search(*a))
    run(cfg)
    _, nbr, attrs = _affinity(tmp_path / "part.zarr")
    assert parts == [] and attrs["knn_chunks"][2] == per_pass + 2   # pass 0 and 2 chunks of pass 1 reused
    np.testing.assert_array_equal(nbr, nbr_whole)


def test_bench_knn_sizes_reports_time_recall_and_slope(tmp_path):
    from bigclust.bench.knn import bench_knn_sizes, format_report

    p = tmp_path / "rows.npy"
    np.save(p, _noisy(n=1200, k=12, d=8))
    res = bench_knn_sizes([600, 1200], str(p), k=5, approx=("ivf", "ivf-rows"), sample=200)
    assert res["sizes"] == [600, 1200] and res["repeats"] == 1 and "load_avg_after" in res and "machine" in res
    for name in ("ivf", "ivf-rows"):
        assert len(res[f"{name}_seconds"]) == 2 and min(res[f"{name}_recall"]) > 0.9 and f"{name}_slope" in res
    assert "ivf-rows" in format_report(res)
