"""Sinkhorn-Knopp and (iterated) Ncut: the paper's 3 x 3 example, the symmetric
update, the direct Ncut formula, blocked kernels."""
import numpy as np
import pytest

from bigclust.normalize import _numba as nb
from bigclust.normalize import ncut, quality, sinkhorn

# paper 000, section I.B: A, its row normalisation, then its column normalisation, and the limit P
PAPER_A = np.array([[1.0, 0.8, 0.6], [0.8, 1.0, 0.4], [0.6, 0.4, 1.0]])
PAPER_ROWS = np.array([[0.4167, 0.3333, 0.2500], [0.3636, 0.4545, 0.1818], [0.3000, 0.2000, 0.5000]])
PAPER_COLS = np.array([[0.3857, 0.3374, 0.2683], [0.3366, 0.4601, 0.1951], [0.2777, 0.2025, 0.5366]])
PAPER_P = np.array([[0.3886, 0.3392, 0.2722], [0.3392, 0.4627, 0.1980], [0.2722, 0.1980, 0.5297]])


def gauss(n, gamma=1.0, d=5, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / gamma)


def test_paper_sinkhorn_example():
    """The paper prints 4 decimals: its steps must agree to half a unit in the last place."""
    np.testing.assert_allclose(sinkhorn(PAPER_A, 1, variant="alternating"), PAPER_ROWS, atol=5.1e-5)
    np.testing.assert_allclose(sinkhorn(PAPER_A, 2, variant="alternating"), PAPER_COLS, atol=5.1e-5)
    for variant in ("alternating", "symmetric"):
        P, info = sinkhorn(PAPER_A, 10000, tol=1e-14, variant=variant, return_info=True)
        assert info.converged
        np.testing.assert_allclose(P, PAPER_P, atol=5.1e-5)
        np.testing.assert_allclose(P, P.T, atol=1e-13)
        np.testing.assert_allclose(P.sum(axis=0), 1, atol=1e-13)
        np.testing.assert_allclose(P.sum(axis=1), 1, atol=1e-13)


def test_symmetric_update_is_diag_scaling_and_agrees_with_alternating():
    K = gauss(80, gamma=0.5, seed=1)
    P, info = sinkhorn(K, 5000, tol=1e-13, return_info=True)
    d = info.mu
    np.testing.assert_allclose(P, d[:, None] * K * d[None, :], rtol=1e-14)
    np.testing.assert_allclose(P.sum(axis=1), 1, atol=1e-12)
    Pa = sinkhorn(K, 5000, tol=1e-13, variant="alternating")
    np.testing.assert_allclose(P, Pa, atol=1e-12)


def test_symmetric_update_reference_iterations():
    K = gauss(30, gamma=0.5, seed=2)
    d = np.ones(30)
    for _ in range(7):
        d = np.sqrt(d / (K @ d))
    np.testing.assert_allclose(sinkhorn(K, 7), d[:, None] * K * d[None, :], rtol=1e-13)


def test_sinkhorn_history_and_float32():
    K = gauss(40, gamma=0.5, seed=3)
    y = np.arange(40) % 4
    for variant in ("symmetric", "alternating"):
        _, info = sinkhorn(K, 9, y=y, record_every=2, variant=variant, return_info=True)
        assert [h[0] for h in info.history] == [2, 4, 6, 8]
        for t, mb, mc in info.history:
            np.testing.assert_allclose((mb, mc), quality(sinkhorn(K, t, variant=variant), y), rtol=1e-10)
    P32 = sinkhorn(K.astype(np.float32), 50)
    assert P32.dtype == np.float32
    np.testing.assert_allclose(P32, sinkhorn(K, 50), atol=1e-6)


def test_ncut_direct_formula_and_iteration():
    K = gauss(50, gamma=0.5, seed=4)
    d = K.sum(axis=1) ** -0.5
    np.testing.assert_allclose(ncut(K), d[:, None] * K * d[None, :], rtol=1e-14)
    Kt = K.copy()
    for _ in range(6):  # Zass-Shashua: K <- D^-1/2 K D^-1/2 with the current D
        dt = Kt.sum(axis=1) ** -0.5
        Kt = dt[:, None] * Kt * dt[None, :]
    np.testing.assert_allclose(ncut(K, 6), Kt, rtol=1e-12)
    np.testing.assert_allclose(ncut(K, 6), sinkhorn(K, 6), rtol=1e-14)  # the same iteration
    errs = [ncut(K, it, return_info=True)[1].row_err for it in (1, 10, 200)]
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-10


def test_scaling_kernels_blocked_equal_whole():
    K = gauss(45, gamma=0.5, seed=5)
    d = np.random.default_rng(0).uniform(0.5, 1.5, 45)
    y = np.arange(45) % 3
    whole = np.empty(45)
    nb.sk_matvec_block(K, d, whole)
    np.testing.assert_allclose(whole, K @ d, rtol=1e-14)
    for kernel in (nb.sk_matvec_block, nb.sk_matvec_block_serial):
        out = np.empty(45)
        for row0 in range(0, 45, 10):
            kernel(K[row0:row0 + 10], d, out[row0:row0 + 10])
        np.testing.assert_array_equal(out, whole)
    out, outc = np.empty(45), np.empty(45)
    for row0 in range(0, 45, 10):
        nb.sk_matvec_class_block(K[row0:row0 + 10], d, y, row0, out[row0:row0 + 10], outc[row0:row0 + 10])
    same = y[:, None] == y[None, :]
    np.testing.assert_allclose(outc, (K * same) @ d, rtol=1e-14)
