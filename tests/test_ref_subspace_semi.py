"""AkS-SC and AkS-LRR against plain NumPy references written from DESIGN section 4 (paper 002).

Nothing here imports a helper of the code under test: the kNN supports, the per-column weighted
lasso (by coordinate descent, not ADMM), the Laplacians and the F-step system are written out
from the equations:

* supports N_i: the k atoms most similar to x_i, without i, its augmentations A(i) and, for a
  labelled i, the atoms whose known label differs (cannot-links);
* C-step: per column ``min_c 1/2 ||x_i - A c||^2 + ridge/2 ||c||^2 + sum_p w_p |c_p|`` with
  ``w = lam + gamma Theta_i`` (SSC; LSR: ``w = gamma Theta_i``, ridge = lam),
  ``Theta[a, i] = 1/2 ||f_a - f_i||^2``;
* F-step: ``(gamma L1 + mu2 L2 + mu1 Delta) F = mu1 Delta Yhat``, L1 the Laplacian of
  ``(|Ct| + |Ct|^T) / 2`` (Ct = C padded to N x N), L2 that of the sample-augmentation graph;
* AkS-LRR's C-step with the extra weighted l1 term, ``min 1/2 ||X - D^T C||^2 + lam ||C||_*
  + sum thr |C|`` on the supports, by a Condat-Vu primal-dual iteration (a different algorithm
  from the code's inexact ALM).
"""
import warnings

import numpy as np
import pytest

from bigclust.subspace import aks_sc
from bigclust.subspace.lrr import lrr_knn

N_PER, N_CLASSES, DIM, K_NB = 8, 3, 8, 5


def _data(seed=0):
    """Three 2-D subspaces of R^8 with noise, one noisy copy per sample as its augmentation."""
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.standard_normal((N_PER, 2)) @ np.linalg.qr(rng.standard_normal((DIM, 2)))[0].T
                   for _ in range(N_CLASSES)]) + 0.05 * rng.standard_normal((N_PER * N_CLASSES, DIM))
    y = np.repeat(np.arange(N_CLASSES), N_PER)
    X_aug = X + 0.05 * rng.standard_normal(X.shape)
    yl = np.full(y.size, -1)
    for c in range(N_CLASSES):
        yl[np.flatnonzero(y == c)[:2]] = c
    return X, X_aug, yl


def _unit(M):
    return M / np.linalg.norm(M, axis=1, keepdims=True)


def ref_supports(atoms, n, owner, atom_label, yl, k):
    """k most similar admissible atoms of every original (atoms are unit rows: cosine = -distance)."""
    S = atoms[:n] @ atoms.T
    nb = np.empty((n, k), dtype=np.int64)
    for i in range(n):
        bad = owner == i
        if yl[i] >= 0:
            bad |= (atom_label >= 0) & (atom_label != yl[i])
        s = np.where(bad, -np.inf, S[i])
        nb[i] = np.argsort(-s, kind="stable")[:k]
    return nb


def weighted_lasso_cd(A, x, w, ridge=0.0, sweeps=100000, tol=1e-14):
    """``min_c 1/2 ||x - A^T c||^2 + ridge/2 ||c||^2 + sum w |c|`` by cyclic coordinate descent."""
    G = A @ A.T + ridge * np.eye(A.shape[0])
    b = A @ x
    c = np.zeros(A.shape[0])
    for _ in range(sweeps):
        biggest = 0.0
        for p in range(c.size):
            r = b[p] - G[p] @ c + G[p, p] * c[p]
            new = np.sign(r) * max(abs(r) - w[p], 0.0) / G[p, p]
            biggest = max(biggest, abs(new - c[p]))
            c[p] = new
        if biggest < tol:
            break
    return c


def ref_aks_sc(X, X_aug, yl, *, regularizer, lam, gamma, mu1, mu2, k, n_outer):
    """DESIGN section 4's AkS-SC block coordinate descent, ``n_outer`` C-step / F-step rounds."""
    n = X.shape[0]
    atoms = np.vstack([_unit(X), _unit(X_aug)])
    N = atoms.shape[0]
    owner = np.concatenate([np.arange(n), np.arange(n)])          # augmented atom n + j is owned by j
    atom_label = yl[owner]
    nb = ref_supports(atoms, n, owner, atom_label, yl, k)
    K = int(yl.max()) + 1
    Yhat = np.zeros((N, K))
    lab = np.flatnonzero(yl >= 0)
    Yhat[lab, yl[lab]] = 1.0
    Delta = np.zeros(N)
    Delta[lab] = 1.0
    R = np.zeros((N, N))                                          # original j -- its augmentation n + j
    R[np.arange(n), n + np.arange(n)] = R[n + np.arange(n), np.arange(n)] = 1.0
    L2 = np.diag(R.sum(1)) - R
    F = np.zeros((N, K))
    for _ in range(n_outer):
        C = np.zeros((N, n))
        for i in range(n):
            theta = 0.5 * ((F[nb[i]] - F[i]) ** 2).sum(axis=1)
            if regularizer == "l1":
                c = weighted_lasso_cd(atoms[nb[i]], atoms[i], lam + gamma * theta)
            else:
                c = weighted_lasso_cd(atoms[nb[i]], atoms[i], gamma * theta, ridge=lam)
            C[nb[i], i] = c
        Ct = np.zeros((N, N))
        Ct[:, :n] = np.abs(C)
        W1 = (Ct + Ct.T) / 2
        L1 = np.diag(W1.sum(1)) - W1
        M = gamma * L1 + mu2 * L2 + mu1 * np.diag(Delta)
        F = np.linalg.solve(M, mu1 * Delta[:, None] * Yhat)
    return F, C


@pytest.mark.parametrize("regularizer", ["l1", "l2"])
def test_aks_sc_follows_the_numpy_block_coordinate_descent(regularizer):
    X, X_aug, yl = _data()
    params = dict(lam=0.05, gamma=0.1, mu1=100.0, mu2=100.0)
    n_outer = 3
    F_ref, C_ref = ref_aks_sc(X, X_aug, yl, regularizer=regularizer, k=K_NB, n_outer=n_outer, **params)
    # the reference F is the A.2 label matrix: non-negative and row-stochastic without any projection
    assert F_ref.min() > -1e-12 and np.abs(F_ref.sum(1) - 1).max() < 1e-10
    with warnings.catch_warnings():
        warnings.simplefilter("error")                            # no ridge, no unconverged solve
        labels, info = aks_sc(X, yl, X_aug=X_aug, origin=np.arange(X.shape[0]), regularizer=regularizer,
                              n_neighbors=K_NB, max_outer=n_outer, tol=0.0, knn_method="exact", eps_abs=1e-13,
                              eps_rel=1e-13, max_iter=200000, return_info=True, **params)
    assert info["n_outer"] == n_outer
    np.testing.assert_allclose(info["C"].toarray(), C_ref, rtol=0, atol=1e-8)
    np.testing.assert_allclose(info["F"], F_ref, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(labels, np.argmax(F_ref[:X.shape[0]], axis=1))
    # the coupling is at work: the last round's thresholds differ from lam (F moved the coefficients)
    F1, C1 = ref_aks_sc(X, X_aug, yl, regularizer=regularizer, k=K_NB, n_outer=1, **params)
    assert np.abs(C_ref - C1).max() > 1e-4 and np.abs(F_ref - F1).max() > 1e-4


# -- AkS-LRR: the support-restricted LRR C-step with an extra weighted l1 term ------------------------


def ref_lrr_weighted_l1(Xs, D, nb, lam, thr, n_iter=20000):
    """``min 1/2 sum_i ||x_i - A_i^T c_i||^2 + lam ||C||_* + sum thr |C|`` (C (N, n) zero off the supports).

    Condat-Vu primal-dual splitting: f = the smooth data term, g = the weighted l1 norm (separable prox),
    h = lam ||.||_* composed with the embedding L of the support coefficients into (N, n);
    prox of h* by Moreau: ``v - sigma SVT(v / sigma, lam / sigma)``.
    """
    n, k = nb.shape
    A = D[nb]                                                     # (n, k, d)
    G = np.einsum("ikd,ild->ikl", A, A)
    b = np.einsum("ikd,id->ik", A, Xs)
    beta = max(np.linalg.eigvalsh(G[i]).max() for i in range(n))
    sigma = 1.0
    tau = 0.99 / (beta / 2 + sigma)                              # tau (beta/2 + sigma ||L||^2) < 1, ||L|| = 1
    cols = np.repeat(np.arange(n), k)

    def embed(c):
        M = np.zeros((D.shape[0], n))
        np.add.at(M, (nb.ravel(), cols), c.ravel())
        return M

    def svt(M, t):
        U, s, Vt = np.linalg.svd(M, full_matrices=False)
        return (U * np.maximum(s - t, 0)) @ Vt

    c = np.zeros((n, k))
    Yd = np.zeros((D.shape[0], n))
    for _ in range(n_iter):
        grad = np.einsum("ikl,il->ik", G, c) - b
        v = c - tau * (grad + Yd[nb, np.arange(n)[:, None]])
        c_new = np.sign(v) * np.maximum(np.abs(v) - tau * thr, 0.0)
        W = Yd + sigma * embed(2 * c_new - c)
        Yd = W - sigma * svt(W / sigma, lam / sigma)
        step = np.abs(c_new - c).max()
        c = c_new
        if step < 1e-14:
            break
    return c


def _lrr_problem():
    X, X_aug, _ = _data(seed=3)
    n = X.shape[0]
    atoms = np.vstack([_unit(X), _unit(X_aug)])
    owner = np.concatenate([np.arange(n), np.arange(n)])
    nb = ref_supports(atoms, n, owner, np.full(2 * n, -1), np.full(n, -1), K_NB)
    rng = np.random.default_rng(1)
    thr = 0.05 * rng.random(nb.shape)                            # gamma Theta: entry-dependent weights
    thr[rng.random(nb.shape) < 0.3] = 0.0                         # some entries free of the l1 term
    return atoms, n, nb, thr


def test_lrr_with_weighted_l1_reaches_the_optimum_of_its_objective():
    atoms, n, nb, thr = _lrr_problem()
    lam = 0.05
    ref = ref_lrr_weighted_l1(atoms[:n], atoms, nb, lam, thr)
    # a slowly growing penalty (eta = 1.01): the inexact ALM then stops at the optimum (see the xfail below)
    coef, _, conv, _ = lrr_knn(atoms[:n], atoms, nb, lam, rho=lam, rho_max=1e8, eta=1.01, tol=1e-11,
                               max_iter=20000, thresholds=thr)
    assert conv
    np.testing.assert_allclose(coef, ref, rtol=0, atol=1e-7)
    # the l1 block matters: without it the optimum is another point
    plain = ref_lrr_weighted_l1(atoms[:n], atoms, nb, lam, np.zeros_like(thr))
    assert np.abs(plain - ref).max() > 1e-3


@pytest.mark.xfail(strict=True, reason="with the default penalty growth eta = 1.1 (lrr(), aks_sc's nuclear C-step) "
                   "the inexact ALM meets its stop rule 3e-3 away from the optimum (objective 4e-7 too high; "
                   "plain LRR 1.5e-4 away): the penalty has grown ~1e6-fold by then, so C - J and the steps of J "
                   "fall below tol before C is optimal")
def test_lrr_default_penalty_growth_reaches_the_optimum():
    atoms, n, nb, thr = _lrr_problem()
    ref = ref_lrr_weighted_l1(atoms[:n], atoms, nb, 0.05, thr)
    coef, _, conv, _ = lrr_knn(atoms[:n], atoms, nb, 0.05, rho=0.05, rho_max=1e8, eta=1.1, tol=1e-11,
                               max_iter=20000, thresholds=thr)
    assert conv
    np.testing.assert_allclose(coef, ref, rtol=0, atol=1e-6)
