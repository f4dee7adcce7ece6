"""Ak-SC in bounded memory (issue 29, item 2): the copies made a slice of images at a time and the PCA of the
copies projected in row slices give the one-shot results bit for bit; the subspace steps show progress."""
import numpy as np
import pytest

from bigclust import SubspaceClustering
from bigclust._util import progress
from bigclust.algo.preprocess import pca_fit, pca_transform
from bigclust.subspace import transforms
from bigclust.subspace.augment import augment
from bigclust.subspace.features import Stacked, features_after_augmentation
from bigclust.subspace.transforms import describe, plan, transform_rows, transform_rows_ndimage

TABLE = {"flip": True, "rotate": {"count": 3, "max_degrees": 20}, "scale": {"count": 2, "range": [0.8, 1.2]},
         "shift": {"count": 2, "pixels": 1.5}}


def _images(n, d, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    X[:, : d // 5] = 0.0
    return X.astype(dtype)


@pytest.mark.parametrize("shape, order, dtype", [((12, 10), "C", np.float64), ((12, 10), "F", np.float32),
                                                 ((6, 8, 3), "C", np.float32)])
def test_copies_made_in_slices_are_the_one_shot_copies(monkeypatch, shape, order, dtype):
    X = _images(41, int(np.prod(shape)), dtype)
    p = plan(X.shape[0], describe(TABLE), 5)
    ref = transform_rows_ndimage(X, 0, X.shape[0], shape, order, p, dtype)
    # 3 images per kernel call: 14 calls, the last one short
    monkeypatch.setattr(transforms, "WARP_BYTES", 3 * 8 * X.shape[1] * p.per)

    class Count:
        n = 0

        def update(self, k):
            self.n += k

    bar = Count()
    got = transform_rows(X, 0, X.shape[0], shape, order, p, dtype, bar=bar)
    assert got.dtype == dtype and np.array_equal(got, ref) and bar.n == X.shape[0]
    assert np.array_equal(transform_rows(X, 5, 30, shape, order, p, dtype), ref[5 * p.per:30 * p.per])


def test_float32_copies_hold_no_float64_copy_of_all_of_them(monkeypatch):
    """The copies of float32 images are written as float32 (what a fit ingested from integers holds): the
    only float64 buffers are a slice's (a float64 copy of all of them would take twice the output)."""
    import tracemalloc
    X = _images(2000, 28 * 28, np.float32)
    augment(X[:2], {"rotate": {"count": 4}}, image_shape=(28, 28))          # compiled outside the count
    monkeypatch.setattr(transforms, "WARP_BYTES", 1 << 20)
    tracemalloc.start()
    try:
        Xa, _ = augment(X, {"rotate": {"count": 4}}, image_shape=(28, 28))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert Xa.dtype == np.float32 and Xa.shape == (8000, 784)
    assert peak < 1.25 * Xa.nbytes


def test_copies_projected_in_row_slices_are_the_one_shot_projection():
    X = _images(300, 40, np.float32, seed=1)
    X_aug = _images(9000, 40, np.float32, seed=2)      # 2 slices (4500 rows each)
    F, F_aug = features_after_augmentation(X, X_aug, 7)
    mean, comps = pca_fit(Stacked(X, X_aug), 7)
    assert np.array_equal(F, pca_transform(X.astype(np.float64), mean, comps))
    assert F_aug.dtype == np.float64
    assert np.array_equal(F_aug, pca_transform(X_aug.astype(np.float64), mean, comps))


def test_estimator_fit_shows_the_subspace_steps(monkeypatch, capsys):
    monkeypatch.setenv("BIGCLUST_PROGRESS", "1")
    monkeypatch.setattr(progress, "MININTERVAL", 0)
    rng = np.random.default_rng(0)
    # two shapes (a bar and a square) at random positions in 10 x 10 images
    imgs = np.zeros((40, 10, 10))
    for i in range(40):
        r, c = rng.integers(1, 5, 2)
        if i % 2:
            imgs[i, r:r + 5, c + 2] = 1.0
        else:
            imgs[i, r:r + 4, c:c + 4] = 1.0
    model = SubspaceClustering(2, n_neighbors=5, augment={"rotate": {"count": 2, "max_degrees": 10}},
                               image_shape=(10, 10), random_state=0).fit(imgs.reshape(40, -1))
    err = capsys.readouterr().err
    assert model.labels_.shape == (40,)
    for shown in ("subspace affinity", "augmentation (2 copies of each image)", "dictionary kNN", "ADMM (columns)"):
        assert shown in err
