"""Tests of bigclust.algo.kmeans against a plain NumPy Lloyd and on separable blobs."""
import warnings

import numba
import numpy as np
import pytest
from sklearn.datasets import make_blobs

from bigclust._util.errors import DataError, UserError
from bigclust.algo.kmeans import KMeansResult, assign, init_centers, kmeans, minibatch_kmeans
from bigclust.algo.metrics import accuracy


def reference_lloyd(X, C, max_iter, tol=0.0):
    """Lloyd's algorithm in NumPy with the same stopping and empty-cluster rules.

    Returns (labels, inertia, n_iter, centres, n_empty).
    """
    X = np.asarray(X, dtype=np.float64)
    C = np.array(C, dtype=np.float64)
    n, k = X.shape[0], C.shape[0]
    labels = np.full(n, -1)
    n_empty = 0
    converged = False
    for it in range(1, max_iter + 1):
        D = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
        new = D.argmin(axis=1)
        d2 = D[np.arange(n), new]
        inertia = d2.sum()
        if np.array_equal(new, labels):
            converged = True
            break
        labels = new.copy()
        counts = np.bincount(labels, minlength=k)
        for j in range(k):
            if counts[j] == 0:  # farthest point among clusters that can spare one
                eligible = np.flatnonzero(counts[labels] > 1)
                far = eligible[np.argmax(d2[eligible])]
                counts[labels[far]] -= 1
                labels[far], counts[j], d2[far] = j, 1, 0.0
                n_empty += 1
        new_C = np.array([X[labels == j].mean(axis=0) for j in range(k)])
        shift = ((new_C - C) ** 2).sum()
        C = new_C
        if shift <= tol:
            break
    if not converged:
        D = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
        labels = D.argmin(axis=1)
        inertia = D[np.arange(n), labels].sum()
    return labels, inertia, it, C, n_empty


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=600, n_features=4, centers=5, cluster_std=0.6, random_state=1)
    return X, y


@pytest.fixture(scope="module")
def overlapping():
    # Overlapping blobs: many iterations, so the comparison exercises real updates.
    X, _ = make_blobs(n_samples=500, n_features=3, centers=6, cluster_std=2.5, random_state=2)
    return X


@pytest.mark.parametrize("method", ["k-means++", "random"])
def test_lloyd_matches_numpy_reference(overlapping, method):
    X = overlapping
    C0 = init_centers(X, 6, np.arange(5), method)
    res = kmeans(X, 6, n_init=5, init=C0, max_iter=300)
    assert isinstance(res, KMeansResult)
    assert res.labels.shape == (5, len(X)) and res.labels.dtype == np.int32
    assert res.n_iter.dtype == np.int32 and res.inertia.dtype == np.float64
    for r in range(5):
        lab, inertia, n_iter, C, n_empty = reference_lloyd(X, C0[r], 300)
        np.testing.assert_array_equal(res.labels[r], lab)
        np.testing.assert_allclose(res.inertia[r], inertia, rtol=1e-10)
        assert res.n_iter[r] == n_iter
        if r == res.best:
            np.testing.assert_allclose(res.centers, C, rtol=1e-10, atol=1e-12)
    assert res.best == int(np.argmin(res.inertia))
    assert res.n_iter.max() > 3  # the case is not trivial


def test_max_iter_and_tol_stop_with_consistent_labels(overlapping):
    X = overlapping.astype(np.float32)
    C0 = init_centers(X, 6, [3, 4], "random")
    for kw in ({"max_iter": 2}, {"max_iter": 300, "tol": 1e-2}):
        res = kmeans(X, 6, n_init=2, init=C0, **kw)
        for r in range(2):
            lab, inertia, n_iter, _, _ = reference_lloyd(X, C0[r], kw["max_iter"], kw.get("tol", 0.0))
            np.testing.assert_array_equal(res.labels[r], lab)
            np.testing.assert_allclose(res.inertia[r], inertia, rtol=1e-10)
            assert res.n_iter[r] == n_iter
        lab, d2 = assign(X, res.centers)
        np.testing.assert_array_equal(lab, res.labels[res.best])
        np.testing.assert_allclose(d2.sum(), res.inertia[res.best], rtol=1e-10)


def test_bounded_passes_match_full_reference():
    # Hamerly's bounds skip most points after a few passes; whatever they skip, labels, pass counts and
    # re-seeds must be the full pass's: many clusters in few blobs, random starts (later empty clusters)
    rng = np.random.default_rng(0)
    reseeded = skipped_runs = 0
    for s in range(30):
        n, d, k = int(rng.integers(60, 400)), int(rng.integers(1, 4)), int(rng.integers(2, 13))
        X = np.round(rng.standard_normal((n, d)) * rng.uniform(0.5, 3.0), 1)  # repeated rows: empty clusters
        X[: n // 3] += 8.0
        C0 = init_centers(X, k, [s, s + 100], "random" if s % 2 else "k-means++")
        max_iter = int(rng.integers(2, 200))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = kmeans(X, k, n_init=2, init=C0, max_iter=max_iter)
        for r in range(2):
            lab, inertia, n_iter, C, n_empty = reference_lloyd(X, C0[r], max_iter)
            np.testing.assert_array_equal(res.labels[r], lab)
            np.testing.assert_allclose(res.inertia[r], inertia, rtol=1e-10)
            assert res.n_iter[r] == n_iter
            reseeded += n_empty
            skipped_runs += n_iter > 4
        assert res.n_empty_reseeded == sum(reference_lloyd(X, C0[r], max_iter)[4] for r in range(2))
    assert reseeded > 0 and skipped_runs > 10  # the cases exercise re-seeding and long runs


def test_kmeanspp_distinct_centres_from_data(overlapping):
    X = overlapping
    C = init_centers(X, 6, np.arange(20))
    assert C.shape == (20, 6, 3)
    for Cr in C:
        rows = [np.flatnonzero((X == c).all(axis=1)) for c in Cr]
        assert all(len(ix) == 1 for ix in rows)
        assert len({int(ix[0]) for ix in rows}) == 6
    np.testing.assert_array_equal(init_centers(X, 6, 7), C[7])  # scalar seed = one row
    assert not np.array_equal(C[0], C[1])


def test_kmeanspp_samples_proportionally_to_squared_distance():
    # Points 0, 1, 3 on a line, first centre uniform.  D^2 weights of the
    # others: from 0 -> (1, 9), from 1 -> (1, 4), from 3 -> (9, 4); so
    # P({0, 3}) = (9/10 + 9/13) / 3 and P({0, 1}) = (1/10 + 1/5) / 3.
    X = np.array([[0.0], [1.0], [3.0]])
    C = init_centers(X, 2, np.arange(6000))
    pairs = np.sort(C[:, :, 0], axis=1)
    p03 = np.mean((pairs == [0, 3]).all(axis=1))
    p01 = np.mean((pairs == [0, 1]).all(axis=1))
    # 6000 draws: standard errors ~0.0065 and ~0.004
    assert p03 == pytest.approx((9 / 10 + 9 / 13) / 3, abs=0.025)
    assert p01 == pytest.approx((1 / 10 + 1 / 5) / 3, abs=0.02)


def test_random_init_distinct_rows(overlapping):
    C = init_centers(overlapping[:8], 8, np.arange(5), "random")  # k = n: a permutation
    for Cr in C:
        assert len({tuple(c) for c in Cr}) == 8


def test_empty_cluster_is_reseeded(blobs):
    X, _ = blobs
    C0 = init_centers(X, 5, [0])
    C0[0, 4] = 1e6  # a centre far from every point: empty after the first assignment
    with pytest.warns(RuntimeWarning, match="empty"):
        res = kmeans(X, 5, n_init=1, init=C0)
    assert res.n_empty_reseeded >= 1
    assert (np.bincount(res.labels[0], minlength=5) > 0).all()
    lab, inertia, _, _, n_empty = reference_lloyd(X, C0[0], 1000)
    np.testing.assert_array_equal(res.labels[0], lab)
    np.testing.assert_allclose(res.inertia[0], inertia, rtol=1e-10)
    assert res.n_empty_reseeded == n_empty


def test_duplicate_points():
    X = np.repeat(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-0.0, 0.0]]), 10, axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = kmeans(X, 3, n_init=5, init="random", random_state=0)
    for lab in res.labels:  # three distinct points (0.0 == -0.0), three clusters: one each
        assert sorted(np.bincount(lab, minlength=3)) == [10, 10, 20]
    with pytest.raises(DataError, match="only 3 distinct rows"):
        kmeans(X, 4)


def test_same_seed_same_labels_whatever_the_threads(overlapping):
    X = overlapping
    a = kmeans(X, 6, n_init=8, random_state=42)
    b = kmeans(X, 6, n_init=8, random_state=42)
    np.testing.assert_array_equal(a.labels, b.labels)
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        c = kmeans(X, 6, n_init=8, random_state=42)
    finally:
        numba.set_num_threads(old)
    np.testing.assert_array_equal(a.labels, c.labels)
    np.testing.assert_array_equal(a.inertia, c.inertia)
    d = kmeans(X, 6, n_init=8, random_state=43)
    assert not np.array_equal(a.labels, d.labels)


def test_blobs_accuracy_one(blobs):
    X, y = blobs
    res = kmeans(X, 5, n_init=10, random_state=0)
    assert accuracy(y, res.labels[res.best]) == 1.0
    assert res.centers.shape == (5, 4)


def test_assign_matches_brute_force(overlapping):
    X = overlapping
    C = X[[0, 10, 20, 30]] + 0.1
    lab, d2 = assign(X, C)
    D = ((X[:, None] - C[None]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(lab, D.argmin(axis=1))
    np.testing.assert_allclose(d2, D.min(axis=1), rtol=1e-12)
    assert lab.dtype == np.int32


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"n_clusters": 1}, UserError, "n_clusters=1 must be between 2 and n=20"),
        ({"n_clusters": 21}, UserError, "between 2 and n=20"),
        ({"n_clusters": 3, "n_init": 0}, UserError, "n_init"),
        ({"n_clusters": 3, "max_iter": 0}, UserError, "max_iter"),
        ({"n_clusters": 3, "init": "kmeans"}, UserError, "init"),
        ({"n_clusters": 3, "init": np.zeros((2, 3, 2))}, UserError, "n_init"),
        ({"n_clusters": 3, "init": np.zeros((3, 5)), "n_init": 1}, UserError, "shape"),
        ({"n_clusters": 3, "tol": -1.0}, UserError, "tol"),
    ],
)
def test_validation(kwargs, error, match):
    X = np.random.default_rng(0).normal(size=(20, 2))
    k = kwargs.pop("n_clusters")
    with pytest.raises(error, match=match):
        kmeans(X, k, **kwargs)


def test_non_finite_data():
    X = np.random.default_rng(0).normal(size=(20, 2))
    X[7, 1] = np.nan
    with pytest.raises(DataError, match="row 7"):
        kmeans(X, 3)
    with pytest.raises(DataError, match="row 7"):
        minibatch_kmeans(X, 3, batch_size=50)


@pytest.mark.parametrize("read_whole", [True, False])
def test_minibatch_blobs_and_chunk_invariance(read_whole, monkeypatch):
    import dask.array as da

    import bigclust.algo.kmeans.minibatch as km

    # both paths for a Dask X: read once (small X) and batch by batch from the chunks (large X)
    monkeypatch.setattr(km, "_READ_WHOLE_BYTES", 2**40 if read_whole else 0)

    X, y = make_blobs(n_samples=3000, n_features=5, centers=6, cluster_std=0.8, random_state=5)
    kw = dict(n_init=3, batch_size=256, max_iter=60, random_state=7)
    ref = minibatch_kmeans(X, 6, **kw)
    assert ref.labels.shape == (3, 3000)
    assert accuracy(y, ref.labels[ref.best]) >= 0.99
    for chunks in (100, 1000):
        got = minibatch_kmeans(da.from_array(X, chunks=(chunks, 5)), 6, **kw)
        np.testing.assert_array_equal(got.labels, ref.labels)
        np.testing.assert_array_equal(got.inertia, ref.inertia)
        np.testing.assert_array_equal(got.n_iter, ref.n_iter)
    # the labels are the nearest-centre labels of the returned centres
    lab, d2 = assign(X, ref.centers)
    np.testing.assert_array_equal(lab, ref.labels[ref.best])
    np.testing.assert_allclose(d2.sum(), ref.inertia[ref.best], rtol=1e-12)


def test_minibatch_explicit_init_and_validation():
    X, y = make_blobs(n_samples=800, n_features=2, centers=3, cluster_std=0.3, random_state=0)
    C0 = np.array([X[y == c][0] for c in range(3)])
    res = minibatch_kmeans(X, 3, n_init=1, init=C0, batch_size=100, random_state=0)
    assert accuracy(y, res.labels[0]) == 1.0
    with pytest.raises(UserError, match="reassign_tol"):
        minibatch_kmeans(X, 3, reassign_tol=1.5)
    with pytest.raises(UserError, match="batch_size"):
        minibatch_kmeans(X, 3, batch_size=0)
    with pytest.raises(UserError, match="between 2 and n=800"):
        minibatch_kmeans(X, 900)


def test_minibatch_reassigns_starved_centre():
    X, _ = make_blobs(n_samples=2000, n_features=2, centers=4, cluster_std=0.5, random_state=3)
    C0 = init_centers(X, 4, [1])
    C0[0, 3] = [1e4, 1e4]  # never the nearest centre of any point
    with pytest.warns(RuntimeWarning, match="starved"):
        res = minibatch_kmeans(X, 4, n_init=1, init=C0, batch_size=200, max_iter=30,
                               max_no_improvement=None, random_state=0)
    assert res.n_empty_reseeded >= 1
    assert (np.bincount(res.labels[0], minlength=4) > 0).all()


# -- sparse (CSR) input -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs():
    """tf-idf-like data: non-negative, ~10% dense rows, three groups of topics, a few empty rows."""
    import scipy.sparse as sp

    rng = np.random.default_rng(7)
    n, d = 300, 80
    y = rng.integers(0, 3, n)
    dense = rng.random((n, d)) * (rng.random((n, d)) < 0.08)
    for c in range(3):  # each class favours its own block of terms
        rows = y == c
        dense[np.ix_(rows, np.arange(c * 20, c * 20 + 20))] += rng.random((rows.sum(), 20)) * (
            rng.random((rows.sum(), 20)) < 0.4)
    dense[[5, 77]] = 0.0
    dense /= np.maximum(np.linalg.norm(dense, axis=1, keepdims=True), 1e-300)
    return sp.csr_matrix(dense), y


def test_sparse_lloyd_matches_reference(docs):
    Xs, _ = docs
    X = Xs.toarray()
    C0 = X[[0, 1, 2, 3]] + 0.01
    ref_labels, ref_inertia, ref_iter, ref_C, ref_empty = reference_lloyd(X, C0, 100)
    res = kmeans(Xs, 4, n_init=1, init=C0, max_iter=100)
    np.testing.assert_array_equal(res.labels[0], ref_labels)
    np.testing.assert_allclose(res.inertia[0], ref_inertia, rtol=1e-10)
    np.testing.assert_allclose(res.centers, ref_C, rtol=1e-12, atol=1e-14)
    assert res.n_iter[0] == ref_iter and res.n_empty_reseeded == ref_empty


def test_sparse_empty_cluster_is_reseeded_like_reference(docs):
    Xs, _ = docs
    X = Xs.toarray()
    C0 = np.vstack([X[[10, 20]], np.full((1, X.shape[1]), 50.0)])  # the third centre attracts nobody
    ref_labels, ref_inertia, ref_iter, ref_C, ref_empty = reference_lloyd(X, C0, 100)
    assert ref_empty >= 1
    with pytest.warns(RuntimeWarning, match="re-seeded"):
        res = kmeans(Xs, 3, n_init=1, init=C0, max_iter=100)
    np.testing.assert_array_equal(res.labels[0], ref_labels)
    np.testing.assert_allclose(res.inertia[0], ref_inertia, rtol=1e-10)
    assert res.n_empty_reseeded == ref_empty


def test_sparse_equals_dense_for_the_same_seed(docs):
    # the same draws from the same per-restart streams: identical initial centres and labels
    Xs, y = docs
    sparse = kmeans(Xs, 3, n_init=8, random_state=3)
    dense = kmeans(Xs.toarray(), 3, n_init=8, random_state=3)
    np.testing.assert_array_equal(sparse.labels, dense.labels)
    np.testing.assert_allclose(sparse.inertia, dense.inertia, rtol=1e-10)
    assert accuracy(y, sparse.labels[sparse.best]) > 0.9
    np.testing.assert_array_equal(init_centers(Xs.toarray(), 3, [1, 2]), _csr_init(Xs, 3, [1, 2]))


def _csr_init(Xs, k, seeds):
    from bigclust.algo.kmeans import _numba_csr as kmeans_numba
    from bigclust.algo.kmeans._common import _as_csr64, _row_sqnorms

    X = _as_csr64(Xs)
    out = np.empty((len(seeds), k, X.shape[1]))
    kmeans_numba.init_centers_csr_kernel(X.data, X.indices, X.indptr, _row_sqnorms(X), k,
                                         np.asarray(seeds, dtype=np.uint64), 0, out)
    return out


def test_sparse_bad_input(docs):
    import scipy.sparse as sp

    Xs, _ = docs
    bad = Xs.copy()
    bad.data[5] = np.nan
    with pytest.raises(DataError, match="non-finite"):
        kmeans(bad, 3, n_init=1)
    few = sp.csr_matrix(np.repeat(Xs[:2].toarray(), 10, axis=0))
    with pytest.raises(DataError, match="only 2 distinct rows"):
        kmeans(few, 3, n_init=1)


def test_minibatch_sparse_equals_dense(monkeypatch):
    # CSR rows are densified batch by batch: same draws, same steps, same result as the dense array
    import scipy.sparse as sp

    import bigclust.algo.kmeans.minibatch as km

    X, y = make_blobs(n_samples=1200, n_features=40, centers=4, cluster_std=1.0, random_state=3)
    X = np.abs(X)
    X[X < 3.0] = 0.0  # about half the entries zero, like tf-idf rows
    assert 0.2 < (X == 0).mean() < 0.8
    kw = dict(n_init=3, batch_size=128, max_iter=40, random_state=11)
    ref = minibatch_kmeans(X, 4, **kw)
    monkeypatch.setattr(km, "_FINAL_PASS_ROWS", 50)  # 50 * 64 / 40 = 80-row blocks in the final pass
    got = minibatch_kmeans(sp.csr_matrix(X), 4, **kw)
    np.testing.assert_array_equal(got.labels, ref.labels)
    np.testing.assert_array_equal(got.inertia, ref.inertia)
    np.testing.assert_array_equal(got.centers, ref.centers)
    assert accuracy(y, got.labels[got.best]) >= 0.9
    Xn = sp.csr_matrix(X)
    Xn.data[5] = np.nan
    with pytest.raises(DataError, match="non-finite"):
        minibatch_kmeans(Xn, 4, **kw)
