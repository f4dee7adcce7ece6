"""Self-expression solvers of bigclust.subspace against independent references.

SSC's per-column ADMM against scikit-learn's Lasso (coordinate descent) and
the Lasso optimality (KKT) conditions; weighted thresholds through the
column-rescaling identity; LSR against least squares; full-dictionary SSC
and LSR against per-column references on the admissible atoms; LRR against
the closed form (full support) and a plain NumPy inexact ALM (kNN support).
"""
import numpy as np
import pytest
from sklearn.linear_model import Lasso

from bigclust.subspace import build_dictionary, knn_dictionary, self_expression
from bigclust.subspace.lrr import lrr_knn
from bigclust.subspace.selfexpr import admm_knn

TIGHT = dict(eps_abs=1e-12, eps_rel=1e-12, max_iter=100000)


def _unit(M):
    return M / np.linalg.norm(M, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 20))
    D = build_dictionary(X)
    nb = knn_dictionary(D, 12)
    return D, nb


def _lasso_ref(A, x, lam):
    """sklearn minimises 1/(2 m) ||x - A w||^2 + alpha ||w||_1 (m = rows), so alpha = lam / m."""
    m = Lasso(alpha=lam / A.shape[0], fit_intercept=False, tol=1e-14, max_iter=1_000_000).fit(A, x)
    return m.coef_


def _obj(A, x, c, lam):
    return 0.5 * np.sum((x - A @ c) ** 2) + lam * np.abs(c).sum()


@pytest.mark.parametrize("lam", [0.01, 0.05, 0.2])
def test_ssc_admm_matches_lasso_and_kkt(small, lam):
    D, nb = small
    C = self_expression(None, D, nb, "l1", lam=lam, **TIGHT)
    for i in range(0, D.n, 3):
        A = D.atoms[nb[i]].T            # (d, k): columns are the atoms of N_i
        x = D.atoms[i]
        c = C[nb[i], i].toarray().ravel()
        ref = _lasso_ref(A, x, lam)
        assert np.abs(c - ref).max() < 1e-6
        assert _obj(A, x, c, lam) - _obj(A, x, ref, lam) < 1e-10
        # KKT: g = A^T (x - A c); g_j = lam sign(c_j) on the support, |g_j| <= lam off it
        g = A.T @ (x - A @ c)
        on = c != 0
        assert np.allclose(g[on], lam * np.sign(c[on]), atol=1e-7)
        assert np.all(np.abs(g[~on]) <= lam + 1e-7)


def test_ssc_default_lambda_is_elhamifar_vidal_rule(small):
    D, nb = small
    _, info = self_expression(None, D, nb, "l1", return_info=True)
    mu = min(np.abs(D.atoms[nb[i]] @ D.atoms[i]).max() for i in range(D.n))
    assert info["lam"] == pytest.approx(mu / 20.0)
    assert np.all(info["converged"])


def test_weighted_thresholds_match_rescaled_lasso(small):
    """min 1/2||x - Ac||^2 + sum w_j |c_j|  ==  Lasso(lam=1) on A diag(1/w), then c = c'/w."""
    D, nb = small
    rng = np.random.default_rng(1)
    thr = rng.uniform(0.01, 0.2, nb.shape)
    coef, _, conv = admm_knn(D.atoms[:D.n], D.atoms, nb, thr, 0.0, 1.0, 1e-12, 1e-12, 100000)
    assert conv.all()
    for i in range(0, D.n, 5):
        A = D.atoms[nb[i]].T
        ref = _lasso_ref(A / thr[i], D.atoms[i], 1.0) / thr[i]
        assert np.abs(coef[i] - ref).max() < 1e-6


def test_ridge_plus_weighted_l1_kkt(small):
    """AkS-LSR C-step: 1/2||x - Ac||^2 + lam/2 ||c||^2 + sum w|c| -- optimality conditions."""
    D, nb = small
    lam = 0.05
    thr = np.random.default_rng(2).uniform(0.0, 0.1, nb.shape)
    coef, _, conv = admm_knn(D.atoms[:D.n], D.atoms, nb, thr, lam, 1.0, 1e-12, 1e-12, 100000)
    assert conv.all()
    for i in range(D.n):
        A, x, c = D.atoms[nb[i]].T, D.atoms[i], coef[i]
        g = A.T @ (x - A @ c) - lam * c
        on = c != 0
        assert np.allclose(g[on], thr[i][on] * np.sign(c[on]), atol=1e-7)
        assert np.all(np.abs(g[~on]) <= thr[i][~on] + 1e-7)


def test_lsr_matches_least_squares(small):
    D, nb = small
    lam = 0.1
    C = self_expression(None, D, nb, "l2", lam=lam)
    k = nb.shape[1]
    for i in range(D.n):
        A = D.atoms[nb[i]].T
        # (A^T A + lam I) c = A^T x  <=>  least squares on [A; sqrt(lam) I] c = [x; 0]
        big = np.vstack([A, np.sqrt(lam) * np.eye(k)])
        rhs = np.concatenate([D.atoms[i], np.zeros(k)])
        ref = np.linalg.lstsq(big, rhs, rcond=None)[0]
        assert np.abs(C[nb[i], i].toarray().ravel() - ref).max() < 1e-10


def _aug_dictionary(seed=3, n=24, d=15, m=2):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    Xa = np.repeat(X, m, axis=0) + 0.3 * rng.standard_normal((n * m, d))
    return build_dictionary(X, Xa, np.repeat(np.arange(n), m))


def test_full_dictionary_lsr_and_ssc_against_restricted_solves():
    """neighbors=None: every column uses all atoms except i and A(i)."""
    D = _aug_dictionary()
    lam = 0.05
    owner = np.concatenate([np.arange(D.n), np.repeat(np.arange(D.n), 2)])
    C2 = self_expression(None, D, None, "l2", lam=lam).toarray()
    C1 = self_expression(None, D, None, "l1", lam=lam, eps_abs=1e-10, eps_rel=1e-10, max_iter=100000).toarray()
    for i in range(D.n):
        ok = owner != i
        A = D.atoms[ok].T
        x = D.atoms[i]
        ref2 = np.linalg.solve(A.T @ A + lam * np.eye(A.shape[1]), A.T @ x)
        assert np.abs(C2[ok, i] - ref2).max() < 1e-9
        assert np.all(C2[~ok, i] == 0)
        ref1 = _lasso_ref(A, x, lam)
        assert np.abs(C1[ok, i] - ref1).max() < 1e-6
        assert np.all(C1[~ok, i] == 0)


def _lrr_obj(X, C, lam, D=None):
    D = X if D is None else D
    return 0.5 * np.linalg.norm(X.T - D.T @ C) ** 2 + lam * np.linalg.svd(C, compute_uv=False).sum()


def test_lrr_full_support_matches_closed_form():
    """With the support = all samples (self included), min 1/2||X - XZ||^2 + lam||Z||_* has the
    closed form Z = V diag(max(0, 1 - lam/s^2)) V^T (Favaro et al. 2011); the ALM must reach it."""
    rng = np.random.default_rng(0)
    n, d, lam = 30, 8, 0.3
    X = _unit(rng.standard_normal((n, d)))
    nb = np.tile(np.arange(n), (n, 1))
    coef, _, conv, _ = lrr_knn(X, X, nb, lam, rho=lam, rho_max=1e8, eta=1.1, tol=1e-9, max_iter=5000)
    assert conv
    U, s, _ = np.linalg.svd(X, full_matrices=False)     # X^T = V S U^T in the paper's columns
    Z = (U * np.maximum(0, 1 - lam / s ** 2)) @ U.T
    assert np.abs(coef.T - Z).max() < 1e-6
    # the public full-dictionary path is the same closed form
    Cf = self_expression(X, build_dictionary(X), None, "nuclear", lam=lam).toarray()
    assert np.abs(Cf - Z).max() < 1e-12


def _lrr_numpy_reference(X, D, nb, lam, iters=3000, rho=None, eta=1.1, rho_max=1e8, tol=1e-10):
    """Plain NumPy inexact ALM for min 1/2||X - D^T C||^2 + lam ||C||_* with C supported on nb."""
    N, n = D.shape[0], X.shape[0]
    rho = lam if rho is None else rho
    C = np.zeros((N, n))
    J = np.zeros((N, n))
    Y = np.zeros((N, n))
    for _ in range(iters):
        U, s, Vt = np.linalg.svd(C + Y / rho, full_matrices=False)
        Jn = (U * np.maximum(s - lam / rho, 0)) @ Vt
        C = np.zeros((N, n))
        for i in range(n):
            A = D[nb[i]].T
            C[nb[i], i] = np.linalg.solve(A.T @ A + rho * np.eye(len(nb[i])),
                                          A.T @ X[i] + rho * Jn[nb[i], i] - Y[nb[i], i])
        Y += rho * (C - Jn)
        done = max(np.abs(C - Jn).max(), np.abs(Jn - J).max()) < tol
        J = Jn
        if done:
            break
        rho = min(eta * rho, rho_max)
    return C


def test_lrr_knn_support_matches_numpy_reference():
    D = _aug_dictionary(seed=4, n=16, d=10, m=1)
    nb = knn_dictionary(D, 5)
    lam = 0.1
    C, info = self_expression(None, D, nb, "nuclear", lam=lam, return_info=True, tol=1e-10)
    assert info["converged"]
    ref = _lrr_numpy_reference(D.atoms[:D.n], D.atoms, nb, lam)
    Cd = C.toarray()
    assert np.abs(Cd - ref).max() < 1e-6
    # support respected: nothing outside N_i
    mask = np.zeros_like(Cd, dtype=bool)
    mask[nb.ravel(), np.repeat(np.arange(D.n), nb.shape[1])] = True
    assert np.all(Cd[~mask] == 0)
    # and it beats a perturbed feasible point
    P = Cd + 1e-3 * mask * np.random.default_rng(0).standard_normal(Cd.shape)
    X = D.atoms[:D.n]
    assert _lrr_obj(X, Cd, lam, D.atoms) < _lrr_obj(X, P, lam, D.atoms)


def test_lrr_randomized_and_gram_svt_equal_exact():
    D = _aug_dictionary(seed=5, n=16, d=10, m=1)
    nb = knn_dictionary(D, 5)
    Ce = self_expression(None, D, nb, "nuclear", lam=0.1).toarray()
    Cr = self_expression(None, D, nb, "nuclear", lam=0.1, svt_method="randomized", rank=16).toarray()
    Cg = self_expression(None, D, nb, "nuclear", lam=0.1, svt_method="gram").toarray()
    assert np.abs(Ce - Cr).max() < 1e-6 and np.abs(Ce - Cg).max() < 1e-6
