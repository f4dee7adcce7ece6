"""The spectral step out of core: a LinearOperator streaming the row blocks of a zarr P."""
from __future__ import annotations

import numpy as np

from bigclust._util.errors import DataError
from bigclust.algo.blocks import blocks_for, budget, reader
from bigclust._util.plan import consumer_rows


def _nb():
    from bigclust.normalize import _numba as normalize_numba

    return normalize_numba


def blocked_matvec_operator(P, *, max_memory=None):
    """A symmetric ``scipy.sparse.linalg.LinearOperator`` streaming the row blocks of a zarr P.

    ``eigsh(blocked_matvec_operator(P), k, which="LA")`` computes the spectral
    embedding with only ``n``-length vectors (and one block) in memory.

    Parameters
    ----------
    P : zarr.Array, shape (n, n)
        Symmetric, chunked by rows.
    max_memory : int or str, optional
        Budget for the block buffer and one float64 block (``matmat``);
        default: one chunk of P per block.

    Returns
    -------
    LinearOperator
        float64, with attribute ``passes``: the sweeps over P so far.
    """
    from scipy.sparse.linalg import LinearOperator

    if not (hasattr(P, "chunks") and len(P.shape) == 2 and P.shape[0] == P.shape[1] > 0):
        raise DataError(f"P must be a non-empty square 2-D zarr array, got shape {getattr(P, 'shape', None)}")
    n = P.shape[0]
    dt = np.dtype(P.dtype) if np.dtype(P.dtype) in (np.float32, np.float64) else np.dtype(np.float64)
    blocks = blocks_for(P, consumer_rows("operator", n, 8, budget(max_memory)) if max_memory is not None
                       else P.chunks[0])
    read = reader(P, blocks, dt)

    class _BlockedOperator(LinearOperator):
        passes, buf = 0, None

        def _sweep(self, apply):
            for i, (r0, r1) in enumerate(blocks):
                self.buf, blk = read(i, self.buf)
                apply(r0, r1, blk)
            self.passes += 1

        def _matvec(self, x):
            x, y = np.ascontiguousarray(np.ravel(x), dtype=np.float64), np.empty(n)
            self._sweep(lambda r0, r1, blk: _nb().sk_matvec_block(blk, x, y[r0:r1]))
            return y

        def _matmat(self, X):
            X, Y = np.asarray(X, dtype=np.float64), np.empty((n, X.shape[1]))
            self._sweep(lambda r0, r1, blk: Y.__setitem__(slice(r0, r1), blk.astype(np.float64) @ X))
            return Y

        def _adjoint(self):
            return self  # P is symmetric

    return _BlockedOperator(dtype=np.float64, shape=(n, n))
