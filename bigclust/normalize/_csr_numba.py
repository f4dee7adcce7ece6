"""Numba kernels over CSR matrices: sparse BBS, signless-Laplacian CG, class sums.

The dense kernels are in :mod:`bigclust.normalize._numba`; these are their
O(nnz) counterparts for a kernel K stored as CSR (``data``, ``indices``,
``indptr``; sorted indices, symmetric pattern) and work on the stored entries
only.  Conventions as there: preallocated outputs, float64 accumulation,
strict element helpers.  Entries are read through unsigned indices (``uint64(indices[k])``): Numba then
leaves out the negative-index wrap-around it adds to every signed read (half the time of a product on
mnist-8m's kernel: :mod:`bigclust.algo._spectral_numba`).

The conjugate-gradient solver :func:`cg_csr` runs entirely in compiled code.
A Python CG loop would interleave Numba's OpenMP regions with NumPy's BLAS
threads many times per solve, and on a small machine the two thread pools'
spin-waits fight for the cores (we measured 20x slow-downs on 2 cores).
"""
import numpy as np
from numba import prange, uint64

from bigclust._util.jit import njit
from bigclust.normalize._numba import _pos_shift

#: row ranges per parallel product: cheap to schedule, balanced enough
_CHUNKS = 64


@njit(nogil=True)
def _dot(a, b):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@njit(nogil=True)
def _bounds(n, c):
    """Rows ``[lo, hi)`` of chunk ``c`` of :data:`_CHUNKS`."""
    step = (n + _CHUNKS - 1) // _CHUNKS
    return min(n, c * step), min(n, c * step + step)


# -- conjugate gradients on a listed graph -----------------------------------------
#
# The CG below works on a graph listed as (indptr, indices) only: the stored
# pattern (support projection) or the active set of the dual Newton step, listed
# in place by the evaluation that accepted the step (csr_dual_eval).  Reading 4-byte indices and one gathered
# vector per entry is about a third of the traffic of re-deciding activity from
# (data, mu[j]) in every product.  Each iteration is three fused passes (product
# and p.q; x, r and r.r, r.z; the new direction from z = dinv r); the dot products are summed
# per fixed row chunk and the chunk sums added in order, so the result does not
# depend on the number of threads and the serial twin gives the same bits.


@njit(nogil=True)
def _spmv_chunk(start, stop, indices, shift, p, q, lo, hi):
    """``q = (D + A + shift I) p`` on rows [lo, hi); returns their part of ``p . q``."""
    s = 0.0
    for i in range(lo, hi):
        pi = p[i]
        a = 0.0
        for k in range(uint64(start[i]), uint64(stop[i])):
            a += p[uint64(indices[k])]
        qi = (stop[i] - start[i] + shift) * pi + a
        q[i] = qi
        s += pi * qi
    return s


@njit(nogil=True)
def _update_chunk(x, r, p, q, dinv, a, lo, hi, out, c):
    rr = 0.0
    rz = 0.0
    for i in range(lo, hi):
        x[i] += a * p[i]
        ri = r[i] - a * q[i]
        r[i] = ri
        zi = dinv[i] * ri
        rr += ri * ri
        rz += ri * zi
    out[0, c] = rr
    out[1, c] = rz


@njit(parallel=True, nogil=True)
def _spmv_par(start, stop, indices, shift, p, q, part):
    for c in prange(_CHUNKS):
        lo, hi = _bounds(p.shape[0], c)
        part[c] = _spmv_chunk(start, stop, indices, shift, p, q, lo, hi)


@njit(nogil=True)
def _spmv_ser(start, stop, indices, shift, p, q, part):
    for c in range(_CHUNKS):
        lo, hi = _bounds(p.shape[0], c)
        part[c] = _spmv_chunk(start, stop, indices, shift, p, q, lo, hi)


@njit(parallel=True, nogil=True)
def _update_par(x, r, p, q, dinv, a, parts):
    for c in prange(_CHUNKS):
        lo, hi = _bounds(x.shape[0], c)
        _update_chunk(x, r, p, q, dinv, a, lo, hi, parts, c)


@njit(nogil=True)
def _update_ser(x, r, p, q, dinv, a, parts):
    for c in range(_CHUNKS):
        lo, hi = _bounds(x.shape[0], c)
        _update_chunk(x, r, p, q, dinv, a, lo, hi, parts, c)


@njit(parallel=True, nogil=True)
def _direction_par(p, r, dinv, beta):
    for c in prange(_CHUNKS):
        lo, hi = _bounds(p.shape[0], c)
        for i in range(lo, hi):
            p[i] = dinv[i] * r[i] + beta * p[i]


@njit(nogil=True)
def _direction_ser(p, r, dinv, beta):
    for i in range(p.shape[0]):
        p[i] = dinv[i] * r[i] + beta * p[i]


@njit(nogil=True)
def pattern_matvec(start, stop, indices, shift, v, out):
    """``out = (D + A + shift I) v`` for the signless Laplacian of the listed graph (serial).

    Row i lists ``indices[start[i]:stop[i]]`` (``start = indptr[:-1]``,
    ``stop = indptr[1:]`` for a plain CSR pattern; shorter rows for an active
    set listed in place).  ``((D + A) v)_i = sum_{j in row i} (v_i + v_j)``: a
    listed diagonal entry counts twice, as it should (it is ``d/dmu_i`` of
    ``mu_i + mu_i``).  Returns ``v . out``.
    """
    return _spmv_chunk(start, stop, indices, shift, v, out, 0, v.shape[0])


@njit(nogil=True)
def cg_csr(start, stop, indices, shift, b, x, dinv, rtol, maxiter, parallel):
    """Jacobi-preconditioned CG for ``(D + A + shift I) x = b`` on the graph listed as in :func:`pattern_matvec`.

    ``x`` (n,) INOUT: the starting guess, overwritten by the solution;
    ``dinv`` (n,) IN: inverse diagonal of the matrix.  Stops when
    ``||b - (D + A + shift I) x||_2 <= rtol ||b||_2``.  The matrix is symmetric
    positive semi-definite (singular only on bipartite components, where the
    systems of a feasible BBS problem are consistent).  ``parallel`` selects
    the ``prange`` passes (large graphs) or their serial twins (same bits).

    Returns
    -------
    (iterations, converged)
    """
    n = b.shape[0]
    q = np.empty(n)
    part = np.empty(_CHUNKS)
    parts = np.zeros((2, _CHUNKS))
    if parallel:
        _spmv_par(start, stop, indices, shift, x, q, part)
    else:
        _spmv_ser(start, stop, indices, shift, x, q, part)
    r = b - q
    target = rtol * np.sqrt(_dot(b, b))
    if np.sqrt(_dot(r, r)) <= target:
        return 0, True
    p = dinv * r   # the preconditioned residual z = dinv r is recomputed where it is used: one n-vector fewer
    rz = _dot(r, p)
    for it in range(1, maxiter + 1):
        if parallel:
            _spmv_par(start, stop, indices, shift, p, q, part)
        else:
            _spmv_ser(start, stop, indices, shift, p, q, part)
        pq = part.sum()
        if not pq > 0.0:  # a null-space direction: nothing left to gain
            return it, False
        a = rz / pq
        if parallel:
            _update_par(x, r, p, q, dinv, a, parts)
        else:
            _update_ser(x, r, p, q, dinv, a, parts)
        if np.sqrt(parts[0].sum()) <= target:
            return it, True
        rz_new = parts[1].sum()
        beta = rz_new / rz
        rz = rz_new
        if parallel:
            _direction_par(p, r, dinv, beta)
        else:
            _direction_ser(p, r, dinv, beta)
    return maxiter, False


@njit(parallel=True, nogil=True)
def csr_dual_eval(data, indices, indptr, mu, r_out, sq_out, cnt_out, list_out, listing):
    """Row sums, row sums of squares and active counts of ``max(K + mu_i + mu_j, 0)`` on E.

    The sparse counterpart of ``_numba.bbs_dual_eval``; all OUT (n,).  With
    ``listing``, the active columns of row i are also written in place to
    ``list_out[indptr[i]:indptr[i] + cnt_out[i]]`` (``list_out`` (nnz,) OUT):
    the graph of the Newton step's CG (:func:`cg_csr` with ``start =
    indptr[:-1]``, ``stop = start + cnt``) comes with the evaluation that
    accepts the step, instead of from a pass of its own.
    """
    for i in prange(indptr.shape[0] - 1):
        mi = mu[i]
        s = 0.0
        q = 0.0
        c = 0
        for k in range(uint64(indptr[i]), uint64(indptr[i + 1])):
            j = uint64(indices[k])
            v = _pos_shift(data[k], mi, mu[j])
            s += v
            q += v * v
            if v > 0.0:
                if listing:
                    list_out[indptr[i] + c] = j
                c += 1
        r_out[i] = s
        sq_out[i] = q
        cnt_out[i] = c


@njit(parallel=True, nogil=True)
def csr_dual_form(data, indices, indptr, mu, out_data, r_out):
    """``max(K_ij + mu_i + mu_j, 0)`` on the stored entries, and the row sums.

    ``out_data`` OUT (same pattern) may be ``data`` itself: in place, with
    ``mu`` solving ``(D + A_E) mu = 1 - G1``, this is one iteration of Alg. 1
    within the support E (projection onto the symmetric E-supported matrices
    with unit row sums, then the clip).  ``r_out`` (n,) float64 OUT.
    """
    for i in prange(indptr.shape[0] - 1):
        mi = mu[i]
        s = 0.0
        for k in range(uint64(indptr[i]), uint64(indptr[i + 1])):
            out_data[k] = _pos_shift(data[k], mi, mu[uint64(indices[k])])
            s += out_data[k]
        r_out[i] = s


@njit(parallel=True, nogil=True)
def csr_dual_class_sums(data, indices, indptr, mu, y, r_out, rc_out):
    """:func:`csr_class_sums` of ``max(K + mu_i + mu_j, 0)`` without forming it (no nnz float64 array).

    Each entry is :func:`csr_dual_form`'s float64 value, added in stored order:
    the bits of that form followed by the class sums.
    """
    for i in prange(indptr.shape[0] - 1):
        mi = mu[i]
        yi = y[i]
        s = 0.0
        sc = 0.0
        for k in range(uint64(indptr[i]), uint64(indptr[i + 1])):
            j = uint64(indices[k])
            v = _pos_shift(data[k], mi, mu[j])
            s += v
            if y[j] == yi:
                sc += v
        r_out[i] = s
        rc_out[i] = sc


@njit(parallel=True, nogil=True)
def csr_class_sums(data, indices, indptr, y, row0, r_out, rc_out):
    """Row sums and same-class row sums of a CSR row block starting at row ``row0`` (MB, MC)."""
    for i in prange(indptr.shape[0] - 1):
        yi = y[row0 + i]
        s = 0.0
        sc = 0.0
        for k in range(uint64(indptr[i]), uint64(indptr[i + 1])):
            p = data[k]
            s += p
            if y[uint64(indices[k])] == yi:
                sc += p
        r_out[i] = s
        rc_out[i] = sc


# -- setting up and finishing the sparse dual -------------------------------------------------


@njit(parallel=True, nogil=True)
def csr_row_sums(data, indptr, r_out):
    """Float64 row sums of a CSR matrix (one pass; NumPy's bincount would first expand the row ids)."""
    for i in prange(indptr.shape[0] - 1):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k]
        r_out[i] = s


@njit(parallel=True, nogil=True)
def csr_diagonal(data, indices, indptr, stored_out, value_out):
    """Whether row i stores its diagonal (explicit zeros count) and its value (0 when not stored)."""
    for i in prange(indptr.shape[0] - 1):
        stored_out[i] = False
        value_out[i] = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            if indices[k] == i:
                stored_out[i] = True
                value_out[i] = data[k]


@njit(nogil=True)
def _finish_rows(data, indices, indptr, mu, out_data, r_out, lo, hi, stats, c):
    g_min = 0.0
    lam_min = 0.0
    comp = 0.0
    for i in range(lo, hi):
        mi = mu[i]
        s = 0.0
        for k in range(uint64(indptr[i]), uint64(indptr[i + 1])):
            j = uint64(indices[k])
            dk = data[k]  # read before the store: out_data may be data itself
            out_data[k] = _pos_shift(dk, mi, mu[j])
            g = np.float64(out_data[k])  # the stored (possibly float32) value is the one the residuals judge
            s += out_data[k]
            lam = g - (np.float64(dk) + (mi + mu[j]))
            g_min = min(g_min, g)
            lam_min = min(lam_min, lam)
            comp = max(comp, abs(lam * g))
        r_out[i] = s
    stats[0, c] = g_min
    stats[1, c] = lam_min
    stats[2, c] = comp


@njit(parallel=True, nogil=True)
def csr_dual_finish(data, indices, indptr, mu, out_data, r_out, stats):
    """:func:`csr_dual_form` and the KKT residuals of the result in the same pass.

    ``stats`` (3, _CHUNKS) OUT: per row chunk the smallest ``G_ij`` (and 0),
    the smallest multiplier ``lam_ij = G_ij - (K_ij + mu_i + mu_j)`` (and 0)
    and the largest ``|lam_ij G_ij|`` (complementarity).  ``out_data`` may be
    ``data`` itself (a copy of K's values the caller owns becomes G's).
    """
    for c in prange(_CHUNKS):
        lo, hi = _bounds(indptr.shape[0] - 1, c)
        _finish_rows(data, indices, indptr, mu, out_data, r_out, lo, hi, stats, c)


@njit(parallel=True, nogil=True)
def csr_zero_diagonal(data, indices, indptr):
    """Set the stored diagonal entries of ``data`` to 0 in place (``self_loops="zero"``)."""
    for i in prange(indptr.shape[0] - 1):
        for k in range(indptr[i], indptr[i + 1]):
            if indices[k] == i:
                data[k] = 0.0


@njit(parallel=True, nogil=True)
def csr_set_diagonal(data, indices, indptr, stored, value):
    """Put :func:`csr_diagonal`'s ``value`` back into the stored diagonal entries of ``data`` (rows ``stored``)."""
    for i in prange(indptr.shape[0] - 1):
        if stored[i]:
            for k in range(indptr[i], indptr[i + 1]):
                if indices[k] == i:
                    data[k] = value[i]


# -- input check and Sinkhorn's final form (no nnz-long temporaries) ---------------


@njit(nogil=True)
def first_nonfinite(data):
    """Index of the first non-finite stored value, or -1 (no nnz-long mask)."""
    for p in range(data.shape[0]):
        if not np.isfinite(data[p]):
            return p
    return -1


@njit(nogil=True)
def _mirror(indices, lo, hi, j):
    """Position of column ``j`` in the sorted ``indices[lo:hi]``, or -1."""
    while lo < hi:
        mid = (lo + hi) // 2
        c = indices[mid]
        if c < j:
            lo = mid + 1
        elif c > j:
            hi = mid
        else:
            return mid
    return -1


@njit(parallel=True, nogil=True)
def csr_symmetry(data, indices, indptr, worst, missing):
    """Per chunk: ``max |K_ij - K_ji|`` into ``worst``, entries without a stored mirror into ``missing``.

    K must have sorted indices and no duplicates; then every entry having a
    mirror is the same as ``K.T`` having K's pattern.  The difference is taken
    in K's dtype, as ``K.data - K.T.data`` would; a max does not depend on order.
    """
    n = indptr.shape[0] - 1
    for c in prange(_CHUNKS):
        lo, hi = _bounds(n, c)
        w, m = 0.0, 0
        for i in range(lo, hi):
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                q = _mirror(indices, indptr[j], indptr[j + 1], i)
                if q < 0:
                    m += 1
                else:
                    a = abs(data[p] - data[q])
                    if a > w:
                        w = a
        worst[c], missing[c] = w, m


@njit(parallel=True, nogil=True)
def csr_scale_form(data, indices, indptr, u, v, out, r):
    """``out = diag(u) K diag(v)`` in K's dtype and ``r`` its float64 row sums.

    Each entry is ``(u_i * K_ij) * v_j`` in float64, rounded to K's dtype on the
    store, exactly as the NumPy expression; ``r_i`` adds the rounded entries in
    stored order, as ``np.bincount(rows, weights=out)`` does.
    """
    for i in prange(indptr.shape[0] - 1):
        s = 0.0
        for p in range(uint64(indptr[i]), uint64(indptr[i + 1])):
            out[p] = (u[i] * np.float64(data[p])) * v[uint64(indices[p])]
            s += np.float64(out[p])
        r[i] = s
