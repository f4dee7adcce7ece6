"""Numba kernels of :mod:`bigclust.normalize`.

Plain functions over arrays writing into preallocated outputs;
the CSR kernels (O(nnz) per pass) are in :mod:`bigclust.normalize._csr_numba`.
Dense kernels take a row block ``K_block = K[row0:row0 + b]`` plus full
length-n vectors, so the in-memory solvers (one block) and the out-of-core path
(zarr row blocks) share them; ``*_serial`` twins (nogil, no prange) serve Dask
blocks: one level of parallelism per stage (Dask tasks or Numba threads, not both).

Numerics.  Element values come from tiny strict-IEEE helpers
(``_alt_value``, ``_pos_shift``, ``_scaled``), so ``G[i, j]`` and ``G[j, i]`` are
the same operations on the same operands and BBS iterates stay exactly
symmetric.  Only the float64 row-sum leaves are compiled with
``fastmath={"reassoc"}`` so LLVM can vectorise them (about 2x on float32
storage); LLVM keeps fast-math flags per instruction, so they cannot reach the
strict helpers.  No kernel divides by data; Sinkhorn's divisions are guarded
in Python.
"""
import numpy as np
from numba import prange

from bigclust._util.jit import njit

_SUM = {"reassoc"}  # fast-math flags for pure summation leaves only


# -- strict element helpers ----------------------------------------------------


@njit(nogil=True)
def _alt_value(g, c, ri, rj, inv_n):
    """``max(g + c - (r_i + r_j)/n, 0)``: Alg. 1's affine step then the clip."""
    v = g + (c - (ri + rj) * inv_n)
    return v if v > 0.0 else 0.0


@njit(nogil=True)
def _pos_shift(k, a, b):
    """``max(k + (mu_i + mu_j), 0)``, symmetric in (a, b) bit for bit."""
    v = k + (a + b)
    return v if v > 0.0 else 0.0


# -- row helpers (summation leaves) ----------------------------------------------


@njit(nogil=True, fastmath=_SUM)
def _alt_row(G, i, ri, r, c, inv_n):
    s = 0.0
    for j in range(G.shape[1]):
        G[i, j] = _alt_value(G[i, j], c, ri, r[j], inv_n)
        s += G[i, j]  # the stored (possibly float32) value, so r matches G exactly
    return s


@njit(nogil=True, fastmath=_SUM)
def _alt_row_class(G, i, ri, r, c, inv_n, y, yi):
    s = 0.0
    sc = 0.0
    for j in range(G.shape[1]):
        G[i, j] = _alt_value(G[i, j], c, ri, r[j], inv_n)
        g = G[i, j]
        s += g
        if y[j] == yi:
            sc += g
    return s, sc


@njit(nogil=True, fastmath=_SUM)
def _dual_row(K, i, mi, mu):
    s = 0.0
    for j in range(K.shape[1]):
        s += _pos_shift(K[i, j], mi, mu[j])
    return s


@njit(nogil=True, fastmath=_SUM)
def _dual_row_eval(K, i, mi, mu):
    s = 0.0
    q = 0.0
    c = 0
    for j in range(K.shape[1]):
        v = _pos_shift(K[i, j], mi, mu[j])
        s += v
        q += v * v
        if v > 0.0:
            c += 1
    return s, q, c


@njit(nogil=True, fastmath=_SUM)
def _dual_row_class(K, i, mi, mu, y, yi):
    s = 0.0
    sc = 0.0
    for j in range(K.shape[1]):
        v = _pos_shift(K[i, j], mi, mu[j])
        s += v
        if y[j] == yi:
            sc += v
    return s, sc


@njit(nogil=True, fastmath=_SUM)
def _matvec_row(K, i, d):
    s = 0.0
    for j in range(K.shape[1]):
        s += K[i, j] * d[j]
    return s


@njit(nogil=True, fastmath=_SUM)
def _matvec_row_class(K, i, d, y, yi):
    s = 0.0
    sc = 0.0
    for j in range(K.shape[1]):
        t = K[i, j] * d[j]
        s += t
        if y[j] == yi:
            sc += t
    return s, sc


@njit(nogil=True, fastmath=_SUM)
def _class_row(P, i, y, yi):
    s = 0.0
    sc = 0.0
    for j in range(P.shape[1]):
        p = P[i, j]
        s += p
        if y[j] == yi:
            sc += p
    return s, sc


# -- BBS, alternating projection (paper 000, Alg. 1) -----------------------------


@njit(parallel=True, nogil=True)
def bbs_alt_pass(G_block, r, S, row0, r_out):
    """One fused iteration of Alg. 1 on a row block, in place.

    ``G <- max(G + (1 + S/n)/n 11^T - (r 1^T + 1 r^T)/n, 0)``: the projection
    onto {G = G^T, G1 = 1} followed by the projection onto {G >= 0}, and the
    row sums of the result, in one read-modify-write sweep.

    Parameters
    ----------
    G_block : (b, n) float32 or float64, INOUT
        Rows ``row0 .. row0+b-1`` of the current symmetric iterate G.
    r : (n,) float64, IN
        Row sums of the current G (= column sums, G being symmetric).
    S : float, IN
        ``r.sum()``.
    row0 : int, IN
        Index of the block's first row in G.
    r_out : (b,) float64, OUT
        Row sums of the updated rows.
    """
    n = r.shape[0]
    inv_n = 1.0 / n
    c = (1.0 + S * inv_n) * inv_n
    for i in prange(G_block.shape[0]):
        r_out[i] = _alt_row(G_block, i, r[row0 + i], r, c, inv_n)


@njit(nogil=True)
def bbs_alt_pass_serial(G_block, r, S, row0, r_out):
    """:func:`bbs_alt_pass` without ``prange``, for use inside Dask blocks."""
    n = r.shape[0]
    inv_n = 1.0 / n
    c = (1.0 + S * inv_n) * inv_n
    for i in range(G_block.shape[0]):
        r_out[i] = _alt_row(G_block, i, r[row0 + i], r, c, inv_n)


@njit(parallel=True, nogil=True)
def bbs_alt_pass_class(G_block, r, S, row0, y, r_out, rc_out):
    """:func:`bbs_alt_pass` that also returns same-class row sums.

    ``y`` (n,) int64 IN: class codes; ``rc_out`` (b,) float64 OUT:
    ``sum_{j: y_j = y_i} G_ij`` of the updated rows (for the MC history).
    """
    n = r.shape[0]
    inv_n = 1.0 / n
    c = (1.0 + S * inv_n) * inv_n
    for i in prange(G_block.shape[0]):
        r_out[i], rc_out[i] = _alt_row_class(G_block, i, r[row0 + i], r, c, inv_n, y, y[row0 + i])


# -- BBS, dual form G = max(K + mu 1^T + 1 mu^T, 0) (Dykstra and Newton) --------


@njit(parallel=True, nogil=True)
def bbs_dual_rowsums(K_block, mu, row0, r_out):
    """Row sums of ``max(K + mu 1^T + 1 mu^T, 0)`` on a row block (read-only on K).

    ``K_block`` (b, n) float32/float64 IN, ``mu`` (n,) float64 IN, ``r_out``
    (b,) float64 OUT.  One Dykstra iteration, or ``F(mu) + 1`` for Newton.
    """
    for i in prange(K_block.shape[0]):
        r_out[i] = _dual_row(K_block, i, mu[row0 + i], mu)


@njit(parallel=True, nogil=True)
def bbs_dual_rowsums_class(K_block, mu, row0, y, r_out, rc_out):
    """:func:`bbs_dual_rowsums` plus same-class row sums ``rc_out`` (b,) OUT."""
    for i in prange(K_block.shape[0]):
        r_out[i], rc_out[i] = _dual_row_class(K_block, i, mu[row0 + i], mu, y, y[row0 + i])


@njit(parallel=True, nogil=True)
def bbs_dual_eval(K_block, mu, row0, r_out, sq_out, cnt_out):
    """Everything one Newton trial point needs, in one read of K.

    OUT (b,) each: ``r_out`` row sums of ``G(mu) = max(K + mu 1^T + 1 mu^T, 0)``,
    ``sq_out`` row sums of ``G(mu)**2`` (float64; for the dual objective) and
    ``cnt_out`` (int64) the number of active entries ``G_ij > 0`` per row.
    """
    for i in prange(K_block.shape[0]):
        r_out[i], sq_out[i], cnt_out[i] = _dual_row_eval(K_block, i, mu[row0 + i], mu)


@njit(parallel=True, nogil=True)
def bbs_dual_active_fill(K, mu, indptr, indices):
    """Column indices of the active set ``{(i, j): K_ij + mu_i + mu_j > 0}``.

    ``indptr`` (n+1,) IN, from the counts of :func:`bbs_dual_eval` at the same
    ``mu`` (the test is the same strict expression, so the counts agree);
    ``indices`` (nnz,) int32 OUT.
    """
    for i in prange(K.shape[0]):
        pos = indptr[i]
        mi = mu[i]
        for j in range(K.shape[1]):
            if _pos_shift(K[i, j], mi, mu[j]) > 0.0:
                indices[pos] = j
                pos += 1


@njit(parallel=True, nogil=True)
def bbs_dual_jvp(K, mu, v, out):
    """Generalised Jacobian product of ``F(mu) = G(mu) 1 - 1``, recomputing the active set.

    ``J = diag(A 1) + A`` with ``A_ij = [K_ij + mu_i + mu_j > 0]`` (the
    signless Laplacian of the active graph), so ``(J v)_i = sum_{j active}
    (v_i + v_j)``.  O(n^2) per product, no storage: used when the active set
    is too dense to be worth listing.  ``out`` (n,) float64 OUT.
    """
    for i in prange(K.shape[0]):
        mi = mu[i]
        vi = v[i]
        s = 0.0
        for j in range(K.shape[1]):
            if _pos_shift(K[i, j], mi, mu[j]) > 0.0:
                s += vi + v[j]
        out[i] = s


@njit(parallel=True, nogil=True)
def bbs_dual_form(K_block, mu, row0, G_out, r_out):
    """``G_out = max(K + mu 1^T + 1 mu^T, 0)`` on a row block and its row sums.

    ``G_out`` (b, n) float32 or float64 OUT; ``r_out`` (b,) float64 OUT: row
    sums of the stored values.
    """
    for i in prange(K_block.shape[0]):
        mi = mu[row0 + i]
        s = 0.0
        for j in range(K_block.shape[1]):
            G_out[i, j] = _pos_shift(K_block[i, j], mi, mu[j])
            s += G_out[i, j]
        r_out[i] = s


@njit(parallel=True, nogil=True)
def bbs_kkt_rows(K_block, G_block, mu, row0, lam_min_out, comp_out):
    """Row-wise KKT residuals of ``min ||G - K||^2, G >= 0, G = G^T, G1 = 1``.

    With ``Lambda = G - (K + mu 1^T + 1 mu^T)`` the multiplier of ``G >= 0``:
    ``lam_min_out[i] = min_j Lambda_ij`` (dual feasibility wants >= 0) and
    ``comp_out[i] = max_j |Lambda_ij G_ij|`` (complementarity wants 0).
    """
    for i in prange(K_block.shape[0]):
        mi = mu[row0 + i]
        lo = np.inf
        cp = 0.0
        for j in range(K_block.shape[1]):
            g = np.float64(G_block[i, j])
            lam = g - (K_block[i, j] + (mi + mu[j]))
            lo = min(lo, lam)
            cp = max(cp, abs(lam * g))
        lam_min_out[i] = lo
        comp_out[i] = cp


# -- Sinkhorn-Knopp / Ncut scaling ------------------------------------------------


@njit(parallel=True, nogil=True)
def sk_matvec_block(K_block, d, out):
    """``out = K_block @ d`` with float64 accumulation (one Sinkhorn pass).

    ``K_block`` (b, n) IN, ``d`` (n,) float64 IN, ``out`` (b,) float64 OUT.
    """
    for i in prange(K_block.shape[0]):
        out[i] = _matvec_row(K_block, i, d)


@njit(nogil=True)
def sk_matvec_block_serial(K_block, d, out):
    """:func:`sk_matvec_block` without ``prange``, for use inside Dask blocks."""
    for i in range(K_block.shape[0]):
        out[i] = _matvec_row(K_block, i, d)


@njit(parallel=True, nogil=True)
def sk_matvec_class_block(K_block, d, y, row0, out, out_class):
    """:func:`sk_matvec_block` plus ``out_class[i] = sum_{j: y_j = y_i} K_ij d_j``."""
    for i in prange(K_block.shape[0]):
        out[i], out_class[i] = _matvec_row_class(K_block, i, d, y, y[row0 + i])


@njit(nogil=True)
def _scaled(k, a, b):
    return (a * k) * b


@njit(nogil=True, fastmath=_SUM)
def _form_row(K, i, ui, v, P):
    s = 0.0
    for j in range(K.shape[1]):
        P[i, j] = _scaled(K[i, j], ui, v[j])  # strict: exactly (u_i K_ij) v_j
        s += P[i, j]
    return s


@njit(parallel=True, nogil=True)
def sk_form(K_block, u, v, row0, P_out, r_out):
    """``P_out = diag(u) K diag(v)`` on a row block, and its row sums.

    ``u``, ``v`` (n,) float64 IN (full vectors); ``P_out`` (b, n) OUT (may be
    ``K_block`` itself for an in-place scaling); ``r_out`` (b,) float64 OUT.
    Each entry is ``(u_i K_ij) v_j`` in float64, rounded once to P's type.
    """
    for i in prange(K_block.shape[0]):
        r_out[i] = _form_row(K_block, i, u[row0 + i], v, P_out)


# -- quality (paper 000, Eqs. 32-33) ----------------------------------------------


@njit(parallel=True, nogil=True)
def quality_block(P_block, y, row0, rs_out, rc_out):
    """Row sums and same-class row sums of a row block of P.

    ``rs_out[i] = sum_j P_ij`` and ``rc_out[i] = sum_{j: y_j = y_i} P_ij``
    (float64, OUT, shape (b,)); MB and MC are the means of ``|rs - 1|`` and
    ``|rc - 1|`` over all rows.
    """
    for i in prange(P_block.shape[0]):
        rs_out[i], rc_out[i] = _class_row(P_block, i, y, y[row0 + i])


@njit(nogil=True)
def quality_block_serial(P_block, y, row0, rs_out, rc_out):
    """:func:`quality_block` without ``prange``, for use inside Dask blocks."""
    for i in range(P_block.shape[0]):
        rs_out[i], rc_out[i] = _class_row(P_block, i, y, y[row0 + i])


# -- validation and MBBS helpers ---------------------------------------------------


@njit(parallel=True, nogil=True)
def dense_check(K, rowsum_out, rowmin_out, rowmax_out, bad_out, asym_out):
    """One sweep of the checks every solver needs, with no n x n temporary.

    OUT: ``rowsum_out`` (n,) float64 row sums; ``rowmin_out``, ``rowmax_out``
    (n,) float64 row minima and maxima (of the finite entries);
    ``bad_out`` (n,) int64 first non-finite column of each row or -1;
    ``asym_out`` (ceil(n/64),) max ``|K_ij - K_ji|`` per band of 64 rows,
    compared tile by tile so that the transposed reads stay in cache.
    """
    n = K.shape[0]
    for i in prange(n):
        s = 0.0
        lo = np.inf
        hi = -np.inf
        bad = -1
        for j in range(n):
            x = np.float64(K[i, j])
            if not np.isfinite(x):
                if bad < 0:
                    bad = j
                continue
            s += x
            lo = min(lo, x)
            hi = max(hi, x)
        rowsum_out[i] = s
        rowmin_out[i] = lo
        rowmax_out[i] = hi
        bad_out[i] = bad
    T = 64
    nb = (n + T - 1) // T
    for bi in prange(nb):
        a = 0.0
        for bj in range(bi, nb):
            for i in range(bi * T, min(n, bi * T + T)):
                for j in range(max(i + 1, bj * T), min(n, bj * T + T)):
                    dlt = abs(np.float64(K[i, j]) - np.float64(K[j, i]))
                    if dlt > a:
                        a = dlt
        asym_out[bi] = a


@njit(nogil=True, fastmath=_SUM)
def _half_sqdist_row(A, B, i):
    s = 0.0
    for j in range(A.shape[1]):
        t = np.float64(A[i, j]) - np.float64(B[i, j])
        s += t * t
    return 0.5 * s


@njit(parallel=True, nogil=True)
def half_sqdist_rows(A, B, out):
    """``out[i] = 1/2 sum_j (A_ij - B_ij)^2`` in float64 (the Euclidean D_phi)."""
    for i in prange(A.shape[0]):
        out[i] = _half_sqdist_row(A, B, i)


@njit(nogil=True)
def half_sqdist_rows_serial(A, B, out):
    """:func:`half_sqdist_rows` without ``prange``, for use inside Dask blocks."""
    for i in range(A.shape[0]):
        out[i] = _half_sqdist_row(A, B, i)
