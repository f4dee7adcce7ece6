"""The ``amg`` eigensolver of :func:`bigclust.algo.spectral.top_eigenvectors`: LOBPCG with a multigrid preconditioner."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp


def have_pyamg() -> bool:
    """Whether pyamg (the multigrid preconditioner of the ``amg`` eigensolver) can be imported."""
    import importlib.util
    return importlib.util.find_spec("pyamg") is not None


#: relative residual ``||P v - lambda v|| / c`` below which an ``amg`` eigenpair counts as converged
AMG_TOL = 1e-7


def lobpcg_amg(P, k, random_state, tol=AMG_TOL, maxiter=400):
    """Top-k eigenpairs of sparse symmetric P by LOBPCG on ``L = cI - P`` with an AMG preconditioner.

    ``c`` is the largest absolute row sum of P (Gershgorin: every eigenvalue
    of P is <= c), so L is positive semi-definite and its smallest
    eigenvectors are P's largest.  For a non-negative P (every normalisation
    here) L is a diagonally dominant M-matrix -- a graph Laplacian up to a
    non-negative diagonal -- the case smoothed-aggregation multigrid is built
    for: one V-cycle approximates ``L^-1`` well on the smooth (low-energy)
    vectors LOBPCG is after, so the iteration count barely grows with n or
    with a small spectral gap, where ARPACK's grows like ``1/sqrt(gap)``
    (scikit-learn's ``eigen_solver="amg"`` is the same idea on the Laplacian).
    That is the theory; on kNN graphs of high-dimensional data it does not pay:
    MNIST-70k's kNN graphs are expander-like, the aggregation hierarchy has an
    operator complexity of about 2, and one V-cycle per block column costs
    more than the Lanczos products it saves (issue 13, k = 10 eigenvectors,
    one BLAS thread: 13.9 s of CPU against 1.8 s for ``eigsh`` on the BBS
    graph, 15.3 s against 2.2 s on SK's).  So ``auto`` does not choose it; it
    stays for graphs with geometric (mesh-like) structure, where multigrid is
    at home.
    The hierarchy is built on ``L + 1e-5 c I`` because L itself is singular
    when P is stochastic.  The block carries a few more vectors than asked
    (faster convergence of the last wanted ones); the wanted pairs must reach
    a relative residual ``tol`` or ARPACK takes over, with a warning.
    """
    from pyamg import smoothed_aggregation_solver
    from scipy.sparse.linalg import lobpcg

    n = P.shape[0]
    A = sp.csr_matrix(P, dtype=np.float64)
    c = float(np.abs(A).sum(axis=1).max())
    L = (sp.identity(n, format="csr") * c - A).tocsr()
    ml = smoothed_aggregation_solver((L + sp.identity(n, format="csr") * (1e-5 * c)).tocsr(), max_coarse=500)
    M = ml.aspreconditioner()
    m = min(n - 1, k + max(2, k // 2))
    X0 = np.random.default_rng(random_state).standard_normal((n, m))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        lam, V = lobpcg(L, X0, M=M, largest=False, tol=tol * c, maxiter=maxiter)
    order = np.argsort(lam)[:k]
    lam, V = lam[order], V[:, order]
    res = np.linalg.norm(L @ V - V * lam, axis=0) / c
    if not np.all(res <= 10 * tol):
        warnings.warn(f"amg eigensolver: residual {res.max():.2g} above {10 * tol:.0e} after {maxiter} iterations "
                      f"(k={k}, n={n}); falling back to eigsh", RuntimeWarning, stacklevel=3)
        from scipy.sparse.linalg import eigsh
        v0 = np.random.default_rng(random_state).uniform(0.5, 1.5, n)
        return eigsh(A, k=k, which="LA", v0=v0, tol=1e-10, maxiter=max(5000, 20 * n))
    return c - lam, V
