"""Euclidean BBS on dense kernels: Alg. 1 against a NumPy reference, the affine
projection, and the exact solvers (Dykstra, dual Newton) against each other,
the KKT conditions and a generic QP solve."""
import numpy as np
import pytest
from scipy.optimize import minimize

from bigclust.normalize import _numba as nb
from bigclust.normalize import bbs, quality


def gauss(n, gamma=1.0, d=5, seed=0):
    """Gaussian kernel of L2-normalised random points (paper 000, Eq. 4)."""
    X = np.random.default_rng(seed).standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / gamma)


def affine_ref(G):
    """DESIGN section 4: G + (1 + S/n)/n 11^T - (r 1^T + 1 r^T)/n."""
    n = G.shape[0]
    r = G.sum(axis=1)
    S = r.sum()
    return G + (1 + S / n) / n - (r[:, None] + r[None, :]) / n


def alg1_ref(K, n_iter):
    G = K.copy()
    for _ in range(n_iter):
        G = np.maximum(affine_ref(G), 0)
    return G


def kkt_mu(G, K):
    """mu from G alone: least squares of G_ij = K_ij + mu_i + mu_j on the support."""
    i, j = np.nonzero(G > 0)
    A = np.zeros((i.size, G.shape[0]))
    np.add.at(A, (np.arange(i.size), i), 1.0)
    np.add.at(A, (np.arange(i.size), j), 1.0)
    return np.linalg.lstsq(A, G[i, j] - K[i, j], rcond=None)[0]


@pytest.mark.parametrize("n_iter", [1, 5, 50])
def test_alternating_matches_numpy_alg1(n_iter):
    K = gauss(60, gamma=0.5)
    G = bbs(K, "alternating", n_iter)
    np.testing.assert_allclose(G, alg1_ref(K, n_iter), rtol=0, atol=1e-12)
    assert np.array_equal(G, G.T)  # the fused pass keeps G exactly symmetric


def test_alternating_float32_storage_close_to_float64():
    K = gauss(60, gamma=0.5)
    G64 = bbs(K, "alternating", 50)
    G32 = bbs(K, "alternating", 50, dtype=np.float32)
    assert G32.dtype == np.float32
    np.testing.assert_allclose(G32, G64, rtol=0, atol=1e-5)
    assert bbs(K.astype(np.float32), "alternating", 2).dtype == np.float32


def test_alternating_signed_kernel_and_input_untouched():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((40, 40))
    K = (A + A.T) / 2
    K0 = K.copy()
    np.testing.assert_allclose(bbs(K, "alternating", 7), alg1_ref(K, 7), rtol=0, atol=1e-12)
    assert np.array_equal(K, K0)


def test_alt_pass_blocks_and_serial_twin_equal_one_block():
    K = gauss(50, gamma=0.5)
    r = K.sum(axis=1)
    whole, r_whole = K.copy(), np.empty(50)
    nb.bbs_alt_pass(whole, r, r.sum(), 0, r_whole)
    for kernel in (nb.bbs_alt_pass, nb.bbs_alt_pass_serial):
        G, r_new = K.copy(), np.empty(50)
        for row0 in range(0, 50, 16):
            blk = G[row0:row0 + 16]
            kernel(blk, r, r.sum(), row0, r_new[row0:row0 + 16])
        np.testing.assert_array_equal(G, whole)
        np.testing.assert_allclose(r_new, r_whole, rtol=1e-14)
    np.testing.assert_allclose(r_whole, whole.sum(axis=1), rtol=1e-13)


def test_affine_projection_is_the_nearest_point():
    """Closed form vs a brute-force KKT solve, and orthogonality of the residual."""
    rng = np.random.default_rng(1)
    n = 6
    A = rng.standard_normal((n, n))
    A = (A + A.T) / 2
    # brute force: min ||g - a||^2 s.t. C g = d (symmetry and unit row sums), KKT system
    rows, rhs = [], []
    for i in range(n):
        for j in range(i + 1, n):
            c = np.zeros((n, n))
            c[i, j], c[j, i] = 1, -1
            rows.append(c.ravel())
            rhs.append(0.0)
        c = np.zeros((n, n))
        c[i] = 1
        rows.append(c.ravel())
        rhs.append(1.0)
    C = np.array(rows)
    kkt = np.block([[np.eye(n * n), C.T], [C, np.zeros((len(rows), len(rows)))]])
    sol = np.linalg.lstsq(kkt, np.concatenate([A.ravel(), rhs]), rcond=None)[0]
    P = affine_ref(A)
    np.testing.assert_allclose(P, sol[:n * n].reshape(n, n), atol=1e-12)
    # the fused kernel without active clipping is the same projection: entries near 1/n
    n = 20
    B = rng.uniform(-1, 1, (n, n)) * 0.004
    A = 1.0 / n + (B + B.T) / 2
    G, r_out = A.copy(), np.empty(n)
    r = A.sum(axis=1)
    nb.bbs_alt_pass(G, r, r.sum(), 0, r_out)
    assert G.min() > 0
    np.testing.assert_allclose(G, affine_ref(A), atol=1e-15)
    np.testing.assert_allclose(G.sum(axis=1), 1.0, atol=1e-14)
    np.testing.assert_array_equal(G, G.T)
    for seed in range(3):
        Z0 = np.random.default_rng(seed).standard_normal((n, n))
        Z = affine_ref((Z0 + Z0.T) / 2)  # any point of the affine set
        assert abs(np.sum((A - G) * (G - Z))) < 1e-12


@pytest.mark.parametrize("n,gamma", [(50, 0.25), (120, 0.5), (200, 2.0)])
def test_dykstra_equals_dual(n, gamma):
    K = gauss(n, gamma=gamma, seed=n)
    Gd, idu = bbs(K, "dual", tol=1e-13, return_info=True)
    Gk, iky = bbs(K, "dykstra", 200000, tol=1e-12, return_info=True)
    assert idu.converged and iky.converged and idu.n_iter <= 20
    assert np.abs(Gd - Gk).max() < 1e-8
    assert 0 < (Gd > 0).mean() < 1  # the exact solution is sparse but not empty


@pytest.mark.parametrize("solver", ["dual", "dykstra"])
def test_exact_solvers_satisfy_kkt(solver):
    K = gauss(80, gamma=0.5, seed=4)
    G, info = bbs(K, solver, 100000, tol=1e-12, return_info=True)
    mu = info.mu
    M = K + mu[:, None] + mu[None, :]
    assert G.min() >= 0
    np.testing.assert_allclose(G.sum(axis=1), 1.0, atol=1e-11)
    np.testing.assert_array_equal(G, G.T)
    on = G > 0
    np.testing.assert_allclose(G[on], M[on], atol=1e-14)   # stationarity on the support
    assert M[~on].max() <= 1e-14                             # the multiplier of G >= 0 is >= 0 off it
    np.testing.assert_allclose(kkt_mu(G, K), mu, atol=1e-9)  # mu is determined by G
    assert info.kkt["primal_row_err"] < 1e-11 and info.kkt["complementarity"] < 1e-14
    assert info.kkt["dual_feasibility"] < 1e-14 and info.kkt["primal_min"] >= 0


def exact_bbs_ref(K, tol=1e-14, max_steps=100):
    """The exact BBS projection by its dual closed form (DESIGN section 4), in NumPy:
    ``G* = max(K + mu 1^T + 1 mu^T, 0)`` with ``sum_j max(K_ij + mu_i + mu_j, 0) = 1``, the equation
    solved by damped semismooth Newton (Jacobian: the signless Laplacian of the active set)."""
    n = K.shape[0]
    r = K.sum(axis=1)
    mu = (1 - r) / n - (n - r.sum()) / (2 * n * n)      # unclipped: K + mu1^T + 1mu^T has unit row sums

    def resid(m):
        return np.maximum(K + m[:, None] + m[None, :], 0).sum(axis=1) - 1

    f = resid(mu)
    for _ in range(max_steps):
        if np.abs(f).max() < tol:
            break
        A = (K + mu[:, None] + mu[None, :] > 0).astype(float)
        step = np.linalg.lstsq(np.diag(A.sum(axis=1)) + A, -f, rcond=None)[0]
        t = 1.0
        while t > 1e-10:
            new = mu + t * step
            fn = resid(new)
            if np.linalg.norm(fn) < (1 - 1e-4 * t) * np.linalg.norm(f):
                break
            t /= 2
        mu, f = new, fn
    assert np.abs(f).max() < tol
    return np.maximum(K + mu[:, None] + mu[None, :], 0)


def test_alg1_is_feasible_but_not_the_exact_projection():
    K = gauss(60, gamma=0.5, seed=2)
    G_star = exact_bbs_ref(K)
    Ga = bbs(K, "alternating", 3000)
    assert np.abs(Ga.sum(axis=1) - 1).max() < 1e-6 and Ga.min() >= 0 and np.array_equal(Ga, Ga.T)
    # G* is the projection: <K - G*, F - G*> <= 0 for every feasible F, Alg. 1's point included
    assert np.sum((K - G_star) * (Ga - G_star)) <= 1e-9
    assert np.linalg.norm(G_star - K) < np.linalg.norm(Ga - K) - 1e-6
    assert np.abs(Ga - G_star).max() > 1e-3                  # Alg. 1 stops at another feasible point
    np.testing.assert_allclose(bbs(K, "dual", tol=1e-13), G_star, rtol=0, atol=1e-10)
    np.testing.assert_allclose(bbs(K, "dykstra", 200000, tol=1e-12), G_star, rtol=0, atol=1e-8)


def test_exact_solution_matches_generic_qp():
    """n = 8: minimise ||G - K||_F^2 over the upper triangle with SLSQP."""
    n = 8
    K = gauss(n, gamma=0.3, seed=7)
    iu = np.triu_indices(n)
    w = np.where(iu[0] == iu[1], 1.0, 2.0)  # off-diagonal entries count twice

    def full(x):
        G = np.zeros((n, n))
        G[iu] = x
        return G + np.triu(G, 1).T

    res = minimize(lambda x: np.sum(w * (x - K[iu]) ** 2), K[iu], jac=lambda x: 2 * w * (x - K[iu]),
                   method="SLSQP", bounds=[(0, None)] * iu[0].size,
                   constraints={"type": "eq", "fun": lambda x: full(x).sum(axis=1) - 1},
                   options={"ftol": 1e-15, "maxiter": 1000})
    assert res.success
    G = bbs(K, "dual")
    assert (G == 0).any()  # the inequality is active somewhere
    np.testing.assert_allclose(G, full(res.x), atol=1e-6)


@pytest.mark.parametrize("n_iter", [1, 5, 40])
def test_dykstra_matches_design_form_with_correction_matrix(n_iter):
    """DESIGN section 4: alternate P_affine and max(., 0), keeping Q = min(Y + Q, 0)."""
    rng = np.random.default_rng(5)
    A = rng.standard_normal((30, 30))
    K = gauss(30, gamma=0.5) + 0.05 * (A + A.T)  # some negative entries: the cone step matters
    X, Q = np.maximum(K, 0), np.minimum(K, 0)    # the cone step first (Z = K), see _bbs_dense
    for _ in range(n_iter):
        Y = affine_ref(X)
        X, Q = np.maximum(Y + Q, 0), np.minimum(Y + Q, 0)
    np.testing.assert_allclose(bbs(K, "dykstra", n_iter), X, rtol=0, atol=1e-12)


def test_dykstra_first_iteration_is_alg1_first_iteration():
    K = gauss(40, gamma=0.5)
    np.testing.assert_allclose(bbs(K, "dykstra", 1), bbs(K, "alternating", 1), atol=1e-15)


def test_dual_dense_and_listed_jacobian_agree():
    from bigclust.normalize import _bbs_dense
    from bigclust.normalize._common import History

    K = gauss(70, gamma=1.0, seed=5)
    out = {}
    for jvp in ("csr", "dense"):
        G, info = _bbs_dense.dual(K, np.dtype(np.float64), 50, 1e-12, History(None, 0), jvp=jvp)
        assert info.converged
        out[jvp] = G
    np.testing.assert_allclose(out["csr"], out["dense"], atol=1e-12)


@pytest.mark.filterwarnings("ignore::bigclust.normalize.NormalizeConvergenceWarning")
@pytest.mark.parametrize("solver,n_iter", [("alternating", 10), ("dykstra", 10), ("dual", 6)])
def test_history_recorded_at_the_right_iterations(solver, n_iter):
    K = gauss(40, gamma=0.5, seed=1)
    y = np.arange(40) % 3
    _, info = bbs(K, solver, n_iter, tol=1e-300 if solver == "dual" else None, y=y, record_every=3,
                  return_info=True)
    its = [h[0] for h in info.history]
    assert its == list(range(3, info.n_iter + 1, 3)) and its
    for t, mb, mc in info.history:
        G_t = bbs(K, solver, t, tol=1e-300 if solver == "dual" else None)
        np.testing.assert_allclose((mb, mc), quality(G_t, y), rtol=1e-9, atol=1e-13)
    _, info = bbs(K, solver, 4, record_every=2, return_info=True)
    assert all(np.isnan(h[2]) for h in info.history) and len(info.history) >= 1


def test_tol_stops_alternating_early_and_reports_row_err():
    K = gauss(50, gamma=0.5)
    G, info = bbs(K, "alternating", 100000, tol=1e-6, return_info=True)
    assert info.converged and info.n_iter < 100000
    assert info.row_err == pytest.approx(np.abs(G.sum(axis=1) - 1).max(), abs=1e-15)
    assert info.row_err <= 1e-6
