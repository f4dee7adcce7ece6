"""The per-column self-expression solvers against references written from the equations (paper 002, Eq. 6).

No solver of the code under test is used here (only its dictionary builders).  Per column i, with A = D[N_i]^T (d, k) and x = x_i:

* SSC (elastic when ridge > 0, weighted when the thresholds differ):
  ``min_c 1/2 ||x - A c||^2 + ridge/2 ||c||^2 + sum_p w_p |c_p|``, solved here by SciPy's L-BFGS-B on the
  split ``c = c+ - c-`` with ``c+, c- >= 0`` (a smooth bound-constrained problem: a different algorithm from the
  code's ADMM), then checked by its optimality conditions;
* LSR: ``min_c 1/2 ||x - A c||^2 + lam/2 ||c||^2``, by least squares on the stacked system
  ``[A; sqrt(lam) I] c = [x; 0]``.

The tolerances (1e-6 on the coefficients) are far below what a wrong formula moves: the last test shows that
halving a threshold, dropping the ridge or using lam instead of lam/2 in LSR moves the solution by more than 1e-3.
"""
import numpy as np
import pytest
from scipy.optimize import minimize

from bigclust.subspace import build_dictionary, knn_dictionary, self_expression
from bigclust.subspace.selfexpr import admm_knn

TIGHT = dict(eps_abs=1e-12, eps_rel=1e-12, max_iter=100000)


def ref_weighted_elastic_lasso(A, x, w, ridge=0.0):
    """``min 1/2 ||x - A c||^2 + ridge/2 ||c||^2 + sum w |c|`` by L-BFGS-B on c = p - q, p, q >= 0.

    Restarted from its own result until the objective stops decreasing (one run can stop early on an
    ill-conditioned Gram matrix), then polished on the support it found: ``c_S = G_SS^{-1} (b_S - w_S sign c_S)``.
    """
    k = A.shape[1]
    G = A.T @ A + ridge * np.eye(k)
    b = A.T @ x

    def f(pq):
        c = pq[:k] - pq[k:]
        g = G @ c - b
        return 0.5 * c @ (G @ c) - b @ c + w @ (pq[:k] + pq[k:]), np.concatenate([g + w, -g + w])

    pq, best = np.zeros(2 * k), np.inf
    for _ in range(50):
        res = minimize(f, pq, jac=True, method="L-BFGS-B", bounds=[(0, None)] * (2 * k),
                       options=dict(ftol=1e-16, gtol=1e-14, maxiter=100000, maxcor=50))
        pq = res.x
        if res.fun >= best - 1e-16:
            break
        best = res.fun
    c = pq[:k] - pq[k:]
    S = np.abs(c) > 1e-9
    polished = np.zeros(k)
    polished[S] = np.linalg.solve(G[np.ix_(S, S)], b[S] - w[S] * np.sign(c[S]))
    if np.array_equal(np.sign(polished[S]), np.sign(c[S])):   # the same signs: the KKT point of this support
        c = polished
    return c


def objective(A, x, c, w, ridge=0.0):
    return 0.5 * np.sum((x - A @ c) ** 2) + 0.5 * ridge * c @ c + w @ np.abs(c)


def _problem(seed=0, n=24, d=25, k=12):
    rng = np.random.default_rng(seed)
    bases = [np.linalg.qr(rng.standard_normal((d, 3)))[0] for _ in range(4)]
    X = np.stack([bases[i % 4] @ rng.standard_normal(3) for i in range(n)]) + 0.05 * rng.standard_normal((n, d))
    D = build_dictionary(X)
    return D, knn_dictionary(D, k), rng


@pytest.mark.parametrize("ridge,weighted,relax,k", [(0.0, False, 1.8, 12), (0.05, False, 1.8, 12),
                                                    (0.0, True, 1.0, 12), (0.02, True, 1.5, 12),
                                                    (0.0, False, 1.8, 21), (0.02, True, 1.8, 21)])
def test_per_column_admm_solves_the_weighted_elastic_lasso(ridge, weighted, relax, k):
    # k = 21: the kernel's inverse runs in rows padded to 24, with four-row blocks and single-row tails
    D, nb, rng = _problem(n=40, d=30, k=k) if k != 12 else _problem()
    n = nb.shape[0]
    thr = np.full(nb.shape, 0.03)
    if weighted:
        thr = thr * rng.uniform(0.2, 3.0, nb.shape)
        thr[rng.random(nb.shape) < 0.2] = 0.0                  # entries free of the l1 term (AkS: Theta = 0)
    coef, its, conv = admm_knn(D.atoms[:n], D.atoms, nb, thr, ridge, 0.1, 1e-12, 1e-12, 100000, True, relax)
    assert conv.all() and its.max() < 100000
    for i in range(n):
        A = D.atoms[nb[i]].T
        x = D.atoms[i]
        ref = ref_weighted_elastic_lasso(A, x, thr[i], ridge)
        c = coef[i]
        assert np.abs(c - ref).max() < 1e-6, i
        assert objective(A, x, c, thr[i], ridge) <= objective(A, x, ref, thr[i], ridge) + 1e-12
        # optimality: g = A^T (x - A c) - ridge c;  g_p = w_p sign(c_p) on the support, |g_p| <= w_p off it
        g = A.T @ (x - A @ c) - ridge * c
        on = c != 0
        assert np.allclose(g[on], thr[i][on] * np.sign(c[on]), atol=1e-8)
        assert np.all(np.abs(g[~on]) <= thr[i][~on] + 1e-8)


def test_ssc_and_lsr_through_self_expression_match_the_references():
    D, nb, _ = _problem(seed=1)
    n = nb.shape[0]
    lam = 0.04
    C1 = self_expression(None, D, nb, "l1", lam=lam, **TIGHT)
    C2 = self_expression(None, D, nb, "l2", lam=lam)
    for i in range(n):
        A = D.atoms[nb[i]].T
        x = D.atoms[i]
        ref1 = ref_weighted_elastic_lasso(A, x, np.full(nb.shape[1], lam))
        assert np.abs(C1[nb[i], i].toarray().ravel() - ref1).max() < 1e-6
        stacked = np.vstack([A, np.sqrt(lam) * np.eye(nb.shape[1])])
        ref2 = np.linalg.lstsq(stacked, np.concatenate([x, np.zeros(nb.shape[1])]), rcond=None)[0]
        np.testing.assert_allclose(C2[nb[i], i].toarray().ravel(), ref2, rtol=0, atol=1e-10)


def test_the_tolerances_catch_a_wrong_formula():
    """The 1e-6 tolerance of the tests above is tight enough: a halved lam, a dropped ridge or a halved LSR
    regulariser each move the reference solution by more than 1e-3 (a check of the tests, not of the code)."""
    D, nb, _ = _problem(seed=2)
    i = 5
    A = D.atoms[nb[i]].T
    x = D.atoms[i]
    w = np.full(nb.shape[1], 0.03)
    right = ref_weighted_elastic_lasso(A, x, w, 0.05)
    assert np.abs(ref_weighted_elastic_lasso(A, x, w / 2, 0.05) - right).max() > 1e-3     # lam/2 for lam
    assert np.abs(ref_weighted_elastic_lasso(A, x, w, 0.0) - right).max() > 1e-3          # ridge dropped
    lsr = np.linalg.solve(A.T @ A + 0.05 * np.eye(A.shape[1]), A.T @ x)
    assert np.abs(np.linalg.solve(A.T @ A + 0.025 * np.eye(A.shape[1]), A.T @ x) - lsr).max() > 1e-3
