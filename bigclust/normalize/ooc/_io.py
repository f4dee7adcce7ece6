"""Checks shared by the out-of-core solvers; the streaming itself is :mod:`bigclust.algo.blocks`."""
from __future__ import annotations

import warnings

import numpy as np

from bigclust.algo.blocks import map_blocks
from bigclust._util.errors import DataError, UserError
from bigclust.normalize._common import NormalizeConvergenceWarning, check_tol

#: rows sampled (evenly spaced) for the streaming symmetry check
N_SYMMETRY_ROWS = 16


def _check(K, out, what, client):
    """K (and ``out`` unless None) square 2-D zarr arrays; ``out`` another float array a cluster can reach."""
    for A, name in ((K, "K"), (out, what)) if out is not None else ((K, "K"),):
        if not (hasattr(A, "chunks") and hasattr(A, "shape")) or len(A.shape) != 2 or A.shape[0] != A.shape[1] \
                or A.shape[0] == 0:
            raise DataError(f"{name} must be a non-empty square 2-D zarr array, got {type(A).__name__} "
                            f"of shape {getattr(A, 'shape', None)}")
    if out is None:
        return
    if out.shape != K.shape:
        raise DataError(f"{what} has shape {out.shape}, K has {K.shape}")
    if np.dtype(out.dtype) not in (np.float32, np.float64):
        raise UserError(f"{what} must be float32 or float64, got {out.dtype}")
    if out is K or (str(out.store) == str(K.store) and out.path == K.path):
        raise UserError(f"{what} must be another array than K (K is read only)")
    if client is not None and type(out.store).__name__ == "MemoryStore":
        raise UserError(f"{what} is in an in-memory zarr store, which Dask workers cannot reach; "
                        "use a store on a shared file system")


def _first_pass(client, ring, blocks, fn, K, dtype, dst):
    """The first pass over K: ``fn``'s (n,) vector, and K checked finite, (maybe) >= 0 and symmetric.

    A full symmetry check would need column blocks (a read of all of K per
    block); comparing ``N_SYMMETRY_ROWS`` whole rows with the same columns
    costs two ``n x 16`` arrays and catches a K that is not symmetric at all.
    """
    n = K.shape[0]
    idx = np.unique(np.linspace(0, n - 1, min(n, N_SYMMETRY_ROWS)).astype(np.int64))
    vec, cols, rows, scale = np.empty(n), np.empty((n, idx.size)), np.empty((idx.size, n)), 0.0
    for v, (r0, r1, c, rw, sc) in map_blocks(client, ring, blocks, fn, K, dtype, dst, idx):
        vec[r0:r1], cols[r0:r1], scale = v, c, max(scale, sc)
        rows[(idx >= r0) & (idx < r1)] = rw
    asym = float(np.abs(cols.T - rows).max())
    if asym > 64 * np.finfo(dtype).eps * max(scale, np.finfo(np.float64).tiny):
        raise DataError(f"K is not symmetric (max |K - K^T| = {asym:.3g} on sampled rows)")
    return vec


def _scan_part(blk, r0, idx, nonneg, what, rowsums):
    """Per-block part of :func:`_first_pass` (in-process or in a task); no block-sized temporaries.

    A non-finite entry makes its row sum non-finite, so only such rows are searched.
    """
    for i in np.flatnonzero(~np.isfinite(rowsums)):
        bad = np.flatnonzero(~np.isfinite(blk[i]))
        where = f"entry at ({r0 + i}, {bad[0]})" if bad.size else f"row sum in row {r0 + i} (overflow)"
        raise DataError(f"K has a non-finite {where}; {what} needs a finite K")
    lo, hi = float(blk.min()), float(blk.max())
    if nonneg and lo < 0:
        i, j = np.unravel_index(np.argmin(blk), blk.shape)
        raise DataError(f"K has negative entries ({lo:.3g} at ({r0 + i}, {j})); {what} needs K >= 0")
    r1 = r0 + blk.shape[0]
    mine = idx[(idx >= r0) & (idx < r1)] - r0
    return r0, r1, blk[:, idx].astype(np.float64), blk[mine].astype(np.float64), max(hi, -lo)


def _check_args(n_iter, tol, record_every):
    for name, v in (("n_iter", n_iter), ("record_every", record_every)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise UserError(f"{name} must be an integer >= 0, got {v!r}")
    return int(n_iter), check_tol(tol), int(record_every)


def _not_converged(what, t, err, tol):
    warnings.warn(f"{what} did not converge in {t} iterations: max row-sum error {err:.3g} > tol {tol:.3g}",
                  NormalizeConvergenceWarning, stacklevel=3)


