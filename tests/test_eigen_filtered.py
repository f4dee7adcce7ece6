"""ARPACK on a Chebyshev filter of P (bigclust.algo._filtered) finds P's own top eigenpairs: against plain ARPACK and
dense eigh, on connected and split graphs, with its cut below the k-th eigenvalue or its fallback."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import subspace_angles
from scipy.special import eval_chebyt

from bigclust.algo import _filtered, spectral
from bigclust.algo.affinity import knn_kernel
from bigclust.algo.spectral import top_eigenvectors
from bigclust.normalize import sinkhorn


def _graph(n=3000, d=6, k=15, seed=0, blobs=5):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=1.5, size=(blobs, d))
    X = centres[rng.integers(blobs, size=n)] + rng.normal(size=(n, d))
    K = knn_kernel(X, k, gamma="median")
    return sp.csr_matrix(sinkhorn(K, n_iter=500, tol=1e-10))


@pytest.fixture
def filter_everywhere(monkeypatch):
    calls = []
    real = _filtered.filtered_eigsh

    def counted(*a, **kw):
        out = real(*a, **kw)
        calls.append(out is not None)
        return out
    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    monkeypatch.setattr(_filtered, "filtered_eigsh", counted)
    return calls


@pytest.mark.parametrize("seed", [0, 1])
def test_filtered_eigenpairs_are_arpack_s(filter_everywhere, seed):
    P = _graph(seed=seed)
    assert spectral.components(P)[0] == 1
    k = 11
    w, V = top_eigenvectors(P, k)
    assert filter_everywhere == [True]           # the filter ran and its cut held
    w0, V0 = top_eigenvectors(P, k, solver="arpack")
    assert filter_everywhere == [True]           # "arpack": ARPACK on P itself
    exact = np.linalg.eigvalsh(P.toarray())[::-1][:k]
    np.testing.assert_allclose(w, exact, rtol=0, atol=1e-10)
    np.testing.assert_allclose(w0, exact, rtol=0, atol=1e-10)
    assert np.max(subspace_angles(V, V0)) < 1e-6
    assert np.max(np.abs(P @ V - V * w)) < 1e-7   # eigenpairs of P, not only of the filter


def test_filtered_per_component_on_a_split_graph(filter_everywhere):
    A, B = _graph(n=2500, seed=2, blobs=3), _graph(n=2000, seed=3, blobs=4)
    P = sp.block_diag([A, B], format="csr")
    order = np.random.default_rng(0).permutation(P.shape[0])   # components interleaved in the data's order
    P = P[order][:, order].tocsr()
    k = 8
    w, V = top_eigenvectors(P, k)
    assert filter_everywhere and all(filter_everywhere)        # each large block through the filter
    w0, V0 = top_eigenvectors(P, k, solver="arpack")
    np.testing.assert_allclose(w, w0, rtol=0, atol=1e-10)
    assert w[0] == pytest.approx(1.0) and w[1] == pytest.approx(1.0)   # one top eigenvalue per component
    assert np.max(subspace_angles(V, V0)) < 1e-6


def test_a_cut_above_the_k_th_eigenvalue_is_refused_and_plain_arpack_answers(monkeypatch):
    P = _graph(seed=4)
    k = 11
    exact = np.linalg.eigvalsh(P.toarray())[::-1]
    monkeypatch.setattr(_filtered, "probe_cut", lambda *a, **kw: (exact[k - 3] + exact[k - 2]) / 2)
    v0 = np.random.default_rng(0).uniform(0.5, 1.5, P.shape[0])
    assert _filtered.filtered_eigsh(lambda x: P @ x, P.shape[0], k, v0, 1.0) is None
    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    w, _ = top_eigenvectors(P, k)
    np.testing.assert_allclose(w, exact[:k], rtol=0, atol=1e-10)


@pytest.mark.parametrize("seed", range(6))
def test_the_probe_s_cut_lies_below_the_k_th_eigenvalue(seed):
    # Ritz values of a Krylov space lie below the eigenvalues of the same rank (counted once each)
    rng = np.random.default_rng(seed)
    n, k = 400, int(rng.integers(2, 15))
    A = sp.random(n, n, density=0.02, random_state=seed)
    A = (A + A.T) * 0.5 + sp.diags(rng.normal(scale=0.1, size=n))
    lam = np.linalg.eigvalsh(A.toarray())[::-1]
    rho = float(abs(A).sum(axis=1).max())
    c = _filtered.probe_cut(lambda x: A @ x, rng.uniform(0.5, 1.5, n), k, rho, steps=int(rng.integers(20, 120)))
    assert c < lam[k - 1]


def test_the_filter_is_the_chebyshev_polynomial_of_the_interval():
    # T_m(t(P)) on an eigenvector is T_m(t(lambda)) times it: the recurrence is the polynomial
    rng = np.random.default_rng(5)
    Q, _ = np.linalg.qr(rng.normal(size=(60, 60)))
    lam = np.sort(rng.uniform(-1, 1, 60))[::-1]
    lam[:4] = [1.0, 0.995, 0.99, 0.985]
    A = (Q * lam) @ Q.T
    c, rho, m = 0.9, 1.0, 8
    calls = []

    def fake_eigsh(op, k, **kw):   # capture the filtered operator instead of solving
        calls.append(op)
        raise StopIteration
    import scipy.sparse.linalg as sla
    real = sla.eigsh
    sla.eigsh = fake_eigsh
    try:
        with pytest.raises(StopIteration):
            _filtered.filtered_eigsh(lambda x: A @ x, 60, 3, np.ones(60), rho, degree=m)
    finally:
        sla.eigsh = real
    cut = _filtered.probe_cut(lambda x: A @ x, np.ones(60), 3, rho)
    t = (2 * lam - (cut - rho)) / (cut + rho)
    np.testing.assert_allclose(calls[0].matvec(Q[:, 0]), eval_chebyt(m, t[0]) * Q[:, 0], atol=1e-9)
    np.testing.assert_allclose(calls[0].matvec(Q[:, 30]), eval_chebyt(m, t[30]) * Q[:, 30], atol=1e-9)
    assert abs(eval_chebyt(m, t[30])) <= 1 + 1e-12 < eval_chebyt(m, t[2])
    assert c == 0.9   # (the interval is the probe's, not c: c only names the test's intent)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fused_recurrence_is_the_unfused_one_bit_for_bit(dtype, monkeypatch):
    # csr=: each step one pass of csr_chebyshev_step; the same sums in the same order as product + three passes
    rng = np.random.default_rng(6)
    A = sp.random(3000, 3000, density=0.004, random_state=7, format="csr", dtype=dtype)
    A = ((A + A.T) * 0.25).tocsr()
    ops = []

    def fake_eigsh(op, k, **kw):
        ops.append(op)
        raise StopIteration
    import scipy.sparse.linalg as sla
    monkeypatch.setattr(sla, "eigsh", fake_eigsh)
    A64 = A.astype(np.float64)
    v0 = rng.uniform(0.5, 1.5, 3000)
    for csr in (None, (A.indptr, A.indices, A.data)):
        with pytest.raises(StopIteration):
            _filtered.filtered_eigsh(lambda x: A64 @ x, 3000, 4, v0, 1.0, csr=csr)
    x = rng.standard_normal(3000)
    keep = x.copy()
    assert np.array_equal(ops[0].matvec(x), ops[1].matvec(x))
    assert np.array_equal(x, keep)   # ARPACK's vector is not overwritten


def test_sparse_sinkhorn_product_of_a_float32_kernel_is_scipy_s_bit_for_bit():
    from bigclust.normalize._scaling import _SparseOp
    K = sp.random(4000, 4000, density=0.003, random_state=2, format="csr", dtype=np.float32)
    K = (K + K.T).tocsr()
    d = np.random.default_rng(3).random(4000)
    assert np.array_equal(_SparseOp(None, K).matvec(d), K.astype(np.float64) @ d)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fused_recurrence_on_a_component_is_the_unfused_one_bit_for_bit(dtype, monkeypatch):
    # rows=: the recurrence on P's numbering over one component's rows, x in and out in the rows' order
    from bigclust.algo._spectral_numba import csr_rows_matvec
    rng = np.random.default_rng(8)
    blocks = [sp.random(m, m, density=0.01, random_state=s, format="csr", dtype=dtype) for s, m in ((1, 700), (2, 900))]
    A = sp.block_diag([(b + b.T) * 0.25 for b in blocks]).tocsr()
    perm = rng.permutation(A.shape[0])          # the component's rows scattered over P's numbering
    A = A[perm][:, perm].tocsr()
    A.sort_indices()
    rows = np.sort(np.flatnonzero(perm >= 700))  # the 900-row component
    full = np.zeros(A.shape[0])

    def matvec(x):   # _block_eigsh's product
        full[rows] = x
        y = np.empty(rows.size)
        csr_rows_matvec(A.indptr, A.indices, A.data, rows, full, y)
        return y
    ops = []

    def fake_eigsh(op, k, **kw):
        ops.append(op)
        raise StopIteration
    import scipy.sparse.linalg as sla
    monkeypatch.setattr(sla, "eigsh", fake_eigsh)
    v0 = rng.uniform(0.5, 1.5, rows.size)
    for csr in (None, (A.indptr, A.indices, A.data)):
        with pytest.raises(StopIteration):
            _filtered.filtered_eigsh(matvec, rows.size, 4, v0, 1.0, csr=csr, rows=rows)
    x = rng.standard_normal(rows.size)
    assert np.array_equal(ops[0].matvec(x), ops[1].matvec(x))
    assert np.array_equal(ops[1].matvec(x), ops[1].matvec(x))   # no state carried between products


def test_lean_eigsh_is_eigsh_bit_for_bit_without_its_second_basis(monkeypatch):
    """The Ritz vectors formed in ARPACK's basis: eigsh's values and vectors exactly, and its n x ncv output array
    (ncv = 21 for k = 10) not allocated."""
    import tracemalloc

    from scipy.sparse.linalg import eigsh
    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    rng = np.random.default_rng(0)
    n = 40000
    E = sp.random(n, n, density=6 / n, random_state=rng, format="csr")
    d = rng.uniform(size=n)
    d[rng.choice(n, 12, replace=False)] = 2.0 + np.arange(12)   # a clear top: few restarts
    P = sp.csr_matrix(0.05 * (E + E.T) + sp.diags(d))
    v0 = np.random.default_rng(0).uniform(0.5, 1.5, P.shape[0])
    peaks = []
    for solve in (lambda: eigsh(P, k=10, which="LA", v0=v0, tol=1e-10, maxiter=5000),
                  lambda: _filtered.lean_eigsh(P, 10, v0, 1e-10, 5000)):
        tracemalloc.start()
        out = solve()
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        if len(peaks) == 1:
            w, V = out
    lw, lV = out
    np.testing.assert_array_equal(lw, w)
    np.testing.assert_array_equal(lV, V)
    assert lV.flags.c_contiguous
    basis = P.shape[0] * 21 * 8
    assert peaks[0] - peaks[1] > 0.9 * basis, (peaks, basis)


@pytest.mark.parametrize("split", [False, True])
def test_a_float32_p_is_filtered_on_its_own_values_with_a_float64_copy_s_bits(monkeypatch, split):
    """No float64 copy of a float32 P (12 bytes an entry; scipy's product on one thread): the fused recurrence
    reads P's values and the probe multiplies through the widening kernel -- eigenpairs equal bit for bit to
    those of P's float64 copy, on a connected graph and per component."""
    P = sp.block_diag([_graph(n=2500, seed=5, blobs=3), _graph(n=2300, seed=6)], format="csr") if split else \
        _graph(seed=4)
    P = P.astype(np.float32)
    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", 0)   # renumbered as large graphs are
    seen, copies = [], []
    real, real_operand = _filtered.filtered_eigsh, spectral._as_operand

    def spy(*a, csr=None, **kw):
        seen.append(None if csr is None else csr[2].dtype)
        return real(*a, csr=csr, **kw)
    monkeypatch.setattr(_filtered, "filtered_eigsh", spy)
    monkeypatch.setattr(spectral, "_as_operand", lambda A: copies.append(A.dtype) or real_operand(A))
    k = 8
    w, V = top_eigenvectors(P, k)
    assert seen == [np.float32] * (1 + split) and copies == []
    seen.clear()
    w64, V64 = top_eigenvectors(P.astype(np.float64), k)
    assert seen == [None] * (1 + split)                    # a float64 P: scipy's product and NumPy's passes
    np.testing.assert_array_equal(w, w64)
    np.testing.assert_array_equal(V, V64)


def test_start_is_drawn_where_used_and_not_held_through_the_solve(monkeypatch):
    """``start``'s callable draws the vectors the solvers drew before (renumbered by gather or scatter), gives
    ARPACK the same bits as the array, and no frame holds it while ARPACK multiplies: the memory traced at the
    products is one n-vector less than with the caller holding the array."""
    import tracemalloc

    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    rng = np.random.default_rng(1)
    n = 30000
    order = rng.permutation(n)
    v = np.random.default_rng(7).uniform(0.5, 1.5, n)
    np.testing.assert_array_equal(_filtered.start(n, 7)(), v)
    np.testing.assert_array_equal(_filtered.start(n, 7, order)(), v[order])
    scattered = np.empty(n)
    scattered[order] = v
    np.testing.assert_array_equal(_filtered.start(n, 7, order, scatter=True)(), scattered)

    E = sp.random(n, n, density=6 / n, random_state=rng, format="csr")
    d = rng.uniform(size=n)
    d[rng.choice(n, 8, replace=False)] = 2.0 + np.arange(8)
    P = sp.csr_matrix(0.05 * (E + E.T) + sp.diags(d))
    held = {}

    def solve(how):
        seen = []

        def matvec(x):
            seen.append(tracemalloc.get_traced_memory()[0])
            return P @ x
        op = sp.linalg.LinearOperator(P.shape, matvec=matvec, dtype=np.float64)
        tracemalloc.start()
        if how == "array":
            v0 = _filtered.start(n, 7)()
            out = _filtered.lean_eigsh(op, 6, v0, 1e-10, 5000)
        else:
            out = _filtered.lean_eigsh(op, 6, _filtered.start(n, 7), 1e-10, 5000)
        tracemalloc.stop()
        held[how] = np.median(seen)
        return out
    (wa, Va), (wc, Vc) = solve("array"), solve("callable")
    np.testing.assert_array_equal(wa, wc)
    np.testing.assert_array_equal(Va, Vc)
    assert 0.9 * n * 8 < held["array"] - held["callable"] < 1.5 * n * 8, held


def test_the_solve_log_counts_the_filtered_solve_s_products_and_iterations(monkeypatch):
    """Every product by P of a filtered solve (probe, filter, Rayleigh quotients) is counted once, in its entry."""
    P = _graph(seed=0)
    n, k = P.shape[0], 11
    calls = []

    def product(x):
        calls.append(1)
        return P @ x
    v0 = np.random.default_rng(0).uniform(0.5, 1.5, n)
    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    with _filtered.solve_log() as log:
        w, _ = _filtered.filtered_eigsh(product, n, k, v0, 1.0)
    assert log == [{"rows": n, "k": k, "ncv": 2 * k + 1, "iterations": log[0]["iterations"], "products": len(calls),
                    "filter_degree": _filtered.DEGREE, "converged": True}]
    assert log[0]["iterations"] > 1 and len(calls) > _filtered.DEGREE * 2 * k
    np.testing.assert_allclose(np.sort(w)[::-1], np.linalg.eigvalsh(P.toarray())[::-1][:k], rtol=0, atol=1e-10)
    assert _filtered._LOG.get() is None          # the log ends with its block; outside it nothing is kept


def test_the_solve_log_says_when_arpack_stopped_at_its_iteration_limit(monkeypatch):
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator
    P = _graph(seed=1)
    n = P.shape[0]
    calls = []
    op = LinearOperator(P.shape, matvec=lambda x: calls.append(1) or P @ x, dtype=np.float64)
    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    with _filtered.solve_log() as log:
        with pytest.raises(ArpackNoConvergence):
            _filtered.lean_eigsh(op, 10, np.ones(n), 1e-14, 2)
        _filtered.lean_eigsh(op, 10, np.ones(n), 1e-10, 5000)
    assert [e["converged"] for e in log] == [False, True]
    assert log[0]["iterations"] == 3             # ARPACK stops at the first iteration past maxiter
    assert log[0]["products"] + log[1]["products"] == len(calls) and log[1]["filter_degree"] == 0
    assert log[1]["iterations"] > 3


def test_a_split_graph_logs_one_solve_per_block_arpack_solves(monkeypatch):
    """Blocks above EIGH_MAX_N rows are ARPACK's (one entry each, with the block's rows); smaller ones eigh's."""
    A, B, C = (_graph(n=n, seed=s, blobs=3) for n, s in ((2500, 2), (2100, 3), (1500, 4)))
    P = sp.block_diag([A, B, C], format="csr")
    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    with spectral.solve_log() as log:
        top_eigenvectors(P, 8)
    assert [e["rows"] for e in log] == [2500, 2100] and all(e["converged"] for e in log)


def test_a_large_block_s_solve_holds_only_arpack_s_and_the_filter_s_vectors(monkeypatch):
    """Through a block of a renumbered split graph (the 8.1M BBS-dual path): while the filter runs, what is traced
    is ARPACK's work (3m) and residual (m) vectors, the filter's two n-vectors and two index vectors (P's rows by
    component, the block's rows sorted) -- no map of P's rows to M's or to places in a block, and no product
    allocates its result (it is written into ARPACK's work vector)."""
    import tracemalloc

    from bigclust.algo import _spectral_numba
    A, B = _graph(n=12000, seed=5, blobs=4), _graph(n=9000, seed=6, blobs=3)
    M = sp.block_diag([A, B], format="csr").astype(np.float32)
    n, m, k = M.shape[0], A.shape[0], 6
    P, order = spectral.local_order(M)
    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    monkeypatch.setattr(spectral, "FLOAT32_OPERATOR_NNZ", 0)       # every block through _block_eigsh
    real, seen = _spectral_numba.csr_rows_chebyshev_step, []

    def step(*a):
        if a[3].size == m:   # A's block (rows)
            seen.append(tracemalloc.get_traced_memory())
            tracemalloc.reset_peak()
        return real(*a)
    spectral._by_component(P, k, 0, order=order)   # the kernels loaded (Numba's cache) before any tracing
    monkeypatch.setattr(_spectral_numba, "csr_rows_chebyshev_step", step)
    tracemalloc.start()
    w, V = spectral._by_component(P, k, 0, order=order)
    tracemalloc.stop()
    held = max(cur for cur, _ in seen)             # A's block is solved first: nothing of B's is held yet
    assert held < (4 * m + 2 * n) * 8 + (n + m) * 4 + 4 * n, (held, m, n)   # the three index arrays: 8n + 4m more
    # no vector per product (the first step's interval holds a fixed 0.25 MB of Numba's, the same at twice n)
    assert max(pk - cur for (cur, _), (_, pk) in zip(seen[1:], seen[2:])) < m * 4
    w0, V0 = top_eigenvectors(M, k, solver="arpack")
    np.testing.assert_allclose(w, w0, rtol=0, atol=1e-9)
    assert np.max(subspace_angles(V, V0)) < 1e-6


def test_a_connected_graph_s_filter_allocates_one_vector_per_product(monkeypatch):
    """The filter writes into ARPACK's work vector: while it runs, what is traced is ARPACK's work (3n) and
    residual (n) vectors, one scratch n-vector, and the renumbered P with its order."""
    import tracemalloc

    from bigclust.algo import _spectral_numba
    P = _graph(n=12000, seed=7).astype(np.float32)
    n = P.shape[0]
    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", 0)
    top_eigenvectors(P, 6)                         # the kernels loaded before any tracing
    real, seen = _spectral_numba.csr_chebyshev_step, []

    def step(*a):
        seen.append(tracemalloc.get_traced_memory()[0])
        return real(*a)
    monkeypatch.setattr(_spectral_numba, "csr_chebyshev_step", step)
    tracemalloc.start()
    w, V = top_eigenvectors(P, 6)
    tracemalloc.stop()
    renumbered = P.nnz * 8 + (n + 1) * 4 + n * 4   # values and indices, indptr, order
    assert max(seen[1:]) < 5 * n * 8 + renumbered + 6 * n, (max(seen), n)   # before: a second scratch vector
    w0, V0 = top_eigenvectors(P, 6, solver="arpack")
    np.testing.assert_allclose(w, w0, rtol=0, atol=1e-9)
    assert np.max(subspace_angles(V, V0)) < 1e-6
