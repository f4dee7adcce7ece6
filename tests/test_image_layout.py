"""``bigclust.subspace.image_layout``: which (height, width) and pixel order a flattened image row has.

The expected layouts are written out here, not read from the presets: COIL-20 (Deng Cai's COIL20.mat, a
MATLAB file) stores each 32 x 32 image column-major ("F"), MNIST's 28 x 28 images are row-major ("C").
The order decides what "left-right" means: the mirror of a column-major row read as row-major is the
upside-down image.  The real-data check confirms COIL-20's rows are column-major.
"""
import numpy as np
import pytest

from bigclust.subspace import augment, image_layout

CASES = [
    # (augment, image_shape, order) -> (image_shape, order)
    (("coil20", None, None), ((32, 32), "F")),
    (("coil20_rotscale", None, None), ((32, 32), "F")),
    (("coil20_flip", None, None), ((32, 32), "F")),
    (("mnist", None, None), ((28, 28), "C")),
    ((None, None, None), (None, "C")),                    # no augmentation, no layout: row-major default
    (("none", None, None), (None, "C")),
    (("interpolate", None, None), (None, "C")),
    ((None, (5, 7), "F"), ((5, 7), "F")),
    (("coil20", (16, 64), None), ((16, 64), "F")),        # the argument wins over the preset, field by field
    (("coil20", None, "C"), ((32, 32), "C")),
    (("mnist", (14, 56), "F"), ((14, 56), "F")),
    (({"image_shape": (4, 6), "order": "F"}, None, None), ((4, 6), "F")),
    (({"image_shape": (4, 6)}, None, None), ((4, 6), "C")),
    (({"image_shape": (4, 6), "order": "F"}, (6, 4), "C"), ((6, 4), "C")),
]


@pytest.mark.parametrize("args,expected", CASES, ids=[str(c[0]) for c in CASES])
def test_image_layout_table(args, expected):
    shape, order = image_layout(*args)
    assert (None if shape is None else tuple(shape), order) == expected


def _asymmetric_images(n, h, w, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, h, w)) + np.linspace(0, 1, h)[:, None] + 2 * np.linspace(0, 1, w)[None, :] ** 2


def test_coil20_mirror_is_left_right_in_column_major_rows():
    imgs = _asymmetric_images(3, 32, 32)
    X = np.stack([im.ravel(order="F") for im in imgs])   # COIL20.mat's layout
    X_aug, origin = augment(X, "coil20_flip")             # the mirror only: no random draw
    assert np.array_equal(origin, np.arange(3))
    mirror = np.stack([im[:, ::-1].ravel(order="F") for im in imgs])
    np.testing.assert_allclose(X_aug, mirror, atol=1e-12)
    # read row-major, the same "mirror" turns the images upside down
    wrong = np.stack([im[::-1, :].ravel(order="F") for im in imgs])
    X_c, _ = augment(X, "coil20_flip", order="C")
    np.testing.assert_allclose(X_c, wrong, atol=1e-12)
    assert np.abs(X_aug - X_c).max() > 0.1


def test_mnist_mirror_is_left_right_in_row_major_rows():
    imgs = _asymmetric_images(2, 28, 28, seed=1)
    X = np.stack([im.ravel() for im in imgs])
    X_aug, _ = augment(X, {**dict(zip(("image_shape", "order"), image_layout("mnist"))), "flip": True,
                           "n_rotations": 0, "n_scalings": 0})
    np.testing.assert_allclose(X_aug, np.stack([im[:, ::-1].ravel() for im in imgs]), atol=1e-12)


@pytest.mark.realdata
def test_coil20_rows_are_column_major(data_root):
    """Consecutive COIL-20 poses differ by 5 degrees of turntable rotation about the vertical axis: image
    content moves sideways, so the change between two poses correlates with the horizontal gradient more
    than with the vertical one -- in the column-major reading, and the other way round in the row-major one."""
    import scipy.io

    m = scipy.io.loadmat(data_root / "coil20" / "COIL20.mat")
    X, y = m["fea"].astype(np.float64), m["gnd"].ravel()
    assert X.shape == (1440, 1024)

    def mean_correlations(order):
        imgs = X.reshape(-1, 32, 32, order=order)
        same = np.flatnonzero(y[:-1] == y[1:])              # consecutive poses of one object
        A, B = imgs[same], imgs[same + 1]
        change, mid = B - A, (A + B) / 2
        out = []
        for axis in (2, 1):                                 # horizontal, vertical gradient
            g = np.gradient(mid, axis=axis)
            out.append(np.mean(np.abs((change * g).sum((1, 2)))
                               / np.sqrt((change ** 2).sum((1, 2)) * (g ** 2).sum((1, 2)))))
        return out

    shape, order = image_layout("coil20")
    assert tuple(shape) == (32, 32)
    horizontal, vertical = mean_correlations(order)
    assert horizontal > vertical + 0.05                     # 0.28 against 0.22
    h_c, v_c = mean_correlations("C")
    assert v_c > h_c + 0.05
