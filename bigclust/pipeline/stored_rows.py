"""Matrices of a bigclust store read by row block, in this process or on Dask workers (streamed methods).

A streamed method (linear NMF, kernel k-means on a stored kernel) receives a
:class:`RowReader` and the block bounds, and never learns where the rows come
from; this module is the piece that knows the store's layout (dense array or
CSR group), so that :mod:`bigclust.algo.blocks` stays below the pipeline.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust.pipeline.store import Store


class RowReader:
    """``reader(i)``: rows ``bounds[i]:bounds[i+1]`` of a matrix stored in a bigclust store (dense or CSR).

    Holds only the store path and names, so it pickles to Dask workers (each
    opens the store itself, once: the opened arrays are kept per process and
    left out of the pickle).  A CSR block reads its slice of ``indptr`` and
    then just its stretch of ``data`` / ``indices``.
    """

    def __init__(self, store_path, stage, key, name, bounds):
        self.store_path, self.stage, self.key, self.name = str(store_path), stage, key, name
        self.bounds = [int(b) for b in bounds]
        self._open = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_open"] = None
        return state

    def _arrays(self):
        """``(node, None)`` for a dense matrix, ``(None, (indptr, data, indices, n_columns))`` for CSR."""
        # opening the store, the group and its arrays reads their metadata (~4 ms a block on 20
        # Newsgroups, 15 % of a streamed NMF pass); a finished stage never changes, so once is enough
        if self._open is None:
            node = Store(self.store_path).open(self.stage, self.key)[self.name]
            if node.attrs.get("format") == "csr":
                self._open = (None, (node["indptr"], node["data"], node["indices"], int(node.attrs["shape"][1])))
            else:
                self._open = (node, None)
        return self._open

    def __call__(self, i):
        r0, r1 = self.bounds[i], self.bounds[i + 1]
        dense, csr = self._arrays()
        if csr is None:
            return np.asarray(dense[r0:r1])
        indptr, data, indices, m = csr
        ptr = indptr[r0:r1 + 1]
        a, b = int(ptr[0]), int(ptr[-1])
        return sp.csr_matrix((data[a:b], indices[a:b], ptr - a), shape=(r1 - r0, m))


def stored_shape(node):
    """``(n, m, bytes per row on average)`` of a stored dense or CSR matrix."""
    if node.attrs.get("format") == "csr":
        n, m = node.attrs["shape"]
        nnz = node["data"].shape[0]
        per = (nnz * (node["data"].dtype.itemsize + 8) + 8 * (n + 1)) / max(n, 1)
        return int(n), int(m), per
    return int(node.shape[0]), int(node.shape[1]), node.shape[1] * node.dtype.itemsize
