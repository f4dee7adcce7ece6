"""Numba kernels of :mod:`bigclust.algo.spectral`.

The CSR products index by unsigned integers (``uint64(indices[p])``): with a signed index Numba adds the
negative-index wrap-around to every read, and on a product that is most of the instructions -- mnist-8m's
kNN kernel (8.1M rows, 108.9M entries, one thread): 858 ms a product signed, 444 ms unsigned; mnist-1m's
SK graph 41 ms against 22 ms.  The arithmetic is unchanged (the same bits).
"""
import numpy as np

from numba import prange, uint64

from bigclust._util.jit import njit


@njit
def dense_components(A, labels):
    """Connected components of the graph of a dense symmetric A's non-zero entries.

    OUT ``labels`` (n,) int64: component of each node (0, 1, ...).  Returns the
    number of components.  Breadth-first search with a preallocated queue: one
    read of A, nothing n x n allocated (a CSR of a dense Gaussian K would be
    12 n^2 bytes).
    """
    n = A.shape[0]
    labels[:] = -1
    queue = np.empty(n, dtype=np.int64)
    ncomp = 0
    for s in range(n):
        if labels[s] >= 0:
            continue
        labels[s] = ncomp
        head, tail = 0, 1
        queue[0] = s
        while head < tail:
            i = queue[head]
            head += 1
            for j in range(n):
                if labels[j] < 0 and A[i, j] != 0:
                    labels[j] = ncomp
                    queue[tail] = j
                    tail += 1
        ncomp += 1
    return ncomp


@njit
def csr_components(indptr, indices, data, labels):
    """Connected components of the graph of a CSR matrix's non-zero entries (symmetric pattern).

    OUT ``labels`` (n,) int64, numbered in the order of each component's lowest row (as scipy's
    ``connected_components`` numbers them).  Returns the number of components.  Stored zeros are
    not edges.  Breadth-first search over K's own arrays: two n-vectors, nothing of nnz size (scipy's
    csgraph converts K to float64 and builds its transpose: ~24 bytes per stored entry).
    """
    n = indptr.shape[0] - 1
    labels[:] = -1
    queue = np.empty(n, dtype=np.int64)
    ncomp = 0
    for s in range(n):
        if labels[s] >= 0:
            continue
        labels[s] = ncomp
        head, tail = 0, 1
        queue[0] = s
        while head < tail:
            i = queue[head]
            head += 1
            for t in range(indptr[i], indptr[i + 1]):
                j = indices[t]
                if labels[j] < 0 and data[t] != 0:
                    labels[j] = ncomp
                    queue[tail] = j
                    tail += 1
        ncomp += 1
    return ncomp


@njit(parallel=True)
def csr_matvec(indptr, indices, data, x, y):
    """OUT ``y = A @ x`` for CSR A, float32 or float64 values, float64 x and y; rows in parallel.

    The arithmetic of scipy's ``csr_matvec`` on the float64 copy of A (each
    value widened, the row's products summed in stored order from 0, no
    fused multiply-add), so the result is the same bit for bit -- without
    that float64 copy of a float32 matrix.
    """
    for i in prange(y.size):
        s = 0.0
        for p in range(uint64(indptr[i]), uint64(indptr[i + 1])):
            s += np.float64(data[p]) * x[uint64(indices[p])]
        y[i] = s


@njit(parallel=True)
def csr_rows_matvec(indptr, indices, data, rows, x, y):
    """OUT ``y[i] = (A @ x)[rows[i]]`` for CSR A: :func:`csr_matvec`'s arithmetic on some of A's rows.

    With ``rows`` a connected component of A's graph and x filled on them, this
    is the product by A's block on those rows without a copy of the block (x
    is read by A's own column numbers: no renaming gather per entry).
    """
    for i in prange(y.size):
        r = rows[i]
        s = 0.0
        for p in range(uint64(indptr[r]), uint64(indptr[r + 1])):
            s += np.float64(data[p]) * x[uint64(indices[p])]
        y[i] = s


@njit
def _chebyshev_row(indptr, indices, data, t1, t0, i, a, b, sub_t0):
    """Row i of :func:`csr_chebyshev_step` (i unsigned)."""
    s = 0.0
    for p in range(uint64(indptr[i]), uint64(indptr[i + 1])):
        s += np.float64(data[p]) * t1[uint64(indices[p])]
    s = s * a
    s = s - b * t1[i]
    if sub_t0:
        s = s - t0[i]
    t0[i] = s


@njit(parallel=True)
def csr_chebyshev_step(indptr, indices, data, t1, t0, a, b, sub_t0):
    """IN/OUT ``t0 <- a (A @ t1) - b t1 - t0`` (``sub_t0`` False: ``- t0`` left out, t0 only written): a step
    of the Chebyshev three-term recurrence in one pass over memory.

    The product is :func:`csr_matvec`'s (same sum, same order) and the rest
    NumPy's ``y *= a; y -= b * t1; y -= t0`` in the same order (no fused
    multiply-add), so the result is theirs bit for bit.  Row i of t0 is read
    only by row i, so it is overwritten in place; the product gathers t1.
    """
    for i in prange(t1.shape[0]):
        _chebyshev_row(indptr, indices, data, t1, t0, uint64(i), a, b, sub_t0)


@njit(parallel=True)
def csr_rows_chebyshev_step(indptr, indices, data, rows, t1, t0, a, b, sub_t0):
    """:func:`csr_chebyshev_step` on A's block of ``rows`` (a connected component): t1 and t0 are n-vectors
    by A's row numbers, read and written on ``rows`` only (the block's products never read elsewhere), so the
    recurrence runs on the block without a copy of it or a scatter of x per product."""
    for t in prange(rows.shape[0]):
        _chebyshev_row(indptr, indices, data, t1, t0, uint64(rows[t]), a, b, sub_t0)


@njit(parallel=True)
def put_rows(dst, rows, x):
    """OUT ``dst[rows] = x`` and :func:`take_rows` ``out = src[rows]``, without NumPy's int64 copy of 4-byte
    ``rows`` (an n-vector per call of the block's filter: 62 MiB at 8.1M rows)."""
    for t in prange(rows.shape[0]):
        dst[uint64(rows[t])] = x[t]


@njit(parallel=True)
def take_rows(src, rows, out):
    """OUT ``out = src[rows]`` (see :func:`put_rows`)."""
    for t in prange(rows.shape[0]):
        out[t] = src[uint64(rows[t])]


@njit
def csr_rows_max_abs_sum(indptr, data, rows):
    """``max_i sum_p |A[rows[i], p]|``: a bound on the spectral radius of a symmetric A's block on ``rows``
    (Gershgorin), without an absolute-value copy of A's values."""
    m = 0.0
    for i in range(rows.size):
        r = rows[i]
        s = 0.0
        for p in range(uint64(indptr[r]), uint64(indptr[r + 1])):
            s += abs(np.float64(data[p]))
        if s > m:
            m = s
    return m


# -- a cache-friendly row order for the eigensolver's products (see renumber.local_order) ----------


@njit
def bfs_order(indptr, indices):
    """Rows of a symmetric CSR pattern in breadth-first order, component after component (each from its lowest row).

    Breadth-first order puts each row near its neighbours, so the gathers
    ``x[indices[p]]`` of a product read nearby memory -- the locality of
    reverse Cuthill-McKee at an O(nnz) cost, without its degree sort.
    """
    n = indptr.shape[0] - 1
    order = np.empty(n, dtype=np.int64)
    seen = np.zeros(n, dtype=np.bool_)
    head = 0
    tail = 0
    for s in range(n):
        if seen[s]:
            continue
        seen[s] = True
        order[tail] = s
        tail += 1
        while head < tail:
            i = order[head]
            head += 1
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                if not seen[j]:
                    seen[j] = True
                    order[tail] = j
                    tail += 1
    return order


@njit(parallel=True)
def csr_permute(indptr, indices, data, order, inv, p_indptr, p_indices, p_data):
    """OUT ``P A P^T``: row r is row ``order[r]`` of A, columns renamed by ``inv`` (``p_indptr`` IN).

    Each row keeps A's stored order, so every entry of a product by the
    result is the same sum in the same order as A's (bit for bit).
    """
    for r in prange(order.shape[0]):
        i = order[r]
        o = p_indptr[r]
        for p in range(uint64(indptr[i]), uint64(indptr[i + 1])):
            p_indices[o] = inv[uint64(indices[p])]
            p_data[o] = data[p]
            o += 1


@njit(parallel=True)
def csr_rows_nonzeros(indptr, data, rows, out):
    """OUT ``out[r]``: non-zero stored entries of row ``rows[r]``."""
    for r in prange(rows.shape[0]):
        c = 0
        for p in range(uint64(indptr[rows[r]]), uint64(indptr[rows[r] + 1])):
            c += data[p] != 0
        out[r] = c


@njit(parallel=True)
def csr_take_block(indptr, indices, data, rows, pos, b_indptr, b_indices, b_data):
    """OUT the block of A on ``rows`` (a connected component): row r is row ``rows[r]`` of A less its stored
    zeros, columns renamed by ``pos`` (``b_indptr`` IN, from :func:`csr_rows_nonzeros`).

    A stored zero may join two components (the exact BBS keeps the entries it clips in K's pattern); its
    column is then another block's, and ``pos`` of it no column of this one.  The non-zero entries keep A's
    stored order, so a product by the block is the same sum as by A's rows (a zero term adds nothing).
    """
    for r in prange(rows.shape[0]):
        i = rows[r]
        o = b_indptr[r]
        for p in range(uint64(indptr[i]), uint64(indptr[i + 1])):
            if data[p] != 0:
                b_indices[o] = pos[uint64(indices[p])]
                b_data[o] = data[p]
                o += 1


@njit(parallel=True)
def csr_sort_rows_by(indptr, indices, data, key):
    """IN/OUT: each row's entries sorted by ``key[indices]`` (insertion sort: kNN rows hold ~10-20 entries)."""
    for i in prange(indptr.shape[0] - 1):
        a = indptr[i]
        for p in range(a + 1, indptr[i + 1]):
            j, v, kj = indices[p], data[p], key[indices[p]]
            q = p - 1
            while q >= a and key[indices[q]] > kj:
                indices[q + 1] = indices[q]
                data[q + 1] = data[q]
                q -= 1
            indices[q + 1] = j
            data[q + 1] = v
