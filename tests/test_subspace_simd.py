"""The register-resident row updates (:mod:`bigclust.subspace._simd`) change the time, not one bit.

The references are the loops the ADMM's inverse and mat-vec were before (copied here, compiled with the same
``fastmath={"contract", "reassoc"}``): on random symmetric positive definite matrices of every padded width
up to 80 (above 64 the rows run as two column blocks) the inverse, its factor and the mat-vec are equal to
theirs bit for bit.  Where the CPU has no fused multiply-add the loops do not contract, so only agreement to
rounding is asked there.  That the inverse is the inverse and the mat-vec the product is checked against
NumPy in test_subspace_admm_kernel.py.
"""
import llvmlite.binding as llvm
import numpy as np
import pytest
from numba import njit

from bigclust.subspace import _numba as K
from bigclust.subspace._simd import LANES, fma_rows

ARITH = K.ARITH
PAD = K.PAD
HAS_FMA = "+fma" in llvm.get_host_cpu_features().flatten().split(",")


def _same(a, b):
    if HAS_FMA:
        return np.array_equal(a, b)
    return np.allclose(a, b, rtol=1e-13, atol=1e-13 * np.abs(a).max())


@njit(fastmath=ARITH, cache=False)
def _loops_inverse(G, shift, U, Y, M):
    """The former loops: each row update a loop over the row, four source rows at a time."""
    k = G.shape[0]
    kp = U.shape[0]
    for p in range(k):                                     # 1. Cholesky, U[p, lo:] from rows t < p
        lo = (p // PAD) * PAD
        for q in range(kp):
            U[p, q] = 0.0
        for q in range(p, k):
            U[p, q] = G[p, q]
        U[p, p] += shift
        up = U[p, lo:]
        n = kp - lo
        t = 0
        while t + 4 <= p:
            a0, a1, a2, a3 = U[t, p], U[t + 1, p], U[t + 2, p], U[t + 3, p]
            u0, u1, u2, u3 = U[t, lo:], U[t + 1, lo:], U[t + 2, lo:], U[t + 3, lo:]
            for q in range(n):
                up[q] -= ((a0 * u0[q] + a1 * u1[q]) + a2 * u2[q]) + a3 * u3[q]
            t += 4
        while t < p:
            a0 = U[t, p]
            u0 = U[t, lo:]
            for q in range(n):
                up[q] -= a0 * u0[q]
            t += 1
        piv = U[p, p]
        if not piv > 0.0:
            return False
        dia = np.sqrt(piv)
        inv = 1.0 / dia
        for q in range(n):
            up[q] *= inv
        for q in range(lo, p):                             # below the diagonal: what the slices touched
            U[p, q] = 0.0
        U[p, p] = dia
    for p in range(k):                                     # 2. Y = U^{-T}, row p nonzero in [0, p]
        hi = (p // PAD) * PAD + PAD
        yp = Y[p]
        for q in range(kp):
            yp[q] = 0.0
        yp[p] = 1.0
        t = 0
        while t + 4 <= p:
            a0, a1, a2, a3 = U[t, p], U[t + 1, p], U[t + 2, p], U[t + 3, p]
            y0, y1, y2, y3 = Y[t], Y[t + 1], Y[t + 2], Y[t + 3]
            for q in range(hi):
                yp[q] -= ((a0 * y0[q] + a1 * y1[q]) + a2 * y2[q]) + a3 * y3[q]
            t += 4
        while t < p:
            a0 = U[t, p]
            y0 = Y[t]
            for q in range(hi):
                yp[q] -= a0 * y0[q]
            t += 1
        inv = 1.0 / U[p, p]
        for q in range(hi):
            yp[q] *= inv
    for p in range(k):                                     # 3. M = Y^T Y, row p from column lo on
        lo = (p // PAD) * PAD
        for q in range(kp):
            M[p, q] = 0.0
        mp = M[p, lo:]
        t = p
        while t + 4 <= k:
            n = ((t + 3) // PAD) * PAD + PAD - lo          # Y[t + 3] is zero past column t + 3
            a0, a1, a2, a3 = Y[t, p], Y[t + 1, p], Y[t + 2, p], Y[t + 3, p]
            y0, y1, y2, y3 = Y[t, lo:], Y[t + 1, lo:], Y[t + 2, lo:], Y[t + 3, lo:]
            for q in range(n):
                mp[q] += ((a0 * y0[q] + a1 * y1[q]) + a2 * y2[q]) + a3 * y3[q]
            t += 4
        while t < k:
            n = (t // PAD) * PAD + PAD - lo
            a0 = Y[t, p]
            y0 = Y[t, lo:]
            for q in range(n):
                mp[q] += a0 * y0[q]
            t += 1
    for p in range(k):                                     # the lower triangle mirrored: exactly symmetric
        for q in range(p):
            M[p, q] = M[q, p]
    for p in range(k, kp):
        for q in range(kp):
            M[p, q] = 0.0
    return True


@njit(fastmath=ARITH, cache=False)
def _loops_matvec(M, rhs, out, k):
    """The former mat-vec: ``out[:k]``, four rows of M a pass, ``out`` loaded and stored on each."""
    for p in range(k):
        out[p] = 0.0
    q = 0
    while q + 4 <= k:
        r0 = rhs[q]
        r1 = rhs[q + 1]
        r2 = rhs[q + 2]
        r3 = rhs[q + 3]
        m0 = M[q]
        m1 = M[q + 1]
        m2 = M[q + 2]
        m3 = M[q + 3]
        for p in range(k):
            out[p] = (((out[p] + m0[p] * r0) + m1[p] * r1) + m2[p] * r2) + m3[p] * r3
        q += 4
    while q < k:
        rq = rhs[q]
        for p in range(k):
            out[p] += M[q, p] * rq
        q += 1


def _spd(rng, k):
    A = rng.standard_normal((k + int(rng.integers(0, 9)), k)) * rng.uniform(0.1, 3.0)
    return A.T @ A


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 8, 9, 13, 20, 31, 33, 50, 56, 57, 64, 65, 72, 80])
def test_the_inverse_is_the_former_loops_bit_for_bit(k):
    rng = np.random.default_rng(k)
    kp = K.padded(k)
    for trial in range(8):
        G = _spd(rng, k)
        shift = float(rng.uniform(1e-4, 10.0))
        ref = [np.full((kp, kp), np.nan) for _ in range(3)]
        new = [np.full((kp, kp), np.nan) for _ in range(3)]
        assert _loops_inverse(G, shift, *ref) and K.spd_inverse_shifted(G, shift, *new)
        assert _same(np.triu(ref[0][:k, :k]), np.triu(new[0][:k, :k]))   # the factor U
        assert _same(np.tril(ref[1][:k, :k]), np.tril(new[1][:k, :k]))   # Y = U^-T
        assert _same(ref[2], new[2])                                        # M, padding included


@pytest.mark.parametrize("k", [1, 3, 4, 8, 9, 13, 50, 64, 65, 80])
def test_the_mat_vec_is_the_former_loops_bit_for_bit(k):
    rng = np.random.default_rng(100 + k)
    kp = K.padded(k)
    for trial in range(8):
        M = np.zeros((kp, kp))
        K.spd_inverse_shifted(_spd(rng, k), float(rng.uniform(1e-3, 5.0)), np.empty((kp, kp)), np.empty((kp, kp)), M)
        r = rng.standard_normal(k) * rng.uniform(0.1, 10.0)
        ref, new = np.full(k, np.nan), np.full(kp, np.nan)
        _loops_matvec(M, r, ref, k)
        K.sym_matvec(M, r, new, k)
        assert _same(ref, new[:k])
        assert not new[k:].any()                  # the padding's columns of M are zero, so is out there


@njit(cache=False)
def _product_at(M, r, out, k):
    fma_rows(M, r, out, k)


def test_rows_are_read_from_any_alignment_and_stride():
    """A view that starts 8 bytes into a buffer, rows wider than the vectors held (a column block past 64):
    the product is still one fused multiply-add a row in row order from zero."""
    rng = np.random.default_rng(7)
    k, kp = 70, 72 + LANES                        # rows of 80 doubles, 70 rows summed
    buf = rng.standard_normal(kp * kp + 1)
    M = buf[1:].reshape(kp, kp)
    r = rng.standard_normal(k)
    out = np.empty(kp)
    _product_at(M, r, out, k)
    expect = np.zeros(kp)
    for q in range(k):                            # math.fma is Python 3.13+: the exact sum in high precision
        expect = expect + M[q] * r[q]
    np.testing.assert_allclose(out, expect, rtol=1e-12, atol=1e-12)
