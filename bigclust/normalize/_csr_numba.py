"""Numba kernels over CSR matrices: sparse BBS, signless-Laplacian CG, class sums.

The dense kernels are in :mod:`bigclust.normalize._numba`; these are their
O(nnz) counterparts for a kernel K stored as CSR (``data``, ``indices``,
``indptr``; sorted indices, symmetric pattern) and work on the stored entries
only.  Conventions as there: preallocated outputs, float64 accumulation,
strict element helpers.

The conjugate-gradient solver :func:`cg_csr` runs entirely in compiled code.
A Python CG loop would interleave Numba's OpenMP regions with NumPy's BLAS
threads many times per solve, and on a small machine the two thread pools'
spin-waits fight for the cores (we measured 20x slow-downs on 2 cores).
"""
import numpy as np
from numba import prange

from bigclust._util.jit import njit
from bigclust.normalize._numba import _pos_shift

#: row ranges per parallel product: cheap to schedule, balanced enough
_CHUNKS = 64


@njit(nogil=True)
def _jvp_rows(indptr, indices, data, mu, active, v, out, lo, hi):
    if active:
        for i in range(lo, hi):
            mi = mu[i]
            vi = v[i]
            s = 0.0
            for k in range(indptr[i], indptr[i + 1]):
                j = indices[k]
                if _pos_shift(data[k], mi, mu[j]) > 0.0:
                    s += vi + v[j]
            out[i] = s
    else:
        for i in range(lo, hi):
            vi = v[i]
            s = 0.0
            for k in range(indptr[i], indptr[i + 1]):
                s += vi + v[indices[k]]
            out[i] = s


@njit(parallel=True, nogil=True)
def csr_jvp(indptr, indices, data, mu, active, v, out):
    """``out = (D + A) v`` for the signless Laplacian of a graph listed in CSR.

    ``((D + A) v)_i = sum_{j in row i} (v_i + v_j)``: a stored diagonal entry
    counts twice, as it should (it is ``d/dmu_i`` of ``mu_i + mu_i``).  With
    ``active=False`` the graph is the stored pattern (the support projection's
    system); with ``active=True`` only the entries with
    ``data_k + mu_i + mu_j > 0`` count (the generalised Jacobian of the dual
    BBS equations).  ``v`` (n,) IN, ``out`` (n,) OUT.
    """
    n = indptr.shape[0] - 1
    step = (n + _CHUNKS - 1) // _CHUNKS
    for c in prange(_CHUNKS):
        _jvp_rows(indptr, indices, data, mu, active, v, out, min(n, c * step), min(n, c * step + step))


@njit(nogil=True)
def csr_jvp_serial(indptr, indices, data, mu, active, v, out):
    """:func:`csr_jvp` without ``prange``."""
    _jvp_rows(indptr, indices, data, mu, active, v, out, 0, indptr.shape[0] - 1)


@njit(nogil=True)
def _dot(a, b):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@njit(nogil=True)
def cg_csr(indptr, indices, data, mu, active, shift, b, x, dinv, rtol, maxiter, parallel):
    """Jacobi-preconditioned CG for ``(L + shift I) x = b``, L as in :func:`csr_jvp`.

    ``x`` (n,) INOUT: the starting guess, overwritten by the solution;
    ``dinv`` (n,) IN: inverse diagonal of ``L + shift I``.  Stops when
    ``||b - (L + shift I) x||_2 <= rtol ||b||_2``.  L is symmetric positive
    semi-definite (singular only on bipartite components, where the systems of
    a feasible BBS problem are consistent).  ``parallel`` selects the
    ``prange`` product (large graphs) or the serial one.

    Returns
    -------
    (iterations, converged)
    """
    n = b.shape[0]
    q = np.empty(n)
    if parallel:
        csr_jvp(indptr, indices, data, mu, active, x, q)
    else:
        csr_jvp_serial(indptr, indices, data, mu, active, x, q)
    r = b - q - shift * x
    stop = rtol * np.sqrt(_dot(b, b))
    if np.sqrt(_dot(r, r)) <= stop:
        return 0, True
    z = dinv * r
    p = z.copy()
    rz = _dot(r, z)
    for it in range(1, maxiter + 1):
        if parallel:
            csr_jvp(indptr, indices, data, mu, active, p, q)
        else:
            csr_jvp_serial(indptr, indices, data, mu, active, p, q)
        for i in range(n):
            q[i] += shift * p[i]
        pq = _dot(p, q)
        if not pq > 0.0:  # a null-space direction: nothing left to gain
            return it, False
        a = rz / pq
        for i in range(n):
            x[i] += a * p[i]
            r[i] -= a * q[i]
        if np.sqrt(_dot(r, r)) <= stop:
            return it, True
        for i in range(n):
            z[i] = dinv[i] * r[i]
        rz_new = _dot(r, z)
        beta = rz_new / rz
        rz = rz_new
        for i in range(n):
            p[i] = z[i] + beta * p[i]
    return maxiter, False


@njit(parallel=True, nogil=True)
def csr_dual_eval(data, indices, indptr, mu, r_out, sq_out, cnt_out):
    """Row sums, row sums of squares and active counts of ``max(K + mu_i + mu_j, 0)`` on E.

    The sparse counterpart of ``_numba.bbs_dual_eval``; all OUT (n,).
    """
    for i in prange(indptr.shape[0] - 1):
        mi = mu[i]
        s = 0.0
        q = 0.0
        c = 0
        for k in range(indptr[i], indptr[i + 1]):
            v = _pos_shift(data[k], mi, mu[indices[k]])
            s += v
            q += v * v
            if v > 0.0:
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
        for k in range(indptr[i], indptr[i + 1]):
            out_data[k] = _pos_shift(data[k], mi, mu[indices[k]])
            s += out_data[k]
        r_out[i] = s


@njit(parallel=True, nogil=True)
def csr_class_sums(data, indices, indptr, y, row0, r_out, rc_out):
    """Row sums and same-class row sums of a CSR row block starting at row ``row0`` (MB, MC)."""
    for i in prange(indptr.shape[0] - 1):
        yi = y[row0 + i]
        s = 0.0
        sc = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            p = data[k]
            s += p
            if y[indices[k]] == yi:
                sc += p
        r_out[i] = s
        rc_out[i] = sc
