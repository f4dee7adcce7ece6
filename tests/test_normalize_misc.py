"""MB/MC quality, MBBS and the simplex projection, input validation, dispatch."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from bigclust._util.errors import DataError, UserError
from bigclust.normalize import (bbs, mbbs, ncut, normalize, project_simplex, quality, quality_from_sums,
                                quality_partial, ra, sinkhorn)


def gauss(n, gamma=1.0, d=5, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / gamma)


def quality_loops(P, y):
    n = len(y)
    mb = sum(abs(sum(P[i][j] for j in range(n)) - 1) for i in range(n)) / n
    mc = sum(abs(sum(P[i][j] for j in range(n) if y[j] == y[i]) - 1) for i in range(n)) / n
    return mb, mc


def test_quality_matches_loops_dense_sparse_and_blocks():
    rng = np.random.default_rng(0)
    P = rng.random((30, 30)) * (rng.random((30, 30)) < 0.4) / 6
    y = np.array(list("abc") * 10)
    ref = quality_loops(P.tolist(), list(y))
    np.testing.assert_allclose(quality(P, y), ref, rtol=1e-13)
    np.testing.assert_allclose(quality(sp.csr_matrix(P), y), ref, rtol=1e-13)
    np.testing.assert_allclose(quality(P.astype(np.float32), y), ref, rtol=1e-6)
    for M in (P, sp.csr_matrix(P)):
        parts = [quality_partial(M[r0:r0 + 7], y, r0) for r0 in range(0, 30, 7)]
        rs, rc = (np.concatenate(p) for p in zip(*parts))
        np.testing.assert_allclose(quality_from_sums(rs, rc), ref, rtol=1e-13)
    with pytest.raises(DataError, match="labels"):
        quality(P, y[:-1])


def test_simplex_projection_matches_qp():
    rng = np.random.default_rng(1)
    for m in (1, 2, 5, 9):
        for _ in range(4):
            v = rng.normal(0, 2, m)
            res = minimize(lambda a: np.sum((a - v) ** 2), np.full(m, 1 / m), jac=lambda a: 2 * (a - v),
                           method="SLSQP", bounds=[(0, None)] * m,
                           constraints={"type": "eq", "fun": lambda a: a.sum() - 1}, options={"ftol": 1e-15})
            a = project_simplex(v)
            assert a.min() >= 0 and a.sum() == pytest.approx(1, abs=1e-14)
            np.testing.assert_allclose(a, res.x, atol=1e-7)
    np.testing.assert_array_equal(project_simplex([0.2, 0.3, 0.5]), [0.2, 0.3, 0.5])


def test_mbbs_single_kernel_is_bbs():
    K = gauss(40, gamma=0.5)
    G, info = mbbs([K], lam=1.0, return_info=True)
    np.testing.assert_array_equal(info.alpha, [1.0])
    np.testing.assert_allclose(G, bbs(K, "dual"), atol=1e-12)


@pytest.mark.parametrize("lam", [5.0, 50.0, 1e4])
def test_mbbs_alpha_on_simplex_and_objective_non_increasing(lam):
    Ks = [gauss(40, gamma=g, seed=1) for g in (0.25, 0.5, 1.0, 4.0)]
    G, info = mbbs(Ks, lam=lam, n_outer=30, tol=1e-10, return_info=True)
    for a in info.alpha_history:
        assert a.min() >= 0 and a.sum() == pytest.approx(1, abs=1e-12)
    np.testing.assert_allclose(info.alpha_history[0], 0.25)
    obj = np.array(info.objective_history)
    assert np.all(np.diff(obj) <= 1e-9 * np.abs(obj[:-1]))
    # the returned weights are the exact alpha-step for the returned G ...
    g = np.array([0.5 * np.sum((G - K) ** 2) for K in Ks])
    np.testing.assert_allclose(info.alpha, project_simplex(-g / (2 * lam)), atol=1e-9)
    # ... and G is the BBS of the weighted kernel (converged: alpha stopped moving)
    assert info.converged
    Kbar = sum(a * K for a, K in zip(info.alpha, Ks))
    np.testing.assert_allclose(G, bbs(Kbar, "dual"), atol=1e-8)
    if lam == 1e4:
        assert info.alpha.min() > 0  # heavy regularisation keeps every kernel


def test_mbbs_sparse_matches_dense_on_full_patterns():
    Ks = [gauss(30, gamma=g, seed=2) for g in (0.5, 2.0)]
    Gd, idn = mbbs(Ks, lam=20.0, return_info=True)
    Gs, isp = mbbs([sp.csr_matrix(K) for K in Ks], lam=20.0, return_info=True)
    np.testing.assert_allclose(isp.alpha, idn.alpha, atol=1e-9)
    np.testing.assert_allclose(Gs.toarray(), Gd, atol=1e-9)


def test_validation_errors():
    K = gauss(20)
    A = K.copy()
    A[2, 5] += 0.1
    with pytest.raises(DataError, match=r"K is not symmetric \(max \|K - K\^T\| = 0\.1"):
        bbs(A)
    B = K.copy()
    B[3, 4] = B[4, 3] = np.nan
    with pytest.raises(DataError, match=r"non-finite entry at \(3, 4\)"):
        bbs(B, "dual")
    Z = K.copy()
    Z[17] = 0
    Z[:, 17] = 0
    with pytest.raises(DataError, match=r"K has a zero row \(row 17\): Sinkhorn scaling does not exist"):
        sinkhorn(Z)
    with pytest.raises(DataError, match="Ncut"):
        ncut(Z)
    with pytest.raises(DataError, match="K >= 0"):
        sinkhorn(K - 0.5)
    with pytest.raises(DataError, match="square"):
        bbs(np.ones((3, 4)))
    with pytest.raises(UserError, match="solver"):
        bbs(K, "newton")
    with pytest.raises(UserError, match="dtype"):
        bbs(K, dtype=np.int32)
    with pytest.raises(UserError, match="n_iter"):
        bbs(K, n_iter=-1)
    with pytest.raises(UserError, match="lam"):
        mbbs([K], lam=0)
    # round-off asymmetry is tolerated (blocked kernel computations produce it)
    C = K.copy()
    C[2, 5] += 1e-17
    bbs(C, "alternating", 2)
    # errors are one line
    with pytest.raises(DataError) as e:
        bbs(A)
    assert "\n" not in str(e.value)


def test_normalize_dispatch():
    K = gauss(25, gamma=0.5)
    y = np.arange(25) % 2
    assert normalize(K, "ra") is K
    P, info = normalize(K, "ra", y=y, record_every=1, return_info=True)
    assert P is K and info.n_iter == 0
    np.testing.assert_array_equal(normalize(K, "ncut", n_iter=3), ncut(K, 3))
    np.testing.assert_array_equal(normalize(K, "sk", n_iter=20, tol=None), sinkhorn(K, 20))
    G, info = normalize(K, "bbs", solver="dual", n_iter=50, tol=None, y=y, record_every=1, return_info=True)
    np.testing.assert_array_equal(G, bbs(K, "dual"))
    assert info.converged and len(info.history) == info.n_iter
    with pytest.raises(UserError, match="unknown normalisation method"):
        normalize(K, "pca")
    with pytest.raises(UserError, match="does not take tol"):
        normalize(K, "ncut", tol=1e-3)
    assert ra(K) is K
