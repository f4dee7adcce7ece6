"""Eigensolvers agree with each other and with a dense reference."""
import numpy as np
import pytest
import scipy.sparse as sp

from bigclust._util.errors import UserError
from bigclust.algo.spectral import embed, top_eigenvectors


def _sym(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    return np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / 4.0)


@pytest.mark.parametrize("solver", ["eigh", "eigsh", "lobpcg"])
def test_solvers_match_numpy(solver):
    K = _sym()
    ref_vals, ref_vecs = np.linalg.eigh(K)
    vals, vecs = top_eigenvectors(K, 4, solver=solver)
    np.testing.assert_allclose(vals, ref_vals[::-1][:4], rtol=1e-6)
    # compare spanned subspaces (eigenvalues are distinct here, so column by column up to sign)
    for j in range(4):
        assert abs(abs(vecs[:, j] @ ref_vecs[:, -1 - j]) - 1) < 1e-5


def test_sparse_input():
    K = _sym()
    K[K < 0.2] = 0
    v1, _ = top_eigenvectors(K, 3, solver="eigh")
    v2, _ = top_eigenvectors(sp.csr_matrix(K), 3, solver="eigsh")
    np.testing.assert_allclose(v1, v2, rtol=1e-8)


def test_embed_rows_unit_and_signs_fixed():
    E = embed(_sym(), 3)
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, rtol=1e-12)
    E2 = embed(_sym(), 3, solver="eigsh")
    np.testing.assert_allclose(E, E2, atol=1e-6)


def test_k_bounds():
    with pytest.raises(UserError, match=r"k=10 must be between 1 and n-1=9"):
        top_eigenvectors(_sym(10), 10)
