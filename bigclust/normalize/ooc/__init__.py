"""Out-of-core normalisation: K and G live in zarr, every iteration streams row blocks.

When ``n^2`` entries do not fit ``max_memory``, K (read only) and the iterate
(G for BBS, P for Sinkhorn) are zarr arrays chunked by rows.  Each iteration
reads every row block once, runs the in-memory solver's Numba kernel on it and
(for BBS) writes it back; only length-``n`` vectors persist between blocks, so
memory is a few blocks whatever ``n`` (:mod:`bigclust._util.plan`); the
streaming itself is :mod:`bigclust.algo.blocks`, shared with the other method families.

The results equal the in-memory ones bit for bit: every kernel works row by
row from the *full* vectors (``r`` and ``S`` for BBS, ``d`` for Sinkhorn), so
a row's values do not depend on its block, and the small state is reduced on
the driver as in memory.  Alg. 1's affine step needs the row sums of the whole
*previous* G; they are collected in the pass that writes the new G, so an
iteration is exactly one read and one write of G.

With ``client=None`` the blocks run in turn in this process with the ``prange``
kernels, a reader thread prefetching the next block and a writer thread writing
the previous one.  With a ``dask.distributed`` client there is one task per row
block per pass: it reads its block from the (shared) store, runs the serial
``nogil`` kernel, writes its rows back and returns its row sums.  Either way
blocks are whole chunks of the written array, so no two writers share a chunk
(one level of parallelism: tasks, each with a serial kernel).
"""
from bigclust.normalize.ooc._io import N_SYMMETRY_ROWS
from bigclust.normalize.ooc._operator import blocked_matvec_operator
from bigclust.normalize.ooc._solvers import bbs_blocked, mbbs_blocked, sinkhorn_blocked

__all__ = ["N_SYMMETRY_ROWS", "bbs_blocked", "blocked_matvec_operator", "mbbs_blocked", "sinkhorn_blocked"]
