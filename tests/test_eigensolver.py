"""The ``amg`` eigensolver (LOBPCG + algebraic multigrid) spans the same subspace as ARPACK / dense eigh."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import subspace_angles

from bigclust.algo import spectral
from bigclust.algo.affinity import knn_kernel
from bigclust.normalize import bbs, sinkhorn
from bigclust.algo.spectral import top_eigenvectors



def _need_pyamg():
    pytest.importorskip("pyamg")


def _blobs(n_per=150, k=5, spread=1.2, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(k, 8)) * spread
    return np.vstack([c[i] + rng.normal(size=(n_per, 8)) for i in range(k)])


def _knn(X, k=10, gamma=16.0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return knn_kernel(X, k, gamma)


@pytest.mark.parametrize("norm", ["sk", "bbs"])
def test_amg_spans_the_arpack_subspace(norm):
    _need_pyamg()
    K = _knn(_blobs())
    P = sinkhorn(K, n_iter=10000, tol=1e-10) if norm == "sk" else bbs(K, "dual")
    v_ref, V_ref = top_eigenvectors(P, 5, solver="eigsh")
    v, V = top_eigenvectors(P, 5, solver="amg")
    np.testing.assert_allclose(v, v_ref, atol=1e-6)
    assert np.max(subspace_angles(V, V_ref)) < 1e-3
    # and with the dense reference
    w, U = np.linalg.eigh(P.toarray())
    np.testing.assert_allclose(v, w[::-1][:5], atol=1e-6)
    assert np.max(subspace_angles(V, U[:, -5:])) < 1e-3


def test_amg_finds_every_copy_of_a_repeated_eigenvalue():
    _need_pyamg()
    # three separated blobs: three components, eigenvalue 1 three times (ARPACK would miss copies)
    X = _blobs(n_per=120, k=3, spread=40.0)
    K = _knn(X, 8)
    P = sinkhorn(K, n_iter=10000, tol=1e-10)
    assert spectral.components(P)[0] == 3
    v, V = top_eigenvectors(P, 4, solver="amg")
    np.testing.assert_allclose(v[:3], 1.0, atol=1e-8)
    w, U = np.linalg.eigh(P.toarray())
    assert np.max(subspace_angles(V, U[:, -4:])) < 1e-3


def test_amg_on_a_matrix_with_negative_entries():
    _need_pyamg()
    # Gershgorin shift: cI - P stays positive semi-definite whatever the signs
    rng = np.random.default_rng(1)
    A = sp.random(400, 400, density=0.03, random_state=rng, format="csr")
    A = A + A.T - 0.3 * sp.identity(400)
    w, U = np.linalg.eigh(A.toarray())
    v, V = top_eigenvectors(sp.csr_matrix(A), 3, solver="amg")
    np.testing.assert_allclose(v, w[::-1][:3], atol=1e-6)
    assert np.max(subspace_angles(V, U[:, -3:])) < 1e-3


def test_auto_is_arpack_on_a_connected_sparse_graph_and_lobpcg_on_a_split_one(monkeypatch):
    monkeypatch.setattr(spectral, "EIGH_MAX_N", 100)   # treat n = 750 as large
    K = _knn(_blobs())
    P = sinkhorn(K, n_iter=10000, tol=1e-10)
    assert spectral.auto_solver(P, 5) == "eigsh"
    v, V = top_eigenvectors(P, 5)
    w, U = np.linalg.eigh(P.toarray())
    assert np.max(subspace_angles(V, U[:, -5:])) < 1e-3
    # explicitly stored zeros (entries the exact BBS clipped) are not edges
    Z = sp.csr_matrix(P, copy=True)
    rows = np.repeat(np.arange(750), np.diff(Z.indptr))
    Z.data[(rows < 300) != (Z.indices < 300)] = 0.0      # blobs 0-1 | 2-4, the cut edges still stored
    assert Z.nnz == P.nnz
    assert spectral.components(Z)[0] >= 2 and spectral.auto_solver(Z, 5) == "components"
    # the split graph solved component by component: the top-5 subspace of the whole matrix
    w, U = np.linalg.eigh(Z.toarray())
    v, V = top_eigenvectors(Z, 5)
    np.testing.assert_allclose(v, w[::-1][:5], atol=1e-9)
    assert np.max(subspace_angles(V, U[:, -5:])) < 1e-6


def test_components_solver_with_single_points_and_small_and_large_blocks(monkeypatch):
    """Blocks solved by ARPACK (large), dense eigh (small) and single points: the top-k eigenpairs of the
    whole block-diagonal matrix, in any row order (the blocks are interleaved by a permutation)."""
    monkeypatch.setattr(spectral, "EIGH_MAX_N", 100)
    big = sinkhorn(_knn(_blobs()), n_iter=10000, tol=1e-10)             # 750 rows, connected: ARPACK
    rng = np.random.default_rng(2)
    small = sp.random(30, 30, density=0.3, random_state=rng)
    small = sp.csr_matrix(small + small.T + sp.identity(30) * 3.0)     # top eigenvalues above the big block's 1
    lone = sp.diags([0.9, 1.5, 0.2])                                  # three single points
    A = sp.block_diag([big, small, lone]).tocsr()
    perm = rng.permutation(A.shape[0])
    A = A[perm][:, perm]
    w, U = np.linalg.eigh(A.toarray())
    assert np.min(np.diff(w[::-1][:9])) < -1e-8                       # no tie at the cut below
    v, V = top_eigenvectors(A, 8, solver="components")
    np.testing.assert_allclose(v, w[::-1][:8], atol=1e-9)
    assert np.max(subspace_angles(V, U[:, -8:])) < 1e-6


def test_amg_needs_pyamg(monkeypatch):
    P = sinkhorn(_knn(_blobs()), n_iter=10000, tol=1e-10)
    monkeypatch.setattr(spectral, "have_pyamg", lambda: False)
    with pytest.raises(ValueError, match="pyamg"):
        top_eigenvectors(P, 5, solver="amg")
