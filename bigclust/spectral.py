"""Spectral embedding: top-k eigenvectors, rows normalised (Ng, Jordan, Weiss).

For a symmetric similarity P (RA: K; Ncut: D^-1/2 K D^-1/2; SK/BBS: the
bi-stochastic matrix) the embedding is the k eigenvectors of the largest
eigenvalues, each row scaled to unit length (paper 000 section III-B).
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from .errors import UserError

EIGH_MAX_N = 2000  # above this a full dense eigendecomposition costs more than Lanczos


def top_eigenvectors(P, k, *, solver="auto", random_state=0):
    """Eigenvectors of the ``k`` largest (algebraic) eigenvalues of symmetric ``P``.

    Parameters
    ----------
    P : ndarray, scipy.sparse matrix or LinearOperator, shape (n, n), symmetric
        A LinearOperator (e.g. streaming row blocks from zarr) always goes
        to an iterative solver.
    k : int
        Number of eigenvectors, 1 <= k < n.
    solver : {"auto", "eigh", "eigsh", "lobpcg"}
        ``auto``: dense ``eigh`` for n <= 2000 (dense or sparse P), block
        ``lobpcg`` for a larger sparse P whose graph is disconnected (ARPACK
        misses copies of a repeated eigenvalue), else ``eigsh`` (ARPACK) with a
        fallback to ``lobpcg`` when ARPACK does not converge (with a warning).
    random_state : int
        Seeds the start vector so that runs are reproducible.

    Returns
    -------
    values : (k,) ndarray, descending
    vectors : (n, k) ndarray, columns with a fixed sign (largest-magnitude
        entry positive) so that the embedding does not depend on the solver's
        arbitrary sign choice.
    """
    from scipy.sparse.linalg import LinearOperator

    n = P.shape[0]
    if not 1 <= k < n:
        raise UserError(f"number of eigenvectors k={k} must be between 1 and n-1={n - 1}")
    if isinstance(P, LinearOperator) and solver in ("auto", "eigh"):
        solver = "eigsh"  # an operator streaming blocks from disk: never densify it
    if solver == "auto":
        # ARPACK finds one vector per distinct eigenvalue of its Krylov space, so on a disconnected graph
        # it misses copies of the repeated top eigenvalue (one per component) and the embedding is wrong;
        # dense eigh is exact up to EIGH_MAX_N, block LOBPCG finds repeated eigenvalues above it
        if n <= EIGH_MAX_N:
            solver = "eigh"
        elif sp.issparse(P) and components(P)[0] > 1:
            solver = "lobpcg"
        else:
            solver = "eigsh"
    if solver == "eigh":
        from scipy.linalg import eigh
        A = P.toarray() if sp.issparse(P) else np.asarray(P, dtype=np.float64)
        vals, vecs = eigh(A, subset_by_index=[n - k, n - 1])
    elif solver == "eigsh":
        from scipy.sparse.linalg import ArpackNoConvergence, eigsh
        v0 = np.random.default_rng(random_state).uniform(0.5, 1.5, n)
        try:
            vals, vecs = eigsh(_as_operand(P), k=k, which="LA", v0=v0, tol=1e-10,
                               maxiter=max(5000, 20 * n))
        except ArpackNoConvergence:
            warnings.warn(f"eigsh did not converge for k={k}, n={n}; falling back to lobpcg",
                          RuntimeWarning, stacklevel=2)
            vals, vecs = _lobpcg(P, k, random_state)
    elif solver == "lobpcg":
        vals, vecs = _lobpcg(P, k, random_state)
    else:
        raise UserError(f"unknown eigensolver {solver!r}; expected auto, eigh, eigsh or lobpcg")
    order = np.argsort(vals)[::-1]
    vals, vecs = vals[order], np.asarray(vecs[:, order], dtype=np.float64)
    idx = np.argmax(np.abs(vecs), axis=0)
    vecs *= np.sign(vecs[idx, np.arange(vecs.shape[1])])
    return vals, vecs


def _as_operand(P):
    from scipy.sparse.linalg import LinearOperator
    if isinstance(P, LinearOperator):
        return P
    if sp.issparse(P):
        return sp.csr_matrix(P, dtype=np.float64)
    return np.asarray(P, dtype=np.float64)


def _lobpcg(P, k, random_state):
    from scipy.sparse.linalg import lobpcg
    n = P.shape[0]
    X0 = np.random.default_rng(random_state).standard_normal((n, k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        vals, vecs = lobpcg(_as_operand(P), X0, largest=True, tol=1e-8, maxiter=2000)
    return vals, vecs


def embed(P, k, *, solver="auto", random_state=0):
    """Row-normalised spectral embedding (n, k) of a symmetric similarity.

    Rows of zero length (isolated points) are left at zero rather than
    divided by zero; k-means then places them with whichever centre is
    nearest the origin.
    """
    _, V = top_eigenvectors(P, k, solver=solver, random_state=random_state)
    norms = np.linalg.norm(V, axis=1)
    nz = norms > 0
    V[nz] /= norms[nz, None]
    return V


def components(K):
    """``(n_components, labels)`` of the graph of K's non-zero entries (dense or sparse, symmetric)."""
    from scipy.sparse.csgraph import connected_components
    if sp.issparse(K):
        return connected_components(sp.csr_matrix(K), directed=False)
    from .spectral_numba import dense_components
    A = np.asarray(K)
    if A.dtype not in (np.float32, np.float64):
        A = A.astype(np.float64)
    labels = np.empty(A.shape[0], dtype=np.int64)
    return int(dense_components(np.ascontiguousarray(A), labels)), labels


def check_connected(K, what="affinity graph") -> int:
    """Number of connected components of the graph of ``K``; one warning line when there are several.

    Spectral clustering proceeds on a disconnected graph, but each component
    adds an eigenvalue at the top of the spectrum, so k-means sees the
    components before any structure inside them.
    """
    ncomp, labels = components(K)
    if ncomp > 1:
        sizes = np.bincount(labels)
        warnings.warn(f"{what} has {ncomp} connected components (largest {int(sizes.max())}, "
                      f"{int((sizes == 1).sum())} isolated points); clustering goes on, each component adds an "
                      "eigenvalue at the top of the spectrum (raise n_neighbors or gamma to connect them)",
                      RuntimeWarning, stacklevel=3)
    return ncomp
