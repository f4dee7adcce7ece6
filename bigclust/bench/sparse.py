"""Graph diagnostics of ``bigclust bench sparse``: what a normalisation does to a kNN graph.

Issue 13 item 5: the exact (dual) BBS of a kNN kernel with its self-loops
kept zeroes many edges, leaves rows with their whole mass on the diagonal and
splits the graph into components, each adding an eigenvalue 1 at the top of
the spectrum.  These numbers say whether that happened: connected components
of K and of P's positive entries, rows with more than 90 % of their mass on the
diagonal, positive entries kept, and the spectral gap ``lambda_c -
lambda_{c+1}`` of P (c = number of clusters) that governs how hard the
eigenvectors are to find.
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

#: a row counts as "diagonal" when more than this share of its mass sits on its self-loop
DIAGONAL_SHARE = 0.9


def positive_part(P):
    """CSR of P's strictly positive entries (the graph the eigensolver and k-means see)."""
    P = sp.csr_matrix(P, copy=True)
    P.data[P.data <= 0] = 0
    P.eliminate_zeros()
    return P


def diagonal_rows(P, share=DIAGONAL_SHARE) -> int:
    """Number of rows of non-negative P with more than ``share`` of their mass on the diagonal."""
    P = sp.csr_matrix(P)
    r = np.asarray(P.sum(axis=1)).ravel()
    return int(np.count_nonzero((r > 0) & (P.diagonal() > share * r)))


def graph_stats(K, P, n_clusters, *, prefix=""):
    """Components, diagonal rows, positive entries and spectral gap of a normalised kNN kernel.

    Parameters
    ----------
    K : sparse (n, n)
        The kernel before normalisation.
    P : sparse (n, n)
        The normalised matrix (SK, BBS).
    n_clusters : int
        c: the gap is ``lambda_c - lambda_{c+1}`` of P's eigenvalues in
        descending order (computed with the ``auto`` eigensolver, c + 1 pairs;
        the time is reported as ``seconds_gap`` and is not part of a pipeline).

    Returns
    -------
    dict with keys (each prefixed by ``prefix``): ``components_in``,
    ``components_out``, ``singletons_out``, ``diagonal_rows``,
    ``nnz_positive``, ``eigenvalues`` (the top c + 1), ``spectral_gap``,
    ``eigensolver`` (what ``auto`` chose) and ``seconds_gap``.
    """
    from bigclust.algo.spectral import auto_solver, components, top_eigenvectors

    Pp = positive_part(P)
    nin = components(K)[0]
    nout, lab = components(Pp)
    t = time.perf_counter()
    vals, _ = top_eigenvectors(P, n_clusters + 1)
    out = {"components_in": int(nin), "components_out": int(nout),
           "singletons_out": int(np.count_nonzero(np.bincount(lab) == 1)),
           "diagonal_rows": diagonal_rows(Pp), "nnz_positive": int(Pp.nnz),
           "eigenvalues": [float(v) for v in vals],
           "spectral_gap": float(vals[n_clusters - 1] - vals[n_clusters]),
           "eigensolver": auto_solver(P, n_clusters), "seconds_gap": time.perf_counter() - t}
    return {prefix + key: v for key, v in out.items()}
