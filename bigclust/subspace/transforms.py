"""Descriptions of augmented copies of images, and the transforms that make them (paper 002, section 4.1).

A description says which copies every image gets, in this order (sample-major: image i's copies are
consecutive rows)::

    {"flip": True,                                   # the left-right mirror image
     "rotate": {"count": 5, "max_degrees": 15},     # angles numpy.linspace(-15, 15, 5)
     "scale": {"count": 5, "range": [0.9, 1.1]},    # zoom factors numpy.linspace(0.9, 1.1, 5)
     "shift": {"count": 4, "pixels": 2}}            # 2 px right, left, down, up

Every transform is optional and every count may be 0.  Spreads are even and seed-free: ``rotate``
over ``[-max_degrees, max_degrees]`` (or its ``range`` in degrees), ``scale`` over ``range``, both by
``numpy.linspace`` (an odd count holds the middle value: 0 degrees, a scale of 1); ``shift`` cycles
through the four directions right, left, down, up, ``pixels`` further out every fourth copy.
``"random": true`` in ``rotate`` or ``scale`` draws every image's angles or factors uniformly from the
range instead (angles first, then factors, from one ``RandomState``): the paper's presets, whose
copies are bit for bit those of the draws made before descriptions existed.

Every transform is about the image centre, keeps its shape (crop or zero-pad), bilinear
(``scipy.ndimage``, ``order=1``) with 0 outside, the black background of COIL-20 and MNIST; an image
of shape (h, w, c) is transformed channel by channel.  A callable ``f(images, rng) -> copies`` replaces
a description: ``images`` (n, h, w[, c]), ``rng`` a ``numpy.random.Generator``, ``copies``
(n, m, h, w[, c]).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from bigclust._util.errors import DataError, UserError

TRANSFORMS = ("flip", "rotate", "scale", "shift")
#: the keys each transform's table takes
_FIELDS = {"rotate": ("count", "max_degrees", "range", "random"), "scale": ("count", "range", "random"),
           "shift": ("count", "pixels")}
#: the shift directions (rows, columns): right, left, down, up
_DIRECTIONS = ((0, 1), (0, -1), (1, 0), (-1, 0))


class CallableAugment(str):
    """A callable augmentation as it travels through a config: a string naming it (what hashes, store
    attributes and reports see, all JSON) that carries the function (``.fn``, what the augmenting stage calls).

    Only Python code makes one (:class:`bigclust.SubspaceClustering` from its ``augment`` callable); a TOML
    config cannot, so a config's ``augment`` is always a preset name or a table.
    """

    fn = None

    def __new__(cls, fn):
        if isinstance(fn, CallableAugment):
            return fn
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        self = super().__new__(cls, f"callable:{getattr(fn, '__module__', '')}.{name}")
        self.fn = fn
        return self

    def __call__(self, images, rng):
        return self.fn(images, rng)

    def __reduce__(self):   # pickled (to a Dask worker) with its function, not as a bare string
        return CallableAugment, (self.fn,)


def _number(where, v, low=None, strict=False):
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v):
        raise UserError(f"{where} must be a number, got {v!r}")
    if low is not None and (v <= low if strict else v < low):
        raise UserError(f"{where} must be {'>' if strict else '>='} {low}, got {v!r}")
    return float(v)


def _count(where, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
        raise UserError(f"{where} must be an integer >= 0, got {v!r}")
    return int(v)


def _range(where, v, positive=False):
    if not (isinstance(v, (list, tuple)) and len(v) == 2):
        raise UserError(f"{where} must be [low, high], got {v!r}")
    lo, hi = (_number(where, x, 0.0 if positive else None, strict=True) for x in v)
    if lo > hi:
        raise UserError(f"{where} must be [low, high] with low <= high, got {list(v)!r}")
    return [lo, hi]


def describe(augment) -> dict:
    """A description checked and written out in full: ``{"flip": bool, "rotate": {"count", "range",
    "random"}, "scale": {"count", "range", "random"}, "shift": {"count", "pixels"}}``.

    Raises a one-line :class:`UserError` naming the transform: an unknown transform or field, a negative
    count, a range the wrong way round, nothing to make.
    """
    if not isinstance(augment, dict):
        raise UserError(f"augment must be a table of transforms ({', '.join(TRANSFORMS)}), got {augment!r}")
    unknown = [k for k in augment if k not in TRANSFORMS]
    if unknown and unknown[0] in ("image_shape", "order"):
        raise UserError(f"{unknown[0]} is not a transform: give it beside augment, not inside its table")
    if unknown:
        raise UserError(f"unknown transform {unknown[0]!r}; the transforms are {', '.join(TRANSFORMS)}")
    flip = augment.get("flip", False)
    if not isinstance(flip, (bool, np.bool_)):
        raise UserError(f"flip must be true or false, got {flip!r}")
    out = {"flip": bool(flip)}
    for name, fields in _FIELDS.items():
        t = augment.get(name, {"count": 0})
        if not isinstance(t, dict):
            raise UserError(f"{name} must be a table like {{count = 4, ...}}, got {t!r}")
        bad = [k for k in t if k not in fields]
        if bad:
            raise UserError(f"unknown field {bad[0]!r} of {name}; its fields are {', '.join(fields)}")
        where = name
        count = _count(f"{where} count", t.get("count", 0))
        if name == "shift":
            out[name] = {"count": count, "pixels": _number(f"{where} pixels", t.get("pixels", 1), 0.0, True)}
            continue
        if name == "rotate":
            if "max_degrees" in t and "range" in t:
                raise UserError("rotate takes max_degrees or range, not both")
            m = _number(f"{where} max_degrees", t.get("max_degrees", 15.0), 0.0)
            rng = _range(f"{where} range", t["range"]) if "range" in t else [-m, m]
        else:
            rng = _range(f"{where} range", t.get("range", [0.9, 1.1]), positive=True)
        random = t.get("random", False)
        if not isinstance(random, (bool, np.bool_)):
            raise UserError(f"{where} random must be true or false, got {random!r}")
        out[name] = {"count": count, "range": rng, "random": bool(random)}
    if not copies_of(out):
        raise UserError("the table makes no copies: set flip = true or a count > 0 (or no augmentation at all)")
    return out


def copies_of(desc: dict) -> int:
    """Copies per image of a full description."""
    return int(desc["flip"]) + sum(desc[t]["count"] for t in ("rotate", "scale", "shift"))


def draws(desc: dict) -> bool:
    """True when a full description draws random numbers (its copies depend on the seed)."""
    return any(desc[t]["random"] and desc[t]["count"] for t in ("rotate", "scale"))


def shift_offsets(count, pixels):
    """``(count, 2)`` (rows, columns) offsets: right, left, down, up, then each again ``pixels`` further."""
    k = np.arange(int(count))
    return np.asarray(_DIRECTIONS, dtype=np.float64)[k % 4] * (pixels * (k // 4 + 1))[:, None]


@dataclass(frozen=True)
class Plan:
    """Every parameter of every copy, drawn once: ``angles`` (n, r) degrees, ``scales`` (n, s), ``shifts``
    (t, 2) pixels.  Rows of ``angles`` / ``scales`` are per image, so a chunk of images takes its rows."""

    flip: bool
    angles: np.ndarray
    scales: np.ndarray
    shifts: np.ndarray

    @property
    def per(self) -> int:
        return int(self.flip) + self.angles.shape[1] + self.scales.shape[1] + self.shifts.shape[0]

    def rows(self, r0, r1) -> "Plan":
        return Plan(self.flip, self.angles[r0:r1], self.scales[r0:r1], self.shifts)


def plan(n, desc: dict, random_state=None) -> Plan:
    """The parameters of every copy of ``n`` images under the full description ``desc``."""
    rs = None
    if draws(desc):
        from sklearn.utils import check_random_state  # sklearn loads in seconds: only when drawing
        rs = check_random_state(random_state)
    spread = []
    for t in ("rotate", "scale"):   # this order of draws is the presets'
        d = desc[t]
        if d["random"]:
            spread.append(rs.uniform(d["range"][0], d["range"][1], size=(n, d["count"])) if d["count"]
                          else np.empty((n, 0)))
        else:
            spread.append(np.broadcast_to(np.linspace(d["range"][0], d["range"][1], d["count"]), (n, d["count"])))
    return Plan(desc["flip"], spread[0], spread[1], shift_offsets(desc["shift"]["count"], desc["shift"]["pixels"]))


def image_shape_of(image_shape, n_features, what="augmentation", channels=False):
    """``image_shape`` as a tuple of positive ints, (h, w) or with ``channels`` (h, w, c), of ``n_features``
    pixels (a DataError otherwise)."""
    if image_shape is None:
        raise DataError(f"{what} needs image data: give image_shape=(height, width)")
    kind = "(height, width) or (height, width, channels)" if channels else "(height, width)"
    try:
        shape = tuple(int(s) for s in image_shape)
        if any(s != v for s, v in zip(shape, image_shape)):
            raise ValueError
    except (TypeError, ValueError):
        raise DataError(f"image_shape={image_shape!r} must be {kind}, positive ints") from None
    if len(shape) not in ((2, 3) if channels else (2,)) or min(shape) < 1:
        raise DataError(f"image_shape={image_shape!r} must be {kind}, positive ints")
    if int(np.prod(shape)) != n_features:
        raise DataError(f"image_shape {shape} has {int(np.prod(shape))} pixels but X has {n_features} features "
                        "(an augment preset sets it: coil20* 32 x 32, mnist 28 x 28)")
    return shape


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


def _shift(img, offset):
    from scipy import ndimage
    return ndimage.shift(img, offset, order=1, mode="constant", cval=0.0)


def _each_channel(f, img, arg):
    if img.ndim == 2:
        return f(img, arg)
    return np.stack([f(img[..., c], arg) for c in range(img.shape[2])], axis=-1)


def warp_params(p: Plan, shape):
    """``(kinds (m,), params (n, m, 6))`` of the rotations, zooms and shifts of ``p`` for
    :func:`bigclust.subspace._kernels.warp_images`, formed as scipy.ndimage forms them (its copies bit for bit).

    ``rotate``: ``c, s = cosdg, sindg``, ``M = [[c, s], [-s, c]]``, offset ``ctr - M @ ctr`` (a stacked
    ``matmul``, whose rounding is the one of ndimage's 2 x 2 product); ``_zoom``: ``affine_transform`` of the
    diagonal ``1/s``, which ndimage runs as ``zoom_shift`` with shift ``offset / matrix``; ``shift(o)``:
    ``zoom_shift`` with shift ``-o`` and no zoom (a zoom of 1 multiplies exactly).
    """
    from scipy import special

    from bigclust.subspace._kernels import ROTATE, ZOOM
    n = p.angles.shape[0]
    ctr = (np.asarray(shape[:2], dtype=np.float64) - 1) / 2
    blocks, kinds = [], []
    if p.angles.shape[1]:
        c, s = special.cosdg(p.angles), special.sindg(p.angles)
        M = np.stack([np.stack([c, s], -1), np.stack([-s, c], -1)], -2)         # (n, r, 2, 2)
        off = ctr - M @ ctr
        blocks.append(np.concatenate([off, M.reshape(M.shape[:2] + (4,))], axis=-1))
        kinds += [ROTATE] * p.angles.shape[1]
    if p.scales.shape[1]:
        m = 1.0 / p.scales                                                        # (n, s): the diagonal matrix
        sh = (ctr - ctr / p.scales[..., None]) / m[..., None]                     # offset / matrix
        blocks.append(np.concatenate([sh, m[..., None], m[..., None], np.zeros(m.shape + (2,))], axis=-1))
        kinds += [ZOOM] * p.scales.shape[1]
    if p.shifts.shape[0]:
        t = p.shifts.shape[0]
        one = np.concatenate([-p.shifts, np.ones((t, 2)), np.zeros((t, 2))], axis=1)
        blocks.append(np.broadcast_to(one, (n, t, 6)))
        kinds += [ZOOM] * t
    if not kinds:
        return np.empty(0, dtype=np.int64), np.empty((n, 0, 6))
    return np.asarray(kinds, dtype=np.int64), np.ascontiguousarray(np.concatenate(blocks, axis=1))


#: bytes of the float64 copies one kernel call makes: the copies are written into the output, in its dtype,
#: a slice of images at a time, so an augmentation in memory holds them once (float32 input: 4 bytes a
#: pixel) instead of beside a float64 array of all of them (10 000 MNIST digits x 10 copies: 627 MB)
WARP_BYTES = 32 << 20


def transform_rows(X, r0, r1, shape, order, p: Plan, dtype, params=None, bar=None):
    """Augmented rows of images r0..r1-1 of X (sample-major block) under the plan ``p`` (rows of all of X).

    One kernel call per slice of :data:`WARP_BYTES` of copies (:func:`bigclust.subspace._kernels.warp_images`;
    every copy depends on its image only): the copies of :func:`transform_rows_ndimage` bit for bit.
    ``params``: :func:`warp_params` of all of ``p``, when the caller makes many chunks of one plan (the
    streamed passes); ``bar``: a progress bar (:mod:`bigclust._util.progress`) advanced by the images done.
    """
    kinds, par = warp_params(p.rows(r0, r1), shape) if params is None else (params[0], params[1][r0:r1])
    out = np.empty(((r1 - r0) * p.per, int(np.prod(shape))), dtype=dtype)
    step = max(1, WARP_BYTES // (8 * out.shape[1] * max(1, p.per)))
    for a in range(r0, r1, step):
        b = min(r1, a + step)
        out[(a - r0) * p.per:(b - r0) * p.per] = _copies(X[a:b], shape, order, p.flip, kinds, par[a - r0:b - r0])
        if bar is not None:
            bar.update(b - a)
    return out


def _copies(rows, shape, order, flip, kinds, par):
    """The float64 copies (sample-major rows) of the image rows ``rows``: the flip, then the warps."""
    from bigclust.subspace._kernels import warp_images
    imgs = as_images(np.asarray(rows, dtype=np.float64), shape, order)
    if imgs.ndim == 3:
        imgs = imgs[..., None]
    imgs = np.ascontiguousarray(imgs)
    nb, h, w, c = imgs.shape
    warped = np.empty((nb, kinds.size, h, w, c))
    if kinds.size:
        warp_images(imgs, kinds, par, warped)
    copies = ([imgs[:, None, :, ::-1]] if flip else []) + [warped]
    allc = np.concatenate(copies, axis=1) if len(copies) > 1 else warped    # (nb, per, h, w, c)
    return as_rows(allc.reshape((-1,) + tuple(shape)), order)


def transform_rows_ndimage(X, r0, r1, shape, order, p: Plan, dtype):
    """:func:`transform_rows` by scipy.ndimage, one call per copy: the definition the kernel is tested against."""
    out = np.empty(((r1 - r0) * p.per, X.shape[1]), dtype=dtype)
    a = 0
    for i in range(r0, r1):
        img = np.asarray(X[i], dtype=np.float64).reshape(shape, order=order)
        made = ([img[:, ::-1]] if p.flip else []) + [_each_channel(_rotate, img, t) for t in p.angles[i]] \
            + [_each_channel(_zoom, img, s) for s in p.scales[i]] + [_each_channel(_shift, img, o) for o in p.shifts]
        for im in made:
            out[a] = im.ravel(order=order)
            a += 1
    return out


def as_images(rows, shape, order):
    """Rows (n, prod(shape)) as images (n, *shape), each row read in ``order``."""
    rows = np.asarray(rows)
    if order == "C":
        return rows.reshape((rows.shape[0],) + tuple(shape))
    rev = tuple(range(len(shape), 0, -1))           # column-major: the C reading of the reversed shape
    return rows.reshape((rows.shape[0],) + tuple(shape)[::-1]).transpose((0,) + rev)


def as_rows(images, order):
    """Images (n, *shape) as rows, each written in ``order`` (the inverse of :func:`as_images`)."""
    images = np.asarray(images)
    if order == "F":
        images = images.transpose((0,) + tuple(range(images.ndim - 1, 0, -1)))
    return images.reshape(images.shape[0], -1)


def call(fn, X, shape, order, rng, dtype):
    """Copies made by a callable ``fn(images, rng)`` of the rows X: ``(rows (n*m, d), m)``, sample-major."""
    images = as_images(np.asarray(X, dtype=np.float64), shape, order)
    n = images.shape[0]
    copies = np.asarray(fn(images, rng))
    name = getattr(fn, "__name__", "the augment callable")
    if copies.ndim != len(shape) + 2 or copies.shape[0] != n or copies.shape[2:] != tuple(shape) \
            or copies.shape[1] < 1:
        raise UserError(f"augment callable {name} returned shape {copies.shape}; expected (n, m, "
                        f"{', '.join(map(str, shape))}) with n = {n} images and m >= 1 copies of each")
    if copies.dtype.kind not in "biuf" or not np.all(np.isfinite(copies)):
        raise DataError(f"augment callable {name} returned non-numeric or non-finite pixels")
    m = copies.shape[1]
    return as_rows(copies.reshape((n * m,) + tuple(shape)), order).astype(dtype, copy=False), m


def generator(random_state):
    """A ``numpy.random.Generator`` for a callable from a seed, None or a ``RandomState``."""
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**32, dtype=np.int64))
    return np.random.default_rng(random_state)
