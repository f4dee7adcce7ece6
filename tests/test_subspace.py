"""kNN dictionaries, fold-back, end-to-end Ak-SC and input errors of bigclust.subspace."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust._util.errors import DataError, UserError
from bigclust.algo.metrics import error_rate
from bigclust.subspace import (affinity, augment_images, build_dictionary, fold_back, knn_dictionary,
                               self_expression, subspace_affinity, subspace_clustering)


def union_of_subspaces(n_sub=5, dim=3, ambient=30, per=40, seed=0):
    rng = np.random.default_rng(seed)
    X, y = [], []
    for c in range(n_sub):
        B = np.linalg.qr(rng.standard_normal((ambient, dim)))[0]
        X.append((B @ rng.standard_normal((dim, per))).T)
        y += [c] * per
    return np.vstack(X), np.array(y)


def _aug_dict(n=50, d=12, m=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    Xa = np.repeat(X, m, axis=0) + 0.2 * rng.standard_normal((n * m, d))
    origin = np.repeat(np.arange(n), m)
    return X, build_dictionary(X, Xa, origin), origin


def _owned(D, i):
    return {i} | set(D.aug_idx[D.aug_ptr[i]:D.aug_ptr[i + 1]].tolist())


def test_dictionary_unit_rows_and_ownership():
    X, D, origin = _aug_dict()
    assert np.allclose(np.linalg.norm(D.atoms, axis=1), 1.0)
    assert D.n_atoms == X.shape[0] * 4
    for a in (0, 7, D.n + 5, D.n_atoms - 1):
        owner = a if a < D.n else origin[a - D.n]
        assert D.own_idx[D.own_ptr[a]:D.own_ptr[a + 1]].tolist() == [owner]
    assert _owned(D, 3) == {3, D.n + 9, D.n + 10, D.n + 11}


def test_exact_knn_excludes_self_and_own_augmentations_and_matches_brute_force():
    X, D, origin = _aug_dict()
    k = 8
    nb = knn_dictionary(D, k, method="exact", block_bytes=8 * D.n_atoms * 7)   # blocks of 7 rows
    S = D.atoms[:D.n] @ D.atoms.T
    for i in range(D.n):
        assert not (set(nb[i].tolist()) & _owned(D, i))
        s = S[i].copy()
        s[list(_owned(D, i))] = -np.inf
        ref = np.argsort(-s, kind="stable")[:k]
        assert set(nb[i].tolist()) == set(ref.tolist())
        assert np.all(np.diff(S[i, nb[i]]) <= 1e-15)     # most similar first


def test_cannot_links_exclude_atoms_of_other_labelled_classes():
    X, D, origin = _aug_dict(n=40, m=2, seed=2)
    y = np.full(40, -1)
    y[:10] = np.arange(10) % 2
    nb = knn_dictionary(D, 5, y=y)
    owner = np.concatenate([np.arange(D.n), origin])
    atom_y = y[owner]
    for i in range(10):
        got = atom_y[nb[i]]
        assert not np.any((got >= 0) & (got != y[i]))
    # unlabelled samples are not restricted
    nb_u = knn_dictionary(D, 5)
    assert np.array_equal(nb[10:], nb_u[10:])


def test_k_too_large_is_a_one_line_user_error():
    X, D, _ = _aug_dict(n=10, m=3)
    knn_dictionary(D, D.n_atoms - 4)              # 40 atoms - itself - 3 augmentations = 36
    with pytest.raises(UserError) as e:
        knn_dictionary(D, D.n_atoms - 3)
    assert "\n" not in str(e.value) and "n_neighbors" in str(e.value)


def test_fold_back_sums_owned_atoms_and_has_zero_diagonal():
    X, D, origin = _aug_dict(n=20, m=3, seed=3)
    rng = np.random.default_rng(0)
    C = sp.random(D.n_atoms, D.n, density=0.3, random_state=1, format="csc")
    C.data = rng.standard_normal(C.data.size)
    Cbar = fold_back(C, D).toarray()
    Cd = C.toarray()
    owner = np.concatenate([np.arange(D.n), origin])
    ref = np.zeros((D.n, D.n))
    for a in range(D.n_atoms):
        ref[owner[a]] += np.abs(Cd[a])
    np.fill_diagonal(ref, 0.0)
    assert np.allclose(Cbar, ref)
    W = affinity(Cbar)
    assert np.allclose(W.toarray(), ref + ref.T)
    assert np.all(W.diagonal() == 0) and (W != W.T).nnz == 0


@pytest.mark.parametrize("reg", ["l1", "l2"])
def test_zero_self_coefficients_after_fold_back(reg):
    X, D, _ = _aug_dict(n=40, m=2, seed=4)
    nb = knn_dictionary(D, 6)
    C = self_expression(None, D, nb, reg)
    Cbar = fold_back(C, D)
    assert Cbar.diagonal().max() == 0
    # none of the folded mass came from i's own atoms: C is zero on them
    for i in range(D.n):
        assert np.all(C[sorted(_owned(D, i)), i].toarray() == 0)


def test_knn_ssc_recovers_union_of_subspaces():
    X, y = union_of_subspaces()
    with pytest.warns(RuntimeWarning, match="connected components"):     # one per subspace: ideal
        labels, W = subspace_clustering(X, 5, regularizer="l1", n_neighbors=10, n_init=10, random_state=0)
    assert error_rate(y, labels) == 0.0
    # subspace preserving: no weight across subspaces
    Wc = W.tocoo()
    assert np.all(y[Wc.row] == y[Wc.col])


def test_ak_ssc_on_images_runs_and_keeps_structure():
    """Two families of smooth 12x12 images; augmentation enlarges the dictionary 1 + 3 times."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:12, 0:12] / 11.0
    imgs, y = [], []
    for t in range(30):
        ph = rng.uniform(0, 2 * np.pi)
        imgs.append(np.sin(6 * xx + ph) * np.exp(-((yy - .5) ** 2) * 4))
        imgs.append(np.sin(6 * yy + ph) * np.exp(-((xx - .5) ** 2) * 4))
        y += [0, 1]
    X = np.array([im.ravel() for im in imgs]) + 0.01
    y = np.array(y)
    W, info = subspace_affinity(X, n_neighbors=8, augment=dict(image_shape=(12, 12), n_rotations=2, n_scalings=1),
                                random_state=0, return_info=True)
    assert info["dictionary"].n_atoms == 60 * 4
    assert W.shape == (60, 60) and W.diagonal().max() == 0
    Wc = W.tocoo()
    assert Wc.data[y[Wc.row] == y[Wc.col]].sum() > 0.9 * Wc.data.sum()


def test_bad_inputs_raise_one_line_errors():
    X = np.random.default_rng(0).standard_normal((10, 16))
    cases = [
        (DataError, lambda: augment_images(X, None)),
        (DataError, lambda: augment_images(X, (3, 5))),
        (DataError, lambda: subspace_affinity(X, augment="mnist")),            # 784 != 16 features
        (DataError, lambda: build_dictionary(np.vstack([X[:3], np.zeros((1, 16))]))),
        (DataError, lambda: build_dictionary(np.where(X > 2, np.nan, X))),
        (DataError, lambda: build_dictionary(X, X[:4], [0, 1, 2, 99])),
        (UserError, lambda: self_expression(None, build_dictionary(X), np.zeros((10, 2), int), "l0")),
        (DataError, lambda: self_expression(None, build_dictionary(X), np.zeros((9, 2), int))),
    ]
    for exc, fn in cases:
        with pytest.raises(exc) as e:
            fn()
        assert "\n" not in str(e.value)


def test_full_dictionary_baseline_without_augmentation():
    X, y = union_of_subspaces(n_sub=3, per=25, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for reg in ("l1", "l2", "nuclear"):
            labels, W = subspace_clustering(X, 3, regularizer=reg, n_neighbors=None, n_init=5, random_state=0)
            assert error_rate(y, labels) == 0.0, reg
            assert W.diagonal().max() == 0


def test_interpolated_atoms_have_several_owners_labels_and_fold_to_each_source():
    from bigclust.subspace.dictionary import atom_labels
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4, 6))
    Xa = rng.standard_normal((3, 6))
    D = build_dictionary(X, Xa, np.array([[0, 1], [0, 2], [3, -1]]))
    assert atom_labels(D, np.array([0, 0, 1, -1])).tolist() == [0, 0, 1, -1, 0, -1, -1]
    assert _owned(D, 0) == {0, 4, 5} and _owned(D, 3) == {3, 6}
    C = sp.csc_matrix(([2.0, -3.0], ([4, 5], [3, 3])), shape=(7, 4))
    Cbar = fold_back(C, D).toarray()
    assert Cbar[:, 3].tolist() == [5.0, 2.0, 3.0, 0.0]
