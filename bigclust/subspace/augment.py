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

from bigclust._util import progress
from bigclust._util.errors import DataError, UserError
from bigclust.subspace.transforms import (TRANSFORMS, CallableAugment, call, copies_of, describe, draws, generator,
                                          image_shape_of, plan, transform_rows)

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


#: what ``augment`` takes besides a table or a callable: no augmentation, the presets, AkS-SC's interpolation
NAMES = ("none", *PRESETS, "interpolate")
#: the keyword arguments of :func:`augment_images` (a dict of them is the older form of a description)
_KWARGS = ("image_shape", "order", "flip", "n_rotations", "rotation_range", "n_scalings", "scale_range")


def expand(name):
    """A preset as ``(description, image_shape, order)``: the description makes the preset's copies bit for bit."""
    if name not in PRESETS:
        raise UserError(f"unknown augmentation preset {name!r}; expected {', '.join(PRESETS)} or a table")
    pre = PRESETS[name]
    desc, _, _ = _from_kwargs(pre)
    return desc, pre["image_shape"], pre["order"]


def _from_kwargs(opts):
    """``(description, image_shape, order)`` of a dict of :func:`augment_images` keyword arguments."""
    def spread(n, rng):
        return {"count": _count(n, opts.get(n, 5)), "range": list(rng), "random": True}
    desc = describe({"flip": opts.get("flip", False),
                     "rotate": spread("n_rotations", opts.get("rotation_range", (-15.0, 15.0))),
                     "scale": spread("n_scalings", opts.get("scale_range", (0.9, 1.1)))})
    return desc, opts.get("image_shape"), opts.get("order")


def resolve(augment, image_shape=None, order=None):
    """``(description or callable, image_shape, order)`` of any ``augment``: a preset name, a table of
    transforms (or of :func:`augment_images` keyword arguments), or a callable; the arguments win over a
    preset's layout, and the order is "C" when neither says."""
    if callable(augment):
        return getattr(augment, "fn", None) or augment, image_shape, order or "C"
    if isinstance(augment, str):
        desc, shape, order_ = expand(augment)
    elif isinstance(augment, dict) and any(k in _KWARGS[2:] and k != "flip" for k in augment):
        if any(k not in _KWARGS for k in augment):
            raise UserError(f"augment {augment!r} mixes augment_images keywords ({', '.join(_KWARGS)}) with "
                            f"transforms; use the transforms: {', '.join(TRANSFORMS)}")
        desc, shape, order_ = _from_kwargs(augment)
    elif isinstance(augment, dict):
        desc, shape, order_ = describe(augment), None, None
    else:
        raise UserError(f"augment must be None, a preset name ({', '.join(PRESETS)}), a table of transforms "
                        f"({', '.join(TRANSFORMS)}) or a callable f(images, rng), got {type(augment).__name__}")
    return desc, image_shape if image_shape is not None else shape, order or order_ or "C"


def check_augment(v) -> bool:
    """The ``[aksc] augment`` check: a name of :data:`NAMES`, a callable, or a table (a one-line UserError
    saying what is wrong with it)."""
    if callable(v) and not isinstance(v, str) or isinstance(v, CallableAugment):
        return True
    if isinstance(v, str):
        return v in NAMES
    if isinstance(v, dict):
        resolve(v)
        return True
    return False


def copies_per_image(augment):
    """Copies each image gets (0 for ``"none"``), None when only running it tells (a callable, interpolation)."""
    if isinstance(augment, str) and augment in ("none", "interpolate"):
        return 0 if augment == "none" else None
    if augment is None:
        return 0
    desc = resolve(augment)[0]
    return None if callable(desc) else copies_of(desc)


def draws_nothing(augment):
    """True for ``"none"`` and for a description without random draws (``coil20_flip``, even spreads, shifts):
    its output is seed-free."""
    if isinstance(augment, str) and augment in ("none", "interpolate"):
        return augment == "none"
    desc = resolve(augment)[0]
    return not callable(desc) and not draws(desc)


def _check_images(X, image_shape, order):
    X = np.asarray(X)
    if X.ndim != 2:
        raise DataError(f"X must be 2-D (samples as rows), got shape {X.shape}")
    shape = image_shape_of(image_shape, X.shape[1], channels=True)
    if order not in ("C", "F"):
        raise UserError(f"order={order!r} must be 'C' (row-major) or 'F' (column-major, MATLAB)")
    if not np.all(np.isfinite(X)):
        raise DataError("X contains NaN or infinite values")
    return X, shape


def _count(name, v):
    if not (isinstance(v, numbers.Integral) and v >= 0):
        raise UserError(f"{name}={v!r} must be a non-negative int")
    return int(v)


def augment_images(X, image_shape, *, order="C", flip=False, n_rotations=5, rotation_range=(-15.0, 15.0),
                   n_scalings=5, scale_range=(0.9, 1.1), random_state=None):
    """Instance-based image augmentation in memory: random rotations and zooms, the presets' form.

    A description of any copies is :func:`augment`'s.

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
    rotation_range : (float, float)
        The range of the rotation angles, in degrees.
    n_scalings : int
        Random zooms per image about the centre, factors uniform in ``scale_range``.
    scale_range : (float, float)
        The range of the zoom factors.
    random_state : None, int or RandomState
        Seed of the angles and factors drawn.

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
    return augment(X, dict(image_shape=image_shape, order=order, flip=flip, n_rotations=n_rotations,
                           rotation_range=rotation_range, n_scalings=n_scalings, scale_range=scale_range),
                   random_state=random_state)


def augment_chunks(X, image_shape=None, *, chunk_rows=1024, order=None, flip=False, n_rotations=5,
                   rotation_range=(-15.0, 15.0), n_scalings=5, scale_range=(0.9, 1.1), random_state=None,
                   augment=None):
    """The rows of :func:`augment_images` (or of :func:`augment`), ``chunk_rows`` source images at a time.

    ``X`` may be any row-indexable array (NumPy, zarr, a Dask array
    computed block by block); only ``chunk_rows`` source rows and their
    augmentations are in memory at once.  The random draws are made up front
    (two small (n, m) arrays), so the concatenated chunks equal the in-memory
    result bit for bit, for any ``chunk_rows``.  A callable ``augment`` is
    called once per chunk, in order, with one ``numpy.random.Generator``.

    Parameters
    ----------
    X : array-like, shape (n, h*w)
        One image per row; any row-indexable array.
    image_shape : tuple of int, optional
        (height, width[, channels]); None: the preset's.
    chunk_rows : int
        Source images per chunk.
    order : {"C", "F"}, optional
        Row layout of an image; None: the preset's, else "C".
    flip : bool
        Keyword form (``augment`` None): add the mirror image.
    n_rotations : int
        Keyword form: random rotations per image.
    rotation_range : (float, float)
        Keyword form: the range of the angles, in degrees.
    n_scalings : int
        Keyword form: random zooms per image.
    scale_range : (float, float)
        Keyword form: the range of the zoom factors.
    random_state : None, int or RandomState
        Seed of the draws.
    augment : str, dict or callable, optional
        A preset name, a description or a callable, as :func:`augment` takes; given, the keyword form is
        not used.

    Yields
    ------
    (start, X_aug_chunk, origin_chunk) : int, ndarray, ndarray
        ``start`` is the first augmented row index of the chunk.
    """
    if augment is None:   # the keyword form
        augment = dict(flip=flip, n_rotations=n_rotations, rotation_range=rotation_range, n_scalings=n_scalings,
                       scale_range=scale_range)
    desc, shape, order = resolve(augment, image_shape, order)
    n, nf = X.shape
    _, shape = _check_images(np.empty((0, nf)), shape, order)
    if not (isinstance(chunk_rows, numbers.Integral) and chunk_rows >= 1):
        raise UserError(f"chunk_rows={chunk_rows!r} must be a positive int")
    p = None if callable(desc) else plan(n, desc, random_state)
    rng = generator(random_state) if callable(desc) else None
    for r0 in range(0, n, chunk_rows):
        r1 = min(n, r0 + chunk_rows)
        block = np.asarray(X[r0:r1])
        if not np.all(np.isfinite(block)):
            raise DataError(f"X rows {r0}..{r1 - 1} contain NaN or infinite values")
        dtype = np.float32 if block.dtype == np.float32 else np.float64
        if p is None:
            out, per = call(desc, block, shape, order, rng, dtype)
        else:
            out, per = transform_rows(block, 0, r1 - r0, shape, order, p.rows(r0, r1), dtype), p.per
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
        The samples.
    y : array-like (n,) int
        Their labels, ``-1`` for unlabelled (scikit-learn's convention).
    n_per_class : int
        New samples per class.
    n_mix : int
        s, the number of labelled samples combined (the paper's locality
        parameter).  A class with fewer labelled samples uses all of them.
    weights : {"uniform", "gaussian"}
        How the combination weights are drawn (see above).
    random_state : None, int or RandomState
        Seed of the draws.

    Returns
    -------
    X_aug : ndarray (n_classes * n_per_class, d)
        The new samples.
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


# -- any augmentation, by name, table or callable ----------------------------------------------------


def augment(X, augment="coil20", *, image_shape=None, order=None, random_state=None):
    """Augmented copies of image rows: a preset name, a description of the copies, or a callable.

    Parameters
    ----------
    X : array-like (n, d)
        One image per row, ``d = h * w`` (or ``h * w * c``).
    augment : str, dict or callable
        ``"coil20"`` (32x32 column-major, flip + 5 rotations + 5 scalings), ``"coil20_rotscale"``,
        ``"coil20_flip"``, ``"mnist"`` (28x28 row-major, 5 rotations + 5 scalings); a description
        ``{"flip": True, "rotate": {"count": 5, "max_degrees": 15}, "scale": {"count": 5, "range":
        [0.9, 1.1]}, "shift": {"count": 4, "pixels": 2}}`` (:mod:`bigclust.subspace.transforms`); a dict
        of :func:`augment_images` keyword arguments; or ``f(images, rng) -> copies`` with ``images``
        (n, h, w[, c]), ``rng`` a ``numpy.random.Generator`` and ``copies`` (n, m, h, w[, c]).
    image_shape : (h, w) or (h, w, c), optional
        Needed but for a preset (whose shape it overrides).
    order : {"C", "F"}, optional
        How a row holds its image: "C" row-major (the default), "F" column-major (MATLAB, COIL20.mat);
        overrides a preset's.
    random_state : None, int or RandomState
        Seeds random draws (``"random": true``, the presets) and the callable's ``rng``.

    Returns
    -------
    X_aug : ndarray (n*m, d), sample-major: image i's m copies are rows i*m ... i*m + m - 1
        float64 (float32 input stays float32).
    origin : ndarray of int64 (n*m,)
        ``origin[a]`` = index of the source image of row ``a``.
    """
    desc, shape, order = resolve(augment, image_shape, order)
    X, shape = _check_images(X, shape, order)
    dtype = np.float32 if X.dtype == np.float32 else np.float64
    if callable(desc):
        X_aug, per = call(desc, X, shape, order, generator(random_state), dtype)
    else:
        p = plan(X.shape[0], desc, random_state)
        with progress.bar(X.shape[0], f"augmentation ({p.per} copies of each image)", "image") as bar:
            X_aug, per = transform_rows(X, 0, X.shape[0], shape, order, p, dtype, bar=bar), p.per
    return X_aug, np.repeat(np.arange(X.shape[0], dtype=np.int64), per)


def aksc_layout(image="auto", image_shape=None, order="auto"):
    """``(image_shape, order)`` that ``[aksc] image``, ``image_shape`` and ``order`` set, field by field (the
    latter two win), None where none of them says (then the augment preset's, else row-major)."""
    shape, order_ = (PRESETS[image]["image_shape"], PRESETS[image]["order"]) if image != "auto" else (None, None)
    return (shape if image_shape is None else tuple(image_shape)), (order_ if order == "auto" else order)


def image_layout(augment, image_shape=None, order=None):
    """The image layout: the arguments, else the augmentation preset's.

    Parameters
    ----------
    augment : str, dict or None
        A preset name or a description (its ``image_shape`` / ``order`` entries, if any).
    image_shape : tuple of int, optional
        The layout's shape, given explicitly.
    order : {"C", "F"}, optional
        The layout's order, given explicitly.

    Returns
    -------
    image_shape : tuple of int or None
        The shape given, else the preset's, else None.
    order : str
        The order given, else the preset's, else "C".
    """
    base = PRESETS.get(augment, {}) if isinstance(augment, str) else (augment if isinstance(augment, dict) else {})
    return (image_shape if image_shape is not None else base.get("image_shape"),
            order if order is not None else base.get("order", "C"))
