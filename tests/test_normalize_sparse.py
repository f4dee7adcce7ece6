"""Sparse (CSR) normalisation: equal to dense where the mathematics says so, the
support-restricted BBS projection and KKT conditions on the support otherwise."""
import functools

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust._util.errors import DataError
from bigclust.normalize import bbs as _bbs
from bigclust.normalize import ncut, quality, sinkhorn

# these tests compare with references on K's pattern as it is: the self-loops kept (the default is "zero")
bbs = functools.partial(_bbs, self_loops="keep")
from bigclust.normalize._bbs_sparse import Support
from bigclust.normalize.checks import check_sparse


def gauss(n, gamma=1.0, d=5, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / gamma)


def knn_kernel(n, k=6, gamma=0.5, seed=0, diag=True):
    """A truly sparse kernel: Gaussian on the symmetrised k-NN graph, zeros elsewhere."""
    K = gauss(n, gamma=gamma, seed=seed)
    np.fill_diagonal(K, 0)
    thr = np.sort(K, axis=1)[:, -k][:, None]
    mask = (K >= thr) | (K >= thr).T
    if diag:
        np.fill_diagonal(mask, True)
        np.fill_diagonal(K, 1.0)
    Kd = np.where(mask, K, 0.0)
    return Kd, sp.csr_matrix(Kd)


def support_alg1_ref(K, mask, n_iter):
    """Alg. 1 within the support, with a dense solve of (D + A_E) mu = 1 - G1."""
    A = mask.astype(float)
    L = np.diag(A.sum(axis=1)) + A
    G = K.copy()
    for _ in range(n_iter):
        mu = np.linalg.lstsq(L, 1 - G.sum(axis=1), rcond=None)[0]
        G = np.where(mask, np.maximum(G + mu[:, None] + mu[None, :], 0), 0)
    return G


@pytest.mark.parametrize("n_iter", [1, 5, 50])
def test_full_pattern_alternating_equals_dense_closed_form(n_iter):
    K = gauss(40, gamma=0.5)
    Gs = bbs(sp.csr_matrix(K), "alternating", n_iter)
    assert sp.issparse(Gs)
    np.testing.assert_allclose(Gs.toarray(), bbs(K, "alternating", n_iter), rtol=0, atol=1e-12)


def test_full_pattern_exact_solvers_equal_dense():
    K = gauss(40, gamma=0.5, seed=3)
    np.testing.assert_allclose(bbs(sp.csr_matrix(K), "dual").toarray(), bbs(K, "dual"), atol=1e-11)
    np.testing.assert_allclose(bbs(sp.csr_matrix(K), "dykstra", 30).toarray(), bbs(K, "dykstra", 30),
                               atol=1e-12)


@pytest.mark.parametrize("diag", [True, False])
def test_support_projection_is_the_nearest_supported_point(diag):
    """(D + A_E) mu = 1 - A1 gives the KKT point of min ||G - A|| over E-supported G."""
    Kd, S = knn_kernel(12, k=3, seed=1, diag=diag)
    rng = np.random.default_rng(2)
    B = rng.standard_normal((12, 12))
    A = np.where(Kd != 0, (B + B.T) / 2, 0)
    Ac, _ = check_sparse(sp.csr_matrix(A), "test")
    assert Ac.nnz == np.count_nonzero(Kd)
    sup = Support(Ac)
    mu = sup.solve(1 - A.sum(axis=1))
    P = np.where(Kd != 0, A + mu[:, None] + mu[None, :], 0)
    # brute force over the free entries (upper triangle of E), weight 2 off the diagonal
    iu = [(i, j) for i in range(12) for j in range(i, 12) if Kd[i, j] != 0]
    w = np.array([1.0 if i == j else 2.0 for i, j in iu])
    C = np.zeros((12, len(iu)))
    for k, (i, j) in enumerate(iu):
        C[i, k] += 1
        if i != j:
            C[j, k] += 1
    m = len(iu)
    kkt = np.block([[np.diag(w), C.T], [C, np.zeros((12, 12))]])
    a = np.array([A[i, j] for i, j in iu])
    sol = np.linalg.lstsq(kkt, np.concatenate([w * a, np.ones(12)]), rcond=None)[0][:m]
    np.testing.assert_allclose([P[i, j] for i, j in iu], sol, atol=1e-10)
    np.testing.assert_allclose(P.sum(axis=1), 1, atol=1e-10)


@pytest.mark.parametrize("n_iter", [1, 4, 30])
def test_sparse_alternating_matches_support_reference(n_iter):
    Kd, S = knn_kernel(50, k=5, seed=4)
    G = bbs(S, "alternating", n_iter)
    np.testing.assert_allclose(G.toarray(), support_alg1_ref(Kd, Kd != 0, n_iter), atol=1e-10)
    assert np.array_equal(G.indices, S.indices) and np.array_equal(G.indptr, S.indptr)


@pytest.mark.parametrize("diag", [True, False])
def test_sparse_exact_solvers_kkt_on_support(diag):
    Kd, S = knn_kernel(60, k=6, seed=5, diag=diag)
    E = Kd != 0
    Gd, idu = bbs(S, "dual", tol=1e-13, return_info=True)
    Gk, iky = bbs(S, "dykstra", 100000, tol=1e-12, return_info=True)
    assert idu.converged and iky.converged
    np.testing.assert_allclose(Gd.toarray(), Gk.toarray(), atol=1e-8)
    G, mu = Gd.toarray(), idu.mu
    M = Kd + mu[:, None] + mu[None, :]
    assert G.min() >= 0 and np.all(G[~E] == 0)
    np.testing.assert_allclose(G.sum(axis=1), 1, atol=1e-12)
    np.testing.assert_array_equal(G, G.T)
    on = G > 0
    np.testing.assert_allclose(G[on], M[on], atol=1e-14)
    assert M[E & ~on].max(initial=-1) <= 1e-14  # where G = 0 on E the constraint is active
    assert idu.kkt["complementarity"] < 1e-14


@pytest.mark.parametrize("variant", ["symmetric", "alternating"])
def test_sparse_sinkhorn_equals_dense(variant):
    Kd, S = knn_kernel(50, k=5, seed=6)
    P, info = sinkhorn(S, 40, variant=variant, return_info=True)
    Pd, infod = sinkhorn(Kd, 40, variant=variant, return_info=True)
    np.testing.assert_allclose(P.toarray(), Pd, rtol=1e-12, atol=1e-15)
    assert info.row_err == pytest.approx(infod.row_err, rel=1e-9, abs=1e-14)
    assert np.array_equal(P.indices, S.indices)


def test_sparse_ncut_equals_dense_and_keeps_flavour():
    Kd, S = knn_kernel(50, k=5, seed=7)
    for it in (1, 6):
        np.testing.assert_allclose(ncut(S, it).toarray(), ncut(Kd, it), rtol=1e-12, atol=1e-15)
    assert isinstance(ncut(sp.csr_array(S)), sp.csr_array)
    assert isinstance(bbs(sp.csr_array(S), "alternating", 2), sp.csr_array)
    assert isinstance(bbs(S.tocoo(), "alternating", 2), sp.csr_matrix)


@pytest.mark.filterwarnings("ignore::bigclust.normalize.NormalizeConvergenceWarning")
@pytest.mark.parametrize("solver", ["alternating", "dykstra", "dual"])
def test_sparse_history(solver):
    Kd, S = knn_kernel(40, k=4, seed=9)
    y = np.arange(40) % 3
    _, info = bbs(S, solver, 4, tol=1e-300 if solver == "dual" else None, y=y, record_every=2, return_info=True)
    assert [h[0] for h in info.history] == list(range(2, info.n_iter + 1, 2))
    for t, mb, mc in info.history:
        G_t = bbs(S, solver, t, tol=1e-300 if solver == "dual" else None)
        np.testing.assert_allclose((mb, mc), quality(G_t, y), rtol=1e-9, atol=1e-13)


def test_sparse_validation():
    Kd, S = knn_kernel(20, k=3, seed=8)
    T = S.tolil()
    T[0, 5] = 0.3  # value and pattern asymmetric
    with pytest.raises(DataError, match="symmetric"):
        bbs(T.tocsr(), "dual")
    A = sp.csr_matrix(np.array([[1.0, 0, 0], [0, 0, 0], [0, 0, 1.0]]))
    A.eliminate_zeros()
    with pytest.raises(DataError, match=r"empty row \(row 1\)"):
        bbs(A, "dual")
    with pytest.raises(DataError, match=r"zero row \(row 1\)"):
        sinkhorn(A)
    B = S.copy()
    B.data[3] = np.nan
    with pytest.raises(DataError, match="non-finite"):
        sinkhorn(B)
