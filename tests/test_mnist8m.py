"""mnist-8m: mnist-1m's generator extended, stored as uint8, prefixes nested; the ingest resumes after a crash."""
import numpy as np
import pytest

from bigclust.datasets import get_info
from bigclust.datasets import mnist1m as m
from bigclust.pipeline import resumable, stages
from bigclust.pipeline.stages import data as stage_data
from bigclust.pipeline.store import Store, read_matrix

from test_mnist1m import N_BASE, N_TOTAL, _all, _base


def _source(n_rows=None, n_total=N_TOTAL, store_dtype=None, base=None):
    X, y = base if base is not None else _base()

    def blocks(hint):
        for r0 in range(0, N_BASE, 50):
            yield X[r0:r0 + 50], y[r0:r0 + 50]
    return m.source(blocks, n_base=N_BASE, n_total=n_total, n_rows=n_rows, name="toy-aug", store_dtype=store_dtype)


def test_registry_entry_and_dtype():
    info = get_info("mnist-8m")
    assert (info.n_samples, info.n_features, info.n_classes) == (8_100_000, 784, 10)
    assert get_info("mnist-1m").n_samples == 1_000_000


def test_longer_set_starts_with_the_shorter_and_rounds_to_uint8():
    short = _source()
    long8 = _source(n_total=4 * N_TOTAL, store_dtype=np.uint8)
    Xs, ys = short.rows(0, N_TOTAL)
    X8, y8 = long8.rows(0, N_TOTAL)
    assert Xs.dtype == np.float32 and X8.dtype == np.uint8
    np.testing.assert_array_equal(y8, ys)
    np.testing.assert_array_equal(X8, np.rint(Xs).astype(np.uint8))          # nearest integer, bit for bit
    assert np.abs(X8.astype(np.float32) - Xs).max() <= 0.5
    np.testing.assert_array_equal(X8[:N_BASE], Xs[:N_BASE])                    # the originals exactly
    # the chunks read (float32) are the stored integers; rows() alone equals the stream
    Xc, yc = _all(_source(n_total=4 * N_TOTAL, n_rows=N_TOTAL, store_dtype=np.uint8), 333)
    np.testing.assert_array_equal(Xc, X8.astype(np.float32))
    np.testing.assert_array_equal(yc, y8)
    for a in (N_TOTAL, 3 * N_TOTAL + 17):                                      # beyond the shorter set
        Xa, ya = long8.rows(a, a + 5)
        np.testing.assert_array_equal(ya, _base()[1][m.origin_of(np.arange(a, a + 5), N_BASE)])
        np.testing.assert_array_equal(Xa, m.to_store_dtype(
            m.generate_rows(*_base(), a, a + 5)[0], np.uint8))


def test_source_pickles_without_its_images():
    import cloudpickle                  # as Dask ships it to a worker (the source holds closures)

    src = _source(store_dtype=np.uint8)
    src.rows(0, 10)
    assert src._base is not None
    back = cloudpickle.loads(cloudpickle.dumps(src))
    assert back._base is None
    np.testing.assert_array_equal(back.rows(500, 520)[0], src.rows(500, 520)[0])


class _Crash(Exception):
    pass


def test_ingest_resumes_after_a_crash_and_stores_uint8(tmp_path, monkeypatch):
    monkeypatch.setattr(stage_data, "INGEST_CHUNKS_PER_TASK", 2)
    src = _source(n_rows=1500, store_dtype=np.uint8)
    p = stages.IngestParams(data={"array": src.info.name}, chunk_rows=100)    # 8 tasks of 200 rows
    key = stages.stage_key(p)
    store = Store(tmp_path / "s.zarr", owner={"array": "x"})
    calls = []
    real_rows = type(src).rows

    def crashing(self, r0, r1):
        calls.append(r0)
        if len(calls) == 4:
            raise _Crash("killed")                                             # the 4th task dies mid-run
        return real_rows(self, r0, r1)

    monkeypatch.setattr(type(src), "rows", crashing)
    with pytest.raises(_Crash):
        stages.ingest(str(store.path), key, {"params": stages.hashed(p)}, p, source=src)
    work = resumable.work_dir(store.path, "ingest", key)
    assert resumable.chunks_done(work) == {0, 1, 2} and not store.has("ingest", key)
    calls.clear()
    monkeypatch.setattr(type(src), "rows", lambda self, a, b: (calls.append(a), real_rows(self, a, b))[1])
    stages.ingest(str(store.path), key, {"params": stages.hashed(p)}, p, source=src)
    assert sorted(calls) == [600, 800, 1000, 1200, 1400]                       # only the unfinished tasks
    assert not work.exists()
    g = store.open("ingest", key)
    whole, y = _all(_source(n_rows=1500, store_dtype=np.uint8), 1500)
    assert g["X"].dtype == np.uint8 and g["X"].chunks == (100, 784)
    np.testing.assert_array_equal(g["X"][...], whole.astype(np.uint8))
    np.testing.assert_array_equal(read_matrix(g, "y"), y)
    np.testing.assert_array_equal(g["origin"][...], m.origin_of(np.arange(1500), N_BASE))
    assert g.attrs["n_samples"] == 1500 and g.attrs["n_classes"] == 10 and g.attrs["has_labels"]


def test_preprocess_reads_uint8_as_float32(tmp_path):
    from bigclust.algo.preprocess import l2_normalize, pca_fit, pca_transform

    src = _source(n_rows=900, store_dtype=np.uint8)
    ip = stages.IngestParams(data={"array": src.info.name}, chunk_rows=128)
    store = Store(tmp_path / "s.zarr", owner={"array": "x"})
    ik = stages.stage_key(ip)
    stages.ingest(str(store.path), ik, {"params": stages.hashed(ip)}, ip, source=src)
    pp = stages.PreprocessParams(input=ik, l2_normalize=True, pca=5, tfidf_local=None, tfidf_global=None,
                                 tfidf_normalize=None, chunk_rows=128, pca_solver="covariance")
    pk = stages.stage_key(pp)
    stages.preprocess(str(store.path), pk, {"params": stages.hashed(pp)}, pp)
    Z = read_matrix(store.open("preprocess", pk), "X")
    X = l2_normalize(_all(_source(n_rows=900, store_dtype=np.uint8), 900)[0])
    assert Z.dtype == np.float32
    np.testing.assert_allclose(Z, pca_transform(X, *pca_fit(X, 5, solver="covariance")), atol=1e-5)


@pytest.mark.realdata
def test_real_mnist_8m_prefix_is_mnist_1m(data_root):
    from bigclust.datasets.registry import open_mnist1m

    one, eight = open_mnist1m(root=data_root), open_mnist1m(root=data_root, name="mnist-8m")
    assert eight.info.n_samples == 8_100_000 and eight.store_dtype == np.uint8 and one.store_dtype is None
    eight._base = one.base()            # the same 70000 images: read them once
    rng = np.random.default_rng(0)
    for a in [0, 69_990, 70_000, 999_990, *rng.integers(0, 1_000_000 - 10, 5)]:
        X1, y1 = one.rows(a, a + 10)
        X8, y8 = eight.rows(a, a + 10)
        np.testing.assert_array_equal(y8, y1)
        np.testing.assert_array_equal(X8, np.rint(X1).astype(np.uint8))
        X8f, _, _ = m.generate_rows(*eight.base(), a, a + 10)                   # before rounding: the same bits
        np.testing.assert_array_equal(X8f, X1)
    X, y = eight.rows(8_099_990, 8_100_000)
    assert X.dtype == np.uint8 and X.shape == (10, 784) and (X.sum(1) > 0).all()
    np.testing.assert_array_equal(y, one.base()[1][m.origin_of(np.arange(8_099_990, 8_100_000), 70000)])
