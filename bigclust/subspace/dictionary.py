"""The augmented dictionary and its kNN supports (paper 002, section 4.1, Ak-SC).

Dictionary = originals followed by augmented samples, every row scaled to
unit Euclidean length.  For sample i, N_i = the k atoms with the largest
cosine similarity to x_i (= the k nearest in Euclidean distance, the atoms
being unit vectors), EXCLUDING i itself and its own augmentations A(i) --
the constraint of paper Eq. (6) that prevents each sample from being
explained by copies of itself (over-segmentation).  Augmented copies of
other samples are allowed.  For AkS-SC, atoms whose known label differs
from a labelled sample's label are excluded as well (cannot-links).

Two search paths, same answer up to ties/approximation:

* ``exact``: blocks of query rows times the whole dictionary by GEMM
  (a block of ``b`` rows costs ``b * N`` floats; ``b`` from ``block_bytes``,
  never the full n x N matrix), excluded atoms masked to ``-inf``, then the
  k largest of every row in one pass (ties by atom index);
* ``pynndescent``: the NN-descent graph of the dictionary with
  ``k + max|A(i)| + 1`` neighbours per atom gives the candidates of the
  originals (which are atoms), excluded candidates are filtered out, and the
  few rows left with fewer than k admissible candidates are searched exactly;
* ``ivf``, ``ivf-rows`` (or any other search of :func:`bigclust.algo.knn.knn_search`): the same
  candidates and filter, the candidates by bigclust's own inverted-file search (cached Numba, no
  compilation per process, work about linear in N: the million-point path, where NN-descent builds
  its index for minutes and compiles for 33 s in every process).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import DataError, UserError

#: above this many originals ``method="auto"`` uses pynndescent
EXACT_MAX_N = 20000


@dataclass
class Dictionary:
    """Unit-norm atoms and who owns them.

    Parameters
    ----------
    atoms : ndarray (N, d) float64
        Rows 0..n-1 are the originals, the rest the augmented samples.
    n : int
        Number of originals.
    own_ptr, own_idx : ndarray of int64
        CSR map atom -> its owner(s) among the originals: atom j < n owns
        itself; an augmented atom is owned by its source (several sources for
        linear interpolation).
    aug_ptr, aug_idx : ndarray of int64
        CSR map original j -> its augmented atoms A(j) (atom indices >= n).
    """

    atoms: np.ndarray
    n: int
    own_ptr: np.ndarray
    own_idx: np.ndarray
    aug_ptr: np.ndarray
    aug_idx: np.ndarray

    @property
    def n_atoms(self):
        """N, the number of atoms (originals and augmented samples)."""
        return self.atoms.shape[0]

    def owners_matrix(self):
        """Binary CSR (N, n): entry (a, j) = 1 when atom a is j or one of A(j).

        Returns
        -------
        scipy.sparse.csr_matrix
            The ownership matrix.
        """
        N = self.n_atoms
        return sp.csr_matrix((np.ones(self.own_idx.size), self.own_idx, self.own_ptr), shape=(N, self.n))


def _unit_rows(M, what):
    M = np.asarray(M, dtype=np.float64)
    if M.ndim != 2:
        raise DataError(f"{what} must be 2-D (samples as rows), got shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise DataError(f"{what} contains NaN or infinite values")
    norms = np.linalg.norm(M, axis=1)
    zero = np.flatnonzero(norms == 0)
    if zero.size:
        raise DataError(f"{what} row {zero[0]} is all zeros and cannot be a unit-norm atom "
                        f"({zero.size} such rows)")
    return M / norms[:, None]


def build_dictionary(X, X_aug=None, origin=None):
    """Unit-norm dictionary ``[X; X_aug]`` with its ownership maps.

    Parameters
    ----------
    X : array-like (n, d)
        Original samples.
    X_aug : array-like (m, d) or None
        Augmented samples.
    origin : array-like of int, shape (m,) or (m, s)
        Source sample(s) of each augmented row (``-1`` = no source, padding).

    Returns
    -------
    Dictionary
        The atoms and who owns them.
    """
    D0 = _unit_rows(X, "X")
    n = D0.shape[0]
    if n < 2:
        raise DataError(f"need at least 2 samples, got {n}")
    if X_aug is None or np.asarray(X_aug).shape[0] == 0:
        atoms = D0
        src = np.empty((0, 1), dtype=np.int64)
    else:
        if origin is None:
            raise UserError("X_aug needs origin (the source sample of every augmented row)")
        Da = _unit_rows(X_aug, "X_aug")
        if Da.shape[1] != D0.shape[1]:
            raise DataError(f"X_aug has {Da.shape[1]} features but X has {D0.shape[1]}")
        src = np.asarray(origin)
        if src.ndim == 1:
            src = src[:, None]
        if src.ndim != 2 or src.shape[0] != Da.shape[0]:
            raise DataError(f"origin must have one entry (or row) per augmented sample: "
                            f"{Da.shape[0]} rows, got shape {np.asarray(origin).shape}")
        src = src.astype(np.int64)
        if src.size and (src.max() >= n or src.min() < -1):
            raise DataError(f"origin values must be sample indices in [0, {n}) (or -1 for padding)")
        atoms = np.vstack([D0, Da])
    N = atoms.shape[0]
    # atom -> owners
    rows = [np.arange(n, dtype=np.int64)]
    owners = [np.arange(n, dtype=np.int64)]
    if src.shape[0]:
        ok = src >= 0
        rows.append(n + np.nonzero(ok)[0].astype(np.int64))
        owners.append(src[ok])
    r = np.concatenate(rows)
    o = np.concatenate(owners)
    own = sp.csr_matrix((np.ones(r.size), (r, o)), shape=(N, n))
    own.sum_duplicates()
    own.sort_indices()
    aug = own[n:].T.tocsr()  # original -> augmented (relative index)
    aug.sort_indices()
    return Dictionary(atoms=atoms, n=n, own_ptr=own.indptr.astype(np.int64), own_idx=own.indices.astype(np.int64),
                      aug_ptr=aug.indptr.astype(np.int64), aug_idx=(aug.indices + n).astype(np.int64))


def atom_labels(dictionary, y):
    """Known label of every atom: the label of its owners when they agree and are labelled, else -1."""
    y = np.asarray(y, dtype=np.int64)
    lab = np.full(dictionary.n_atoms, -1, dtype=np.int64)
    ptr, idx = dictionary.own_ptr, dictionary.own_idx
    has = np.flatnonzero(np.diff(ptr) > 0)
    if has.size == 0 or not np.any(y >= 0):
        return lab
    ly = y[idx]
    lo = np.minimum.reduceat(ly, ptr[has])
    hi = np.maximum.reduceat(ly, ptr[has])
    agree = (lo == hi) & (lo >= 0)
    lab[has[agree]] = lo[agree]
    return lab


def _check_labels(y, n):
    if y is None:
        return np.full(n, -1, dtype=np.int64)
    y = np.asarray(y)
    if y.shape != (n,):
        raise DataError(f"y must have one label per sample ({n}), got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError("y must be integer class labels with -1 for unlabelled samples")
    if y.size and y.min() < -1:
        raise DataError("y must be >= 0 for labelled samples and -1 for unlabelled ones")
    return y.astype(np.int64)


def n_admissible(dictionary, y=None):
    """Number of atoms each original may use (N - 1 - |A(i)| - cannot-links)."""
    n, N = dictionary.n, dictionary.n_atoms
    y = _check_labels(y, n)
    own_count = np.diff(dictionary.aug_ptr) + 1
    allowed = N - own_count
    lab = atom_labels(dictionary, y) if np.any(y >= 0) else None
    if lab is not None:
        known = lab[lab >= 0]
        counts = np.bincount(known, minlength=int(y.max()) + 1)
        other = known.size - counts[np.where(y >= 0, y, 0)]
        allowed = allowed - np.where(y >= 0, other, 0)
    return allowed


def knn_dictionary(dictionary, n_neighbors, *, y=None, method="auto", random_state=0, block_bytes=32 << 20):
    """The k admissible atoms nearest to each original sample.

    Parameters
    ----------
    dictionary : Dictionary
        From :func:`build_dictionary`.
    n_neighbors : int
        k, the support size of every column.
    y : array-like of int (n,) or None
        Labels for cannot-links (``-1`` = unlabelled); None = unsupervised.
    method : {"auto", "exact", "pynndescent", "ivf", "ivf-rows", ...}
        ``auto``: exact for n <= 20000 originals, else pynndescent; ``ivf``, ``ivf-rows`` and the other
        names of :data:`bigclust.algo.knn.KNN_METHODS`: candidates by :func:`bigclust.algo.knn.knn_search`.
    random_state : int
        Seed of the NN-descent index.
    block_bytes : int
        Memory of one block of similarities in the exact search.

    Returns
    -------
    ndarray of int64 (n, k)
        Atom indices, most similar first.

    Raises
    ------
    UserError
        If k exceeds the number of atoms some sample may use.
    """
    n = dictionary.n
    k, yv, lab = search_inputs(dictionary, n_neighbors, y)
    if method == "auto":
        method = "exact" if n <= EXACT_MAX_N else "pynndescent"
    if method == "exact":
        return _exact(dictionary, k, yv, lab, np.arange(n), block_bytes)
    if method == "pynndescent":
        return _nndescent(dictionary, k, yv, lab, random_state, block_bytes)
    from bigclust.algo.knn import KNN_METHODS
    if method in KNN_METHODS:
        return _searched(dictionary, k, yv, lab, method, random_state, block_bytes)
    raise UserError(f"unknown kNN method {method!r}; expected auto, exact, pynndescent or one of "
                    f"{', '.join(m for m in KNN_METHODS if m not in ('auto', 'exact'))}")


def search_inputs(dictionary, n_neighbors, y=None):
    """``(k, y, atom labels)`` of a search, checked: a one-line :class:`UserError` when k exceeds the atoms
    some sample may use."""
    if not (isinstance(n_neighbors, numbers.Integral) and n_neighbors >= 1):
        raise UserError(f"n_neighbors={n_neighbors!r} must be a positive int")
    k = int(n_neighbors)
    yv = _check_labels(y, dictionary.n)
    allowed = n_admissible(dictionary, yv)
    worst = int(np.argmin(allowed))
    if k > allowed[worst]:
        raise UserError(f"n_neighbors={k} exceeds the {allowed[worst]} atoms sample {worst} may use "
                        f"(dictionary of {dictionary.n_atoms} minus itself, its augmentations and cannot-links)")
    return k, yv, atom_labels(dictionary, yv)


def n_candidates(dictionary, k):
    """Other atoms a searched candidate list needs per atom: ``k + max|A(i)|``, enough to survive the
    exclusion of i's copies (at most N - 1)."""
    return min(dictionary.n_atoms - 1, k + int(np.diff(dictionary.aug_ptr).max(initial=0)))


def _exact(dictionary, k, y, lab, rows, block_bytes):
    """Exact admissible kNN of the originals ``rows`` (blocked GEMM, then the k largest per row)."""
    from threadpoolctl import threadpool_limits

    # one BLAS thread: a block's product is a thin GEMM whose entries do not depend on the thread count
    # (checked: the same bits), and two OpenBLAS threads spin-waiting on a loaded machine cost more wall
    # and CPU than they gain
    with threadpool_limits(limits=1, user_api="blas"):
        return _exact_blocks(dictionary, k, y, lab, rows, block_bytes)


def _exact_blocks(dictionary, k, y, lab, rows, block_bytes):
    from bigclust.subspace._kernels import top_k_rows

    D = dictionary.atoms
    N = D.shape[0]
    out = np.empty((rows.size, k), dtype=np.int64)
    b = int(max(1, min(rows.size, block_bytes // (8 * N))))
    labelled_atoms = {c: np.flatnonzero((lab >= 0) & (lab != c)) for c in np.unique(y[y >= 0])}
    for s0 in range(0, rows.size, b):
        blk = rows[s0:s0 + b]
        S = D[blk] @ D.T
        loc = np.arange(blk.size)
        S[loc, blk] = -np.inf
        cnt = dictionary.aug_ptr[blk + 1] - dictionary.aug_ptr[blk]
        if cnt.sum():
            rr = np.repeat(loc, cnt)
            cols = np.concatenate([dictionary.aug_idx[dictionary.aug_ptr[i]:dictionary.aug_ptr[i + 1]] for i in blk])
            S[rr, cols] = -np.inf
        for c, cols in labelled_atoms.items():
            rr = loc[y[blk] == c]
            if rr.size and cols.size:
                S[np.ix_(rr, cols)] = -np.inf
        # the k most similar, most similar first, ties by atom index: one pass over the block (argpartition,
        # take and lexsort made three and a copy, 26 of the 71 s of the search at 10 000 x 110 000)
        top_k_rows(S, k, out[s0:s0 + blk.size])
    return out


def _nndescent(dictionary, k, y, lab, random_state, block_bytes):
    """Approximate path: the NN-descent graph of the dictionary itself gives the candidates.

    The queries (the originals) are atoms 0..n-1 of the indexed set, so their
    candidate lists are rows of ``neighbor_graph`` -- no ``query`` call (whose
    search function pynndescent compiles anew in every process, ~20-30 s).
    The graph is built with ``q = k + max|A(i)| + 1`` neighbours (enough to
    survive the exclusion of i and A(i)); the rare rows left with fewer than
    k admissible candidates (cannot-links, approximation misses) are searched
    exactly.
    """
    from pynndescent import NNDescent

    D = dictionary.atoms
    n, N = dictionary.n, D.shape[0]
    q = min(N - 1, k + int(np.diff(dictionary.aug_ptr).max(initial=0)) + 1)
    index = NNDescent(D, metric="euclidean", n_neighbors=q + 1, random_state=random_state, n_jobs=1,
                      compressed=True)
    return candidates_filtered(dictionary, index.neighbor_graph[0][:n], k, y, lab, block_bytes)


def candidates_filtered(dictionary, cand, k, y, lab, block_bytes=32 << 20):
    """The first k admissible atoms of every original's candidate list (nearest first); the rows left with
    fewer than k (cannot-links, approximation misses) are searched exactly."""
    from bigclust.subspace._dictionary_numba import filter_candidates

    n = dictionary.n
    rows = np.arange(n, dtype=np.int64)
    out = np.full((n, k), -1, dtype=np.int64)
    cnt = np.empty(n, dtype=np.int64)
    filter_candidates(np.ascontiguousarray(cand, dtype=np.int64), k, dictionary.own_ptr, dictionary.own_idx,
                      lab, y, rows, out, cnt)
    short = np.flatnonzero(cnt < k)
    if short.size:
        out[short] = _exact(dictionary, k, y, lab, short, block_bytes)
    return out


def _searched(dictionary, k, y, lab, method, random_state, block_bytes):
    """Candidates by :func:`bigclust.algo.knn.knn_search` over the whole dictionary (``k + max|A(i)|``
    other atoms per atom: enough to survive the exclusion of i's copies), then the filter.

    The atoms go in as float32: half the memory (1M x 50 atoms: 200 MB), and an approximate search
    ranks no worse for it; the kept atoms are indices, the coefficients are solved in float64.
    """
    from bigclust.algo.knn import knn_search

    q = n_candidates(dictionary, k)
    ind, _ = knn_search(np.asarray(dictionary.atoms, dtype=np.float32), q, method, random_state=random_state)
    return candidates_filtered(dictionary, ind[:dictionary.n], k, y, lab, block_bytes)
