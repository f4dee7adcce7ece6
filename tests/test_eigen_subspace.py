"""The top-k eigenvectors of a sparse similarity span the subspace of a dense reference, to 1e-6 in angle.

Checked the way the mathematics defines them: the sine of the largest
principal angle between the returned columns and the top-k eigenvectors of a
dense ``eigh`` of the same matrix, on graphs of several shapes (kNN blobs, a
ring, a grid, disconnected components with isolated points), k = 2..20,
through the sparse paths ``auto`` takes (ARPACK, component by component), on
float64 and float32 matrices (the pipeline's kNN kernels are float32).  The
tolerance is tight enough to catch a wrong operator: the same check fails on
a matrix with a single edge changed.
"""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import subspace_angles

from bigclust.algo import spectral
from bigclust.algo.affinity import knn_kernel
from bigclust.algo.spectral import top_eigenvectors
from bigclust.normalize import sinkhorn

ANGLE = 1e-6


def _sin(V, U):
    return float(np.sin(np.max(subspace_angles(V, U))))


def _blobs(n_per=120, c=4, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(c, 6)) * 1.5
    X = np.vstack([centres[i] + rng.normal(size=(n_per, 6)) for i in range(c)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return sinkhorn(knn_kernel(X, 8, 8.0), n_iter=10000, tol=1e-12)


def _jitter(A, seed):
    """Edge weights times 1 +- 0.3: a regular graph's exactly repeated eigenvalues split (single-vector
    Lanczos finds one vector per distinct eigenvalue, so an exact repeat would make the top-k subspace
    depend on rounding), the small gaps stay."""
    A = sp.triu(sp.coo_matrix(A), 1)
    A.data *= np.random.default_rng(seed).uniform(0.7, 1.3, A.nnz)
    return sp.csr_matrix(A + A.T)


def _ncut(A):
    d = np.asarray(A.sum(axis=1)).ravel() ** -0.5
    return sp.csr_matrix(sp.diags(d) @ A @ sp.diags(d))


def _ring(n=400):
    i = np.arange(n)
    A = sp.coo_matrix((np.ones(n), (i, (i + 1) % n)), shape=(n, n))
    return _ncut(_jitter(A + A.T, 1))   # gaps of order 1/n^2 between the top eigenvalues


def _grid(a=18, b=23):
    path = lambda m: sp.diags([np.ones(m - 1), np.ones(m - 1)], [-1, 1])
    A = sp.kron(sp.identity(a), path(b)) + sp.kron(path(a), sp.identity(b))
    return _ncut(_jitter(A, 2))          # a mesh: a slowly decaying spectrum


def _split():
    """Three blocks (a blob graph, a grid, a ring) and four isolated points, rows interleaved."""
    A = sp.block_diag([_blobs(60, 3, seed=1), 0.97 * _grid(9, 11), 0.9 * _ring(30),
                       sp.diags([0.95, 0.3, 0.985, 0.1])]).tocsr()   # scaled: no eigenvalue shared by two blocks
    perm = np.random.default_rng(3).permutation(A.shape[0])
    return A[perm][:, perm].tocsr()


def _reference(P, k):
    w, U = np.linalg.eigh(P.toarray())
    return w[::-1], U[:, ::-1][:, :k]


CASES = [("blobs", _blobs, 2, np.float64), ("blobs", _blobs, 10, np.float32), ("blobs", _blobs, 20, np.float64),
         ("ring", _ring, 3, np.float64), ("ring", _ring, 12, np.float32), ("grid", _grid, 6, np.float32),
         ("grid", _grid, 15, np.float64), ("split", _split, 2, np.float64), ("split", _split, 9, np.float32),
         ("split", _split, 20, np.float64)]


@pytest.mark.parametrize("shape,make,k,dtype", CASES, ids=[f"{c[0]}-k{c[2]}-{c[3].__name__}" for c in CASES])
def test_auto_spans_the_dense_top_k_subspace(shape, make, k, dtype, monkeypatch):
    monkeypatch.setattr(spectral, "EIGH_MAX_N", 50)   # the sparse paths, not the dense shortcut
    P = make().astype(dtype)
    w, U = _reference(P.astype(np.float64), k)
    assert w[k - 1] - w[k] > 1e-4 * abs(w[0])           # the top-k subspace is well defined
    v, V = top_eigenvectors(P, k)
    np.testing.assert_allclose(v, w[:k], atol=1e-9)
    assert _sin(V, U) < ANGLE
    assert spectral.auto_solver(P, k) == ("components" if shape == "split" else "eigsh")


def test_the_check_catches_a_wrong_operator():
    """One edge of the blob graph moved: the top subspace moves by more than the tolerance."""
    P = _blobs()
    Q = P.tolil()
    i, j = 3, 200                                          # two rows of different blobs
    Q[i, j] = Q[j, i] = 0.05
    Q[i, i] -= 0.05
    Q[j, j] -= 0.05
    _, U = _reference(sp.csr_matrix(Q), 4)
    _, V = top_eigenvectors(P, 4, solver="eigsh")
    assert _sin(V, U) > 100 * ANGLE


def test_float32_matrix_gives_the_float64_copys_eigenvectors_bit_for_bit(monkeypatch):
    """The pipeline's kNN kernels are float32: ARPACK multiplies by their float64 copy, or (large P, no room for
    the copy) by the Numba product that does scipy's arithmetic on the float32 values -- the same bits."""
    from bigclust.algo._spectral_numba import csr_matvec

    P = _blobs().astype(np.float32)
    x = np.random.default_rng(0).standard_normal(P.shape[0])
    y = np.empty(P.shape[0])
    csr_matvec(P.indptr, P.indices, P.data, x, y)
    assert np.array_equal(y, P.astype(np.float64) @ x)
    v64, V64 = top_eigenvectors(P.astype(np.float64), 5, solver="eigsh")
    for limit in (10 ** 12, 0):                           # the copy, then the kernel
        monkeypatch.setattr(spectral, "FLOAT32_OPERATOR_NNZ", limit)
        v32, V32 = top_eigenvectors(P, 5, solver="eigsh")
        assert np.array_equal(v32, v64) and np.array_equal(V32, V64)
