"""The chunked kNN affinity stage: exact against a NumPy reference, resumable chunk by chunk, same on a cluster."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.pipeline import resumable
from bigclust.pipeline.stages import knn as knn_stage
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store, read_matrix

from conftest import blobs

N, K_NN, CHUNK, GAMMA = 700, 8, 64, 0.5


def _data(tmp_path):
    X, y = blobs(n=N, k=4, d=6, seed=3, sep=1.0)  # one connected kNN graph
    X = X + np.random.default_rng(5).normal(0, 0.05, X.shape).astype(np.float32)  # no distance ties
    p = tmp_path / "d.npz"
    np.savez(p, X=X, y=y)
    return p, X


def _config(make_config, p, store="store.zarr", chunk=CHUNK, out="out"):
    cfg = make_config(p, name=f"{store}.toml")
    text = cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["ncut"]')
    text = text.replace("gamma = 1.0", f'kind = "knn"\ngamma = {GAMMA}\nn_neighbors = {K_NN}\n'
                                       f"knn_chunk_rows = {chunk}")
    text = text.replace('path = "store.zarr"', f'path = "{store}"').replace('dir = "out"', f'dir = "{out}"')
    cfg.write_text(text.replace("l2_normalize = true", "l2_normalize = false"))
    return cfg


def _affinity(store_path):
    s = Store(store_path)
    (key,) = s.stage_keys("affinity")
    g = s.open("affinity", key)
    return read_matrix(g, "K"), g["neighbors"][...], dict(g.attrs)


def _reference(X):
    """Gaussian weights on the symmetrised exact kNN graph, written the obvious way."""
    X = X.astype(np.float64)
    D2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    nbr = np.argsort(D2, axis=1, kind="stable")[:, :K_NN]
    W = np.zeros((N, N))
    rows = np.repeat(np.arange(N), K_NN)
    W[rows, nbr.ravel()] = np.exp(-D2[rows, nbr.ravel()] / GAMMA)
    return np.maximum(W, W.T), nbr


def test_chunked_knn_equals_numpy_reference(tmp_path, make_config):
    p, X = _data(tmp_path)
    run(_config(make_config, p))
    K, nbr, attrs = _affinity(tmp_path / "store.zarr")
    Kref, nbr_ref = _reference(X)
    np.testing.assert_array_equal(nbr, nbr_ref)
    np.testing.assert_allclose(K.toarray(), Kref, rtol=1e-12, atol=0)
    total = -(-N // CHUNK)
    assert attrs["knn_chunks"] == [total, total, 0] and attrs["params"]["search"] == "exact"
    assert not (tmp_path / "store.zarr" / "work" / f"affinity-{attrs['key']}").exists()  # scratch removed


def test_resume_recomputes_only_missing_chunks(tmp_path, make_config, monkeypatch):
    p, _ = _data(tmp_path)
    run(_config(make_config, p, store="whole.zarr", out="o1"))
    K_whole, nbr_whole, _ = _affinity(tmp_path / "whole.zarr")

    search, calls = knn_stage.neighbors_of_rows, []

    def failing(X, r0, r1, k):  # the run dies after m chunks (as a kill would)
        if len(calls) == 4:
            raise KeyboardInterrupt("killed")
        calls.append(r0)
        return search(X, r0, r1, k)

    monkeypatch.setattr(knn_stage, "neighbors_of_rows", failing)
    cfg = _config(make_config, p, store="part.zarr", out="o2")
    with pytest.raises(KeyboardInterrupt, match="^killed$"):   # the injected kill, no other
        run(cfg)
    store = tmp_path / "part.zarr"
    assert Store(store).stage_keys("affinity") == []          # nothing committed
    (work,) = (store / "work").iterdir()
    assert resumable.chunks_done(work) == {0, 1, 2, 3}

    monkeypatch.setattr(knn_stage, "neighbors_of_rows", search)
    recomputed = []
    monkeypatch.setattr(knn_stage, "neighbors_of_rows", lambda X, r0, r1, k: recomputed.append(r0) or search(X, r0, r1, k))
    run(cfg)
    total = -(-N // CHUNK)
    K, nbr, attrs = _affinity(store)
    assert sorted(recomputed) == [r0 for _, r0, _ in resumable.chunk_bounds(N, CHUNK)][4:]
    assert attrs["knn_chunks"] == [total, total - 4, 4] and attrs["knn_chunks_computed"] == list(range(4, total))
    np.testing.assert_array_equal(nbr, nbr_whole)
    assert (K != K_whole).nnz == 0 and sp.issparse(K)


def test_other_chunk_size_starts_afresh(tmp_path):
    work = tmp_path / "w"
    g = knn_stage.open_work(work, 100, 5, 10)
    (work / "done" / "3").write_text("x")
    assert resumable.chunks_done(work) == {3}
    knn_stage.open_work(work, 100, 5, 10)
    assert resumable.chunks_done(work) == {3}                   # same shape: kept
    knn_stage.open_work(work, 100, 5, 20)
    assert resumable.chunks_done(work) == set() and g is not None


def test_sigkill_mid_stage_then_resume(tmp_path, make_config):
    """A real ``kill -9`` of the whole run while it is searching: the re-run computes only the rest."""
    p, _ = _data(tmp_path)
    cfg = _config(make_config, p, store="k.zarr", out="ok")
    script = tmp_path / "slow.py"
    # each chunk sleeps a little so that the kill lands mid-stage
    script.write_text(textwrap.dedent(f"""
        import time, sys
        from bigclust.pipeline.stages import knn as knn_stage
        from bigclust.pipeline.runner import run
        search = knn_stage.neighbors_of_rows
        def slow(X, r0, r1, k):
            time.sleep(0.4)
            return search(X, r0, r1, k)
        knn_stage.neighbors_of_rows = slow
        run(sys.argv[1])
    """))
    env = {**os.environ, "PYTHONPATH": str(Path(knn_stage.__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, str(script), str(cfg)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work_root = tmp_path / "k.zarr" / "work"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        works = list(work_root.iterdir()) if work_root.exists() else []
        if works and len(resumable.chunks_done(works[0])) >= 3:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    (work,) = work_root.iterdir()
    before = resumable.chunks_done(work)
    total = -(-N // CHUNK)
    assert 3 <= len(before) < total
    run(cfg)
    _, _, attrs = _affinity(tmp_path / "k.zarr")
    assert attrs["knn_chunks"] == [total, total - len(before), len(before)]
    assert set(attrs["knn_chunks_computed"]) == set(range(total)) - before


@pytest.mark.parametrize("search", ["exact", "ivf", "ivf-rows"])
def test_chunks_on_a_local_cluster_equal_local(tmp_path, make_config, search):
    """Chunks as tasks of a process-based cluster give the local lists bit for bit; for IVF the
    partition reaches the workers through the store's scratch group."""
    distributed = pytest.importorskip("distributed")
    p, X = _data(tmp_path)
    X_shape = X.shape

    def config(**kw):
        cfg = _config(make_config, p, **kw)
        if search != "exact":
            cfg.write_text(cfg.read_text().replace(f"knn_chunk_rows = {CHUNK}", f"knn_chunk_rows = {CHUNK}\n"
                                                   f'knn = "{search}"\nivf_cells = 16\nivf_probe = 5'))
        return cfg

    run(config(store="loc.zarr", out="o1"))
    shapes, real = [], distributed.Client.scatter

    def scatter(self, data, *a, **kw):   # what the driver sends the workers itself
        shapes.append(getattr(data, "shape", None))
        return real(self, data, *a, **kw)
    with pytest.MonkeyPatch.context() as mp, \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None) as cluster:
        mp.setattr(distributed.Client, "scatter", scatter)
        run(config(store="dist.zarr", out="o2"), scheduler=cluster.scheduler_address)
        with distributed.Client(cluster) as client:   # the rows the workers loaded went with the stage
            assert set(client.run(lambda: len(resumable._LOADED)).values()) == {0}
    # ivf-rows: the workers load the cell-sorted rows from the scratch group; the driver never sends them
    assert (X_shape in shapes) == (search != "ivf-rows")
    K1, n1, _ = _affinity(tmp_path / "loc.zarr")
    K2, n2, a2 = _affinity(tmp_path / "dist.zarr")
    assert a2["params"].get("search") == search
    np.testing.assert_array_equal(n1, n2)
    assert (K1 != K2).nnz == 0 and a2["knn_chunks"][1] == a2["knn_chunks"][0] >= 5


def test_stored_inputs_load_once_per_process_and_go_with_their_pass(tmp_path):
    """A :class:`resumable.Stored` input is read from the scratch group where the chunk runs, cast as asked, kept
    for the next chunk that names it, and let go when a chunk names others (an earlier pass's lists)."""
    import zarr

    g = zarr.open_group(str(tmp_path), mode="w")
    for name, a in (("xs", np.arange(12.0).reshape(4, 3)), ("nbr0", np.arange(8).reshape(4, 2)),
                    ("nbr1", np.arange(8).reshape(4, 2) + 1)):
        g.create_array(name, shape=a.shape, dtype=a.dtype)[...] = a
    (tmp_path / "done").mkdir()
    seen = []
    resumable._LOADED.clear()

    def fn(xs, src, tag):
        seen.append((xs, src, tag))
    xs, n0 = resumable.Stored(tmp_path, "xs"), resumable.Stored(tmp_path, "nbr0", np.int32)
    resumable._run_chunk(fn, tmp_path, "p1_0", 0, 2, xs, n0, "a")
    resumable._run_chunk(fn, tmp_path, "p1_1", 2, 4, xs, n0, "b")
    (x_a, s_a, _), (x_b, s_b, _) = seen
    np.testing.assert_array_equal(x_a, np.arange(12.0).reshape(4, 3))
    assert s_a.dtype == np.int32 and x_a is x_b and s_a is s_b             # loaded once
    resumable._run_chunk(fn, tmp_path, "p2_0", 0, 2, xs, (resumable.Stored(tmp_path, "nbr1"), 7), "c")
    x_c, (s_c, seven), _ = seen[-1]
    assert x_c is x_a and seven == 7 and s_c[0, 0] == 1
    assert set(resumable._LOADED) == {xs.key(), resumable.Stored(tmp_path, "nbr1").key()}   # nbr0 gone
    assert resumable.chunks_done(tmp_path, "p1_") == {0, 1} and resumable.chunks_done(tmp_path, "p2_") == {0}
    resumable._LOADED.clear()


def test_a_disconnected_chunked_kernel_names_the_stored_distances_median(tmp_path, make_config):
    """The stage weighs the pairs and lets the distances go before the kernel is built; the message about an
    underflowing gamma reads their median back from the lists it committed."""
    p, _ = _data(tmp_path)
    cfg = _config(make_config, p)
    cfg.write_text(cfg.read_text().replace(f"gamma = {GAMMA}", "gamma = 1e-9"))
    with pytest.warns(RuntimeWarning, match=r"gamma=1e-09 is too small for the median squared kNN distance") as rec:
        run(cfg)
    s = Store(tmp_path / "store.zarr")
    (key,) = s.stage_keys("affinity")
    d = s.open("affinity", key)["distances"][...]
    said = next(str(w.message) for w in rec if "too small" in str(w.message))
    assert f"distance {float(np.median(d[:, 1:] ** 2)):.3g} " in said
