"""k nearest neighbours of every row: exact blocked search and approximate libraries.

One entry point, :func:`knn_search`, returns ``(indices, squared distances)``
of the k nearest *other* rows of X (the point itself excluded), each (n, k),
rows sorted by (distance, index).  ``method`` chooses how:

- ``"exact"``: :func:`~bigclust.algo.knn.exact.knn_exact`, float32 GEMM tiles through BLAS
  (``|x|^2 + |y|^2 - 2 x.y``) and a Numba k-heap per row, rows in parallel;
  memory is the tiles and the (n, k) heaps, never an n x n matrix.  The k
  chosen distances are recomputed exactly in float64.
- ``"pynndescent"``, ``"hnswlib"``, ``"faiss"``: approximate search by that
  library (:mod:`bigclust.algo.knn.approx`) (``faiss`` = its HNSW index); the last two are the optional extra
  ``bigclust[knn]``.
- ``"ivf"``: inverted file (:mod:`bigclust.algo.knn.ivf`): k-means cells, exact
  search of each cell against its nearest cells; chunked and resumable in
  the kNN stage.
- ``"ivf-rows"``: inverted file where every row probes its own nearest cells, then
  one neighbours-of-neighbours pass (:mod:`bigclust.algo.knn.ivf_rows`): work linear
  in n (the cells and probes per row do not grow with n); chunked and resumable.
- ``"approx"``: the approximate library that won the measurements
  (:data:`APPROX_DEFAULT` = pynndescent, see ``bigclust bench knn``).
- ``"auto"``: exact while ``n * n * d`` stays below :data:`EXACT_WORK_LIMIT`
  (measured on MNIST: see the README); above it ``"ivf-rows"`` (on the top
  principal components, reranked exactly, beyond 128 dimensions).  It is
  bigclust's own cached Numba code, chunked and resumable, linear in n, and
  measured ahead of ``"ivf"`` and the libraries in ``bigclust bench knn``;
  pynndescent spends about 33 s compiling in every new process.
"""
from __future__ import annotations

from bigclust._util.errors import UserError
from bigclust.algo.knn.approx import APPROX_DEFAULT, APPROX_PARAMS, LIBRARIES, knn_approx
from bigclust.algo.knn.exact import knn_exact, recall

KNN_METHODS = ("auto", "exact", "approx", "ivf", "ivf-rows") + LIBRARIES

#: "auto" searches exactly while n * n * d is below this: exact was faster than pynndescent at
#: n = 3000, d = 784 (7e9) and 2-8x slower at n = 20000, d = 50 (2e10); MNIST-70k PCA-50 is 2.45e11
EXACT_WORK_LIMIT = 1e10
#: what "auto" means above EXACT_WORK_LIMIT (``bigclust bench knn``: less CPU than "ivf" at higher recall
#: from 125k rows of mnist-1m on, and no growth of the probes with n)
AUTO_APPROX = "ivf-rows"

#: :mod:`bigclust.algo.knn.sample_recall`'s names, imported on first use: it compiles Numba kernels, and
#: ``import bigclust.algo.knn`` stays free of Numba (the module is not called ``recall``: importing a submodule
#: binds it on the package, which would hide the function :func:`recall` above)
_SAMPLE_RECALL = ("exact_sample", "knn_recall", "sample_rows")

__all__ = ["APPROX_DEFAULT", "APPROX_PARAMS", "AUTO_APPROX", "EXACT_WORK_LIMIT", "KNN_METHODS", "LIBRARIES",
           "check_method", "knn_approx", "knn_exact", "knn_search", "recall", "resolve_method", *_SAMPLE_RECALL]


def __getattr__(name):
    if name in _SAMPLE_RECALL:
        from bigclust.algo.knn import sample_recall

        return getattr(sample_recall, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_method(method) -> str:
    """Validate a ``knn`` method name (one-line :class:`UserError` otherwise)."""
    if method not in KNN_METHODS:
        raise UserError(f"unknown knn method {method!r}; expected one of {', '.join(map(repr, KNN_METHODS))}")
    return method


def resolve_method(method, n, d) -> str:
    """The concrete search (``"exact"`` or a library name) that ``method`` means for n rows in d dimensions."""
    check_method(method)
    if method == "auto":
        method = "exact" if float(n) * n * d <= EXACT_WORK_LIMIT else AUTO_APPROX
    if method == "approx":
        method = APPROX_DEFAULT
    return method


def knn_search(X, k, method="auto", *, random_state=0, n_jobs=None, n_cells=0, n_probe=0):
    """The k nearest other rows of every row of X, by ``method`` (see the module docstring).

    ``n_cells`` / ``n_probe``: the IVF cells and cells probed (``"ivf"``: per cell, ``"ivf-rows"``: per
    row; 0 = default rule).

    Returns ``(indices int64, squared distances float64)``, each (n, k).
    """
    from bigclust.algo.knn.exact import _dense

    X = _dense(X)
    m = resolve_method(method, X.shape[0], X.shape[1])
    if m == "exact":
        return knn_exact(X, k)
    if m == "ivf":
        from bigclust.algo.knn.ivf import knn_ivf

        return knn_ivf(X, k, n_cells=n_cells, n_probe=n_probe, random_state=random_state)
    if m == "ivf-rows":
        from bigclust.algo.knn.ivf_rows import knn_ivf_rows

        return knn_ivf_rows(X, k, n_cells=n_cells, n_probe=n_probe, random_state=random_state)
    return knn_approx(X, k, m, random_state=random_state, n_jobs=n_jobs)
