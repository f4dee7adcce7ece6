"""A symmetric sparse P held as its upper triangle while ARPACK's basis exists: half of P's entries.

At 8.1M rows P's values and column indices are 831 MiB of the embed stage's peak (issue 28, item 6: workers of
3 GB); on or above the diagonal they are 446 MiB.  Each entry above the diagonal then serves twice: row i
gathers ``U[i, j] x[j]`` and scatters ``U[i, j] x[i]`` to row j.  The rows are cut into chunks of about equal
entries, one task each; a scatter into the writer's own chunk goes to the result directly (no other task
writes those rows), one into a later chunk into the writer's buffer (rows from its chunk's end on), and a last
pass adds the buffers, chunk by chunk.  The sums are in another order than the full CSR product's (the last
bits move) and depend on the number of chunks, not on the threads that run them.
"""
import numpy as np
from numba import prange, uint64

from bigclust._util.jit import njit


@njit
def upper_counts(indptr, indices, out):
    """OUT ``out[i + 1]`` = entries of row i on or above the diagonal (``out[0]`` untouched)."""
    for i in range(indptr.shape[0] - 1):
        c = 0
        for p in range(indptr[i], indptr[i + 1]):
            c += indices[p] >= i
        out[i + 1] = c


@njit(parallel=True)
def upper_copy(indptr, indices, data, u_indptr, u_indices, u_data):
    """OUT the entries of each row on or above the diagonal, in the row's stored order."""
    for i in prange(u_indptr.shape[0] - 1):
        q = u_indptr[i]
        for p in range(indptr[i], indptr[i + 1]):
            if indices[p] >= i:
                u_indices[q] = indices[p]
                u_data[q] = data[p]
                q += 1


@njit
def chunk_bounds(indptr, rows, n_chunks):
    """``(n_chunks + 1,)`` positions cutting ``rows`` (all rows if empty) into chunks of about equal entries."""
    m = indptr.shape[0] - 1 if rows.shape[0] == 0 else rows.shape[0]
    total = 0
    for t in range(m):
        i = t if rows.shape[0] == 0 else rows[t]
        total += indptr[i + 1] - indptr[i]
    bounds = np.full(n_chunks + 1, m, dtype=np.int64)
    bounds[0] = 0
    c, acc = 1, 0
    for t in range(m):
        if c == n_chunks:
            break
        i = t if rows.shape[0] == 0 else rows[t]
        acc += indptr[i + 1] - indptr[i]
        while c < n_chunks and acc * n_chunks >= c * total:
            bounds[c] = t + 1
            c += 1
    return bounds


@njit
def _ends(rows, bounds, n):
    """Each chunk's end in P's rows: the first row of the next chunk (n for the last)."""
    nc = bounds.shape[0] - 1
    ends = np.full(nc, n, dtype=np.int64)
    for c in range(nc - 1):
        t = bounds[c + 1]
        m = n if rows.shape[0] == 0 else rows.shape[0]
        if t < m:
            ends[c] = t if rows.shape[0] == 0 else rows[t]
    return ends


@njit(parallel=True)
def sym_upper_step(indptr, indices, data, rows, t1, t0, a, b, sub_t0, bounds, ends, buf_off, buf):
    """IN/OUT ``t0 <- a (P @ t1) - b t1 - t0`` (``sub_t0`` False: ``- t0`` left out) on ``rows`` (sorted; empty:
    all rows), P given by its upper triangle U (CSR, diagonal included): P = U + U^T - diag(U).  ``rows`` are
    a union of P's components: an entry to another row must be a stored zero, and t1 zero on that row.

    bounds, ends : IN chunks (:func:`chunk_bounds`, :func:`_ends`).  buf_off : IN (chunks + 1,) where chunk
    c's buffer starts in ``buf`` (it holds P's rows ``ends[c]`` to n - 1).  buf : scratch.
    """
    nc = bounds.shape[0] - 1
    every = rows.shape[0] == 0
    for c in prange(nc):
        hi, o = ends[c], buf_off[c]
        for t in range(bounds[c], bounds[c + 1]):    # the rows' own terms first: scatters add to them
            i = t if every else rows[t]
            v = -(b * t1[i])
            t0[i] = v - t0[i] if sub_t0 else v
        for j in range(buf_off[c + 1] - o):
            buf[o + j] = 0.0
        for t in range(bounds[c], bounds[c + 1]):
            i = t if every else rows[t]
            xi = t1[i]
            s = 0.0
            for p in range(uint64(indptr[i]), uint64(indptr[i + 1])):
                j = indices[p]
                v = np.float64(data[p])
                s += v * t1[uint64(j)]
                if j != i:
                    if j < hi:
                        t0[uint64(j)] += a * (v * xi)
                    else:
                        buf[uint64(o + j - hi)] += v * xi
            t0[i] += a * s
    for c in prange(1, nc):                           # chunk c's rows: what the chunks before it scattered
        for t in range(bounds[c], bounds[c + 1]):
            i = t if every else rows[t]
            s = 0.0
            for c2 in range(c):
                s += buf[uint64(buf_off[c2] + i - ends[c2])]
            t0[i] += a * s


# -- P given up by its caller: converted in place, multiplied, given back whole if ARPACK fails ------------------

#: rows from which a float32 P that the caller gives up (``overwrite``) is held as its upper triangle while
#: ARPACK runs: where P's memory decides whether the embed stage fits a worker (8.1M rows); below it the
#: products sum in the full CSR order and results keep their bits
UPPER_MIN_ROWS = 1 << 21
#: chunks of the upper step: at most this many threads share a product.  Its buffers are (chunks - 1) / 2
#: n-vectors, so more chunks would spend what the triangle saves (8 chunks: 3.5 n-vectors, 217 MiB at 8.1M rows)
MAX_CHUNKS = 4


def n_chunks():
    """The process's chunk count: its Numba threads (fixed when the process starts, not the live count a stage
    beside another runs with), at most :data:`MAX_CHUNKS`.  The bits depend on it, not on the live threads."""
    import numba
    return max(1, min(int(numba.config.NUMBA_NUM_THREADS), MAX_CHUNKS))


def to_upper(A, rows=None):
    """``(csr, plan)``: the CSR A made its upper triangle, and the step's plan.

    A's ``indptr``, ``indices`` and ``data`` are replaced by the triangle's ``csr``: the full arrays are freed
    when nothing else holds them (the callers pass P itself down, no views of it), so A is the triangle for
    every frame that holds it.  ``plan`` is what :func:`sym_upper_step` takes after its vectors, on ``rows``
    (sorted; None: all rows).
    """
    ip = np.zeros_like(A.indptr)
    upper_counts(A.indptr, A.indices, ip)
    np.cumsum(ip, out=ip)
    ix, data = np.empty(int(ip[-1]), A.indices.dtype), np.empty(int(ip[-1]), A.data.dtype)
    upper_copy(A.indptr, A.indices, A.data, ip, ix, data)
    A.indptr, A.indices, A.data = ip, ix, data
    r = np.empty(0, dtype=ix.dtype) if rows is None else rows
    bounds = chunk_bounds(ip, r, n_chunks())
    ends = _ends(r, bounds, ip.shape[0] - 1)
    buf_off = np.concatenate([[0], np.cumsum(ip.shape[0] - 1 - ends)]).astype(np.int64)
    return (ip, ix, data), (r, bounds, ends, buf_off, np.empty(int(buf_off[-1])))


def product(csr, plan):
    """``matvec(x)``: P @ x from :func:`to_upper`'s triangle; x and the result on the plan's rows (in their
    order), through n-vectors in P's numbering when those are not all rows."""
    from bigclust.algo._spectral_numba import put_rows, take_rows

    ip, ix, data = csr
    rows = plan[0]
    n = ip.shape[0] - 1

    def matvec(x):
        x = np.ascontiguousarray(np.ravel(x), dtype=np.float64)
        y = np.zeros(n)
        if rows.size == 0:
            sym_upper_step(ip, ix, data, rows, x, y, 1.0, 0.0, False, *plan[1:])
            return y
        full = np.zeros(n)   # zero off the rows: their stored zeros read it
        put_rows(full, rows, x)
        sym_upper_step(ip, ix, data, rows, full, y, 1.0, 0.0, False, *plan[1:])
        del full
        out = np.empty(rows.size)
        take_rows(y, rows, out)
        return out
    return matvec


def restore(A, csr):
    """A made whole again from the triangle ``csr`` (U + U^T - diag U, each row sorted by column): the
    fallback of a solve that did not converge, which needs P itself."""
    import scipy.sparse as sp

    n = csr[0].shape[0] - 1
    U = sp.csr_matrix(csr[::-1], shape=(n, n))   # (data, indices, indptr)
    F = (U + U.T - sp.diags(U.diagonal())).tocsr()
    F.sort_indices()
    A.indptr, A.indices, A.data = F.indptr.astype(csr[0].dtype), F.indices.astype(csr[1].dtype), F.data
    A.has_sorted_indices = True
