"""Label-preserving data augmentation for subspace clustering (paper 002, sections 4.1 and 4.2.2).

Two kinds:

* instance-based image transforms (:func:`augment_images`): a left-right
  flip, ``n_rotations`` random rotations and ``n_scalings`` random zooms of
  every image, each about the image centre and cropped/padded back to the
  same shape, by :mod:`scipy.ndimage` (bilinear, ``order=1``; outside pixels
  are 0, the black background of COIL-20 and MNIST);
* mixed-example "linear interpolation" for the semi-supervised case
  (:func:`interpolate`): random non-negative convex combinations of ``s``
  labelled samples of one class, which stay in that class's subspace.

Both return ``(X_aug, origin)``: ``origin[a]`` is the index of the sample
row ``a`` was made from (for interpolation ``origin`` is 2-D, one row of
``s`` source indices per new sample).

Determinism: all random parameters (angles, scales) are
drawn up front from ``check_random_state(random_state)`` in a fixed order,
so the output depends only on the seed; :func:`augment_chunks` yields
exactly the rows of :func:`augment_images` in the same order, whatever the
chunk size.

Row order of the augmented block is sample-major: sample i's
``n_per_sample`` augmentations are rows ``i*n_per_sample ...
(i+1)*n_per_sample - 1``, in the order flip, rotations, scalings.  This keeps
one chunk of samples = one contiguous block of augmented rows for streaming.

Default ranges (the extracted paper text lost them): rotations uniform in
+-15 degrees and zooms uniform in [0.9, 1.1].  Reason: both are small enough
that a 32x32 COIL-20 object or a 28x28 MNIST digit stays inside the frame and
keeps its class (a 6 rotated past ~30 degrees starts to look like other
digits), yet large enough to move pixels by 1-4 px at the border, i.e. to
produce atoms that are not nearly collinear with the original -- which is
what enlarges the inradius (paper section 3).  They are the usual "light"
augmentation ranges of image classification.
"""
from __future__ import annotations

import numbers

import numpy as np

from bigclust._util.errors import DataError, UserError

#: Paper presets.  COIL-20 images are stored column-major (MATLAB) as 32x32;
#: MNIST rows are 28x28 C order.
PRESETS = {
    "coil20": dict(image_shape=(32, 32), order="F", flip=True, n_rotations=5, n_scalings=5,
                   rotation_range=(-15.0, 15.0), scale_range=(0.9, 1.1)),
    # Tables 3-4's {rotation, scale} strategy: the COIL-20 preset without the flip (10 copies)
    "coil20_rotscale": dict(image_shape=(32, 32), order="F", flip=False, n_rotations=5, n_scalings=5,
                            rotation_range=(-15.0, 15.0), scale_range=(0.9, 1.1)),
    # supplement Table 6's {flip} strategy: the left-right mirror image only (1 copy, no randomness)
    "coil20_flip": dict(image_shape=(32, 32), order="F", flip=True, n_rotations=0, n_scalings=0,
                        rotation_range=(-15.0, 15.0), scale_range=(0.9, 1.1)),
    "mnist": dict(image_shape=(28, 28), order="C", flip=False, n_rotations=5, n_scalings=5,
                  rotation_range=(-15.0, 15.0), scale_range=(0.9, 1.1)),
}


def draws_nothing(augment):
    """True for ``"none"`` and for a preset without random copies (``coil20_flip``): its output is seed-free."""
    pre = PRESETS.get(augment)
    return augment == "none" or (pre is not None and pre["n_rotations"] == 0 and pre["n_scalings"] == 0)


def image_shape_of(image_shape, n_features, what="augmentation"):
    """``image_shape`` as a pair of positive ints whose product is ``n_features`` (a DataError otherwise)."""
    if image_shape is None:
        raise DataError(f"{what} needs image data: give image_shape=(height, width)")
    try:
        shape = tuple(int(s) for s in image_shape)
    except (TypeError, ValueError):
        raise DataError(f"image_shape={image_shape!r} must be a pair of ints") from None
    if len(shape) != 2 or min(shape) < 1:
        raise DataError(f"image_shape={image_shape!r} must be a pair of positive ints")
    if shape[0] * shape[1] != n_features:
        raise DataError(f"image_shape {shape} has {shape[0] * shape[1]} pixels but X has {n_features} features "
                        "(an augment preset sets it: coil20* 32 x 32, mnist 28 x 28)")
    return shape


def _check_images(X, image_shape, order):
    X = np.asarray(X)
    if X.ndim != 2:
        raise DataError(f"X must be 2-D (samples as rows), got shape {X.shape}")
    shape = image_shape_of(image_shape, X.shape[1])
    if order not in ("C", "F"):
        raise UserError(f"order={order!r} must be 'C' (row-major) or 'F' (column-major, MATLAB)")
    if not np.all(np.isfinite(X)):
        raise DataError("X contains NaN or infinite values")
    return X, shape


def _check_range(name, rng_, low_ok):
    lo, hi = (float(v) for v in rng_)
    if not (lo <= hi and low_ok(lo)):
        raise UserError(f"{name}={tuple(rng_)!r} must be (low, high) with low <= high")
    return lo, hi


def _count(name, v):
    if not (isinstance(v, numbers.Integral) and v >= 0):
        raise UserError(f"{name}={v!r} must be a non-negative int")
    return int(v)


def _plan(n, flip, n_rotations, n_scalings, rotation_range, scale_range, random_state):
    """Validated parameters and every random draw, made once: (angles (n, r), scales (n, s))."""
    n_rotations = _count("n_rotations", n_rotations)
    n_scalings = _count("n_scalings", n_scalings)
    lo_r, hi_r = _check_range("rotation_range", rotation_range, lambda lo: True)
    lo_s, hi_s = _check_range("scale_range", scale_range, lambda lo: lo > 0)
    if not (bool(flip) or n_rotations or n_scalings):
        raise UserError("no augmentation requested: set flip=True, n_rotations > 0 or n_scalings > 0")
    from sklearn.utils import check_random_state  # sklearn loads in seconds: only when augmenting

    rs = check_random_state(random_state)
    angles = rs.uniform(lo_r, hi_r, size=(n, n_rotations))
    scales = rs.uniform(lo_s, hi_s, size=(n, n_scalings))
    return bool(flip), angles, scales


def _zoom(img, s):
    """Zoom ``img`` by ``s`` about its centre, same output shape (crop or zero-pad)."""
    from scipy import ndimage
    c = (np.asarray(img.shape, dtype=np.float64) - 1.0) / 2.0
    # output pixel o samples input at c + (o - c) / s
    return ndimage.affine_transform(img, np.full(2, 1.0 / s), offset=c - c / s, output_shape=img.shape,
                                    order=1, mode="constant", cval=0.0)


def _rotate(img, angle):
    from scipy import ndimage
    return ndimage.rotate(img, angle, reshape=False, order=1, mode="constant", cval=0.0)


def _transform_rows(X, r0, r1, shape, order, flip, angles, scales, dtype):
    """Augmented rows of samples r0..r1-1 (sample-major block)."""
    per = int(flip) + angles.shape[1] + scales.shape[1]
    out = np.empty(((r1 - r0) * per, X.shape[1]), dtype=dtype)
    a = 0
    for i in range(r0, r1):
        img = np.asarray(X[i], dtype=np.float64).reshape(shape, order=order)
        if flip:
            out[a] = img[:, ::-1].ravel(order=order)
            a += 1
        for t in range(angles.shape[1]):
            out[a] = _rotate(img, angles[i, t]).ravel(order=order)
            a += 1
        for t in range(scales.shape[1]):
            out[a] = _zoom(img, scales[i, t]).ravel(order=order)
            a += 1
    return out


def augment_images(X, image_shape, *, order="C", flip=False, n_rotations=5, rotation_range=(-15.0, 15.0),
                   n_scalings=5, scale_range=(0.9, 1.1), random_state=None):
    """Instance-based image augmentation, in memory.

    Parameters
    ----------
    X : array-like, shape (n, h*w)
        One image per row.
    image_shape : (int, int)
        (height, width) of every image.
    order : {"C", "F"}
        How a row is laid out: "C" row-major (MNIST), "F" column-major
        (MATLAB files such as COIL20.mat).
    flip : bool
        Add the left-right mirror image.
    n_rotations : int
        Random rotations per image, angles uniform in ``rotation_range`` (degrees).
    n_scalings : int
        Random zooms per image about the centre, factors uniform in ``scale_range``.
    random_state : None, int or RandomState

    Returns
    -------
    X_aug : ndarray, shape (n * m, h*w), m = flip + n_rotations + n_scalings,
        float64 (float32 input stays float32).
    origin : ndarray of int64, shape (n * m,)
        ``origin[a]`` = index of the source image of row ``a``.

    Raises
    ------
    DataError
        No ``image_shape`` (non-image data), a shape that does not match the
        number of features, or non-finite pixels.
    UserError
        Bad counts, ranges or order.
    """
    X, shape = _check_images(X, image_shape, order)
    flip, angles, scales = _plan(X.shape[0], flip, n_rotations, n_scalings, rotation_range, scale_range,
                                 random_state)
    per = int(flip) + angles.shape[1] + scales.shape[1]
    dtype = np.float32 if X.dtype == np.float32 else np.float64
    X_aug = _transform_rows(X, 0, X.shape[0], shape, order, flip, angles, scales, dtype)
    return X_aug, np.repeat(np.arange(X.shape[0], dtype=np.int64), per)


def augment_chunks(X, image_shape, *, chunk_rows=1024, order="C", flip=False, n_rotations=5,
                   rotation_range=(-15.0, 15.0), n_scalings=5, scale_range=(0.9, 1.1), random_state=None):
    """Same rows as :func:`augment_images`, yielded for ``chunk_rows`` source images at a time.

    ``X`` may be any row-indexable array (NumPy, zarr, a Dask array
    computed block by block); only ``chunk_rows`` source rows and their
    augmentations are in memory at once.  The random draws are made up front
    (two small (n, m) arrays), so the concatenated chunks equal the in-memory
    result bit for bit, for any ``chunk_rows``.

    Yields
    ------
    (start, X_aug_chunk, origin_chunk) : int, ndarray, ndarray
        ``start`` is the first augmented row index of the chunk.
    """
    if image_shape is None:
        raise DataError("augmentation needs image data: give image_shape=(height, width)")
    n, nf = X.shape
    _check_images(np.empty((0, nf)), image_shape, order)
    shape = tuple(int(s) for s in image_shape)
    if not (isinstance(chunk_rows, numbers.Integral) and chunk_rows >= 1):
        raise UserError(f"chunk_rows={chunk_rows!r} must be a positive int")
    flip, angles, scales = _plan(n, flip, n_rotations, n_scalings, rotation_range, scale_range, random_state)
    per = int(flip) + angles.shape[1] + scales.shape[1]
    for r0 in range(0, n, chunk_rows):
        r1 = min(n, r0 + chunk_rows)
        block = np.asarray(X[r0:r1])
        if not np.all(np.isfinite(block)):
            raise DataError(f"X rows {r0}..{r1 - 1} contain NaN or infinite values")
        dtype = np.float32 if block.dtype == np.float32 else np.float64
        out = _transform_rows(block, 0, r1 - r0, shape, order, flip, angles[r0:r1], scales[r0:r1], dtype)
        yield r0 * per, out, np.repeat(np.arange(r0, r1, dtype=np.int64), per)


def interpolate(X, y, n_per_class, *, n_mix=2, weights="uniform", random_state=None):
    """Linear-interpolation augmentation from labelled samples (paper 002, 4.2.2).

    For every class c with labelled samples, ``n_per_class`` new samples
    ``sum_j w_j x_j`` over ``n_mix`` distinct labelled samples of class c
    drawn at random.  ``weights="uniform"``: w_j uniform in [0, 1] then
    divided by their sum (a non-negative convex combination, which keeps
    non-negative data non-negative); ``"gaussian"``: w_j standard normal
    (spans the whole subspace, signs mixed).  Scale is irrelevant downstream
    because dictionary atoms are normalised to unit length.

    Parameters
    ----------
    X : array-like (n, d)
    y : array-like (n,) int, ``-1`` for unlabelled (scikit-learn convention)
    n_per_class : int
    n_mix : int
        s, the number of labelled samples combined (the paper's locality
        parameter).  A class with fewer labelled samples uses all of them.

    Returns
    -------
    X_aug : ndarray (n_classes * n_per_class, d)
    origin : ndarray of int64 (n_classes * n_per_class, n_mix)
        Source samples of each new row, padded with -1 where a class had
        fewer than ``n_mix`` labelled samples.
    labels : ndarray of int64 (n_classes * n_per_class,)
        The class of each new row.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise DataError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
    if not (isinstance(n_per_class, numbers.Integral) and n_per_class >= 1):
        raise UserError(f"n_per_class={n_per_class!r} must be a positive int")
    if not (isinstance(n_mix, numbers.Integral) and n_mix >= 1):
        raise UserError(f"n_mix={n_mix!r} must be a positive int")
    if weights not in ("uniform", "gaussian"):
        raise UserError(f"weights={weights!r} must be 'uniform' or 'gaussian'")
    classes = np.unique(y[y >= 0])
    if classes.size == 0:
        raise DataError("linear interpolation needs labelled samples (all y are -1)")
    from sklearn.utils import check_random_state  # sklearn loads in seconds: only when augmenting

    rs = check_random_state(random_state)
    rows, srcs, labs = [], [], []
    for c in classes:
        members = np.flatnonzero(y == c)
        s = min(int(n_mix), members.size)
        for _ in range(int(n_per_class)):
            pick = rs.choice(members, size=s, replace=False)
            if weights == "uniform":
                w = rs.uniform(0.0, 1.0, s)
                w = w / w.sum() if w.sum() > 0 else np.full(s, 1.0 / s)
            else:
                w = rs.standard_normal(s)
            rows.append(w @ X[pick])
            src = np.full(int(n_mix), -1, dtype=np.int64)
            src[:s] = pick
            srcs.append(src)
            labs.append(c)
    return np.asarray(rows), np.asarray(srcs, dtype=np.int64), np.asarray(labs, dtype=np.int64)


# -- presets by name ---------------------------------------------------------------------------


def augment(X, augment="coil20", *, image_shape=None, order=None, random_state=None):
    """Augment image rows with a preset name or a dict of :func:`augment_images` options.

    Parameters
    ----------
    X : array-like (n, h*w)
    augment : str or dict
        ``"coil20"`` (32x32 column-major, flip + 5 rotations + 5 scalings),
        ``"mnist"`` (28x28 row-major, 5 rotations + 5 scalings), or a dict of
        keyword arguments of :func:`augment_images` (``image_shape`` and
        ``order`` may also be given here or as arguments).
    image_shape, order : override the preset's.
    random_state : None, int or RandomState

    Returns
    -------
    X_aug : ndarray (n*m, h*w)
    origin : ndarray of int64 (n*m,)
    """
    opts = _augment_options(augment, image_shape, order)
    return augment_images(X, random_state=random_state, **opts)


def _augment_options(augment, image_shape, order):
    if isinstance(augment, str):
        if augment not in PRESETS:
            raise UserError(f"unknown augmentation preset {augment!r}; expected {', '.join(PRESETS)} or a dict")
        opts = dict(PRESETS[augment])
    elif isinstance(augment, dict):
        opts = dict(augment)
    else:
        raise UserError(f"augment must be None, a preset name or a dict, got {type(augment).__name__}")
    if image_shape is not None:
        opts["image_shape"] = image_shape
    if order is not None:
        opts["order"] = order
    opts.setdefault("order", "C")
    if opts.get("image_shape") is None:
        raise DataError("augmentation needs image data: give image_shape=(height, width)")
    return opts


def image_layout(augment, image_shape=None, order=None):
    """``(image_shape, order)``: the arguments, else the augmentation preset's (``(None, "C")`` when neither)."""
    base = PRESETS.get(augment, {}) if isinstance(augment, str) else (augment if isinstance(augment, dict) else {})
    return (image_shape if image_shape is not None else base.get("image_shape"),
            order if order is not None else base.get("order", "C"))
