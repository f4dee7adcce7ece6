"""``mnist-1m``: the 70000 MNIST digits followed by deterministic augmented copies, 1,000,000 rows.

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

This module knows no registry: :func:`source` takes the source images as a
block reader, which :func:`bigclust.datasets.registry.open_mnist1m` builds
from the MNIST files (tests pass a small fixture).
"""
from __future__ import annotations

import numpy as np

from bigclust._util.errors import DataError, UserError
from bigclust.datasets.readers import DatasetInfo, Source

N_TOTAL = 1_000_000
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


class AugmentedSource(Source):
    """A `Source` over the first ``n_rows`` rows of an augmented data set; ``row_extras`` gives ``origin``."""

    def __init__(self, info, blocks, *, n_base, class_names=None):
        super().__init__(info, blocks, class_names=class_names)
        self.n_base = n_base

    def row_extras(self, r0: int, r1: int) -> dict:
        """Per-row arrays the ingest stage stores beside X and y: ``origin`` (index of the source image)."""
        return {"origin": origin_of(np.arange(r0, r1), self.n_base)}


def source(base_blocks, *, n_base: int, n_total: int = N_TOTAL, n_rows: int | None = None, seed: int = SEED,
           name: str = "mnist-1m", files=(), class_names=None, n_classes: int = 10) -> AugmentedSource:
    """The augmented data set as a `Source` that generates its rows chunk by chunk.

    Parameters
    ----------
    base_blocks : callable
        ``base_blocks(hint)`` yields the ``n_base`` source images as ``(X, y)`` blocks
        (MNIST from its files, or a small fixture in tests).
    n_base : int
        Number of source images (70000 for MNIST).
    n_total : int
        Rows of the whole data set (>= ``n_base``).
    n_rows : int, optional
        Only the first ``n_rows`` rows (a prefix: the subsets of ``bench scale``); default ``n_total``.
    seed : int
        Seed of the transforms.
    """
    n_rows = n_total if n_rows is None else int(n_rows)
    if n_total < n_base:
        raise UserError(f"n_total={n_total} must be at least the {n_base} source images")
    if not 1 <= n_rows <= n_total:
        raise UserError(f"n_rows={n_rows} must be between 1 and n_total={n_total}")
    label = name if n_rows == n_total else f"{name}[:{n_rows}]"
    info = DatasetInfo(label, f"{n_base} images and augmented copies (rotation, zoom, shift; seed {seed}) "
                       f"to {n_total} rows" + ("" if n_rows == n_total else f", first {n_rows}"),
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
            yield X, y

    return AugmentedSource(info, blocks, n_base=n_base, class_names=class_names)

