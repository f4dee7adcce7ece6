"""k nearest neighbours of every row: exact blocked search and approximate libraries.

One entry point, :func:`knn_search`, returns ``(indices, squared distances)``
of the k nearest *other* rows of X (the point itself excluded), each (n, k),
rows sorted by (distance, index).  ``method`` chooses how:

- ``"exact"``: :func:`knn_exact`, float32 GEMM tiles through BLAS
  (``|x|^2 + |y|^2 - 2 x.y``) and a Numba k-heap per row, rows in parallel;
  memory is the tiles and the (n, k) heaps, never an n x n matrix.  The k
  chosen distances are recomputed exactly in float64.
- ``"pynndescent"``, ``"hnswlib"``, ``"faiss"``: approximate search by that
  library (``faiss`` = its HNSW index); the last two are the optional extra
  ``bigclust[knn]``.
- ``"ivf"``: inverted file (:mod:`bigclust.algo.knn.ivf`): k-means cells, exact
  search of each cell against its nearest cells; chunked and resumable in
  the kNN stage.
- ``"approx"``: the approximate library that won the measurements
  (:data:`APPROX_DEFAULT` = pynndescent, see ``bigclust bench knn``).
- ``"auto"``: exact while ``n * n * d`` stays below :data:`EXACT_WORK_LIMIT`
  (measured on MNIST: see the README); above it ``"ivf"`` in up to
  :data:`IVF_MAX_DIM` dimensions (after PCA), else ``"approx"``.  IVF is
  bigclust's own cached Numba code, chunked and resumable; pynndescent spends
  about 33 s compiling in every new process (MNIST-70k PCA-50, k = 10: 34.7 s
  cold, 1.4 s warm; IVF 3.8 s cold, recall 0.982).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import UserError

LIBRARIES = ("pynndescent", "hnswlib", "faiss")
KNN_METHODS = ("auto", "exact", "approx", "ivf") + LIBRARIES

#: the approximate search "approx" means: pynndescent had the best recall per second in
#: ``bigclust bench knn`` (MNIST-70k PCA-50, k = 10: 1.8 CPU s at recall 0.984 vs exact, hnswlib 13.5 s)
APPROX_DEFAULT = "pynndescent"

#: "auto" searches exactly while n * n * d is below this: exact was faster than pynndescent at
#: n = 3000, d = 784 (7e9) and 2-8x slower at n = 20000, d = 50 (2e10); MNIST-70k PCA-50 is 2.45e11
EXACT_WORK_LIMIT = 1e10
#: "auto" uses IVF above EXACT_WORK_LIMIT in at most this many dimensions: its cell-against-cells
#: search is exact GEMM work, cheap after PCA, not on raw high-dimensional rows
IVF_MAX_DIM = 128

#: optional libraries and the extra that installs them
_EXTRA = {"hnswlib": "hnswlib", "faiss": "faiss-cpu"}


def check_method(method) -> str:
    """Validate a ``knn`` method name (one-line :class:`UserError` otherwise)."""
    if method not in KNN_METHODS:
        raise UserError(f"unknown knn method {method!r}; expected one of {', '.join(map(repr, KNN_METHODS))}")
    return method


def resolve_method(method, n, d) -> str:
    """The concrete search (``"exact"`` or a library name) that ``method`` means for n rows in d dimensions."""
    check_method(method)
    if method == "auto":
        method = "exact" if float(n) * n * d <= EXACT_WORK_LIMIT else "ivf" if d <= IVF_MAX_DIM else "approx"
    if method == "approx":
        method = APPROX_DEFAULT
    return method


def _dense(X, dtype=None):
    """X as a C-contiguous 2-D float array (float32 / float64 kept unless ``dtype`` is given)."""
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    if X.ndim != 2:
        raise UserError(f"kNN needs a 2-D array of rows, got shape {X.shape}")
    if dtype is None:
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    X = np.ascontiguousarray(X, dtype=dtype)
    if not np.isfinite(X).all():
        raise UserError("kNN input has NaN or infinite values (first in row "
                        f"{int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])})")
    return X


def _augment(A, scale, query):
    """``[scale * A, -|a|^2, 1]`` (query side) or ``[A, 1, -|a|^2]`` (base side), float32."""
    sq = np.einsum("ij,ij->i", A, A, dtype=np.float64).astype(np.float32)
    out = np.empty((A.shape[0], A.shape[1] + 2), dtype=np.float32)
    np.multiply(A, scale, out=out[:, :-2])
    out[:, -2] = -sq if query else 1.0
    out[:, -1] = 1.0 if query else -sq
    return out


def knn_exact(X, k, queries=None, *, row_block=2048, col_block=2048):
    """Exact k nearest neighbours by blocked GEMM and a partial top-k per row.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (m, d)
        The base points: searched in float32, the chosen distances
        recomputed in float64 from X as given.
    k : int
        Neighbours per query, ``1 <= k <= m`` (``m - 1`` when ``queries`` is None).
    queries : ndarray, shape (n, d), optional
        Query rows; ``None`` searches X among itself and excludes each point
        from its own list (a duplicate of it at distance 0 is kept).
    row_block, col_block : int
        Tile sizes: one (row_block x col_block) float32 tile is held at a
        time (a self search uses square tiles of the larger size, and the
        transposed copy of one), plus (n, k) heaps and float32 copies of the
        rows augmented by two columns.  The result does not depend on them
        beyond float32 near-ties (see Notes).

    Returns
    -------
    indices : ndarray int64, shape (n, k)
    sqdist : ndarray float64, shape (n, k)
        ``||q_i - x_j||^2`` recomputed exactly in float64 for the chosen
        pairs; every row sorted by (distance, index).

    Notes
    -----
    Candidates are chosen on float32 distances: two neighbours whose
    distances agree to float32 rounding may be exchanged at the k-th place
    (ties are otherwise broken toward the smaller index).  A self search
    computes only the tiles on and above the diagonal: the tile (a, b)
    holds ``-||x_i - x_j||^2``, a symmetric quantity, so its transpose is
    tile (b, a).
    """
    from bigclust.algo.knn._numba import merge_tile, refine_sort

    B = _dense(X)
    self_search = queries is None
    Q = B if self_search else _dense(queries, B.dtype)
    m, n = B.shape[0], Q.shape[0]
    if Q.shape[1] != B.shape[1]:
        raise UserError(f"queries have {Q.shape[1]} columns, the base {B.shape[1]}")
    kmax = m - 1 if self_search else m
    if not 1 <= k <= kmax:
        raise UserError(f"k={k} must be between 1 and {kmax} (the number of candidate neighbours)")
    if row_block < 1 or col_block < 1:
        raise UserError(f"row_block and col_block must be >= 1, got {row_block}, {col_block}")
    # augmented rows: [2q, -|q|^2, 1] . [x, 1, -|x|^2] = -||q - x||^2 from one GEMM per tile
    Ba = _augment(B, 1.0, False)
    Qa = _augment(Q, 2.0, True)
    heap_d = np.full((n, k), np.inf, dtype=np.float32)
    heap_i = np.full((n, k), -1, dtype=np.int64)
    if self_search:
        # tile (a, b), b >= a, serves rows of tile a and (transposed) rows of tile b: half the GEMMs
        T = max(row_block, col_block)
        for r0 in range(0, n, T):
            r1 = min(n, r0 + T)
            for c0 in range(r0, n, T):
                c1 = min(n, c0 + T)
                G = Qa[r0:r1] @ Ba[c0:c1].T
                merge_tile(G, r0, c0, True, heap_d[r0:r1], heap_i[r0:r1])
                if c0 != r0:
                    merge_tile(np.ascontiguousarray(G.T), c0, r0, False, heap_d[c0:c1], heap_i[c0:c1])
                del G
    else:
        for r0 in range(0, n, row_block):
            r1 = min(n, r0 + row_block)
            for c0 in range(0, m, col_block):
                c1 = min(m, c0 + col_block)
                G = Qa[r0:r1] @ Ba[c0:c1].T          # BLAS sgemm; the only large temporary
                merge_tile(G, r0, c0, False, heap_d[r0:r1], heap_i[r0:r1])
    del heap_d
    sqdist = np.empty((n, k))
    refine_sort(Q, B, heap_i, sqdist)
    return heap_i, sqdist


# -- approximate libraries -----------------------------------------------------------------


def _require(lib):
    import importlib

    mod = {"faiss": "faiss"}.get(lib, lib)
    try:
        return importlib.import_module(mod)
    except ImportError:
        raise UserError(f"knn = {lib!r} needs the package {_EXTRA.get(lib, lib)!r}: "
                        f"pip install 'bigclust[knn]' (or pip install {_EXTRA.get(lib, lib)})") from None


#: tuned defaults per library (the settings measured by ``bigclust bench knn``)
APPROX_PARAMS = {
    "pynndescent": {},
    "hnswlib": {"M": 16, "ef_construction": 100, "ef": 60},
    "faiss": {"M": 16, "ef_construction": 80, "ef": 64},
}


def _drop_self(ind, d2, k):
    """From (n, k+1) lists of a self search, drop each row's own index (or its farthest entry)."""
    n = ind.shape[0]
    own = ind == np.arange(n)[:, None]
    keep = ~own
    none = ~own.any(axis=1)
    keep[none, -1] = False           # the point itself was missed: keep its k best others
    ind = ind[keep].reshape(n, k)
    d2 = d2[keep].reshape(n, k)
    # rows sorted by (distance, index) like the exact search
    o = np.argsort(d2, axis=1, kind="stable")
    return np.take_along_axis(ind, o, 1).astype(np.int64), np.take_along_axis(d2, o, 1).astype(np.float64)


def knn_approx(X, k, library=APPROX_DEFAULT, *, random_state=0, n_jobs=None, **params):
    """Approximate k nearest other rows of X by ``library`` (see :data:`LIBRARIES`).

    Returns ``(indices int64, squared distances float64)``, each (n, k),
    the point itself excluded, rows sorted by distance.  ``params`` override
    :data:`APPROX_PARAMS` (pynndescent: any ``NNDescent`` keyword; hnswlib /
    faiss: ``M``, ``ef_construction``, ``ef``).  ``n_jobs`` threads (None:
    one for pynndescent, whose graph is then a function of the seed as the
    pipeline always had it, all cores for hnswlib and faiss); a graph built
    by several threads may vary from run to run.
    """
    import os

    if library not in LIBRARIES:
        raise UserError(f"unknown kNN library {library!r}; expected one of {', '.join(LIBRARIES)}")
    X = _dense(X, np.float32)
    n, d = X.shape
    if not 1 <= k <= n - 1:
        raise UserError(f"k={k} must be between 1 and n-1={n - 1}")
    # pynndescent: one thread unless asked (today's graph, the same for a seed); the HNSW builds: all cores
    threads = n_jobs or (1 if library == "pynndescent" else os.cpu_count() or 1)
    p = {**APPROX_PARAMS[library], **params}
    kk = k + 1
    if library == "pynndescent":
        from pynndescent import NNDescent

        index = NNDescent(X, n_neighbors=kk, metric="euclidean", random_state=random_state, n_jobs=threads, **p)
        ind, dist = index.neighbor_graph
        d2 = np.asarray(dist, dtype=np.float64) ** 2
    elif library == "hnswlib":
        hnswlib = _require("hnswlib")
        index = hnswlib.Index(space="l2", dim=d)
        index.init_index(max_elements=n, ef_construction=p["ef_construction"], M=p["M"],
                         random_seed=int(random_state) % (2**31))
        index.add_items(X, np.arange(n), num_threads=threads)
        index.set_ef(max(p["ef"], kk))
        ind, d2 = index.knn_query(X, k=kk, num_threads=threads)
    else:
        faiss = _require("faiss")
        faiss.omp_set_num_threads(threads)
        index = faiss.IndexHNSWFlat(d, p["M"])
        index.hnsw.efConstruction = p["ef_construction"]
        index.add(X)
        index.hnsw.efSearch = max(p["ef"], kk)
        d2, ind = index.search(X, kk)
    return _drop_self(np.asarray(ind, dtype=np.int64), np.asarray(d2, dtype=np.float64), k)


def knn_search(X, k, method="auto", *, random_state=0, n_jobs=None, n_cells=0, n_probe=0):
    """The k nearest other rows of every row of X, by ``method`` (see the module docstring).

    ``n_cells`` / ``n_probe``: the IVF cells and cells probed (``"ivf"`` only; 0 = default rule).

    Returns ``(indices int64, squared distances float64)``, each (n, k).
    """
    X = _dense(X)
    m = resolve_method(method, X.shape[0], X.shape[1])
    if m == "exact":
        return knn_exact(X, k)
    if m == "ivf":
        from bigclust.algo.knn.ivf import knn_ivf

        return knn_ivf(X, k, n_cells=n_cells, n_probe=n_probe, random_state=random_state)
    return knn_approx(X, k, m, random_state=random_state, n_jobs=n_jobs)


def recall(ind, ref) -> float:
    """Mean fraction of the true neighbours ``ref`` (n, k) found in ``ind`` (n, k') per row (recall@k)."""
    ind, ref = np.asarray(ind), np.asarray(ref)
    hits = 0
    for r0 in range(0, ref.shape[0], 4096):   # (rows, k, k') comparisons in bounded blocks
        a, b = ind[r0:r0 + 4096], ref[r0:r0 + 4096]
        hits += int((b[:, :, None] == a[:, None, :]).any(axis=2).sum())
    return hits / ref.size
