"""Dense X in linear NMF (issue 28, item 5): the products' forms and one MU / HALS iteration against NumPy.

A dense X with few nonzeros is multiplied as CSR (``ops.product_form``), a denser one by BLAS; either way
one iteration must be the paper's update, written out here in plain NumPy (tolerances far below what a
wrong formula, a wrong update order or a stale Gram matrix would give).
"""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.nmf import linear_nmf, ops, random_factors


def _images(n=120, m=50, share=0.2, seed=0):
    """Non-negative rows with about ``share`` nonzeros, none all zero."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, m)) * (rng.random((n, m)) < share)
    X[np.arange(n), rng.integers(0, m, n)] += 0.5
    return X


def _start(X, k, seed=1):
    n, m = X.shape
    return random_factors(seed, [(m, k), (n, k)], float(np.sqrt(X.mean() / k)))


def _mu_reference(X, U, V, iters):
    """Plain NumPy MU: V first (from X U and U^T U), then U from X^T V and V^T V of the new V."""
    U, V = U.copy(), V.copy()
    for _ in range(iters):
        V *= (X @ U) / (V @ (U.T @ U))
        U *= (X.T @ V) / (U @ (V.T @ V))
    return U, V


def _hals_reference(X, U, V):
    """One fast-HALS iteration (one coordinate sweep per row, latest values), V first then U."""
    U, V = U.copy(), V.copy()
    for F, A, G in ((V, lambda: X @ U, lambda: U.T @ U), (U, lambda: X.T @ V, lambda: V.T @ V)):
        A, G = A(), G()
        for i in range(F.shape[0]):
            for l in range(F.shape[1]):
                if G[l, l] > 0:
                    F[i, l] = max(0.0, F[i, l] + (A[i, l] - F[i] @ G[:, l]) / G[l, l])
    return U, V


@pytest.mark.parametrize("share", [0.2, 0.9])   # multiplied as CSR / by BLAS
def test_dense_mu_iterations_match_numpy(share):
    X = _images(share=share)
    assert sp.issparse(ops.product_form(X)) == (share < ops.CSR_BELOW)
    U0, V0 = _start(X, 4)
    labels, U, V, info = linear_nmf(X, 4, init=(U0, V0), n_init=1, max_iter=3, tol=0.0, return_info=True)
    Ur, Vr = _mu_reference(X, U0, V0, 3)
    np.testing.assert_allclose(V @ U.T, Vr @ Ur.T, rtol=1e-10, atol=1e-14)
    J = 0.5 * np.sum((X - Vr @ Ur.T) ** 2)
    assert abs(info.objective[-1] - J) <= 1e-10 * J
    assert abs(info.objective[0] - 0.5 * np.sum((X - V0 @ U0.T) ** 2)) <= 1e-10 * J


@pytest.mark.parametrize("share", [0.2, 0.9])
def test_dense_hals_one_sweep_matches_numpy(share, monkeypatch):
    X = _images(share=share, seed=2)
    U0, V0 = _start(X, 5)
    monkeypatch.setattr(ops, "HALS_SWEEPS", 1)
    _, U, V, info = linear_nmf(X, 5, solver="hals", init=(U0, V0), n_init=1, max_iter=1, tol=0.0, return_info=True)
    Ur, Vr = _hals_reference(X, U0, V0)
    np.testing.assert_allclose(V @ U.T, Vr @ Ur.T, rtol=1e-9, atol=1e-13)
    J = 0.5 * np.sum((X - Vr @ Ur.T) ** 2)
    assert abs(info.objective[-1] - J) <= 1e-10 * J


def test_dense_as_csr_is_bit_for_bit_the_sparse_run():
    """The CSR form of a dense X is what a CSR X gives: same iterates to the last bit."""
    X = _images(share=0.15, seed=3)
    U0, V0 = _start(X, 3)
    for solver in ("mu", "hals"):
        a = linear_nmf(X, 3, solver=solver, init=(U0, V0), n_init=1, max_iter=20, tol=0.0, return_info=True)
        b = linear_nmf(sp.csr_matrix(X), 3, solver=solver, init=(U0, V0), n_init=1, max_iter=20, tol=0.0,
                       return_info=True)
        for x, y in zip(a[:3], b[:3]):
            assert np.array_equal(x, y)
        # ||X||^2 is summed over the dense X as given (its zeros change the summation's blocking)
        np.testing.assert_allclose(a[3].objective, b[3].objective, rtol=1e-13)


def test_dense_mu_equals_sklearn_from_the_same_start():
    from sklearn.decomposition import NMF

    X = _images(share=0.25, seed=4)
    U0, V0 = _start(X, 4)
    info = linear_nmf(X, 4, init=(U0, V0), n_init=1, max_iter=30, tol=0.0, return_info=True)[3]
    est = NMF(4, init="custom", solver="mu", max_iter=30, tol=0.0)
    with warnings.catch_warnings():   # scikit-learn may say max_iter was reached
        warnings.simplefilter("ignore")
        est.fit_transform(X, W=V0.copy(), H=U0.T.copy())
    J = 0.5 * est.reconstruction_err_ ** 2
    assert abs(info.objective[-1] - J) <= 1e-9 * J


def test_product_form_and_transpose_are_canonical():
    X = _images(n=70, m=33, share=0.1, seed=5)
    X[5] = 0.0                                   # an empty row and column are kept as such
    X[:, 7] = 0.0
    C = ops.product_form(X)
    assert sp.issparse(C) and C.indices.dtype == np.int32 and C.indptr.dtype == np.int64
    assert C.has_canonical_format and np.array_equal(C.toarray(), X)
    T = ops.csr_transpose(C)
    assert T.has_sorted_indices and T.indptr.dtype == np.int64 and np.array_equal(T.toarray(), X.T)
    assert ops.product_form(np.ones((4, 3))) is not None and not sp.issparse(ops.product_form(np.ones((4, 3))))
    # the products (rows of 0..9 nonzeros: every remainder of the four-at-a-time loop)
    M = np.random.default_rng(0).random((33, 6))
    np.testing.assert_allclose(ops.matmul(C, M), X @ M, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(ops.tmatmul(C, np.ones((70, 2)), T), X.T @ np.ones((70, 2)), rtol=1e-13)
    np.testing.assert_allclose(ops.tmatmul(X, M[:, :2].repeat(3, 0)[:70]), X.T @ M[:, :2].repeat(3, 0)[:70],
                               rtol=1e-13)


@pytest.mark.parametrize("k", [6, 16])   # M of 0.43 MB (no prefetches) and 1.15 MB (prefetched rows)
def test_csr_product_sums_each_entry_in_stored_order(k):
    """The CSR product is the row loop over the nonzeros in stored order, bit for bit, whether or not the
    kernel prefetches the gathered rows of M (it does only when M outgrows the cache)."""
    from bigclust.nmf import _numba

    X = sp.random(60, 9000, density=0.006, format="csr", random_state=3)
    X.data += 0.1
    C = ops.product_form(X.toarray())
    M = np.random.default_rng(1).random((9000, k))
    assert (M.nbytes > _numba._PREFETCH_BYTES) == (k == 16)
    ref = np.zeros((60, k))
    for i in range(60):
        for p in range(C.indptr[i], C.indptr[i + 1]):
            ref[i] = ref[i] + C.data[p] * M[C.indices[p]]
    assert np.array_equal(ops.matmul(C, M), ref)
