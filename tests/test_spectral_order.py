"""ARPACK on P renumbered in breadth-first order: the same products, the same eigenpairs, P's numbering back."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import subspace_angles

from bigclust.algo import spectral
from bigclust.algo.affinity import knn_kernel
from bigclust.algo.spectral import local_order, top_eigenvectors


def _knn(n=900, seed=0, dtype=np.float64):
    """Ncut-normalised kNN graph of blobs, rows shuffled (neighbours far apart, as in mnist-1m)."""
    rng = np.random.default_rng(seed)
    X = np.vstack([c + rng.normal(size=(n // 3, 5)) for c in rng.normal(size=(3, 5)) * 1.5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        K = knn_kernel(X[rng.permutation(X.shape[0])], 8, 4.0)
    d = np.asarray(K.sum(axis=1)).ravel() ** -0.5
    return sp.csr_matrix(sp.diags(d) @ K @ sp.diags(d)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_local_order_is_a_renumbering_with_the_same_products(dtype):
    P = _knn(dtype=dtype)
    A, order = local_order(P)
    assert np.array_equal(np.sort(order), np.arange(P.shape[0]))
    assert A.dtype == dtype and (A != P[order][:, order]).nnz == 0
    x = np.random.default_rng(1).standard_normal(P.shape[0])
    A64, _ = local_order(P, dtype=np.float64)   # a float32 P widened as it is copied: scipy's float64 product
    assert A64.dtype == np.float64
    assert np.array_equal(A64 @ x[order], (P.astype(np.float64) @ x)[order])   # same sums in the same order


def test_breadth_first_order_brings_neighbours_together():
    P = _knn()
    A, _ = local_order(P)
    band = lambda M: np.abs(np.repeat(np.arange(M.shape[0]), np.diff(M.indptr)) - M.indices).mean()
    assert band(A) < 0.5 * band(P)


def test_disconnected_pattern_every_row_once():
    P = sp.block_diag([_knn(300, 1), sp.identity(3), _knn(300, 2)]).tocsr()
    _, order = local_order(P)
    assert np.array_equal(np.sort(order), np.arange(P.shape[0]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_renumbered_eigsh_gives_the_same_eigenpairs(dtype, monkeypatch):
    P = _knn(dtype=dtype)
    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", 10 ** 12)
    v_old, V_old = top_eigenvectors(P, 6, solver="eigsh")
    calls = []
    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", 0)
    monkeypatch.setattr(spectral, "local_order", lambda M, dtype=None: calls.append(1) or local_order(M, dtype))
    v, V = top_eigenvectors(P, 6, solver="eigsh")
    assert calls   # the renumbered path ran
    np.testing.assert_allclose(v, v_old, rtol=1e-9)
    assert np.sin(np.max(subspace_angles(V, V_old))) < 1e-8
    np.testing.assert_allclose(V, V_old, atol=1e-8)   # columns in P's numbering, same signs


def test_no_renumbering_below_the_threshold_or_for_the_float32_kernel(monkeypatch):
    P = _knn(dtype=np.float32)
    calls = []
    monkeypatch.setattr(spectral, "local_order", lambda M, dtype=None: calls.append(1) or local_order(M, dtype))
    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", P.shape[0] + 1)
    top_eigenvectors(P, 3, solver="eigsh")
    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", 0)
    monkeypatch.setattr(spectral, "FLOAT32_OPERATOR_NNZ", 0)   # the no-copy kernel: no renumbered copy either
    top_eigenvectors(P, 3, solver="eigsh")
    assert not calls


def test_components_solver_renumbers_each_large_block(monkeypatch):
    """The per-component path calls the same ARPACK step on each block: renumbered blocks, same eigenpairs."""
    P = sp.block_diag([_knn(600, 1), 0.9 * _knn(600, 2)]).tocsr()
    perm = np.random.default_rng(3).permutation(P.shape[0])
    P = P[perm][:, perm].tocsr()
    monkeypatch.setattr(spectral, "EIGH_MAX_N", 50)
    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", 10 ** 12)
    v_old, V_old = top_eigenvectors(P, 5)
    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", 0)
    v, V = top_eigenvectors(P, 5)
    assert spectral.auto_solver(P, 5) == "components"
    np.testing.assert_allclose(v, v_old, rtol=1e-9)
    assert np.sin(np.max(subspace_angles(V, V_old))) < 1e-8


@pytest.mark.parametrize("seed", range(6))
def test_sparse_components_match_scipy_without_stored_zeros(seed):
    """components() on CSR (Numba BFS over K's own arrays) = scipy's csgraph on K without its stored zeros:
    the same count and the same labels (numbered by each component's lowest row)."""
    from scipy.sparse.csgraph import connected_components

    from bigclust.algo.spectral import components
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    A = sp.random(n, n, density=min(1.0, 1.5 / n), random_state=seed, format="csr")
    A = (A + A.T).tocsr()
    A.data[rng.random(A.nnz) < 0.3] = 0.0              # stored zeros (symmetric: both triangles)
    A = ((A + A.T) * 0.5).tocsr()
    A.data[A.data < np.median(A.data) * 0.5] = 0.0 if A.nnz else A.data[:0]
    A = sp.csr_matrix(np.maximum(A.toarray(), A.toarray().T)) if seed % 2 else A
    B = A.copy()
    B.eliminate_zeros()
    want_n, want = connected_components(B, directed=False)
    for K in (A, sp.csr_array(A), A.astype(np.float32), A.tocsc()):
        got_n, got = components(K)
        assert got_n == want_n
        np.testing.assert_array_equal(got, want)
    K64 = A.copy()
    K64.indices, K64.indptr = K64.indices.astype(np.int64), K64.indptr.astype(np.int64)
    assert components(K64)[0] == want_n


def test_sparse_components_share_k():
    """No copy of a CSR kernel's arrays (the 8.1M embed stage's peak): scipy's csgraph took ~24 B per entry."""
    import tracemalloc

    from bigclust.algo.spectral import components
    n = 200_000
    rows = np.arange(n - 1)
    K = sp.coo_matrix((np.ones(2 * (n - 1)), (np.r_[rows, rows + 1], np.r_[rows + 1, rows])), shape=(n, n)).tocsr()
    components(K)                                       # compile outside the measurement
    tracemalloc.start()
    ncomp, labels = components(K)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert ncomp == 1 and not labels.any()
    assert peak < 3 * 8 * n                             # labels + the BFS queue (+ slack), nothing of nnz size
