"""Linear NMF (paper 001, 3-1..3-5): kernels against NumPy references written in the paper's
orientation, monotonicity, normalisation, streamed == in memory, CSR == dense, input checks."""
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust._util.errors import DataError, UserError
from bigclust.algo.metrics import accuracy
from bigclust.nmf import linear_nmf, linear_nmf_streamed
from bigclust.nmf import _linear, ops
from bigclust.nmf._numba import EPS

pytestmark = pytest.mark.filterwarnings("ignore::bigclust.nmf.NMFConvergenceWarning")


def docs(n=90, m=40, k=3, seed=0, density=0.3):
    """Document-like counts: each class draws words from its own sparse topic; rows are non-empty."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % k
    topics = rng.uniform(0, 1, (k, m)) * (rng.uniform(0, 1, (k, m)) < density)
    X = rng.poisson(3 * topics[y] + 0.05).astype(float)
    X[X.sum(1) == 0, 0] = 1.0
    return X, y


def start(X, k, seed=1):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.1, 1, (X.shape[1], k)), rng.uniform(0.1, 1, (X.shape[0], k))


# -- references in the paper's orientation: Xp = X^T is m x n (terms x documents), Xp ~ U V^T ----


def ref_mu(X, U, V, iters):
    """(3-3) then (3-2), written on the paper's Xp; one (U, V) per iteration."""
    Xp = X.T
    out = []
    for _ in range(iters):
        V = V * (Xp.T @ U) / np.maximum(V @ (U.T @ U), EPS)      # v_ij <- v_ij (X^T U)_ij / (V U^T U)_ij
        U = U * (Xp @ V) / np.maximum(U @ (V.T @ V), EPS)        # u_ij <- u_ij (X V)_ij / (U V^T V)_ij
        out.append((U, V))
    return out


def ref_hals(X, U, V, iters):
    """Exact coordinate descent on J = 1/2 ||Xp - U V^T||^2, column by column, V first."""
    Xp = X.T
    out = []
    for _ in range(iters):
        V, U = V.copy(), U.copy()
        A, G = Xp.T @ U, U.T @ U
        for j in range(U.shape[1]):
            V[:, j] = np.maximum(0, V[:, j] + (A[:, j] - V @ G[:, j]) / G[j, j])
        B, H = Xp @ V, V.T @ V
        for j in range(U.shape[1]):
            U[:, j] = np.maximum(0, U[:, j] + (B[:, j] - U @ H[:, j]) / H[j, j])
        out.append((U, V))
    return out


def J(X, U, V):
    return 0.5 * np.sum((X.T - U @ V.T) ** 2)                     # (3-1) on the paper's Xp


@pytest.mark.parametrize("solver,ref", [("mu", ref_mu), ("hals", ref_hals)])
@pytest.mark.parametrize("sparse", [False, True])
def test_iterates_match_reference(solver, ref, sparse):
    X, _ = docs()
    U0, V0 = start(X, 3)
    Xin = sp.csr_matrix(X) if sparse else X
    Xin = ops.csr_transpose(ops.csr_transpose(Xin)) if sparse else Xin
    XT = ops.csr_transpose(Xin) if sparse else None
    U, V = U0.copy(), V0.copy()
    for t, (Ur, Vr) in enumerate(ref(X, U0, V0, 6)):
        hist, _, _ = _linear.run_in_memory(Xin, XT, U, V, solver, 1, 0.0, ops.sqnorm(Xin), sweeps=1)
        np.testing.assert_allclose(V, Vr, rtol=1e-10, atol=1e-14, err_msg=f"V after iteration {t + 1}")
        np.testing.assert_allclose(U, Ur, rtol=1e-10, atol=1e-14, err_msg=f"U after iteration {t + 1}")
        # the cheap objective (traces) equals the direct one
        assert hist[-1] == pytest.approx(J(X, Ur, Vr), rel=1e-10)


@pytest.mark.parametrize("solver", ["mu", "hals"])
def test_objective_never_increases(solver):
    X, _ = docs(seed=3)
    _, _, _, info = linear_nmf(X, 4, solver=solver, n_init=3, max_iter=150, tol=0, random_state=0,
                               return_info=True)
    h = info.objective
    assert h.shape == (151,)
    assert np.all(np.diff(h) <= 1e-12 * h[0])
    assert h[-1] < 0.7 * h[0]


def test_normalisation_keeps_product_and_unit_columns():
    X, _ = docs()
    U0, V0 = start(X, 3)
    U, V = U0.copy(), V0.copy()
    _linear.run_in_memory(X, None, U, V, "mu", 20, 0.0, ops.sqnorm(X))
    lab, Un, Vn = linear_nmf(X, 3, init=(U0, V0), n_init=1, max_iter=20, tol=0)
    np.testing.assert_allclose(Vn @ Un.T, V @ U.T, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(Un, axis=0), 1.0, rtol=1e-13)
    # (3-4): V's columns scaled by the norms of U *before* (3-5)
    np.testing.assert_allclose(Vn, V * np.linalg.norm(U, axis=0), rtol=1e-13)
    np.testing.assert_array_equal(lab, np.argmax(Vn, axis=1))


@pytest.mark.parametrize("solver", ["mu", "hals"])
def test_csr_equals_dense(solver):
    X, _ = docs(seed=5)
    a = linear_nmf(X, 3, solver=solver, n_init=2, max_iter=30, random_state=4, return_info=True)
    b = linear_nmf(sp.csr_matrix(X), 3, solver=solver, n_init=2, max_iter=30, random_state=4, return_info=True)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(b[1], a[1], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(b[2], a[2], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(b[3].objective, a[3].objective, rtol=1e-12)


@pytest.mark.parametrize("solver", ["mu", "hals"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("bounds", [[0, 97], [0, 1, 50, 97], [0, 10, 20, 30, 64, 65, 97]])
def test_streamed_equals_in_memory(solver, sparse, bounds):
    X, _ = docs(n=97, seed=6)
    Xs = sp.csr_matrix(X) if sparse else X
    calls = []

    def read_block(i):
        calls.append(i)
        return Xs[bounds[i]:bounds[i + 1]]

    kw = dict(solver=solver, n_init=2, max_iter=40, tol=1e-7, random_state=11, return_info=True)
    lab_s, U_s, V_s, info_s = linear_nmf_streamed(read_block, bounds, X.shape[1], 3, **kw)
    lab, U, V, info = linear_nmf(Xs, 3, **kw)
    np.testing.assert_allclose(U_s, U, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(V_s, V, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(info_s.objective, info.objective, rtol=1e-10)
    assert info_s.n_iters.tolist() == info.n_iters.tolist()
    np.testing.assert_array_equal(lab_s, lab)
    nb = len(bounds) - 1
    # one validation pass, then one pass per iteration for all restarts together
    assert len(calls) == nb * (1 + int(info.n_iters.max()))


def test_streamed_map_blocks_hook_gets_module_level_function():
    X, _ = docs(n=40)
    bounds = [0, 15, 40]
    seen = []

    def hook(fn, args_list):
        pickle.dumps(fn)  # a module-level function: could be shipped as a Dask task
        seen.append(fn.__name__)
        return [fn(*a) for a in args_list]

    read = [X[:15], X[15:]].__getitem__
    a = linear_nmf_streamed(read, bounds, X.shape[1], 2, max_iter=5, tol=0, random_state=0, map_blocks=hook)
    b = linear_nmf_streamed(read, bounds, X.shape[1], 2, max_iter=5, tol=0, random_state=0)
    assert seen == ["block_stats"] + ["block_step"] * 5
    np.testing.assert_array_equal(a[1], b[1])


def test_planted_clusters_recovered():
    X, y = docs(n=150, m=60, k=3, seed=2)
    for solver in ("mu", "hals"):
        lab, _, _ = linear_nmf(sp.csr_matrix(X), 3, solver=solver, n_init=5, random_state=0)
        assert accuracy(y, lab) >= 0.95
    lab, _, _ = linear_nmf(X, 3, ncw=True, n_init=5, random_state=0)
    assert accuracy(y, lab) >= 0.95
    lab, _, _ = linear_nmf(X, 3, init="nndsvd", n_init=1, random_state=0)
    assert accuracy(y, lab) >= 0.95


def test_ncw_is_nmf_on_scaled_rows():
    X, _ = docs(seed=7)
    U0, V0 = start(X, 3)
    d = X @ (X.T @ np.ones(X.shape[0]))                     # d = K 1, K = X X^T never formed
    Xs = X / np.sqrt(d)[:, None]                              # paper: X D^(-1/2) (columns)
    for Xin in (X, sp.csr_matrix(X)):
        a = linear_nmf(Xin, 3, init=(U0, V0), n_init=1, max_iter=25, tol=0, ncw=True, return_info=True)
        b = linear_nmf(Xs, 3, init=(U0, V0), n_init=1, max_iter=25, tol=0)
        np.testing.assert_allclose(a[1], b[1], rtol=1e-10)
        np.testing.assert_allclose(a[2], b[2], rtol=1e-10)
        np.testing.assert_allclose(a[3].ncw_weights, 1 / np.sqrt(np.sum((X @ X.T), axis=1)), rtol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_same_result_for_a_seed_whatever_the_thread_count(sparse):
    import numba

    X, _ = docs(n=300, m=200, seed=9)            # more rows than row ranges: every chunk is used
    X = sp.csr_matrix(X) if sparse else X
    a = linear_nmf(X, 3, n_init=2, max_iter=20, random_state=5)
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        b = linear_nmf(X, 3, n_init=2, max_iter=20, random_state=5)
    finally:
        numba.set_num_threads(old)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[2], b[2])


def _one_line(excinfo):
    assert "\n" not in str(excinfo.value)
    return str(excinfo.value)


@pytest.mark.parametrize("make,match", [
    (lambda X: X - 0.5, "negative entries .*use the bilinear model"),
    (lambda X: np.where(np.arange(X.shape[0])[:, None] == 4, np.nan, X), "non-finite entry in row 4"),
    (lambda X: np.vstack([X[:3], np.zeros((1, X.shape[1])), X[3:]]), "all-zero document.*row 3"),
    (lambda X: X[:2], "n_components=3 is larger than the number of documents"),
    (lambda X: X[0], "must be 2-D"),
])
@pytest.mark.parametrize("sparse", [False, True])
def test_bad_inputs_raise_one_line_data_error(make, match, sparse):
    X, _ = docs(n=12)
    bad = make(X)
    if sparse and bad.ndim == 2:
        bad = sp.csr_matrix(bad)
    with pytest.raises(DataError, match=match) as e:
        linear_nmf(bad, 3, n_init=1, max_iter=2)
    _one_line(e)


def test_zero_terms_are_kept_and_parameters_checked():
    X, _ = docs(n=30)
    X[:, 5] = 0.0                                              # an all-zero term is harmless
    lab, U, V = linear_nmf(X, 3, n_init=1, max_iter=10, random_state=0)
    assert np.isfinite(U).all() and np.all(U[5] == 0)
    with pytest.raises(UserError, match="solver"):
        linear_nmf(X, 3, solver="als")
    with pytest.raises(UserError, match="pass n_init=1"):
        linear_nmf(X, 3, init=start(X, 3))
    with pytest.raises(DataError, match=r"block 1 has shape \(5, 40\), expected \(10, 40\)"):
        linear_nmf_streamed([X[:20], X[20:25]].__getitem__, [0, 20, 30], 40, 3)
    Xb = X[20:].copy()
    Xb[3, 7] = -1.0
    with pytest.raises(DataError, match="negative entries .*row 23"):
        linear_nmf_streamed([X[:20], Xb].__getitem__, [0, 20, 30], 40, 3)


@pytest.mark.parametrize("solver,sk_solver", [("mu", "mu"), ("hals", "cd")])
def test_same_iterates_as_scikit_learn(solver, sk_solver):
    """scikit-learn's NMF (X ~ W H, W = our V, H = our U^T) also updates W first: same iterates."""
    from sklearn.decomposition import NMF

    X, _ = docs(seed=12)
    U0, V0 = start(X, 3)
    U, V = U0.copy(), V0.copy()
    hist, _, _ = _linear.run_in_memory(sp.csr_matrix(X), ops.csr_transpose(sp.csr_matrix(X)), U, V, solver, 7,
                                       0.0, ops.sqnorm(X), sweeps=1)
    model = NMF(3, solver=sk_solver, beta_loss="frobenius", init="custom", max_iter=7, tol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its own ConvergenceWarning
        W = model.fit_transform(sp.csr_matrix(X), W=V0.copy(), H=U0.T.copy())
    assert model.n_iter_ == 7
    np.testing.assert_allclose(V, W, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(U, model.components_.T, rtol=1e-10, atol=1e-13)
    assert hist[-1] == pytest.approx(0.5 * model.reconstruction_err_ ** 2, rel=1e-10)


@pytest.mark.parametrize("r", [1, 2, 3, 63, 64, 65, 197, 259, 333, 512])
def test_mu_rows_fours_match_the_formula_for_every_range_size(r):
    """mu_rows takes rows in fours inside each fixed row range: ranges of 1 to 8 rows (fours and single
    rows, every remainder), zeros in F (they stay zero)."""
    from bigclust.nmf import _numba as K

    rng = np.random.default_rng(r)
    k = 5
    F = rng.uniform(0.1, 1, (r * 3, k))[:: 3].copy()          # r rows
    F[rng.uniform(size=F.shape) < 0.2] = 0.0
    A = rng.uniform(0, 1, (r, k))
    S = rng.uniform(0, 1, (k, k))
    S = S @ S.T
    F0 = F.copy()
    den = F0 @ S
    want = np.where(F0 == 0, 0.0, F0 * A / np.maximum(den, EPS))
    gp = np.empty((K._CHUNKS, k, k))
    co = np.empty(K._CHUNKS)
    cn = np.empty(K._CHUNKS)
    K.mu_rows(F, A, F, S, gp, co, cn, True, True)
    np.testing.assert_allclose(F, want, rtol=1e-13, atol=0)
    assert np.array_equal(F == 0, F0 == 0)
    np.testing.assert_allclose(gp.sum(0), want.T @ want, rtol=1e-12)
    assert co.sum() == pytest.approx(np.sum(F0 * A), rel=1e-12)
    assert cn.sum() == pytest.approx(np.sum(want * A), rel=1e-12)
    # the Gram partials are symmetric bit for bit (each entry sums the same products in the same order)
    assert np.array_equal(gp, gp.transpose(0, 2, 1))


def test_dense_row_counts_are_the_checks_of_numpy():
    X = np.random.default_rng(0).random((40, 17)) * (np.random.default_rng(1).random((40, 17)) < 0.3)
    X[3, 4], X[5, 6], X[7, 8], X[9] = np.nan, -np.inf, -2.0, 0.0
    nnz, nonfinite, negative = ops.dense_row_counts(X)
    assert np.array_equal(nnz, (X != 0).sum(1))
    assert np.array_equal(nonfinite, (~np.isfinite(X)).sum(1))
    assert np.array_equal(negative, (X < 0).sum(1))
