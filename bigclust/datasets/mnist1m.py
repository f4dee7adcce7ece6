"""``mnist-1m`` and ``mnist-8m``: the 70000 MNIST digits followed by deterministic augmented copies.

Row ``a`` of the data set is a pure function of ``(seed, a)`` and the MNIST files:

- rows ``0 .. n_base - 1`` are the MNIST images themselves (training then
  test, as data set ``mnist``), ``origin[a] = a``;
- row ``a >= n_base`` is a warped copy of image ``origin[a] = (a - n_base) mod n_base``
  (so every digit gets the same number of copies, up to one, and a run of
  consecutive rows reads consecutive source images): a rotation about the
  image centre, a zoom and a small shift, composed into one affine map and
  resampled bilinearly with a black background -- the transforms and ranges
  of :mod:`bigclust.subspace.augment`'s ``mnist`` preset (rotations within
  +-15 degrees, zooms in [0.9, 1.1]) plus shifts within +-2 pixels.

The label of every row is its origin's label.  The random parameters of row
``a`` come from the generator ``default_rng([seed, a // PARAM_BLOCK])`` (row
``a mod PARAM_BLOCK`` of its draws), so any row range is generated alone, in
any order and in chunks of any size, with the same values to the last bit
(the test checks it): ``bigclust data ingest mnist-1m`` streams row chunks
into zarr and only the 70000 source images (220 MB as float32) are held in
memory, never the 3.1 GB of the result.

``mnist-8m`` (8,100,000 rows, the size of MNIST8M) is the same generator run
further: its first 1,000,000 rows are ``mnist-1m``'s, value for value.  It is
stored as ``uint8`` (6.3 GB, not 25 GB of float32): every value rounded to the
nearest integer (``store_dtype``), at most 0.5 from ``mnist-1m``'s float32
value; the originals are integers and stay exact.  ``mnist-1m`` keeps its
float32 rows (its stores and results stay valid).  A source reads any row range
on its own (:meth:`AugmentedSource.rows`), which lets the ingest stage write
chunks in any order and resume after a kill.

This module knows no registry: :func:`source` takes the source images as a
block reader, which :func:`bigclust.datasets.registry.open_mnist1m` builds
from the MNIST files (tests pass a small fixture).
"""
from __future__ import annotations

import numpy as np

from bigclust._util.errors import DataError, UserError
from bigclust.datasets.readers import DatasetInfo, Source

N_TOTAL = 1_000_000
N_TOTAL_8M = 8_100_000         # MNIST8M's size (Loosli, Canu & Bottou 2007)
SEED = 13                      # the issue that asked for it
PARAM_BLOCK = 4096             # rows per random-parameter block (fixed: changing it changes the data)
IMAGE_SHAPE = (28, 28)
ROTATION_DEG = (-15.0, 15.0)   # as bigclust.subspace.augment.PRESETS["mnist"]
SCALE = (0.9, 1.1)             # idem
SHIFT_PX = (-2.0, 2.0)


def origin_of(rows, n_base: int) -> np.ndarray:
    """Source image of each row (int64): the row itself below ``n_base``, else ``(row - n_base) mod n_base``."""
    rows = np.asarray(rows, dtype=np.int64)
    return np.where(rows < n_base, rows, (rows - n_base) % n_base)


def transform_params(rows, seed: int = SEED) -> np.ndarray:
    """``(len(rows), 4)`` float64: angle (degrees), zoom, shift down, shift right of each row.

    Row ``a``'s values are row ``a mod PARAM_BLOCK`` of ``default_rng([seed, a // PARAM_BLOCK])``'s
    uniform draws, so they depend on ``(seed, a)`` only.
    """
    rows = np.asarray(rows, dtype=np.int64)
    out = np.empty((rows.size, 4))
    blocks = rows // PARAM_BLOCK
    for b in np.unique(blocks):
        u = np.random.default_rng([int(seed), int(b)]).random((PARAM_BLOCK, 4))
        sel = blocks == b
        out[sel] = u[rows[sel] % PARAM_BLOCK]
    lo = np.array([ROTATION_DEG[0], SCALE[0], SHIFT_PX[0], SHIFT_PX[0]])
    hi = np.array([ROTATION_DEG[1], SCALE[1], SHIFT_PX[1], SHIFT_PX[1]])
    return lo + (hi - lo) * out


def warp_maps(params, shape=IMAGE_SHAPE):
    """``(A, offset)`` per row for ``scipy.ndimage.affine_transform``: output pixel o samples input ``A o + offset``.

    The forward map sends input pixel p to ``c + s R(theta) (p - c) + t`` (c the
    image centre, t the shift); A and offset are its inverse.
    """
    theta = np.deg2rad(params[:, 0])
    s, t = params[:, 1], params[:, 2:4]
    cos, sin = np.cos(theta) / s, np.sin(theta) / s
    A = np.empty((len(params), 2, 2))
    A[:, 0, 0], A[:, 0, 1], A[:, 1, 0], A[:, 1, 1] = cos, sin, -sin, cos   # R(-theta) / s
    c = (np.asarray(shape, dtype=np.float64) - 1.0) / 2.0
    offset = c - np.einsum("mij,mj->mi", A, c + t)
    return A, offset


def generate_rows(base_X, base_y, r0: int, r1: int, *, seed: int = SEED):
    """Rows ``r0:r1`` of the augmented data set over the source images ``base_X`` (labels ``base_y``).

    Returns ``(X float32 (r1-r0, 784), y int64, origin int64)``.
    """
    from bigclust.datasets._mnist1m_numba import warp_bilinear

    n_base = base_X.shape[0]
    rows = np.arange(r0, r1, dtype=np.int64)
    origin = origin_of(rows, n_base)
    X = np.empty((rows.size, base_X.shape[1]), dtype=np.float32)
    orig = rows < n_base
    X[orig] = base_X[rows[orig]]
    aug = np.flatnonzero(~orig)
    if aug.size:
        A, off = warp_maps(transform_params(rows[aug], seed))
        out = np.empty((aug.size, base_X.shape[1]), dtype=np.float32)
        warp_bilinear(np.ascontiguousarray(base_X[origin[aug]]), IMAGE_SHAPE[0], IMAGE_SHAPE[1], A, off, out)
        X[aug] = out
    return X, np.asarray(base_y, dtype=np.int64)[origin], origin


def to_store_dtype(X, dtype):
    """Rows as stored: float32 as generated (``dtype`` None), or rounded to the nearest integer in ``dtype``.

    Bilinear interpolation of 0..255 pixels stays within 0..255, so the clip
    only guards against rounding at the ends.
    """
    if dtype is None:
        return X
    info = np.iinfo(dtype)
    return np.clip(np.rint(X), info.min, info.max).astype(dtype)


class AugmentedSource(Source):
    """A `Source` over the first ``n_rows`` rows of an augmented data set; ``row_extras`` gives ``origin``.

    ``store_dtype``: None (rows stored as float32) or an integer dtype the
    rows are rounded to (``mnist-8m``: ``uint8``).  :meth:`rows` generates any
    row range on its own; the source images it needs are read once per process
    and dropped when the source is pickled (a Dask worker reads them itself).
    """

    def __init__(self, info, blocks, *, n_base, class_names=None, base_blocks=None, seed=SEED, store_dtype=None):
        super().__init__(info, blocks, class_names=class_names)
        self.n_base, self.seed, self.store_dtype = n_base, seed, store_dtype
        self._base_blocks, self._base = base_blocks, None

    def __getstate__(self):
        return {**self.__dict__, "_base": None}   # 220 MB of source images: each process reads its own

    def row_extras(self, r0: int, r1: int) -> dict:
        """Per-row arrays the ingest stage stores beside X and y: ``origin`` (index of the source image)."""
        return {"origin": origin_of(np.arange(r0, r1), self.n_base)}

    def base(self):
        """``(X float32 (n_base, 784), y int64)``: the source images, read on first use and kept."""
        if self._base is None:
            bx, by = [], []
            for X, y in self._base_blocks(16384):
                bx.append(np.asarray(X, dtype=np.float32))
                by.append(np.asarray(y, dtype=np.int64))
            X, y = np.concatenate(bx), np.concatenate(by)
            if len(y) != self.n_base:
                raise DataError(f"{self.info.name}: read {len(y)} source images, expected {self.n_base}")
            self._base = (X, y)
        return self._base

    def rows(self, r0: int, r1: int):
        """Rows ``r0:r1`` as stored: ``(X (r1-r0, 784) store_dtype or float32, y int64)``."""
        if not 0 <= r0 <= r1 <= self.info.n_samples:
            raise UserError(f"rows {r0}:{r1} outside 0:{self.info.n_samples}")
        X, y, _ = generate_rows(*self.base(), r0, r1, seed=self.seed)
        return to_store_dtype(X, self.store_dtype), y


def source(base_blocks, *, n_base: int, n_total: int = N_TOTAL, n_rows: int | None = None, seed: int = SEED,
           name: str = "mnist-1m", files=(), class_names=None, n_classes: int = 10,
           store_dtype=None) -> AugmentedSource:
    """The augmented data set as a `Source` that generates its rows chunk by chunk.

    Parameters
    ----------
    base_blocks : callable
        ``base_blocks(hint)`` yields the ``n_base`` source images as ``(X, y)`` blocks
        (MNIST from its files, or a small fixture in tests).
    n_base : int
        Number of source images (70000 for MNIST).
    n_total : int
        Rows of the whole data set (>= ``n_base``).  Row ``a`` does not depend
        on it: a data set with more rows starts with every row of one with fewer.
    n_rows : int, optional
        Only the first ``n_rows`` rows (a prefix: the subsets of ``bench scale``); default ``n_total``.
    seed : int
        Seed of the transforms.
    store_dtype : numpy integer dtype, optional
        Round the rows to it (``mnist-8m``: uint8); the chunks read are float32 of those integers.
    """
    n_rows = n_total if n_rows is None else int(n_rows)
    if n_total < n_base:
        raise UserError(f"n_total={n_total} must be at least the {n_base} source images")
    if not 1 <= n_rows <= n_total:
        raise UserError(f"n_rows={n_rows} must be between 1 and n_total={n_total}")
    label = name if n_rows == n_total else f"{name}[:{n_rows}]"
    info = DatasetInfo(label, f"{n_base} images and augmented copies (rotation, zoom, shift; seed {seed}) "
                       f"to {n_total} rows" + ("" if n_rows == n_total else f", first {n_rows}")
                       + ("" if store_dtype is None else f", rounded to {np.dtype(store_dtype).name}"),
                       n_rows, IMAGE_SHAPE[0] * IMAGE_SHAPE[1], n_classes, False, tuple(files))

    def blocks(hint):
        step = min(max(hint, 1024), 16384)
        bx, by, got = [], [], 0
        for X, y in base_blocks(hint):   # the source images, streamed as they are and kept for the copies
            bx.append(np.asarray(X, dtype=np.float32))
            by.append(np.asarray(y, dtype=np.int64))
            if got < n_rows:
                yield bx[-1][:n_rows - got], by[-1][:n_rows - got]
            got += len(y)
            if n_rows <= min(got, n_base):  # a prefix of the source images: no copies needed
                return
        if got != n_base:
            raise DataError(f"{name}: read {got} source images, expected {n_base}")
        base_X, base_y = np.concatenate(bx), np.concatenate(by)
        del bx, by
        for r0 in range(n_base, n_rows, step):
            X, y, _ = generate_rows(base_X, base_y, r0, min(n_rows, r0 + step), seed=seed)
            # the values stored (rounded for an integer store_dtype), as float32 like every chunk read
            yield (X if store_dtype is None else to_store_dtype(X, store_dtype).astype(np.float32)), y

    return AugmentedSource(info, blocks, n_base=n_base, class_names=class_names, base_blocks=base_blocks,
                           seed=seed, store_dtype=store_dtype)
