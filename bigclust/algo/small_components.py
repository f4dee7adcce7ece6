"""Small components of a normalised graph: set aside from the eigenproblem, embedded through the kernel.

A normaliser that clips (the exact Euclidean BBS) can cut a connected kernel
graph into pieces.  Every component of a stochastic P has eigenvalue 1, above
everything inside the large component, so with more components than
eigenvectors the top of the spectrum is component indicators only: mnist-8m's
BBS-dual P has 26 components (25 with 89 rows in all) for k = 10, and k-means
on that embedding puts 8 099 822 rows in one cluster (ACC 0.11).

The rule (:func:`small_component_rows`): a component below ``fraction * n / k``
rows (a fraction of a cluster's mean size) gets no eigenvector -- its entries
are zeroed (:func:`drop_rows`), so each of its rows is a point alone with
eigenvalue 0 -- and each of its rows is embedded afterwards as the normalised
mean of its kernel neighbours' embeddings (:func:`extend`), the kernel being
connected where P is not.  This holds with any number of components: with at
most k of them a small one would still take one of the k eigenvectors (and
k-means one of the k clusters) for a handful of rows -- at 4M rows of
mnist-8m, 7 components of 2-4 rows left the large one 3 of 10 eigenvectors.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def small_component_rows(labels, n_components, k, fraction):
    """Rows (ascending) of the components below ``fraction * n / k`` rows.

    ``labels``: each row's component (0 .. ``n_components`` - 1).  Empty when
    ``fraction`` is 0 or when no component reaches the size (nothing would be
    left to embed).
    """
    labels = np.asarray(labels)
    if fraction <= 0:
        return np.empty(0, dtype=np.int64)
    sizes = np.bincount(labels, minlength=n_components)
    small = sizes < fraction * labels.size / k
    if small.all():
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(small[labels])


def drop_rows(P, rows):
    """IN/OUT: the entries of ``rows`` and their columns set to 0 (a CSR keeps its pattern: stored zeros).

    For a sparse P only the rows' own entries are written: ``rows`` are whole
    components of a symmetric P, so no other row has a non-zero entry in their
    columns.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if sp.issparse(P):
        start, stop = P.indptr[rows].astype(np.int64), P.indptr[rows + 1].astype(np.int64)
        lengths = stop - start
        # every stored position of the rows: each row's start repeated, plus 0, 1, ... within the row
        within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        P.data[np.repeat(start, lengths) + within] = 0
    else:
        P[rows, :] = 0
        P[:, rows] = 0


def extend(E, rows, R):
    """IN/OUT: ``E[rows]``, the normalised mean of the embedded kernel neighbours, reached step by step.

    ``R``: the kernel's rows of ``rows`` (``len(rows) x n``, sparse or dense).
    In each step every row not yet embedded that has an embedded neighbour
    takes the weighted mean of those neighbours' rows of E, normalised to
    unit length (the embedding's rows are); the rows filled in a step count as
    embedded from the next one, so the result does not depend on the order of
    ``rows``.  Rows with no path in the kernel to an embedded row stay at 0.
    Returns the number of rows filled.
    """
    rows = np.asarray(rows, dtype=np.int64)
    R = sp.csr_matrix(R, dtype=np.float64)
    done = np.ones(E.shape[0], dtype=bool)
    done[rows] = False
    todo = np.arange(rows.size)
    while todo.size:
        W = R[todo]
        W.data[~done[W.indices]] = 0   # weights of the embedded neighbours only
        W.eliminate_zeros()
        reached = np.diff(W.indptr) > 0
        if not reached.any():
            break
        M = np.asarray(W[reached] @ E)
        norms = np.linalg.norm(M, axis=1)
        nz = norms > 0
        M[nz] /= norms[nz, None]
        E[rows[todo[reached]]] = M
        done[rows[todo[reached]]] = True
        todo = todo[~reached]
    return int(rows.size - todo.size)
