"""The sparse dual BBS solver at scale (issue 28): renumbered solves, fused CG passes, one-pass KKT.

Large kernels are solved on a breadth-first renumbering, with the active set listed by the evaluation
and a CG of fused passes; these check that every one of those gives the same optimum as the plain
path, on graphs of several shapes (a kNN graph, hubs with very uneven degrees and signed weights,
several components with an isolated point), and that the compiled pieces agree with their definitions.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.normalize import _bbs_sparse, _csr_numba, bbs
from bigclust.normalize._common import History


def knn_graph(n, k=6, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, 5))
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    nn = np.argsort(D, axis=1)[:, :k]
    rows = np.repeat(np.arange(n), k)
    M = sp.csr_matrix((np.exp(-D[rows, nn.ravel()]), (rows, nn.ravel())), shape=(n, n))
    return M.maximum(M.T).tocsr()


def hub_graph(n=400, hubs=3, fan=150, seed=1):
    """A kNN graph plus hubs joined to ``fan`` random rows each, some weights negative: degrees 6 to 150+."""
    rng = np.random.default_rng(seed)
    K = knn_graph(n, 5, seed).tolil()
    for h in range(hubs):
        for j in rng.choice(n, fan, replace=False):
            if j != h:
                K[h, j] = K[j, h] = rng.uniform(-0.2, 1.0)
    return K.tocsr()


def components_graph():
    """Two kNN blobs and one point that stores only its own diagonal."""
    A, B = knn_graph(120, 5, 2), knn_graph(90, 7, 3)
    return sp.block_diag([A, B, sp.csr_matrix([[1.0]])]).tocsr()


GRAPHS = {"knn": lambda: knn_graph(300), "hubs": hub_graph, "components": components_graph}


def _solve(K, reorder, monkeypatch, **kw):
    monkeypatch.setattr(_bbs_sparse, "REORDER_MIN_ROWS", 0 if reorder else 1 << 62)
    return bbs(K, "dual", return_info=True, **kw)


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("self_loops", ["zero", "keep"])
def test_renumbered_solve_is_the_same_optimum(name, self_loops, monkeypatch):
    K = GRAPHS[name]()
    y = np.arange(K.shape[0]) % 3
    G0, i0 = _solve(K, False, monkeypatch, self_loops=self_loops, tol=1e-12, y=y, record_every=1)
    G1, i1 = _solve(K, True, monkeypatch, self_loops=self_loops, tol=1e-12, y=y, record_every=1)
    assert i0.converged and i1.converged
    assert np.array_equal(G1.indices, K.indices) and np.array_equal(G1.indptr, K.indptr)
    np.testing.assert_allclose(G1.toarray(), G0.toarray(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(i1.mu, i0.mu, rtol=0, atol=1e-10)
    assert i1.n_iter == i0.n_iter
    for (t0, mb0, mc0), (t1, mb1, mc1) in zip(i0.history, i1.history):  # MB and MC in K's own numbering
        assert t0 == t1 and abs(mb0 - mb1) < 1e-12 and abs(mc0 - mc1) < 1e-12
    assert G1.min() >= 0 and abs(G1 - G1.T).max() == 0
    np.testing.assert_allclose(np.asarray(G1.sum(axis=1)).ravel(), 1, atol=1e-12)
    assert i1.kkt["dual_feasibility"] < 1e-12 and i1.kkt["complementarity"] < 1e-12


def test_warm_start_is_renumbered(monkeypatch):
    """MBBS hands the dual its previous mu (K's numbering): the renumbered solve must read it so."""
    K = hub_graph()
    Kc = _bbs_sparse.self_loop_support(K.astype(np.float64), "zero")
    _, ref = _solve(K, False, monkeypatch, tol=1e-12)
    for reorder in (False, True):
        monkeypatch.setattr(_bbs_sparse, "REORDER_MIN_ROWS", 0 if reorder else 1 << 62)
        G, info = _bbs_sparse.dual(Kc, Kc, np.float64, 50, 1e-12, History(None, 0), mu0=ref.mu)
        assert info.n_iter == 0  # started at the solution
        np.testing.assert_array_equal(info.mu, ref.mu)


def test_fused_cg_serial_and_parallel_agree_bit_for_bit_and_solve():
    K = hub_graph(600, fan=200)
    start, stop, idx = K.indptr[:-1], K.indptr[1:], K.indices
    n = K.shape[0]
    b = np.random.default_rng(4).standard_normal(n)
    dinv = 1.0 / (np.diff(K.indptr) + (K.diagonal() != 0) + 0.1)
    xs = []
    for parallel in (False, True):
        x = np.zeros(n)
        it, ok = _csr_numba.cg_csr(start, stop, idx, 0.1, b, x, dinv, 1e-12, 1000, parallel)
        assert ok
        xs.append(x)
    np.testing.assert_array_equal(xs[0], xs[1])
    A = sp.csr_matrix((np.ones(K.nnz), K.indices, K.indptr), shape=K.shape)
    L = sp.diags(np.asarray(A.sum(axis=1)).ravel()) + A + 0.1 * sp.eye(n)  # a stored diagonal counts twice
    np.testing.assert_allclose(L @ xs[0], b, atol=1e-9)


def test_evaluation_lists_exactly_the_active_entries():
    K = hub_graph()
    n, nnz = K.shape[0], K.nnz
    mu = np.random.default_rng(5).uniform(-0.3, 0.1, n)
    r, sq, cnt = np.empty(n), np.empty(n), np.empty(n, dtype=np.int64)
    lst = np.empty(nnz, dtype=K.indices.dtype)
    _csr_numba.csr_dual_eval(K.data, K.indices, K.indptr, mu, r, sq, cnt, lst, True)
    rows = np.repeat(np.arange(n), np.diff(K.indptr))
    V = K.data + (mu[rows] + mu[K.indices])
    for i in (0, 1, 2, 17, n - 1):
        seg = slice(K.indptr[i], K.indptr[i + 1])
        on = V[seg] > 0
        assert cnt[i] == on.sum()
        np.testing.assert_array_equal(lst[K.indptr[i]:K.indptr[i] + cnt[i]], K.indices[seg][on])
    np.testing.assert_allclose(r, np.bincount(rows, np.maximum(V, 0), n), atol=1e-12)


def test_one_pass_kkt_equals_its_definition():
    K = hub_graph()
    G, info = bbs(K, "dual", tol=1e-6, return_info=True, dtype=np.float32)  # stored float32: residuals judge that
    mu = info.mu
    rows = np.repeat(np.arange(K.shape[0]), np.diff(K.indptr))
    g = G.data.astype(np.float64)
    Kz = _bbs_sparse.self_loop_support(K, "zero")
    lam = g - (Kz.data + (mu[rows] + mu[K.indices]))
    assert info.kkt["primal_min"] == g.min(initial=0.0)
    assert info.kkt["dual_feasibility"] == max(0.0, -lam.min(initial=0.0))
    assert info.kkt["complementarity"] == np.abs(lam * g).max(initial=0.0)
