"""Augmentation (determinism, label preservation, chunking) and AkS-SC label propagation."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust._util.errors import DataError
from bigclust.algo.metrics import error_rate
from bigclust.subspace import (PRESETS, aks_sc, augment, augment_chunks, augment_images, interpolate,
                               propagate_labels)
from bigclust.subspace.semi import one_hot


def _images(n=6, h=9, w=7, seed=0, order="C"):
    rng = np.random.default_rng(seed)
    imgs = rng.random((n, h, w))
    return np.array([im.ravel(order=order) for im in imgs]), imgs


def test_deterministic_for_a_seed_and_seed_dependent():
    X, _ = _images()
    a1, o1 = augment_images(X, (9, 7), flip=True, n_rotations=3, n_scalings=2, random_state=5)
    a2, o2 = augment_images(X, (9, 7), flip=True, n_rotations=3, n_scalings=2, random_state=5)
    a3, _ = augment_images(X, (9, 7), flip=True, n_rotations=3, n_scalings=2, random_state=6)
    assert np.array_equal(a1, a2) and np.array_equal(o1, o2)
    assert not np.array_equal(a1, a3)
    assert a1.shape == (6 * 6, 63)
    assert np.array_equal(o1, np.repeat(np.arange(6), 6))


@pytest.mark.parametrize("order", ["C", "F"])
def test_flip_is_left_right_in_the_given_layout_and_twice_is_identity(order):
    X, imgs = _images(order=order)
    F1, o = augment_images(X, (9, 7), order=order, flip=True, n_rotations=0, n_scalings=0)
    assert np.array_equal(o, np.arange(6))
    for i in range(6):
        assert np.array_equal(F1[i].reshape((9, 7), order=order), imgs[i][:, ::-1])
    F2, _ = augment_images(F1, (9, 7), order=order, flip=True, n_rotations=0, n_scalings=0)
    assert np.array_equal(F2, X)


@pytest.mark.parametrize("order", ["C", "F"])
def test_rotation_by_90_degrees_is_rot90_and_origin_is_the_source(order):
    X, imgs = _images(h=8, w=8, order=order)
    R, o = augment_images(X, (8, 8), order=order, n_rotations=2, rotation_range=(90, 90), n_scalings=0)
    for a in range(R.shape[0]):
        assert np.allclose(R[a].reshape((8, 8), order=order), np.rot90(imgs[o[a]]), atol=1e-12)


def test_identity_transforms_return_the_source_and_zoom_keeps_the_centre():
    X, imgs = _images()
    A, o = augment_images(X, (9, 7), n_rotations=2, rotation_range=(0, 0), n_scalings=2, scale_range=(1, 1))
    assert np.allclose(A, X[o], atol=1e-12)
    # a zoom about the centre leaves a centred, symmetric bump centred and makes it wider
    yy, xx = np.mgrid[0:9, 0:9]
    bump = np.exp(-((yy - 4) ** 2 + (xx - 4) ** 2) / 4.0)
    Z, _ = augment_images(bump.ravel()[None], (9, 9), n_rotations=0, n_scalings=1, scale_range=(1.5, 1.5))
    z = Z[0].reshape(9, 9)
    assert np.unravel_index(np.argmax(z), z.shape) == (4, 4)
    assert np.allclose(z, z[::-1, ::-1]) and z.sum() > bump.sum()


def test_small_rotations_and_scalings_stay_closest_to_their_source():
    """Label preservation in the sense that matters here: each augmented image is nearer
    (cosine) to its own source than to any other original."""
    from scipy.ndimage import gaussian_filter
    rng = np.random.default_rng(3)
    X = np.array([gaussian_filter(rng.standard_normal((16, 16)), 2.5) for _ in range(12)]).reshape(12, -1)
    A, o = augment(X, dict(image_shape=(16, 16), n_rotations=4, n_scalings=4), random_state=0)
    Xu = X / np.linalg.norm(X, axis=1, keepdims=True)
    Au = A / np.linalg.norm(A, axis=1, keepdims=True)
    assert np.array_equal(np.argmax(Au @ Xu.T, axis=1), o)


@pytest.mark.parametrize("chunk_rows", [1, 4, 100])
def test_chunked_equals_in_memory(chunk_rows):
    X, _ = _images(n=9)
    opts = dict(flip=True, n_rotations=2, n_scalings=3, random_state=11)
    A, o = augment_images(X, (9, 7), **opts)
    parts = list(augment_chunks(X, (9, 7), chunk_rows=chunk_rows, **opts))
    assert [p[0] for p in parts] == list(range(0, A.shape[0], chunk_rows * 6))
    assert np.array_equal(np.vstack([p[1] for p in parts]), A)
    assert np.array_equal(np.concatenate([p[2] for p in parts]), o)


def test_presets_and_augmentation_errors():
    assert PRESETS["coil20"]["order"] == "F" and PRESETS["coil20"]["flip"]
    assert PRESETS["mnist"]["image_shape"] == (28, 28) and not PRESETS["mnist"]["flip"]
    X = np.zeros((3, 1024)) + 1.0
    A, o = augment(X, "coil20", random_state=0)
    assert A.shape == (33, 1024)
    for fn in (lambda: augment(X, "mnist"), lambda: augment_images(X, None),
               lambda: list(augment_chunks(X, (30, 30))), lambda: augment_images(X * np.nan, (32, 32))):
        with pytest.raises(DataError) as e:
            fn()
        assert "\n" not in str(e.value)


def test_flip_preset_is_the_mirror_image_only():
    # supplement Table 6's {flip} strategy: one copy per image, each row's 32x32 column-major image mirrored
    X = np.random.default_rng(1).random((4, 1024))
    A, o = augment(X, "coil20_flip", random_state=0)
    B, _ = augment(X, "coil20_flip", random_state=7)            # no random draw: the seed does not matter
    assert A.shape == (4, 1024) and np.array_equal(o, np.arange(4)) and np.array_equal(A, B)
    for i in range(4):
        img = X[i].reshape(32, 32, order="F")
        assert np.array_equal(A[i].reshape(32, 32, order="F"), img[:, ::-1])
    full, _ = augment(X, "coil20", random_state=0)             # the same flip is the first copy of "coil20"
    assert np.array_equal(full[::11], A)


def test_interpolation_is_convex_within_one_class():
    rng = np.random.default_rng(0)
    X = rng.random((20, 5))
    y = np.full(20, -1)
    y[[0, 1, 2]] = 0
    y[[5, 6]] = 1
    A, src, lab = interpolate(X, y, 4, n_mix=3, random_state=0)
    assert A.shape == (8, 5) and np.array_equal(lab, [0] * 4 + [1] * 4)
    for a in range(8):
        s = src[a][src[a] >= 0]
        assert np.all(y[s] == lab[a]) and len(set(s)) == s.size
        w = np.linalg.lstsq(X[s].T, A[a], rcond=None)[0]       # coefficients of the combination
        assert np.allclose(X[s].T @ w, A[a]) and np.all(w >= -1e-12) and abs(w.sum() - 1) < 1e-9
    assert np.all(src[4:, 2] == -1)                            # class 1 has only 2 labelled samples


def _random_graph(N=60, seed=0):
    rng = np.random.default_rng(seed)
    W = sp.random(N, N, density=0.1, random_state=seed)
    W = (W + W.T + sp.diags(np.ones(N - 1), 1) + sp.diags(np.ones(N - 1), -1)).tocsr()   # connected
    labelled = np.zeros(N, dtype=bool)
    labelled[rng.choice(N, 9, replace=False)] = True
    y = np.where(labelled, rng.integers(0, 3, N), -1)
    return W, labelled, y


def test_propagation_is_nonnegative_row_stochastic_and_solves_the_system():
    W, labelled, y = _random_graph()
    N = W.shape[0]
    Yhat = one_hot(y, N, 3)
    R = sp.csr_matrix((np.ones(10), (np.arange(10), np.arange(10, 20))), shape=(N, N))
    R = R + R.T
    F, info = propagate_labels(W, labelled, Yhat, R=R, gamma=0.5, mu1=100.0, mu2=10.0, return_info=True)
    # raw CG solution already (A.2): projection changes nothing measurable
    assert info["min_entry"] > -1e-10 and info["max_row_err"] < 1e-8
    assert np.all(F >= 0) and np.allclose(F.sum(axis=1), 1.0, atol=1e-12)
    def lap(A):                                   # diag(A1) - A, written out
        A = A.toarray()
        return np.diag(A.sum(axis=1)) - A

    M = 0.5 * lap(W) + 10.0 * lap(R) + np.diag(100.0 * labelled)
    ref = np.linalg.solve(M, 100.0 * labelled[:, None] * np.eye(3)[np.maximum(y, 0)])
    assert np.abs(F - ref).max() < 1e-8
    Fd, dinfo = propagate_labels(W, labelled, Yhat, R=R, gamma=0.5, mu1=100.0, mu2=10.0, solver="direct",
                                 return_info=True)
    assert np.abs(Fd - ref).max() < 1e-10 and dinfo["max_row_err"] < 1e-10


def test_propagation_recovers_two_weakly_linked_cliques():
    n = 10
    W = np.zeros((2 * n, 2 * n))
    W[:n, :n] = 1.0
    W[n:, n:] = 1.0
    np.fill_diagonal(W, 0.0)
    W[n - 1, n] = W[n, n - 1] = 0.01
    y = np.full(2 * n, -1)
    y[0], y[2 * n - 1] = 0, 1
    F = propagate_labels(sp.csr_matrix(W), y >= 0, one_hot(y, 2 * n, 2), gamma=1.0, mu1=100.0)
    assert np.array_equal(np.argmax(F, axis=1), [0] * n + [1] * n)


def test_unlabelled_component_gets_ridge_and_one_warning():
    W = sp.csr_matrix(np.kron(np.eye(2), np.ones((4, 4)) - np.eye(4)))
    y = np.array([0, -1, -1, -1, -1, -1, -1, -1])
    with pytest.warns(RuntimeWarning, match="no labelled sample") as rec:
        F, info = propagate_labels(W, y >= 0, one_hot(y, 8, 2), return_info=True)
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    assert np.allclose(F[:4], [1, 0], atol=1e-6) and np.allclose(F[4:], 0.5)
    assert info["n_unlabelled_components"] == 1


def test_aks_sc_recovers_subspaces_with_two_labels_per_class():
    from test_subspace import union_of_subspaces
    X, y = union_of_subspaces(n_sub=4, per=30, seed=2)
    yl = np.full(y.size, -1)
    for c in range(4):
        yl[np.flatnonzero(y == c)[:2]] = c
    Xa = np.repeat(X, 2, axis=0) * 1.0 + 0.0   # stand-in augmentation: exact copies (same subspace)
    origin = np.repeat(np.arange(y.size), 2)
    for reg in ("l1", "l2"):
        labels, info = aks_sc(X, yl, X_aug=Xa, origin=origin, regularizer=reg, n_neighbors=8, return_info=True)
        assert error_rate(y, labels) == 0.0
        assert np.array_equal(labels[yl >= 0], yl[yl >= 0])
        F = info["F"]
        assert F.shape == (3 * y.size, 4) and info["n_outer"] <= 10
        assert np.all(F >= 0) and np.allclose(F.sum(axis=1), 1.0)
        assert all(p["min_entry"] > -1e-10 and p["max_row_err"] < 1e-8 for p in info["propagation"])


def test_aks_sc_label_errors():
    X = np.random.default_rng(0).standard_normal((12, 5))
    y = np.array([0, 2] + [-1] * 10)
    for bad in (y, np.full(12, -1), y[:5], np.array([0, 1] + [-1] * 10, dtype=float)):
        with pytest.raises(DataError) as e:
            aks_sc(X, bad, n_neighbors=3)
        assert "\n" not in str(e.value)
    with pytest.raises(DataError, match="class 1 has no labelled sample"):
        aks_sc(X, y, n_neighbors=3)
