"""Scattering features of images, as paper 002 computes them for MNIST (an optional extra: kymatio).

The paper's MNIST features: each 28x28 image zero-padded to 32x32, the 2-D
wavelet scattering transform ``Scattering2D(J=3, L=8)`` (Bruna & Mallat;
kymatio's implementation), i.e. 1 + J L + L^2 J (J - 1) / 2 = 217 channels
on a (32 / 2^J)^2 = 4 x 4 grid = 3472 features per image, then PCA to 100
(:func:`bigclust.subspace.features_after_augmentation`).  Augmentation comes
first: the augmented images get their own scattering features.

"The common practice introduced in [50]" that the paper follows (You et al.'s
MNIST script for EnSC / SSC-OMP) also divides every scattering channel, i.e.
each 4 x 4 map, by its largest absolute value before the PCA
(``normalize="channel"``, the default; ``"none"`` keeps kymatio's raw
output).  It matters: kNN-SSC on MNIST [0:9] (seed 0, PCA-100) has 20.4 %
error with it (the paper: 20.36 %) and 33.6 % without (README).

Images are processed ``chunk_rows`` rows at a time (kymatio's intermediate
arrays for one chunk are a few complex ``(rows, 32, 32)`` arrays per filter),
so the memory is bounded by the chunk plus the output; :func:`scattering_chunks`
streams the features of any row-indexable array (NumPy, zarr) without an
output array at all.  The features of a row do not depend on the chunk it is
in (kymatio transforms each image separately): chunked = one shot, bit for bit.

kymatio is imported on first use; without it every entry point raises a
one-line :class:`~bigclust._util.errors.UserError` naming the extra to install.

The pixel features' PCA (:func:`features_after_augmentation`) reads its rows through two row-sliceable
views that hold no copy of the data: :class:`Stacked` (``[X; X_aug]``) and :class:`BlockRows` (a stored
matrix read by zarr chunk, what the streamed subspace stage passes for X).
"""
from __future__ import annotations

import functools
import numbers

import numpy as np

from bigclust._util.errors import DataError, UserError

#: what to install for features = "scattering"
EXTRA = "pip install 'bigclust[scattering]'"
#: the paper's scattering parameters: J = 3 scales, L = 8 orientations
J_DEFAULT, L_DEFAULT = 3, 8


def _scattering_class():
    """kymatio's NumPy ``Scattering2D`` class; a one-line UserError when kymatio is missing or broken."""
    try:
        # The 2-D NumPy frontend itself: ``kymatio.numpy`` (the documented import) also imports the 3-D
        # frontend, which fails with SciPy >= 1.15 (scipy.special.sph_harm removed) in kymatio 0.3.0.
        from kymatio.scattering2d.frontend.numpy_frontend import ScatteringNumPy2D
    except ImportError as e:
        raise UserError(f"features = 'scattering' needs kymatio >= 0.3, the optional extra: {EXTRA} "
                        f"({type(e).__name__}: {e})") from None
    return ScatteringNumPy2D


@functools.lru_cache(maxsize=8)
def _transform(J, L, padded_shape):
    """One kymatio transform per (J, L, shape): building its filter bank costs ~0.1 s."""
    return _scattering_class()(J=J, shape=padded_shape, L=L)


def padded_shape(image_shape, J=J_DEFAULT):
    """Each side rounded up to a multiple of ``2**J`` (MNIST 28x28 -> 32x32 for J = 3; 32x32 stays)."""
    s = 2 ** int(J)
    return tuple(-(-int(v) // s) * s for v in image_shape)


def n_scattering_features(image_shape, J=J_DEFAULT, L=L_DEFAULT):
    """Features per image: ``(1 + J L + L^2 J (J-1) / 2) * (H / 2^J) * (W / 2^J)`` (3472 for MNIST)."""
    ph, pw = padded_shape(image_shape, J)
    channels = 1 + J * L + L * L * J * (J - 1) // 2
    return channels * (ph >> J) * (pw >> J)


def _check(n_features, image_shape, order, J, L, chunk_rows, normalize):
    from bigclust.subspace.augment import image_shape_of
    shape = image_shape_of(image_shape, n_features, "scattering features")
    if order not in ("C", "F"):
        raise UserError(f"order={order!r} must be 'C' (row-major) or 'F' (column-major, MATLAB)")
    if normalize not in ("channel", "none"):
        raise UserError(f"normalize={normalize!r} must be 'channel' or 'none'")
    for name, v in (("J", J), ("L", L), ("chunk_rows", chunk_rows)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise UserError(f"{name}={v!r} must be a positive int")
    if 2 ** int(J) > min(padded_shape(shape, J)):
        raise UserError(f"J={J} is too large for {shape} images")
    return shape


def _block_features(block, shape, order, J, L, normalize, dtype):
    """Features of a (rows, h*w) block: zero-pad each image to :func:`padded_shape`, centred."""
    block = np.asarray(block, dtype=np.float64)
    if not np.all(np.isfinite(block)):
        raise DataError("X contains NaN or infinite values")
    ph, pw = padded_shape(shape, J)
    top, left = (ph - shape[0]) // 2, (pw - shape[1]) // 2
    imgs = np.zeros((block.shape[0], ph, pw))
    # order "F": a row is the image stored column-major (MATLAB); reshape each row back to (h, w)
    imgs[:, top:top + shape[0], left:left + shape[1]] = (
        block.reshape((-1,) + shape) if order == "C" else block.reshape((-1, shape[1], shape[0])).transpose(0, 2, 1))
    S = _transform(int(J), int(L), (ph, pw))(imgs)          # (rows, channels, ph / 2^J, pw / 2^J)
    S = S.reshape(S.shape[0], S.shape[1], -1)
    if normalize == "channel":  # each channel's map over its max |.| ([50]'s "normalize each scattering transform")
        top = np.abs(S).max(axis=2, keepdims=True)
        S = S / np.where(top > 0, top, 1.0)                  # an all-zero channel (a blank image) stays 0
    return S.reshape(block.shape[0], -1).astype(dtype, copy=False)


def scattering_chunks(X, image_shape, *, order="C", J=J_DEFAULT, L=L_DEFAULT, normalize="channel", chunk_rows=256,
                      dtype=np.float64):
    """Scattering features of the rows of ``X``, ``chunk_rows`` rows at a time.

    Parameters
    ----------
    X : row-indexable array (n, h*w)
        NumPy, zarr or anything whose ``X[r0:r1]`` is an array; only one
        chunk of rows is read at a time.
    image_shape : (int, int)
    order : {"C", "F"}
        How a row is laid out (as :func:`bigclust.subspace.augment_images`).
    J, L : int
        Scales and orientations of the scattering transform (the paper: 3, 8).
    normalize : {"channel", "none"}
        "channel": every channel (a (H / 2^J) x (W / 2^J) map) divided by its
        largest absolute value, the practice of the paper's reference [50];
        "none": kymatio's output as it is.
    chunk_rows : int
    dtype : float64 or float32, of the yielded features.

    Yields
    ------
    (start, F_chunk) : int, ndarray (rows, :func:`n_scattering_features`)
    """
    shape = _check(X.shape[1], image_shape, order, J, L, chunk_rows, normalize)
    _scattering_class()           # the missing-extra error before any work
    for r0 in range(0, X.shape[0], int(chunk_rows)):
        r1 = min(X.shape[0], r0 + int(chunk_rows))
        yield r0, _block_features(X[r0:r1], shape, order, J, L, normalize, dtype)


def scattering_features(X, image_shape, *, order="C", J=J_DEFAULT, L=L_DEFAULT, normalize="channel",
                        chunk_rows=256, dtype=np.float64):
    """Scattering features of every row of ``X`` (computed in row chunks), as one array.

    Parameters
    ----------
    X : row-indexable array (n, h*w)
        NumPy, zarr or anything whose ``X[r0:r1]`` is an array.
    image_shape : (int, int)
        The images' height and width.
    order : {"C", "F"}
        How a row is laid out (as :func:`bigclust.subspace.augment_images`).
    J, L : int
        Scales and orientations of the scattering transform (the paper: 3, 8).
    normalize : {"channel", "none"}
        As in :func:`scattering_chunks`.
    chunk_rows : int
        Rows transformed at a time.
    dtype : float64 or float32
        Type of the features.

    Returns
    -------
    ndarray (n, n_features) of ``dtype``
        3472 features for 28x28 images, J = 3, L = 8.

    Raises
    ------
    UserError
        kymatio is not installed (the message names the extra), bad J / L / chunk_rows / order.
    DataError
        No image shape, one that does not match the features, non-finite pixels.
    """
    shape = _check(np.shape(X)[1], image_shape, order, J, L, chunk_rows, normalize)
    out = np.empty((np.shape(X)[0], n_scattering_features(shape, J, L)), dtype=dtype)
    for r0, F in scattering_chunks(X, shape, order=order, J=J, L=L, normalize=normalize, chunk_rows=chunk_rows,
                                   dtype=dtype):
        out[r0:r0 + F.shape[0]] = F
    return out


def uncentred_pca(X, X_aug, n_components, *, chunk_rows=4096):
    """Projection onto the top ``n_components`` right singular vectors of ``[X; X_aug]``, not centred.

    [50]'s ``dim_reduction``: ``Xp = X V`` with V the leading eigenvectors of
    ``AᵀA``, A the stacked rows (the Gram matrix is accumulated over row chunks,
    d x d).  Without centring, the features stay linear in the samples, which
    is what self-expression assumes (a centred PCA moves every subspace off
    the origin); on MNIST [0:9] it gave Ak-SSC 16.4 % error against 19.4 %
    with the centred PCA (seed 0, README).

    Returns ``(F, F_aug)`` (``F_aug`` None without augmentation).
    """
    from scipy.linalg import eigh
    d = X.shape[1]
    if not (isinstance(n_components, numbers.Integral) and 1 <= n_components <= d):
        raise UserError(f"pca={n_components!r} must be between 1 and the number of features {d}")
    parts = (X,) if X_aug is None else (X, X_aug)
    if sum(A.shape[0] for A in parts) <= d:   # fewer rows than features: the rows are smaller than the d x d Gram
        V = np.linalg.svd(np.vstack(parts).astype(np.float64), full_matrices=False)[2][:int(n_components)].T
    else:
        G = np.zeros((d, d))
        for A in parts:
            for r0 in range(0, A.shape[0], chunk_rows):
                B = np.asarray(A[r0:r0 + chunk_rows], dtype=np.float64)
                G += B.T @ B
        V = eigh(G, subset_by_index=[d - int(n_components), d - 1])[1][:, ::-1]   # largest first
    return X @ V, (None if X_aug is None else X_aug @ V)


FEATURES = ("pixels", "scattering")


def image_features(X, X_aug, features, *, image_shape=None, order="C", pca=0):
    """The features the self-expression sees: the samples' pixels or scattering features, then PCA.

    Parameters
    ----------
    X, X_aug : ndarray (n, d), ndarray (m, d) or None
        The samples and their augmented copies (or None), as rows.
    features : {"pixels", "scattering"}
        "scattering": :func:`scattering_features` (J = 3, L = 8, channels
        normalised) of the originals and the copies; its PCA is
        :func:`uncentred_pca`, as in [50].  "pixels": the rows themselves and
        the centred PCA of :func:`bigclust.subspace.features_after_augmentation`.
    image_shape, order : tuple of int, {"C", "F"}
        The image layout (needed for ``"scattering"``).
    pca : int
        > 0: PCA to ``pca`` components fitted on the originals and the copies together.

    Returns
    -------
    F : ndarray
        Features of the samples.
    F_aug : ndarray or None
        Features of the copies (None without augmentation).
    """
    if features not in FEATURES:
        raise UserError(f"features={features!r} must be one of {', '.join(map(repr, FEATURES))}")
    if features == "pixels":
        if pca:
            X, X_aug = features_after_augmentation(X, X_aug, pca)
        return X, X_aug
    if image_shape is None:
        raise DataError("features = 'scattering' needs image data: give the image shape (or an image "
                        "augmentation preset)")
    key = (_digest(X), _digest(X_aug), tuple(int(v) for v in image_shape), order, int(pca))
    if key in _CACHE:  # a sweep over regularizers sees the same images (same seed): transform them once
        F, Fa = _CACHE[key]
        return F.copy(), (None if Fa is None else Fa.copy())
    F = scattering_features(X, image_shape, order=order)
    Fa = None if X_aug is None else scattering_features(X_aug, image_shape, order=order)
    F, Fa = uncentred_pca(F, Fa, pca) if pca else (F, Fa)
    if pca:  # only the reduced features are kept (n x pca), the last few inputs
        _CACHE[key] = (F, Fa)
        while len(_CACHE) > 8:
            _CACHE.pop(next(iter(_CACHE)))
    return F, Fa


#: image_features' results by digest of their inputs (in-process; reduced features only)
_CACHE: dict = {}


def _digest(A):
    """SHA-1 of an array's dtype, shape and bytes (None for None)."""
    if A is None:
        return None
    import hashlib
    A = np.ascontiguousarray(A)
    return hashlib.sha1(f"{A.dtype}{A.shape}".encode() + A.tobytes()).hexdigest()


class Stacked:
    """``[X; aug]`` as one row-sliceable array (rows read on demand), for the PCA passes: no stacked copy.

    ``X`` and ``aug`` are anything whose ``[r0:r1]`` is an array (NumPy, zarr, :class:`AugmentedRows`); a
    chunk that straddles the two is concatenated, so every chunk holds the rows ``np.vstack`` would.
    """

    def __init__(self, X, aug):
        self.X, self.aug = X, aug
        self.n = X.shape[0]
        self.shape = (self.n + aug.shape[0], X.shape[1])
        self.dtype = np.result_type(X.dtype, aug.dtype)

    def __getitem__(self, s):
        r0, r1, _ = s.indices(self.shape[0])
        parts = []
        if r0 < self.n:
            parts.append(np.asarray(self.X[r0:min(r1, self.n)]))
        if r1 > self.n:
            parts.append(np.asarray(self.aug[max(r0, self.n) - self.n:r1 - self.n]))
        return np.concatenate(parts).astype(self.dtype, copy=False) if len(parts) > 1 else parts[0]


class BlockRows:
    """A stored matrix (zarr, or anything row-sliceable) read ``block`` rows at a time, the last block kept.

    ``self[r0:r1]`` is served from whole aligned blocks (a zarr chunk is decompressed whole however few
    of its rows are asked for, and the streamed passes ask for a few thousand rows at a time, the copies'
    kernel for fewer), so each block is read once per pass and at most one is held.  The rows served are
    read-only views of the kept block (or their concatenation).  ``max_rows_read`` / ``rows_read``: the
    largest single read and the rows read in all, what bounds the memory of a pass (tests).
    """

    def __init__(self, X, block=None):
        self.X, self.shape, self.dtype = X, tuple(X.shape), np.dtype(X.dtype)
        chunks = getattr(X, "chunks", None)
        # a zarr chunk is the unit read anyway; capped: an array of one huge chunk is still kept 65536 rows at a time
        self.block = int(block or min(chunks[0] if chunks else 8192, 1 << 16))
        self._kept = (-1, None)
        self.max_rows_read = self.rows_read = 0

    def _read(self, b):
        if self._kept[0] != b:
            self._kept = (-1, None)                         # let the old block go before reading the next
            r0 = b * self.block
            blk = np.asarray(self.X[r0:min(self.shape[0], r0 + self.block)])
            blk.flags.writeable = False
            self.max_rows_read = max(self.max_rows_read, blk.shape[0])
            self.rows_read += blk.shape[0]
            self._kept = (b, blk)
        return self._kept[1]

    def __getitem__(self, s):
        r0, r1, step = s.indices(self.shape[0])
        if step != 1:
            raise ValueError("BlockRows takes contiguous row slices")
        if r1 <= r0:
            return np.empty((0,) + self.shape[1:], dtype=self.dtype)
        B = self.block
        parts = [self._read(b)[max(r0, b * B) - b * B:min(r1, (b + 1) * B) - b * B]
                 for b in range(r0 // B, (r1 - 1) // B + 1)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def features_after_augmentation(X, X_aug, n_components):
    """Centred PCA features of the originals and the augmented samples, fitted on both together.

    Parameters
    ----------
    X : ndarray (n, d)
        The samples.
    X_aug : ndarray (m, d) or None
        Their augmented copies.
    n_components : int
        Number of principal components.

    Returns
    -------
    F : ndarray (n, n_components)
        Features of the samples.
    F_aug : ndarray (m, n_components) or None
        Features of the copies (None without augmentation).
    """
    from bigclust.algo.preprocess import pca_fit, pca_transform
    # the passes read [X; X_aug] chunk by chunk: the chunks (and so the components) are np.vstack's, bit for
    # bit, without a stacked copy of the copies (the largest array of an augmented fit)
    allx = X if X_aug is None else Stacked(X, X_aug)
    mean, comps = pca_fit(allx, int(n_components))
    F = pca_transform(np.asarray(X, dtype=np.float64), mean, comps)
    if X_aug is None:
        return F, None
    # the copies projected in row slices: a float64 copy of (float32) copies and its products would double a
    # fit's peak memory.  Slices of at least 4096 rows give the one-shot product's bits (OpenBLAS rounds
    # otherwise only on its small-matrix path, under ~100 rows; tests/test_subspace_augment_memory.py)
    m = X_aug.shape[0]
    cuts = np.linspace(0, m, max(1, m // 4096) + 1).astype(np.int64)
    F_aug = np.empty((m, comps.shape[0]))
    for r0, r1 in zip(cuts[:-1], cuts[1:]):
        F_aug[r0:r1] = pca_transform(np.asarray(X_aug[r0:r1], dtype=np.float64), mean, comps)
    return F, F_aug
