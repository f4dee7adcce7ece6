"""mnist-1m: deterministic for a seed, independent of the chunking, label-preserving; ingested with origin."""
import numpy as np
import pytest
from scipy import ndimage

from bigclust.pipeline import stages
from bigclust.datasets import get_info, open_dataset
from bigclust.datasets import mnist1m as m
from bigclust.pipeline.store import Store, read_matrix

N_BASE, N_TOTAL = 120, 2000


def _base(seed=0):
    """MNIST-like images: a bright random blob on black, 28 x 28, labels 0..9."""
    rng = np.random.default_rng(seed)
    X = np.zeros((N_BASE, 28, 28), np.float32)
    for i in range(N_BASE):
        r, c = rng.integers(8, 20, 2)
        X[i, r - 4:r + 4, c - 3:c + 3] = rng.integers(1, 256, (8, 6))
    return X.reshape(N_BASE, 784), np.arange(N_BASE) % 10


def _source(n_rows=None, seed=m.SEED, base=None):
    X, y = base if base is not None else _base()

    def blocks(hint):  # the source images in blocks of 50, as a reader would stream them
        for r0 in range(0, N_BASE, 50):
            yield X[r0:r0 + 50], y[r0:r0 + 50]
    return m.source(blocks, n_base=N_BASE, n_total=N_TOTAL, n_rows=n_rows, seed=seed, name="toy-aug")


def _all(src, chunk):
    Xs, ys = zip(*src.iter_chunks(chunk))
    return np.concatenate(Xs), np.concatenate(ys)


def test_generator_deterministic_and_seeded():
    X1, y1 = _all(_source(), 500)
    X2, y2 = _all(_source(), 500)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    X3, _ = _all(_source(seed=m.SEED + 1), 500)
    assert np.array_equal(X3[:N_BASE], X1[:N_BASE]) and not np.array_equal(X3[N_BASE:], X1[N_BASE:])


def test_generator_chunk_independent():
    whole, y = _all(_source(), N_TOTAL)
    for chunk in (7, 333, 1024):
        Xc, yc = _all(_source(), chunk)
        np.testing.assert_array_equal(Xc, whole)
        np.testing.assert_array_equal(yc, y)
    base_X, base_y = _base()
    pieces = [m.generate_rows(base_X, base_y, r0, min(N_TOTAL, r0 + 171)) for r0 in range(0, N_TOTAL, 171)]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in pieces]), whole)
    # rows generated alone, out of order, are the same rows
    rows = [1999, 4095 % N_TOTAL, 130, 121]
    for r in rows:
        np.testing.assert_array_equal(m.generate_rows(base_X, base_y, r, r + 1)[0][0], whole[r])
    # a prefix (bench scale's subsets) is the first rows of the whole
    Xp, yp = _all(_source(n_rows=777), 100)
    np.testing.assert_array_equal(Xp, whole[:777])
    Xp, _ = _all(_source(n_rows=60), 100)
    np.testing.assert_array_equal(Xp, whole[:60])


def test_generator_label_preserving_and_transforms_in_range():
    base_X, base_y = _base()
    X, y, origin = m.generate_rows(base_X, base_y, 0, N_TOTAL)
    np.testing.assert_array_equal(origin, m.origin_of(np.arange(N_TOTAL), N_BASE))
    np.testing.assert_array_equal(y, base_y[origin])
    np.testing.assert_array_equal(X[:N_BASE], base_X)                        # the originals, unchanged
    assert np.ptp(np.bincount(origin[N_BASE:], minlength=N_BASE)) <= 1         # every image copied evenly
    aug = np.arange(N_BASE, N_TOTAL)
    src = base_X[origin[aug]].astype(np.float64)
    assert not np.any(np.all(X[aug] == src, axis=1))                        # every copy is transformed
    corr = np.einsum("ij,ij->i", X[aug] - X[aug].mean(1, keepdims=True), src - src.mean(1, keepdims=True))
    corr /= np.linalg.norm(X[aug] - X[aug].mean(1, keepdims=True), axis=1) * np.linalg.norm(
        src - src.mean(1, keepdims=True), axis=1)
    assert np.median(corr) > 0.3 and X.min() >= 0 and X.max() <= 255 + 1e-3
    P = m.transform_params(aug)
    assert P[:, 0].min() >= -15 and P[:, 0].max() <= 15 and np.ptp(P[:, 0]) > 25
    assert 0.9 <= P[:, 1].min() and P[:, 1].max() <= 1.1
    assert np.abs(P[:, 2:]).max() <= 2 and np.abs(P[:, 2:]).max() > 1.9


def test_warp_kernel_equals_scipy_ndimage():
    base_X, base_y = _base(1)
    X, _, origin = m.generate_rows(base_X, base_y, N_BASE, N_BASE + 60)
    A, off = m.warp_maps(m.transform_params(np.arange(N_BASE, N_BASE + 60)))
    for a in range(60):
        ref = ndimage.affine_transform(base_X[origin[a]].reshape(28, 28).astype(np.float64), A[a], offset=off[a],
                                       order=1, mode="grid-constant", cval=0.0)
        np.testing.assert_allclose(X[a], ref.ravel(), rtol=1e-5, atol=1e-3)
    # a pure shift by whole pixels moves the image: the map's convention is the forward one
    A, off = m.warp_maps(np.array([[0.0, 1.0, 2.0, -1.0]]))
    img = base_X[0].reshape(28, 28)
    got = ndimage.affine_transform(img, A[0], offset=off[0], order=1, mode="grid-constant")
    np.testing.assert_allclose(got[2:, :-1], img[:-2, 1:], atol=1e-4)


@pytest.mark.parametrize("chunk", [300, 512])
def test_ingest_writes_origin_and_same_rows(tmp_path, chunk):
    src = _source(n_rows=1500)
    p = stages.IngestParams(data={"array": src.info.name}, chunk_rows=chunk)
    key = stages.stage_key(p)
    store = Store(tmp_path / "s.zarr", owner={"array": "x"})
    stages.ingest(str(store.path), key, {"params": stages.hashed(p)}, p, source=src)
    g = store.open("ingest", key)
    whole, y = _all(_source(n_rows=1500), 1500)
    np.testing.assert_array_equal(g["X"][...], whole)
    np.testing.assert_array_equal(read_matrix(g, "y"), y)
    np.testing.assert_array_equal(g["origin"][...], m.origin_of(np.arange(1500), N_BASE))
    assert g["X"].chunks[0] == chunk and g.attrs["n_samples"] == 1500


def test_registry_entry():
    info = get_info("mnist-1m")
    assert (info.n_samples, info.n_features, info.n_classes) == (1_000_000, 784, 10)


@pytest.mark.realdata
def test_real_mnist_1m_prefix(data_root):
    src = open_dataset("mnist-1m", data_root)
    assert src.info.n_samples == 1_000_000 and src.class_names == list("0123456789")
    mn = np.concatenate([y for _, y in open_dataset("mnist", data_root).iter_chunks(20000)])
    from bigclust.datasets.registry import _BY_NAME, _selected
    paths = [data_root / f for f in get_info("mnist").files]
    pre = m.source(lambda hint: _selected(_BY_NAME["mnist"], paths, hint), n_base=70000, n_rows=72000)
    X, y = _all(pre, 8192)
    np.testing.assert_array_equal(y, mn[m.origin_of(np.arange(72000), 70000)])
    assert X.shape == (72000, 784) and np.abs(X[70000:].sum(1) / X[:2000].sum(1) - 1).max() < 0.5
