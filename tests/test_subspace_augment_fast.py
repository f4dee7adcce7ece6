"""The Numba augmentation and top-k kernels (bigclust.subspace._kernels) against their definitions, bit for bit."""
import numpy as np
import pytest

from bigclust.subspace import _chunked
from bigclust.subspace._kernels import top_k_rows
from bigclust.subspace.augment import expand
from bigclust.subspace.features import Stacked
from bigclust.subspace.transforms import describe, plan, transform_rows, transform_rows_ndimage

TABLE = {"flip": True, "rotate": {"count": 4, "max_degrees": 40}, "scale": {"count": 3, "range": [0.7, 1.3]},
         "shift": {"count": 6, "pixels": 2.5}}


def _images(n, d, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    X[:, : d // 7] = 0.0            # blank borders: copies that sample outside and on the edge
    return X.astype(dtype)


@pytest.mark.parametrize("desc, shape, order, dtype", [
    (*expand("mnist")[0:3], np.float64),
    (*expand("coil20")[0:3], np.float64),
    (describe(TABLE), (20, 13), "C", np.float64),
    (describe(TABLE), (20, 13), "F", np.float64),
    (describe({**TABLE, "rotate": {"count": 3, "range": [-30, 10], "random": True}}), (16, 12, 3), "C",
     np.float32),
])
def test_kernel_copies_are_ndimage_copies_bit_for_bit(desc, shape, order, dtype):
    X = _images(60, int(np.prod(shape)), dtype)
    p = plan(X.shape[0], desc, 3)
    ref = transform_rows_ndimage(X, 0, X.shape[0], shape, order, p, dtype)
    got = transform_rows(X, 0, X.shape[0], shape, order, p, dtype)
    assert got.dtype == ref.dtype and np.array_equal(got, ref)
    part = transform_rows(X, 7, 31, shape, order, p, dtype)          # a chunk of the images: its rows
    assert np.array_equal(part, ref[7 * p.per:31 * p.per])


def test_augmented_rows_slices_are_the_copies():
    desc, shape, order = expand("mnist")
    X = _images(23, 784)
    rows = _chunked.AugmentedRows(X, plan(23, desc, 0), shape, order, np.float64)
    full = transform_rows(X, 0, 23, shape, order, plan(23, desc, 0), np.float64)
    assert rows.shape == full.shape
    for a0, a1 in ((0, 230), (3, 17), (95, 96), (229, 230), (40, 40)):
        assert np.array_equal(rows[a0:a1], full[a0:a1])
    stacked = Stacked(X, rows)                  # as the PCA passes read [X; copies]
    assert np.array_equal(stacked[10:60], np.vstack([X, full])[10:60])


def test_top_k_rows_is_argpartition_then_lexsort():
    rng = np.random.default_rng(1)
    S = rng.integers(0, 40, size=(50, 300)).astype(np.float64)       # many ties
    S[rng.random(S.shape) < 0.3] = -np.inf
    for k in (1, 5, 17):
        out = np.empty((S.shape[0], k), dtype=np.int64)
        top_k_rows(S, k, out)
        # ties by the smaller column: sort every row by (-value, column)
        ref = np.lexsort((np.broadcast_to(np.arange(S.shape[1]), S.shape), -S), axis=1)[:, :k]
        assert np.array_equal(out, ref)
