"""Reference kernels for ``bigclust bench``: what the memory system allows.

A kernel that streams an ``n x n`` array cannot beat a plain sweep over the
same bytes, so these give the "best achievable" bandwidths that the
normalisation kernels are compared with: a parallel copy (read one array,
write another), an in-place read-modify-write (read and write the same array,
like Alg. 1's fused pass) and a read-only reduction (like Sinkhorn's K d).
"""
from numba import prange

from bigclust._util.jit import njit


@njit(parallel=True, nogil=True)
def copy_rows(src, dst):
    """``dst[:] = src`` row by row in parallel.  IN src (m, n); OUT dst (m, n), same dtype."""
    for i in prange(src.shape[0]):
        for j in range(src.shape[1]):
            dst[i, j] = src[i, j]


@njit(parallel=True, nogil=True)
def touch_rows(a):
    """``a += 0`` in place: one read and one write of every entry, like a fused update.

    ``+ 0.0`` is not an identity for ``-0.0``, so the compiler may not drop
    the store (``* 1.0`` could be folded away).  INOUT a (m, n).
    """
    for i in prange(a.shape[0]):
        for j in range(a.shape[1]):
            a[i, j] = a[i, j] + 0.0


@njit(parallel=True, nogil=True, fastmath={"reassoc"})
def sum_rows(a, out):
    """Row sums with float64 accumulation: one read of every entry.  IN a (m, n); OUT out (m,)."""
    for i in prange(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):
            s += a[i, j]
        out[i] = s
