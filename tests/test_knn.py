"""Exact blocked kNN against a brute-force NumPy reference; approximate libraries; the knn config key."""
import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.algo.affinity import knn_graph, knn_kernel
from bigclust._util.errors import ConfigError, UserError
from bigclust.algo.knn import (APPROX_DEFAULT, AUTO_APPROX, EXACT_WORK_LIMIT, check_method, knn_approx, knn_exact, knn_search,
                          recall, resolve_method)


def brute(Q, B, k, self_search):
    """Plain NumPy: float64 squared distances, self masked out, sorted by (distance, index)."""
    Q, B = np.asarray(Q, np.float64), np.asarray(B, np.float64)
    D = ((Q[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    if self_search:
        np.fill_diagonal(D, np.inf)
    idx = np.broadcast_to(np.arange(B.shape[0]), D.shape)
    order = np.lexsort((idx, D), axis=1)[:, :k]
    return order, np.take_along_axis(D, order, 1)


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(0).normal(size=(301, 13))


@pytest.mark.parametrize("rb, cb", [(2048, 2048), (64, 64), (50, 128), (7, 300), (301, 1), (1, 1)])
def test_exact_equals_bruteforce_for_any_block(X, rb, cb):
    ref_i, ref_d = brute(X, X, 9, True)
    ind, d2 = knn_exact(X, 9, row_block=rb, col_block=cb)
    assert ind.dtype == np.int64 and d2.dtype == np.float64 and ind.shape == (301, 9)
    np.testing.assert_array_equal(ind, ref_i)
    np.testing.assert_allclose(d2, ref_d, rtol=1e-12, atol=1e-12)
    assert not np.any(ind == np.arange(301)[:, None])          # self excluded


@pytest.mark.parametrize("rb, cb", [(2048, 2048), (16, 33), (100, 7)])
def test_exact_queries_against_another_base(X, rb, cb):
    Q = np.random.default_rng(1).normal(size=(45, 13)).astype(np.float32)
    ref_i, ref_d = brute(Q, X, 6, False)
    ind, d2 = knn_exact(X, 6, Q, row_block=rb, col_block=cb)
    np.testing.assert_array_equal(ind, ref_i)
    np.testing.assert_allclose(d2, ref_d, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rb", [3, 10, 64])
def test_ties_break_toward_the_smaller_index(rb):
    # integer grid: every distance exact in float32, many exact ties (and duplicates at distance 0)
    g = np.array([(a, b) for a in range(6) for b in range(6)], dtype=np.float32)
    Xg = np.vstack([g, g[::7]])                                   # rows 36.. duplicate 0, 7, 14, ...
    ref_i, ref_d = brute(Xg, Xg, 8, True)
    ind, d2 = knn_exact(Xg, 8, row_block=rb, col_block=rb + 1)
    np.testing.assert_array_equal(ind, ref_i)
    np.testing.assert_array_equal(d2, ref_d)
    assert ind[0, 0] == 36 and d2[0, 0] == 0.0                   # a duplicate is a neighbour, self is not


def test_exact_sparse_input_and_bounds(X):
    ind, _ = knn_exact(sp.csr_matrix(X), 4)
    np.testing.assert_array_equal(ind, brute(X, X, 4, True)[0])
    for k in (0, 301):
        with pytest.raises(UserError, match="k="):
            knn_exact(X, k)


@pytest.mark.parametrize("lib", ["pynndescent", "hnswlib", "faiss"])
def test_approximate_libraries_exclude_self_and_find_the_neighbours(lib):
    # hnswlib and faiss-cpu are in the test extra: a missing one is a reported skip, never a silent omission
    pytest.importorskip(lib, reason=f"{lib} is not installed (pip install 'bigclust[test]' installs it)")
    rng = np.random.default_rng(2)
    Xa = rng.normal(size=(1500, 10)).astype(np.float32)
    ref, ref_d = knn_exact(Xa, 10)
    ind, d2 = knn_approx(Xa, 10, lib, n_jobs=1)
    assert ind.shape == (1500, 10) and not np.any(ind == np.arange(1500)[:, None])
    assert recall(ind, ref) > 0.95
    assert np.all(np.diff(d2, axis=1) >= 0)
    hit = ind == ref                                              # same neighbour: same squared distance
    np.testing.assert_allclose(d2[hit], ref_d[hit], rtol=1e-4)


def test_the_subspace_dictionary_s_pynndescent_search_excludes_self_and_own_copies():
    # here, beside the test above: pynndescent compiles its parallel kernels in every process (~50 s, not
    # cached), and tests next to each other run in the same pytest-xdist worker
    pytest.importorskip("pynndescent", reason="pynndescent is a dependency of bigclust")
    from bigclust.subspace import build_dictionary, knn_dictionary
    rng = np.random.default_rng(1)
    n, d, m, k = 120, 10, 4, 10
    X = rng.standard_normal((n, d))
    D = build_dictionary(X, np.repeat(X, m, axis=0) + 0.2 * rng.standard_normal((n * m, d)), np.repeat(np.arange(n), m))
    nb = knn_dictionary(D, k, method="pynndescent", random_state=0)
    ex = knn_dictionary(D, k, method="exact")
    for i in range(D.n):
        owned = {i} | set(D.aug_idx[D.aug_ptr[i]:D.aug_ptr[i + 1]].tolist())   # the sample and its own copies
        assert len(set(nb[i].tolist())) == k and not (set(nb[i].tolist()) & owned)
    assert np.mean([len(set(a) & set(b)) / k for a, b in zip(nb.tolist(), ex.tolist())]) > 0.9


def test_recall_counts_shared_neighbours():
    assert recall(np.array([[1, 2, 3], [4, 5, 6]]), np.array([[3, 2, 9], [7, 8, 9]])) == pytest.approx(2 / 6)


def test_method_names_and_auto():
    for bad in ("brute", "", None):
        with pytest.raises(UserError, match="unknown knn method") as e:
            check_method(bad)
        assert "\n" not in str(e.value)
    assert resolve_method("auto", 1000, 50) == "exact"
    n_big = int(np.sqrt(EXACT_WORK_LIMIT / 784)) + 1000
    assert resolve_method("auto", n_big, 784) == AUTO_APPROX
    assert resolve_method("approx", 10, 2) == APPROX_DEFAULT
    assert resolve_method("pynndescent", 10, 2) == "pynndescent"
    with pytest.raises(UserError, match="unknown knn method"):
        knn_search(np.zeros((10, 2)), 3, "kd-tree")


def _legacy_knn_kernel(X, k, gamma):
    """Today's exact path written out: scikit-learn's NearestNeighbors (self first), symmetrised by max."""
    from sklearn.neighbors import NearestNeighbors

    dist, ind = NearestNeighbors(n_neighbors=k).fit(X).kneighbors(X)
    n = len(X)
    W = sp.csr_matrix((np.exp(-dist.ravel() ** 2 / gamma), (np.repeat(np.arange(n), k), ind.ravel())), shape=(n, n))
    return W.maximum(W.T).tocsr()


def test_knn_kernel_exact_equals_todays_exact_path(X):
    K = knn_kernel(X, 7, 3.0, method="exact")
    ref = _legacy_knn_kernel(X, 7, 3.0)
    assert (K != 0).toarray().tolist() == (ref != 0).toarray().tolist()
    np.testing.assert_allclose(K.toarray(), ref.toarray(), rtol=1e-12, atol=0)
    ind, dist = knn_graph(X, 7, method="exact")
    assert np.all(ind[:, 0] == np.arange(len(X))) and np.all(dist[:, 0] == 0)


def test_config_knn_key_is_validated():
    from bigclust.pipeline.config import from_dict

    base = {"data": {"name": "optdigits"}, "store": {"path": "s.zarr"}, "output": {"dir": "o"}}
    assert from_dict(base, "x.toml").sections["affinity"]["knn"] == "auto"
    assert from_dict({**base, "affinity": {"knn": "exact"}}, "x.toml").sections["affinity"]["knn"] == "exact"
    with pytest.raises(ConfigError) as e:
        from_dict({**base, "affinity": {"knn": "annoy"}}, "x.toml")
    assert "[affinity] knn: expected one of" in str(e.value) and "\n" not in str(e.value)


def test_affinity_key_unchanged_by_default_and_changed_by_a_method():
    from bigclust.pipeline.config import stable_hash
    from bigclust.pipeline.stages import AffinityParams, stage_key

    p = AffinityParams(input="abc", src="preprocess", kind="knn", dtype="float64", gamma=1.0, n_neighbors=10, seed=0)
    # the key of a store made before the knn field existed
    old = stable_hash({"input": "abc", "src": "preprocess", "kind": "knn", "dtype": "float64", "gamma": 1.0,
                       "n_neighbors": 10, "seed": 0})
    assert stage_key(p) == old
    q = AffinityParams(input="abc", src="preprocess", kind="knn", dtype="float64", gamma=1.0, n_neighbors=10,
                       seed=0, knn="exact")
    assert stage_key(q) != old


def test_estimator_knn_parameter():
    from bigclust.estimators import SpectralClustering

    rng = np.random.default_rng(3)
    Xb = np.vstack([rng.normal(0, 0.3, (40, 3)), rng.normal(5, 0.3, (40, 3))])
    a = SpectralClustering(2, affinity="knn", n_neighbors=6, knn="exact", random_state=0).fit(Xb)
    assert sorted(np.bincount(a.labels_)) == [40, 40]
    assert a.get_params()["knn"] == "exact"
    with pytest.raises(ValueError, match="^SpectralClustering: knn must be one of .auto., .exact."):
        SpectralClustering(2, affinity="knn", knn="annoy").fit(Xb)
