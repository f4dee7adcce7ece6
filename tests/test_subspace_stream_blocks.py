"""The streamed subspace chain reads X by block (issue 29, item 4's stretch: Ak-SSC on mnist-1m with copies).

``features_step`` projects the originals in blocks of at least ``PROJECT_ROWS`` rows read from the stored
rows by zarr chunk (:class:`bigclust.subspace.features.BlockRows`), and the copies are made from those
blocks in every pass: the atoms are the whole-array projection's bit for bit (OpenBLAS gives a slice of at
least 4096 rows the one-shot product's bits; a slice of ~100 rows may differ in the last digit, which is
why the blocks are never smaller), and no read of the store is larger than one zarr chunk.
"""
import numpy as np
import pytest
import zarr

from bigclust.pipeline import resumable
from bigclust.subspace import _chunked
from bigclust.subspace.dictionary import build_dictionary
from bigclust.subspace.features import BlockRows

AUG = {"rotate": {"count": 2, "max_degrees": 10}}      # the mnist-1m stretch's kind of copies, 2 per image


class CountingRows:
    """A stored array whose every read is recorded: the rows one read of the store brings in."""

    def __init__(self, arr):
        self.arr, self.shape, self.dtype, self.chunks = arr, arr.shape, arr.dtype, arr.chunks
        self.reads = []

    def __getitem__(self, s):
        out = np.asarray(self.arr[s])
        self.reads.append(out.shape[0])
        return out


def _images(n, seed=0):
    """n 28 x 28 float32 "digits": a blob at a random place, so every row has pixels and copies differ."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:28, :28]
    c = rng.uniform(8, 20, size=(n, 2))
    imgs = np.exp(-((yy - c[:, :1, None]) ** 2 + (xx - c[:, 1:, None]) ** 2) / rng.uniform(8, 30, (n, 1, 1)))
    return (imgs.reshape(n, 784) + 0.05 * rng.random((n, 784))).astype(np.float32)


def _stored(tmp_path, X, chunk_rows):
    g = zarr.open_group(str(tmp_path / "X.zarr"), mode="w")
    a = g.create_array("X", shape=X.shape, chunks=(chunk_rows, X.shape[1]), dtype=X.dtype)
    a[...] = X
    return a


def _features(X, work, augment, pca=20, chunk_rows=700):
    g = resumable.open_work(work, {"test": 1})
    aug, origin = (None, None) if augment == "none" else _chunked.augment_step(X, augment, 3, (28, 28), "C")
    atoms, steps = _chunked.features_step(X, g, work, aug, pca, chunk_rows, log=lambda m: None)
    return atoms, origin, aug


def test_block_rows_serves_any_slice_from_chunk_reads(tmp_path):
    X = _images(2500)
    store = CountingRows(_stored(tmp_path, X, 300))
    rows = BlockRows(store)
    assert rows.block == 300
    for r0, r1 in ((0, 10), (5, 905), (290, 310), (2400, 2500), (2499, 2600), (7, 7), (0, 2500)):
        got = rows[r0:r1]
        assert np.array_equal(got, X[r0:r1]) and got.dtype == X.dtype
    assert max(store.reads) <= 300 and rows.max_rows_read <= 300
    with pytest.raises(ValueError):
        rows[0:10] += 1.0              # the kept block is read-only: no caller can change another's rows


@pytest.mark.parametrize("augment", ["none", AUG])
def test_features_step_by_block_equals_whole_array_and_reads_chunks(tmp_path, monkeypatch, augment):
    n, chunk = 9000, 1000
    X = _images(n)
    # the whole-array arithmetic: X in memory, one projection block (the code before the blocks)
    monkeypatch.setattr(_chunked, "PROJECT_ROWS", 10 ** 9)
    ref, ref_origin, _ = _features(X, tmp_path / "whole", augment)
    monkeypatch.undo()
    store = CountingRows(_stored(tmp_path, X, chunk))
    rows = BlockRows(store)
    got, origin, aug = _features(rows, tmp_path / "blocks", augment)
    assert got.dtype == np.float64 and got.shape == ref.shape == (n * (1 if augment == "none" else 3), 20)
    # blocks of >= 4096 rows (here two of 4500): the one-shot product's bits
    assert np.array_equal(got, ref)
    assert (origin is None and ref_origin is None) or np.array_equal(origin, ref_origin)
    # every read of the store is one zarr chunk at most, never X whole: what bounds the step's memory
    assert max(store.reads) <= chunk and rows.max_rows_read <= chunk
    # X read whole, block by block, by each of the PCA's 8 passes and the projection; with copies twice each
    # (the originals, then the images of the copies) and once by augment_step's check of finite pixels
    assert sum(store.reads) == n * (9 if augment == "none" else 2 * 9 + 1)
    # the copies were made from blocks of X, in every pass, and are what a whole-array augmentation makes
    if aug is not None:
        assert aug.X is rows and aug.seconds > 0


def test_dictionary_of_keeps_the_atoms_and_build_dictionarys_maps():
    rng = np.random.default_rng(2)
    n, per = 50, 2
    atoms = rng.standard_normal((n * (1 + per), 6))
    atoms /= np.linalg.norm(atoms, axis=1, keepdims=True)
    origin = np.repeat(np.arange(n), per)
    D = _chunked.dictionary_of(atoms, n, origin)
    ref = build_dictionary(atoms[:n], atoms[n:], origin)
    assert D.atoms is atoms                               # no copy of the N x pca atoms
    for name in ("own_ptr", "own_idx", "aug_ptr", "aug_idx"):
        assert np.array_equal(getattr(D, name), getattr(ref, name))
    assert D.n == ref.n
    assert _chunked.dictionary_of(atoms[:n], n, None).aug_idx.size == 0


def test_all_zero_row_is_named_by_its_row_in_x(tmp_path):
    from bigclust._util.errors import DataError
    X = _images(9000)
    X[6000] = 0.0
    with pytest.raises(DataError, match=r"rows 4500\.\.8999"):
        _features(BlockRows(_stored(tmp_path, X, 1000)), tmp_path / "w", "none", pca=0)
