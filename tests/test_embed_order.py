"""The embed stage renumbers a connected sparse kernel before normalising it: the same E, bit for bit."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
from scipy.linalg import subspace_angles

from bigclust.algo import renumber, spectral
from bigclust.algo.affinity import knn_kernel
from bigclust.algo.spectral import local_order, top_eigenvectors
from bigclust.normalize import bbs, ncut, plugin, sinkhorn

N = 3000   # above EIGH_MAX_N: the eigensolver is ARPACK, as at REORDER_MIN_ROWS


def _blobs(n=N, seed=0, centres=3, spread=1.5):
    """Blobs in 5-d, rows shuffled (neighbours far apart in data order, as in mnist-1m); and their labels."""
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(centres, 5)) * spread
    y = np.repeat(np.arange(centres), n // centres)
    X = C[y] + rng.normal(size=(y.size, 5))
    p = rng.permutation(y.size)
    return X[p], y[p]


def _knn(X, k=8):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return sp.csr_matrix(knn_kernel(X, k, 4.0)).astype(np.float32)


@pytest.fixture
def low_threshold(monkeypatch):
    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", 500)


def _renumbered_path(K, normalise, k, **kw):
    """What the embed stage now does: renumber K, normalise it, rows back in the old stored order, order=."""
    Kp, order = local_order(K)
    P = normalise(Kp)
    renumber.in_original_row_order(P, order)
    return top_eigenvectors(P, k, order=order, **kw), P, order


@pytest.mark.parametrize("normalise", [lambda K: sinkhorn(K, n_iter=30), ncut], ids=["sk", "ncut"])
def test_renumbered_before_normalising_gives_the_same_eigenpairs(normalise, low_threshold):
    K = _knn(_blobs()[0])
    P = normalise(K)
    v_old, V_old = top_eigenvectors(P, 4)          # today: ARPACK renumbers the float64 copy of P
    (v, V), P_new, order = _renumbered_path(K, normalise, 4)
    A, o = local_order(P)
    assert np.array_equal(o, order)                # P has K's pattern: the order ARPACK computes
    assert np.array_equal(A.indices, P_new.indices) and np.array_equal(A.data, P_new.data)
    assert np.array_equal(v, v_old) and np.array_equal(V, V_old)


def test_float32_kernel_above_the_copy_threshold(low_threshold, monkeypatch):
    """Above FLOAT32_OPERATOR_NNZ the renumbered float32 P goes through the Numba product: the same sums."""
    K = _knn(_blobs()[0])
    P = sinkhorn(K, n_iter=30)
    v_old, V_old = top_eigenvectors(P, 4)          # renumbered float64 copy (below the threshold)
    monkeypatch.setattr(spectral, "FLOAT32_OPERATOR_NNZ", 1000)
    operands = []
    real = spectral._arpack_operand
    monkeypatch.setattr(spectral, "_arpack_operand", lambda A, **kw: operands.append(A) or real(A, **kw))
    (v, V), P_new, _ = _renumbered_path(K, lambda M: sinkhorn(M, n_iter=30), 4)
    assert operands[0].dtype == np.float32 and operands[0] is P_new   # no copy of the values
    assert isinstance(real(P_new), sla.LinearOperator)
    assert np.array_equal(v, v_old) and np.array_equal(V, V_old)


def test_start_vector_in_the_data_numbering_and_signs_after_unpermuting(low_threshold, monkeypatch):
    K = _knn(_blobs()[0])
    Kp, order = local_order(K)
    P = ncut(Kp)
    seen = {}
    real = sla.eigsh

    def spy(A, **kw):
        seen["v0"] = kw["v0"]
        return real(A, **kw)
    monkeypatch.setattr(sla, "eigsh", spy)
    calls = []
    monkeypatch.setattr(spectral, "local_order", lambda *a, **kw: calls.append(1))
    _, V = top_eigenvectors(P, 3, random_state=7, order=order)
    assert not calls                               # not renumbered a second time
    v0 = np.random.default_rng(7).uniform(0.5, 1.5, P.shape[0])
    assert np.array_equal(seen["v0"], v0[order])
    inv = spectral.inverse(order)
    _, U = top_eigenvectors(spectral.permute(P, inv, np.float64), 3, solver="eigh")   # data's numbering, exact
    assert np.sin(np.max(subspace_angles(V, U))) < 1e-8
    big = np.argmax(np.abs(V), axis=0)             # the sign fix looked at the data's numbering
    assert np.all(V[big, np.arange(3)] > 0)


def test_other_solvers_get_the_matrix_back_in_the_data_numbering(low_threshold):
    K = _knn(_blobs(900)[0])
    P = ncut(K)
    Pp, order = local_order(P)
    for solver in ("eigh", "lobpcg"):
        v_old, V_old = top_eigenvectors(P, 3, solver=solver)
        v, V = top_eigenvectors(Pp, 3, solver=solver, order=order)
        assert np.array_equal(v, v_old) and np.array_equal(V, V_old)


def _fit(X, normalization, monkeypatch, **kw):
    """The estimator, its kernel in float32 (the pipeline's ``[affinity] dtype``; the estimator's is float64)."""
    from bigclust import SpectralClustering
    from bigclust.pipeline import config

    real = config.from_dict
    monkeypatch.setattr(config, "from_dict", lambda raw, *a: real(
        {**raw, "affinity": {**raw.get("affinity", {}), "dtype": "float32"}}, *a))
    m = SpectralClustering(n_clusters=3, affinity="knn", n_neighbors=8, normalization=normalization,
                           random_state=0, n_init=2, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return m.fit(X)


def _spy_renumber(monkeypatch, off=None):
    """Records whether the stage renumbered; ``off["on"] = False`` makes it keep the data order (the old path)."""
    calls = []
    real = plugin._renumber

    def spy(Ks, n_in, m, y):
        out = real(Ks, n_in, m, y) if off is None or off["on"] else (None, y)
        calls.append(out[0] is not None)
        return out
    monkeypatch.setattr(plugin, "_renumber", spy)
    return calls


@pytest.mark.parametrize("normalization,kw", [("sk", {"n_iter": 30}), ("ncut", {})])
def test_estimator_end_to_end_same_embedding_and_labels(normalization, kw, low_threshold, monkeypatch):
    X, _ = _blobs()
    switch = {"on": False}
    calls = _spy_renumber(monkeypatch, switch)
    old = _fit(X, normalization, monkeypatch, **kw)
    switch["on"] = True
    new = _fit(X, normalization, monkeypatch, **kw)
    assert calls == [False, True]                  # the stage ran in this process, the second time renumbered
    assert np.array_equal(new.embedding_, old.embedding_)
    assert np.array_equal(new.labels_, old.labels_)


def test_bbs_dual_moves_in_the_last_bits_only(low_threshold):
    """BBS-dual's Newton/CG steps sum over all rows: another row order moves its last bits, not the subspace."""
    X, y = _blobs()
    K = _knn(X)
    P = bbs(K)
    _, V_old = top_eigenvectors(P, 3)
    (_, V), _, _ = _renumbered_path(K, bbs, 3)
    assert np.sin(np.max(subspace_angles(V, V_old))) < 1e-6


def test_disconnected_graph_keeps_the_data_order(low_threshold, monkeypatch):
    X, _ = _blobs(seed=1, centres=3, spread=200.0)  # far apart blobs: three components
    assert spectral.components(_knn(X))[0] > 1
    calls = _spy_renumber(monkeypatch)
    _fit(X, "sk", monkeypatch, n_iter=30)
    assert calls == [False]


def test_below_the_threshold_keeps_the_data_order(monkeypatch):
    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", N + 1)
    calls = _spy_renumber(monkeypatch)
    _fit(_blobs()[0], "sk", monkeypatch, n_iter=30)
    assert calls == [False]


def test_float64_kernel_keeps_the_data_order(low_threshold, monkeypatch):
    """A float64 P would keep the renumbered row sums' last bits: the stage leaves a float64 kernel alone."""
    from bigclust import SpectralClustering
    calls = _spy_renumber(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        SpectralClustering(n_clusters=3, affinity="knn", n_neighbors=8, normalization="sk", n_iter=30,
                           random_state=0, n_init=2).fit(_blobs()[0])
    assert calls == [False]
