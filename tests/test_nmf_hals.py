"""Accelerated HALS (several sweeps per row from one X U / X^T V): against a plain NumPy reference."""
import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.nmf import _linear, linear_nmf, ops
from tests.test_nmf import J, docs, start


def _rows_hals(F, A, G, sweeps, delta):
    """Each row: up to ``sweeps`` coordinate sweeps, (F_i G)_l recomputed per coordinate; stop when the
    squared change of a sweep is at most delta^2 times the first sweep's."""
    F = F.copy()
    for i in range(F.shape[0]):
        first = None
        for t in range(sweeps):
            old = F[i].copy()
            for j in range(F.shape[1]):
                if G[j, j] > 0:
                    F[i, j] = max(0.0, F[i, j] + (A[i, j] - F[i] @ G[:, j]) / G[j, j])
            ch = np.sum((F[i] - old) ** 2)
            first = ch if t == 0 else first
            if ch <= delta ** 2 * first:
                break
    return F


def ref_accelerated(X, U, V, iters, sweeps, delta):
    out = []
    for _ in range(iters):
        V = _rows_hals(V, X @ U, U.T @ U, sweeps, delta)          # paper: V from X^T U and U^T U
        U = _rows_hals(U, X.T @ V, V.T @ V, sweeps, delta)        # paper: U from X V and V^T V
        out.append((U, V))
    return out


@pytest.mark.parametrize("sparse", [False, True])
def test_accelerated_hals_matches_reference(sparse):
    X, _ = docs(seed=21)
    U0, V0 = start(X, 4)
    Xin = sp.csr_matrix(X) if sparse else X
    XT = ops.csr_transpose(Xin) if sparse else None
    U, V = U0.copy(), V0.copy()
    for t, (Ur, Vr) in enumerate(ref_accelerated(X, U0, V0, 5, ops.HALS_SWEEPS, ops.HALS_DELTA)):
        hist, _, _ = _linear.run_in_memory(Xin, XT, U, V, "hals", 1, 0.0, ops.sqnorm(Xin))
        np.testing.assert_allclose(V, Vr, rtol=1e-9, atol=1e-12, err_msg=f"V after iteration {t + 1}")
        np.testing.assert_allclose(U, Ur, rtol=1e-9, atol=1e-12, err_msg=f"U after iteration {t + 1}")
        assert hist[-1] == pytest.approx(J(X, Ur, Vr), rel=1e-10)


def test_more_sweeps_descend_at_least_as_far_per_pass():
    """From the same start, the first update with several sweeps reaches a lower objective than one sweep,
    and both never increase it."""
    X, _ = docs(seed=22)
    U0, V0 = start(X, 4)
    res = {}
    for sweeps in (1, ops.HALS_SWEEPS):
        U, V = U0.copy(), V0.copy()
        h, _, _ = _linear.run_in_memory(X, None, U, V, "hals", 40, 0.0, ops.sqnorm(X), sweeps=sweeps)
        assert np.all(np.diff(h) <= 1e-12 * h[0])
        res[sweeps] = h
    assert res[ops.HALS_SWEEPS][1] < res[1][1]


def test_accelerated_hals_reaches_a_stationary_point():
    """Projected gradient of J at the end is tiny: the same fixed points as one sweep (KKT of NNLS)."""
    X, _ = docs(seed=23)
    _, U, V, info = linear_nmf(X, 3, solver="hals", n_init=1, max_iter=2000, tol=1e-14, random_state=0,
                               return_info=True)
    U = U.copy()
    V = V.copy()
    gV = V @ (U.T @ U) - X @ U                   # dJ/dV
    gU = U @ (V.T @ V) - X.T @ V                 # dJ/dU
    pg = np.concatenate([np.where(V > 0, gV, np.minimum(gV, 0)).ravel(),
                         np.where(U > 0, gU, np.minimum(gU, 0)).ravel()])
    assert np.linalg.norm(pg) < 1e-5 * np.linalg.norm(X)
