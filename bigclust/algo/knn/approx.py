"""Approximate k nearest neighbours by an external library: pynndescent, hnswlib or faiss (HNSW).

hnswlib and faiss are the optional extra ``bigclust[knn]``; the defaults
(:data:`APPROX_PARAMS`, :data:`APPROX_DEFAULT`) are the settings measured by
``bigclust bench knn``.
"""
from __future__ import annotations

import numpy as np

from bigclust._util.errors import UserError
from bigclust.algo.knn.exact import _dense

LIBRARIES = ("pynndescent", "hnswlib", "faiss")

#: the approximate search "approx" means: pynndescent had the best recall per second in
#: ``bigclust bench knn`` (MNIST-70k PCA-50, k = 10: 1.8 CPU s at recall 0.984 vs exact, hnswlib 13.5 s)
APPROX_DEFAULT = "pynndescent"

#: optional libraries and the extra that installs them
_EXTRA = {"hnswlib": "hnswlib", "faiss": "faiss-cpu"}


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


def drop_self(ind, d2, k):
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
    return drop_self(np.asarray(ind, dtype=np.int64), np.asarray(d2, dtype=np.float64), k)
