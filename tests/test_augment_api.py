"""Augmentation for any images (issue 29, item 1): descriptions, callables, layouts, presets as descriptions.

The expected copies are written here from the transforms' definitions with plain NumPy / SciPy
(``scipy.ndimage`` rotate / affine zoom / shift, bilinear, 0 outside), not read from the code.
"""
import textwrap

import numpy as np
import pytest
from scipy import ndimage

from bigclust import SubspaceClustering
from bigclust._util.errors import UserError
from bigclust.subspace import PRESETS, augment
from bigclust.subspace.augment import expand

DESC = {"flip": True, "rotate": {"count": 5, "max_degrees": 15}, "scale": {"count": 5, "range": [0.9, 1.1]},
        "shift": {"count": 4, "pixels": 2}}


def _zoom(img, s):
    c = (np.asarray(img.shape, float) - 1) / 2
    return ndimage.affine_transform(img, np.full(2, 1 / s), offset=c - c / s, output_shape=img.shape, order=1)


def _reference(img):
    """The 15 copies of DESC: flip, rotations at linspace(-15, 15, 5), zooms at linspace(0.9, 1.1, 5), shifts."""
    out = [img[:, ::-1]]
    out += [ndimage.rotate(img, a, reshape=False, order=1, mode="constant") for a in np.linspace(-15, 15, 5)]
    out += [_zoom(img, s) for s in np.linspace(0.9, 1.1, 5)]
    out += [ndimage.shift(img, o, order=1, mode="constant") for o in ((0, 2), (0, -2), (2, 0), (-2, 0))]
    return out


def _images(n, h, w, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, h, w)) + np.linspace(0, 1, h)[:, None] + np.linspace(0, 2, w)[None, :] ** 2


@pytest.mark.parametrize("order", ["C", "F"])
def test_description_matches_the_scipy_reference(order):
    imgs = _images(3, 9, 7)
    X = np.stack([im.ravel(order=order) for im in imgs])
    A, origin = augment(X, DESC, image_shape=(9, 7), order=order)
    assert A.shape == (45, 63) and np.array_equal(origin, np.repeat(np.arange(3), 15))
    want = np.stack([c.ravel(order=order) for im in imgs for c in _reference(im)])
    np.testing.assert_allclose(A, want, atol=1e-12)
    # seed-free: an even spread draws nothing
    np.testing.assert_array_equal(A, augment(X, DESC, image_shape=(9, 7), order=order, random_state=5)[0])


def test_shift_cycles_directions_then_goes_further():
    img = np.zeros((9, 9))
    img[4, 4] = 1.0
    A, _ = augment(img.ravel()[None], {"shift": {"count": 8, "pixels": 1}}, image_shape=(9, 9))
    peaks = [np.unravel_index(np.argmax(r), (9, 9)) for r in A]
    assert peaks == [(4, 5), (4, 3), (5, 4), (3, 4), (4, 6), (4, 2), (6, 4), (2, 4)]


def test_channels_are_transformed_one_by_one():
    rgb = np.stack([_images(2, 8, 6, seed=s) for s in range(3)], axis=-1)   # (2, 8, 6, 3)
    X = rgb.reshape(2, -1)
    A, _ = augment(X, {"rotate": {"count": 2, "max_degrees": 10}}, image_shape=(8, 6, 3))
    want = [np.stack([ndimage.rotate(im[..., c], a, reshape=False, order=1) for c in range(3)], -1).ravel()
            for im in rgb for a in (-10, 10)]
    np.testing.assert_allclose(A, np.stack(want), atol=1e-12)


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_preset_is_its_expanded_description_bit_for_bit(name):
    desc, shape, order = expand(name)
    X = np.random.default_rng(1).random((6, shape[0] * shape[1]))
    a, oa = augment(X, name, random_state=7)
    b, ob = augment(X, desc, image_shape=shape, order=order, random_state=7)
    assert np.array_equal(a, b) and np.array_equal(oa, ob)
    # ... and the draws are the presets' own: angles then factors, uniform, from one RandomState
    pre = PRESETS[name]
    rs = np.random.RandomState(7)
    angles = rs.uniform(-15.0, 15.0, (6, pre["n_rotations"]))
    scales = rs.uniform(0.9, 1.1, (6, pre["n_scalings"]))
    img = X[2].reshape(shape, order=order)
    ref = ([img[:, ::-1]] if pre["flip"] else []) \
        + [ndimage.rotate(img, t, reshape=False, order=1) for t in angles[2]] + [_zoom(img, s) for s in scales[2]]
    per = len(ref)
    np.testing.assert_array_equal(a[2 * per:3 * per], np.stack([r.ravel(order=order) for r in ref]))


def test_a_callable_gets_images_and_a_generator():
    seen = {}

    def noisy(images, rng):
        seen["shape"], seen["rng"] = images.shape, rng
        return np.stack([images, images + rng.normal(0, 0.1, images.shape)], axis=1)

    imgs = _images(4, 5, 3)
    X = np.stack([im.ravel(order="F") for im in imgs])
    A, origin = augment(X, noisy, image_shape=(5, 3), order="F", random_state=0)
    assert seen["shape"] == (4, 5, 3) and isinstance(seen["rng"], np.random.Generator)
    np.testing.assert_array_equal(A[::2], X)          # the first copy is the image, read back in F order
    assert np.array_equal(origin, np.repeat(np.arange(4), 2))
    with pytest.raises(UserError, match=r"returned shape \(4, 5, 3\); expected \(n, m, 5, 3\)"):
        augment(X, lambda im, rng: im, image_shape=(5, 3))


@pytest.mark.parametrize("bad,match", [
    ({"rotate": {"count": -1}}, r"^rotate count must be an integer >= 0, got -1$"),
    ({"rotation": {"count": 2}}, r"^unknown transform 'rotation'; the transforms are flip, rotate, scale, shift$"),
    ({"scale": {"count": 2, "range": [1.1, 0.9]}}, r"low <= high"),
    ({"shift": {"count": 2, "px": 1}}, r"unknown field 'px' of shift"),
    ({"flip": False}, r"makes no copies"),
])
def test_description_errors_are_one_line(bad, match):
    X = np.ones((2, 64))
    with pytest.raises(UserError, match=match):
        augment(X, bad, image_shape=(8, 8))
    with pytest.raises(UserError) as e:
        SubspaceClustering(2, augment=bad, image_shape=(8, 8)).fit(X)
    assert str(e.value).startswith("SubspaceClustering: augment: ") and "\n" not in str(e.value)


def test_wrong_shape_is_one_line_in_fit():
    X = np.random.default_rng(0).random((30, 64))
    with pytest.raises(UserError, match=r"^SubspaceClustering: image_shape[ =]*.9, 9.* 81 pixels.* 64 features"):
        SubspaceClustering(3, augment={"flip": True}, image_shape=(9, 9), n_neighbors=5).fit(X)
    with pytest.raises(UserError, match=r"^SubspaceClustering: .*needs the images' shape: set image_shape"):
        SubspaceClustering(3, augment={"flip": True}, n_neighbors=5).fit(X)
    with pytest.raises(UserError, match=r"^SubspaceClustering: image_shape must be"):
        SubspaceClustering(3, augment={"flip": True}, image_shape=(8, -8)).fit(X)


def _config(tmp_path, aksc: str, n=40, d=64):
    from bigclust.pipeline import config
    rng = np.random.default_rng(0)
    np.savetxt(tmp_path / "x.csv", np.column_stack([rng.random((n, d)), np.arange(n) % 2]), delimiter=",")
    p = tmp_path / "c.toml"
    p.write_text(textwrap.dedent(f"""\
        [data]
        path = "x.csv"
        [method]
        names = ["aksc"]
        [aksc]
        n_neighbors = 5
        """) + aksc)
    return p, config


@pytest.mark.parametrize("aksc,match", [
    ("augment = {rotate = {count = -2}}\nimage_shape = [8, 8]\n", r"\[aksc\] augment: rotate count must be an integer"),
    ("augment = {zoom = {count = 2}}\nimage_shape = [8, 8]\n", r"\[aksc\] augment: unknown transform 'zoom'"),
    ("augment = {flip = true}\nimage_shape = [0, 8]\n", r"\[aksc\] image_shape: expected \[height, width\]"),
])
def test_config_errors_are_one_line_in_validate(tmp_path, aksc, match):
    from bigclust.pipeline import validate
    p, _ = _config(tmp_path, aksc)
    with pytest.raises(UserError, match=match) as e:
        validate(p)
    assert "\n" not in str(e.value)


def test_wrong_shape_is_one_line_in_validate(tmp_path):
    """A registered data set's shape is known before any work: optdigits' rows are 8 x 8 images."""
    from bigclust.pipeline import validate
    p = tmp_path / "c.toml"
    p.write_text('[data]\nname = "optdigits"\n[method]\nnames = ["aksc"]\n[aksc]\n'
                 'augment = {flip = true}\nimage_shape = [9, 9]\n')
    with pytest.raises(UserError, match=r"image_shape = \(9, 9\) takes 9 x 9 images \(81 pixels\), but the data "
                                        r"have 64 features") as e:
        validate(p)
    assert "\n" not in str(e.value)


def test_config_table_and_sweep_of_tables(tmp_path):
    p, config = _config(tmp_path, 'augment = ["none", {flip = true}, {shift = {count = 4, pixels = 1}}]\n'
                                  "image_shape = [8, 8]\norder = \"F\"\n")
    cfg = config.load(p)
    augs = [pt["aksc"]["augment"] for pt in cfg.points()]
    assert augs == ["none", {"flip": True}, {"shift": {"count": 4, "pixels": 1}}]
    # a preset name hashes as the same string; the new keys at their defaults are left out of the hash
    p2, _ = _config(tmp_path, 'augment = "mnist"\n')
    cfg = config.load(p2)
    assert cfg.sections["aksc"]["augment"] == "mnist" and cfg.sections["aksc"]["image_shape"] is None
    h2 = cfg.hash
    p3, _ = _config(tmp_path, 'augment = "mnist"\nimage_shape = [28, 28]\n')
    assert config.load(p3).hash != h2        # off its default, a new key counts


def test_load_digits_with_flips_rotations_shifts_is_at_least_as_accurate():
    from sklearn.datasets import load_digits

    from bigclust.metrics import accuracy
    X, y = load_digits(return_X_y=True)
    desc = {"flip": True, "rotate": {"count": 4, "max_degrees": 10}, "shift": {"count": 4, "pixels": 1}}
    plain = accuracy(y, SubspaceClustering(10, image_shape=(8, 8), random_state=0).fit(X).labels_)
    aug = accuracy(y, SubspaceClustering(10, augment=desc, image_shape=(8, 8), random_state=0).fit(X).labels_)
    assert aug >= plain        # measured: 0.869 against 0.813


def test_a_64x64_set_of_rotated_shapes_runs_config_and_estimator(tmp_path):
    from bigclust.metrics import accuracy
    yy, xx = np.mgrid[:64, :64] - 31.5
    shapes = [(np.abs(yy) < 14) & (np.abs(xx) < 14), yy ** 2 + xx ** 2 < 15 ** 2, (np.abs(xx) < 5) | (np.abs(yy) < 5)]
    X, y = [], []
    for c, s in enumerate(shapes):
        for a in np.linspace(0, 80, 12):
            X.append(ndimage.rotate(s.astype(float), a, reshape=False, order=1).ravel())
            y.append(c)
    X, y = np.asarray(X), np.asarray(y)
    m = SubspaceClustering(3, n_neighbors=5, augment={"rotate": {"count": 2, "max_degrees": 5}}, image_shape=(64, 64),
                           pca=20, random_state=0).fit(X)
    assert m.labels_.shape == (36,) and accuracy(y, m.labels_) > 0.6


def test_callable_through_the_estimator():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = X[:200]
    calls = []

    def mirror(images, rng):
        calls.append(images.shape)
        return images[:, None, :, ::-1]

    a = SubspaceClustering(10, augment=mirror, image_shape=(8, 8), random_state=0).fit(X).labels_
    b = SubspaceClustering(10, augment={"flip": True}, image_shape=(8, 8), random_state=0).fit(X).labels_
    assert calls == [(200, 8, 8)] and np.array_equal(a, b)
