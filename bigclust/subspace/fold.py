"""Fold the rectangular coefficient matrix back onto the originals (paper 002, section 4.1).

``C`` is (N atoms, n samples) with the atoms = originals followed by
augmented samples.  The square summary is

    Cbar[j, i] = sum over a in {j} U A(j) of |C[a, i]|,

i.e. every atom's weight goes to the original it was made from (to every
source for an interpolated atom); the affinity is ``W = Cbar + Cbar^T``
(Cbar is already non-negative).  Self-coefficients are zero by construction
(N_i excludes i and A(i)); a coefficient that would land on the diagonal
anyway (the closed-form full LRR baseline allows self-representation) is
dropped, so ``diag(W) = 0`` always.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import DataError


def fold_back(C, dictionary):
    """Square non-negative (n, n) CSR summary Cbar of ``C`` (N, n).

    Parameters
    ----------
    C : scipy.sparse matrix or ndarray, shape (N, n)
        Coefficients of :func:`self_expression`.
    dictionary : Dictionary
        The dictionary C is over.

    Returns
    -------
    scipy.sparse.csr_matrix (n, n)
        Cbar, zero diagonal.
    """
    N, n = dictionary.n_atoms, dictionary.n
    if C.shape != (N, n):
        raise DataError(f"C has shape {C.shape}, expected (atoms={N}, samples={n})")
    owners = dictionary.owners_matrix()          # (N, n): atom -> owning original(s)
    absC = abs(sp.csr_matrix(C, dtype=np.float64))
    Cbar = (owners.T @ absC).tocsr()             # (n, n): sum over atoms owned by j
    return _drop_diag(Cbar)


def affinity(Cbar):
    """Symmetric ``W = |Cbar| + |Cbar|^T`` as CSR with zero diagonal."""
    A = abs(sp.csr_matrix(Cbar, dtype=np.float64))
    W = (A + A.T).tocsr()
    return _drop_diag(W)


def _drop_diag(M):
    """CSR copy of ``M`` without diagonal entries (no explicit zeros stored)."""
    coo = M.tocoo()
    off = coo.row != coo.col
    out = sp.csr_matrix((coo.data[off], (coo.row[off], coo.col[off])), shape=M.shape)
    out.eliminate_zeros()
    out.sort_indices()
    return out
