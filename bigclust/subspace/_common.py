"""What the subspace solvers share: their convergence warning and the sparse matrix of their coefficients.

Both :mod:`bigclust.subspace.selfexpr` (SSC / LSR) and :mod:`bigclust.subspace.lrr`
(LRR) solve per-sample problems on kNN supports and return the same CSC
matrix; keeping these here lets ``selfexpr`` call ``lrr`` without a cycle.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util.convergence import ConvergenceWarning as _ConvergenceWarning


class ConvergenceWarning(_ConvergenceWarning):
    """Some columns stopped on ``max_iter`` before the ADMM residual tests were met (or LRR's ALM before tol)."""


def assemble(nb, coef, dictionary):
    """COO triplets (atom, sample, value) -> CSC (N, n), exact zeros dropped."""
    n, k = nb.shape
    cols = np.repeat(np.arange(n, dtype=np.int64), k)
    vals = coef.ravel()
    keep = vals != 0
    C = sp.csc_matrix((vals[keep], (nb.ravel()[keep], cols[keep])), shape=(dictionary.n_atoms, n))
    C.sort_indices()
    return C
