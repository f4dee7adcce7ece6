"""Small components split off by the normaliser: no eigenvector of their own, embedded through the kernel."""
import dataclasses
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.algo.small_components import drop_rows, extend, small_component_rows


def test_rows_of_components_below_the_fraction_with_any_number_of_components():
    sizes = [500, 300, 4, 1, 2, 190, 3]                      # n = 1000
    labels = np.repeat(np.arange(len(sizes)), sizes)
    rng = np.random.default_rng(0)
    labels = labels[rng.permutation(labels.size)]
    # k = 3: n / k = 333.3 rows; 0.01 of it is 3.33 -> the components of 1, 2 and 3 rows
    rows = small_component_rows(labels, len(sizes), 3, 0.01)
    np.testing.assert_array_equal(rows, np.flatnonzero(np.isin(labels, [3, 4, 6])))
    assert small_component_rows(labels, len(sizes), 3, 0.02).size == 4 + 1 + 2 + 3   # 6.67: the 4 too
    assert small_component_rows(labels, len(sizes), 6, 0.5).size == 10    # 83.3 rows; 7 components > k = 6
    assert small_component_rows(labels, len(sizes), 6, 0.0).size == 0     # 0: off
    # at most k components: a small one would still take an eigenvector of the k (and a cluster) for itself
    assert small_component_rows(labels, len(sizes), 7, 0.5).size == 10    # 71.4 rows: the 4, 1, 2 and 3
    np.testing.assert_array_equal(small_component_rows(labels, len(sizes), 7, 0.01), np.flatnonzero(labels == 3))
    # every component small: nothing would be left to embed, so none is set aside
    assert small_component_rows(np.arange(10), 10, 2, 0.9).size == 0


def _split_graph(rng, n=60):
    A = sp.random(n, n, density=0.15, random_state=rng, dtype=np.float64)
    A = (A + A.T).tocsr()
    A.sort_indices()
    return A


def test_drop_rows_zeroes_the_rows_and_columns_of_whole_components_and_keeps_the_pattern():
    rng = np.random.default_rng(1)
    A = _split_graph(rng)
    rows = np.array([3, 17, 40])
    # make rows a component of their own: no entry to the others (symmetric), entries among them kept
    others = np.setdiff1d(np.arange(A.shape[0]), rows)
    D = A.toarray()
    D[np.ix_(rows, others)] = 0
    D[np.ix_(others, rows)] = 0
    D[np.ix_(rows, rows)] = 0.5
    S = sp.csr_matrix(D)
    ref = D.copy()
    ref[rows, :] = 0
    ref[:, rows] = 0
    nnz = S.nnz
    drop_rows(S, rows)
    assert S.nnz == nnz   # stored zeros: the pattern (and so its renumbering) is unchanged
    np.testing.assert_array_equal(S.toarray(), ref)
    drop_rows(D, rows)
    np.testing.assert_array_equal(D, ref)


def _extend_reference(E, rows, R):
    """Plain loops: step by step, each open row takes the normalised weighted mean of done neighbours."""
    E = E.copy()
    R = np.asarray(R.toarray() if sp.issparse(R) else R, dtype=np.float64)
    done = np.ones(E.shape[0], bool)
    done[rows] = False
    open_ = list(range(len(rows)))
    while open_:
        filled = {}
        for i in open_:
            acc, hit = np.zeros(E.shape[1]), False
            for j in range(E.shape[0]):
                if R[i, j] != 0 and done[j]:
                    acc += R[i, j] * E[j]
                    hit = True
            if hit:
                nrm = np.linalg.norm(acc)
                filled[i] = acc / nrm if nrm > 0 else acc
        if not filled:
            break
        for i, v in filled.items():
            E[rows[i]] = v
            done[rows[i]] = True
        open_ = [i for i in open_ if i not in filled]
    return E


@pytest.mark.parametrize("dense", [False, True])
def test_extend_is_the_stepwise_mean_of_embedded_neighbours(dense):
    rng = np.random.default_rng(2)
    n, k = 80, 4
    K = _split_graph(rng, n)
    E = rng.normal(size=(n, k))
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    # a chain: some rows' neighbours are all set aside too, so they are reached in a later step
    rows = np.unique(np.concatenate([rng.choice(n, 12, replace=False), K[5].indices, [5]]))
    E[rows] = 0
    R = K[rows]
    ref = _extend_reference(E, rows, R)
    got = E.copy()
    filled = extend(got, rows, R.toarray() if dense else R)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)
    assert filled == rows.size
    np.testing.assert_allclose(np.linalg.norm(got[rows], axis=1), 1.0, rtol=1e-12)
    # the order of rows does not matter
    perm = rng.permutation(rows.size)
    got2 = E.copy()
    extend(got2, rows[perm], R[perm])
    np.testing.assert_allclose(got2, got, rtol=1e-12, atol=1e-15)


def test_extend_leaves_rows_with_no_path_to_an_embedded_row_at_zero():
    E = np.eye(4)[:, :2].copy()
    E[2:] = 0
    R = sp.csr_matrix(np.array([[0, 0, 0, 1.0], [0, 0, 1.0, 0]]))   # rows 2 and 3 see only each other
    assert extend(E, np.array([2, 3]), R) == 0
    np.testing.assert_array_equal(E[2:], 0)


def _blobs(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), n // 3)
    X = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])[y] + rng.normal(size=(y.size, 2))
    return X, y


def _cut_normaliser(monkeypatch, n_cut):
    """BBS-dual with ``n_cut`` single rows (not the blobs' cores) cut off as components with eigenvalue 1, as
    the exact BBS leaves them: each a stochastic 1 x 1 block."""
    from bigclust.pipeline import methods

    bbs = methods.get("bbs")
    cut = np.random.default_rng(5).choice(1500, n_cut, replace=False)

    def normalize(K, p, y):
        P, info = bbs.normalize(K, p, y)
        P = sp.csr_matrix(P)
        keep = np.ones(P.shape[0])
        keep[cut] = 0
        D = sp.diags(keep)
        P = (D @ P @ D + sp.diags(1.0 - keep)).tocsr().astype(P.dtype)
        P.sort_indices()
        return P, info

    monkeypatch.setitem(methods.REGISTRY, "bbs", dataclasses.replace(bbs, normalize=normalize))
    return cut


@pytest.fixture
def split_normaliser(monkeypatch):
    return _cut_normaliser(monkeypatch, 20)


def test_the_estimator_sets_small_components_aside_and_labels_their_rows(split_normaliser):
    from bigclust import SpectralClustering
    from bigclust.metrics import accuracy

    X, y = _blobs()
    kw = dict(n_clusters=3, affinity="knn", n_neighbors=10, normalization="bbs", random_state=0, n_init=3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        off = SpectralClustering(min_component=0.0, **kw).fit(X)
    said = [str(x.message) for x in w if "split the affinity graph" in str(x.message)]
    assert len(said) == 1 and "each of the 21 components adds an eigenvalue" in said[0]
    # 21 components, 3 eigenvectors: indicators of single rows, one cluster holds nearly everything
    assert accuracy(y, off.labels_) < 0.5
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        on = SpectralClustering(**kw).fit(X)   # default 0.01 of n / k = 5 rows
    said = [str(x.message) for x in w if "split the affinity graph" in str(x.message)]
    assert len(said) == 1 and "20 of them (20 rows)" in said[0] and "adds an eigenvalue" not in said[0]
    assert on.normalization_info_["components"] == [1, 21]
    assert on.normalization_info_["set_aside"] == [20, 20]
    assert accuracy(y, on.labels_) > 0.95   # 0.979: the cut also thinned their neighbours
    # the rows set aside are labelled by their neighbourhood: as their blob, nearly all
    assert np.mean(_mapped(y, on.labels_)[split_normaliser] == y[split_normaliser]) >= 0.9
    np.testing.assert_allclose(np.linalg.norm(on.embedding_, axis=1), 1.0, rtol=1e-10)


def test_a_small_component_takes_no_eigenvector_with_at_most_k_components(monkeypatch):
    """Two single rows cut off, 3 components for k = 3: each row would take an eigenvector of value 1 and
    leave the three blobs one; set aside, the blobs keep all three."""
    from bigclust import SpectralClustering
    from bigclust.metrics import accuracy

    cut = _cut_normaliser(monkeypatch, 2)
    X, y = _blobs()
    kw = dict(n_clusters=3, affinity="knn", n_neighbors=10, normalization="bbs", random_state=0, n_init=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        off = SpectralClustering(min_component=0.0, **kw).fit(X)
    assert accuracy(y, off.labels_) < 0.5
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        on = SpectralClustering(**kw).fit(X)
    said = [str(x.message) for x in w if "split the affinity graph" in str(x.message)]
    assert len(said) == 1 and "2 of them (2 rows)" in said[0] and "adds an eigenvalue" not in said[0]
    assert on.normalization_info_["components"] == [1, 3]
    assert on.normalization_info_["set_aside"] == [2, 2]
    assert accuracy(y, on.labels_) > 0.95
    assert np.all(_mapped(y, on.labels_)[cut] == y[cut])


def _mapped(y, labels):
    """y's class of each row's cluster under the best matching (the accuracy's)."""
    from scipy.optimize import linear_sum_assignment

    C = np.zeros((labels.max() + 1, y.max() + 1))
    np.add.at(C, (labels, y), 1)
    r, c = linear_sum_assignment(-C)
    m = dict(zip(r, c))
    return np.array([m[v] for v in labels])


def test_renumbered_kernel_rows_set_aside_are_embedded_in_the_data_numbering(split_normaliser, monkeypatch):
    """Above REORDER_MIN_ROWS the stage normalises K renumbered: the cut rows are P's numbers, E's rows the data's."""
    from bigclust import SpectralClustering
    from bigclust.algo import spectral
    from bigclust.normalize import plugin
    from bigclust.pipeline import config

    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", 500)
    real_from_dict, real_renumber, orders = config.from_dict, plugin._renumber, []
    monkeypatch.setattr(config, "from_dict", lambda raw, *a: real_from_dict(
        {**raw, "affinity": {**raw.get("affinity", {}), "dtype": "float32"}}, *a))
    monkeypatch.setattr(plugin, "_renumber", lambda *a: (lambda out: orders.append(out[0]) or out)(real_renumber(*a)))
    X, _ = _blobs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        m = SpectralClustering(n_clusters=3, affinity="knn", n_neighbors=10, normalization="bbs", random_state=0,
                               n_init=3).fit(X)
    order = orders[0]
    assert order is not None and not np.array_equal(order, np.arange(order.size))
    aside = np.sort(order[split_normaliser])     # the data's numbers of the rows the normaliser cut off
    K, E = sp.csr_matrix(m.affinity_matrix_, dtype=np.float64), m.embedding_
    done = np.ones(E.shape[0], bool)
    done[aside] = False
    for i in aside:
        nb = K[i].indices[done[K[i].indices]]
        assert nb.size   # a 10-NN row cut off alone has embedded neighbours
        want = K[i, nb].toarray().ravel() @ E[nb]
        np.testing.assert_allclose(E[i], want / np.linalg.norm(want), rtol=1e-10, atol=1e-12)
