"""Numba kernels of :mod:`bigclust.subspace`.

Every column (sample) is independent: the in-memory kernels run ``prange``
over columns and nothing else is parallel (one level of parallelism).  Inputs are
float64 / int64 C-contiguous arrays (the Python side converts), outputs are
preallocated by the caller; arguments are documented IN / OUT / INOUT.

Notation: the dictionary ``D`` holds one unit-norm atom per row (N, d); the
samples to represent are the rows of ``X`` (n, d); ``nbr[i]`` (k atom
indices) is the support N_i of column i.  With A = D[N_i]^T (d, k) the
per-column Gram matrix is ``G = A^T A`` (k, k) and ``b = A^T x_i``.

The ADMM's arithmetic (the inverse from a Cholesky factor, its mat-vec and its
fused update pass) is compiled with ``fastmath=ARITH``: only contraction into
fused multiply-adds and reassociation of sums, so that the residual norms
vectorise.  Both change results in their last bits only; no flag that assumes
finite values or ignores signed zeros is set, so the threshold comparisons and
the stopping tests keep IEEE semantics.  The row updates of the inverse and the
mat-vec run in :mod:`bigclust.subspace._simd`, which emits the operations those
loops compiled to, with the rows summed in vector registers.
"""
import numpy as np
from numba import prange, uint64

from bigclust._util.jit import njit
from bigclust.subspace._simd import add_rows, fma_rows, sub_rows

#: the only fast-math flags used (see the module docstring)
ARITH = {"contract", "reassoc"}


# ----------------------------------------------------------------------------- small dense linear algebra


@njit
def gram_column(D, X, nbr, i, A, G, b):
    """Gram matrix and right-hand side of column ``i``.

    D : IN (N, d).  X : IN (n, d).  nbr : IN (n, k).  A : scratch (k, d).
    G : OUT (k, k), ``G[p, q] = <D[nbr[i,p]], D[nbr[i,q]]>``.
    b : OUT (k,), ``b[p] = <D[nbr[i,p]], X[i]>``.
    The k atoms are gathered into A and multiplied by BLAS (``A @ A.T``):
    4x faster than scalar dot loops, which cannot vectorise their
    reductions without fastmath.  The products are tiny (k x d), below
    OpenBLAS's threading threshold, so this stays one level of parallelism.
    The gather loops over row views: half the time of ``A[p, :] = D[j]``.
    """
    k = nbr.shape[1]
    for p in range(k):
        src, dst = D[nbr[i, p]], A[p]
        for j in range(A.shape[1]):
            dst[j] = src[j]
    np.dot(A, A.T, G)          # the same BLAS calls as A @ A.T, A @ X[i], without temporaries
    np.dot(A, X[i], b)


@njit
def cholesky_shifted(G, shift, L):
    """Lower Cholesky factor of ``G + shift * I``.

    G : IN (k, k) symmetric positive semi-definite.  shift : IN float > 0
    (makes the matrix positive definite).  L : OUT (k, k), lower triangle
    written, upper triangle zeroed.  Returns False if a pivot is not
    positive (only possible with shift <= 0 or non-finite G).
    """
    k = G.shape[0]
    for p in range(k):
        for q in range(p + 1, k):
            L[p, q] = 0.0
        for q in range(p + 1):
            s = G[p, q]
            if p == q:
                s += shift
            for t in range(q):
                s -= L[p, t] * L[q, t]
            if p == q:
                if not s > 0.0:
                    return False
                L[p, p] = np.sqrt(s)
            else:
                L[p, q] = s / L[q, q]
    return True


@njit
def cho_solve(L, rhs, out):
    """Solve ``L L^T out = rhs`` (forward then backward substitution).

    L : IN (k, k) lower factor.  rhs : IN (k,).  out : OUT (k,) (may not alias rhs).
    """
    k = L.shape[0]
    for p in range(k):
        s = rhs[p]
        for t in range(p):
            s -= L[p, t] * out[t]
        out[p] = s / L[p, p]
    for p in range(k - 1, -1, -1):
        s = out[p]
        for t in range(p + 1, k):
            s -= L[t, p] * out[t]
        out[p] = s / L[p, p]


#: the inverses of the ADMM are stored with rows of ``padded(k)`` doubles, a multiple of PAD: every row then
#: starts on a 32-byte boundary (Numba aligns arrays to 32 bytes), which made the k = 50 mat-vec 1.7x faster
#: than with rows of 50 (loads split across cache lines), and every row update runs over whole vectors of
#: PAD doubles (:data:`bigclust.subspace._simd.LANES`, no scalar remainder)
PAD = 8


@njit
def padded(k):
    """``k`` rounded up to a multiple of :data:`PAD`."""
    return (k + PAD - 1) // PAD * PAD


#: the padded rows' arrays start on a cache line (64 bytes; Numba's own arrays start 32 bytes into one here):
#: a row then is whole vectors that never straddle two lines -- the k = 50 mat-vec took 152 ns on such
#: rows against 265 ns on rows 32 bytes off a line (AVX-512 loads, one thread, medians of 9)
ALIGN = 64


@njit
def aligned_empty(size):
    """An uninitialised float64 array of ``size`` entries whose first one is on an :data:`ALIGN` boundary."""
    per = ALIGN // 8
    buf = np.empty(size + per)
    off = (-(buf.ctypes.data // 8)) % per
    return buf[off:off + size]


@njit(fastmath=ARITH)
def spd_inverse_shifted(G, shift, U, Y, M):
    """``M[:k, :k] = (G + shift I)^{-1}`` through its Cholesky factor; returns False if a pivot is not positive.

    G : IN (k, k) symmetric positive semi-definite.  shift : IN float > 0.
    U, Y : scratch (kp, kp), kp = ``padded(k)``.  M : OUT (kp, kp), symmetric; the rows and columns
    past k are zero.
    1. ``U^T U = G + shift I``, U upper, row p from the finished rows above it;
    2. ``Y = U^{-T}`` (lower) from ``U^T Y = I``, row by row;
    3. ``M = Y^T Y``, the upper part of row p as ``sum_{t >= p} Y[t, p] Y[t, :]``, then mirrored
       (so M is exactly symmetric).
    About k^3/2 multiply-adds in all (an LU inverse does 2 k^3), each row summed in registers over the rows
    before (1, 2) or after it (3), four at a time (:mod:`bigclust.subspace._simd`), from a column that is a
    multiple of PAD; the few entries this touches past the triangle are zero or overwritten.  Indices are
    unsigned: Numba then drops its negative-index checks.  Measured at k = 50 (one thread):
    21 us, against 38 us for the same arithmetic as plain loops and 46 us (another host) for
    ``np.linalg.inv`` (LAPACK getrf/getri).
    With shift >= rho > 0 the matrix is well conditioned (cond <= (||G|| + shift) / shift), so the
    factor needs no pivoting.
    """
    k = G.shape[0]
    kp = U.shape[0]
    for p in range(k):                                     # 1. Cholesky, U[p, lo:] from rows t < p
        lo = (p // PAD) * PAD
        pu = uint64(p)
        for q in range(uint64(kp)):
            U[pu, q] = 0.0
        for q in range(pu, uint64(k)):
            U[pu, q] = G[pu, q]
        U[pu, pu] += shift
        sub_rows(U, p, lo, U, lo, U, p, 0, p, kp - lo)
        piv = U[pu, pu]
        if not piv > 0.0:
            return False
        dia = np.sqrt(piv)
        inv = 1.0 / dia
        for q in range(uint64(lo), uint64(kp)):
            U[pu, q] *= inv
        for q in range(uint64(lo), pu):                    # below the diagonal: what the row update touched
            U[pu, q] = 0.0
        U[pu, pu] = dia
    for p in range(k):                                     # 2. Y = U^{-T}, row p nonzero in [0, p]
        hi = (p // PAD) * PAD + PAD
        pu = uint64(p)
        for q in range(uint64(kp)):
            Y[pu, q] = 0.0
        Y[pu, pu] = 1.0
        sub_rows(Y, p, 0, Y, 0, U, p, 0, p, hi)
        inv = 1.0 / U[pu, pu]
        for q in range(uint64(hi)):
            Y[pu, q] *= inv
    for p in range(k):                                     # 3. M = Y^T Y, row p from column lo on
        lo = (p // PAD) * PAD
        pu = uint64(p)
        for q in range(uint64(kp)):
            M[pu, q] = 0.0
        add_rows(M, p, lo, Y, lo, Y, p, p, k, kp - lo)     # Y[t] is zero past column t: those terms add 0
    for p in range(uint64(k)):                             # the lower triangle mirrored: exactly symmetric
        for q in range(p):
            M[p, q] = M[q, p]
    for p in range(uint64(k), uint64(kp)):
        for q in range(uint64(kp)):
            M[p, q] = 0.0
    return True


# ----------------------------------------------------------------------------- per-column ADMM (SSC, weighted)


#: ``sym_matvec(M, rhs, out, k)``: ``out[:kp] = M[:kp, :k] rhs[:k]`` for the symmetric, padded inverse M (zero past
#: column k), the result held in registers through the k rows (:func:`bigclust.subspace._simd.fma_rows`)
sym_matvec = fma_rows


@njit
def cached_inverse(G, shift, U, Y, cache, keys, state):
    """Index of ``(G + shift I)^{-1}`` in ``cache``, computed only for a shift not seen before.

    G : IN (k, k).  shift : IN float > 0.  U, Y : scratch (kp, kp), kp = ``padded(k)``.
    cache : INOUT (S, kp, kp) inverses (:func:`spd_inverse_shifted`).  keys : INOUT (S,) their shifts
    (NaN = empty slot).  state : INOUT (1,) int64, the next slot to overwrite (round robin).
    Residual balancing doubles and halves rho exactly, so it often returns to a
    shift it has used before; the inverse of the same matrix by the same
    arithmetic is the same bits, so reusing it changes nothing but the time.
    Returns -1 if the factor fails (a pivot <= 0: G + shift I is singular to
    round-off, possible only for a shift near eps ||G||).
    """
    S = keys.shape[0]
    for s in range(S):
        if keys[s] == shift:
            return s
    s = state[0]
    state[0] = (s + 1) % S
    keys[s] = np.nan                     # the slot is overwritten whether or not the factor succeeds
    if not spd_inverse_shifted(G, shift, U, Y, cache[s]):
        return -1
    keys[s] = shift
    return s


#: residual balancing (Boyd 3.4.1): rho doubles or halves when one residual exceeds BALANCE times the
#: other, checked every BALANCE_EVERY iterations.  On ``bigclust bench subspace`` Boyd's mu = 10 took 1.7
#: factorisations per column (each worth ~100 mat-vecs of time) and 78 iterations at tolerance 1e-9; mu = 30
#: took 1.04 and 73 (and fewer or about as many of both on three other synthetic problems: k = 10 to 50,
#: d = 30 to 200, lam = mu/5 to mu/20)
BALANCE = 30.0
BALANCE_EVERY = 10


@njit(fastmath=ARITH)
def admm_one(G, b, thr, ridge, rho, eps_abs, eps_rel, max_iter, adaptive, relax, U, Y, cache, keys, state, c, z,
             u, rhs, tr):
    # one Numba kernel: the ADMM loop keeps its scratch vectors in registers/cache; calls to helpers
    # inside the loop would pass all of them (it is the hot loop of the subspace stage)
    """ADMM for ``min_c 1/2 ||x - A c||^2 + ridge/2 ||c||^2 + sum_p thr[p] |c_p|`` (one column).

    Splitting c = z (Boyd et al. 2011, section 6.4, with the unscaled dual u):
    ``c <- (G + (ridge + rho) I)^{-1} (b + rho z - u)``,
    ``z <- soft(c + u / rho, thr / rho)``, ``u <- u + rho (c - z)``, with
    over-relaxation (Boyd 3.4.3): c is replaced by ``relax c + (1 - relax) z_prev``
    in the z- and u-steps (``relax = 1``: plain ADMM).  Measured on
    ``bigclust bench subspace`` problems (k = 50): ``relax = 1.8`` halves the
    iterations (155 -> 76 at tolerance 1e-9) and lands closer to scikit-learn's
    Lasso at the same tolerance (9e-8 instead of 5e-7; 8e-5 instead of 6e-4 at the
    default tolerance).
    Stops when BOTH the primal residual ``||c - z||`` and the dual residual
    ``rho ||z - z_prev||`` are below ``sqrt(k) eps_abs + eps_rel * max(||c||, ||z||)``
    and ``sqrt(k) eps_abs + eps_rel * ||u||`` respectively (Boyd, 3.3.1).
    With ``adaptive`` the penalty follows residual balancing (``BALANCE``,
    ``BALANCE_EVERY``, tau = 2); the factorisation (held as the inverse of
    G + (ridge + rho) I, from its Cholesky factor) is cached per value of rho
    (:func:`cached_inverse`: balancing often goes back to a rho it left) and u
    is unscaled, so it needs no rescaling.
    Per iteration: one mat-vec with the cached inverse, then one fused,
    branch-free pass over the k entries (soft threshold as
    ``v - clip(v, -t, t)``, which is exactly ``soft(v, t)`` with +0.0 inside
    the threshold, the dual update and the five sums of the stopping test).
    Why the inverse and not two triangular solves with the Cholesky factor
    every iteration: a solve is a chain of k dependent steps, a mat-vec k
    independent row updates; at k = 50 two solves took 1.6 us per iteration
    against 0.3 us for the mat-vec (0.15 us now, :data:`sym_matvec`), while the
    inverse from the factor (:func:`spd_inverse_shifted`, ~20 us) is paid once
    per value of rho (about once per column on ``bigclust bench subspace``: see
    :data:`BALANCE`).

    G : IN (k, k).  b : IN (k,).  thr : IN (k,) >= 0.  U, Y : scratch (kp, kp), kp = ``padded(k)``.
    cache, keys, state : scratch of :func:`cached_inverse` (S, kp, kp), (S,), (1,);
    the caller empties ``keys`` (NaN) for every new G.
    c : scratch (kp,).  u, rhs, tr : scratch (k,) (tr = thr / rho, divided once per value of rho).
    z : OUT (k,), the (exactly sparse) solution.
    Returns (iterations, converged).
    """
    k = G.shape[0]
    for p in range(k):
        c[p] = 0.0
        z[p] = 0.0
        u[p] = 0.0
        tr[p] = thr[p] / rho
    inv_rho = 1.0 / rho            # u / rho as a product: a vector division costs ~10 multiplications
    s0 = cached_inverse(G, ridge + rho, U, Y, cache, keys, state)
    if s0 < 0:
        return 0, False            # z = 0, reported as not converged (the caller counts and warns)
    Minv = cache[s0]
    sk = np.sqrt(k)
    it = 0
    converged = False
    for p in range(k):
        rhs[p] = b[p]                  # b + rho z - u at z = u = 0
    while it < max_iter:
        it += 1
        sym_matvec(Minv, rhs, c, k)
        r2 = 0.0
        s2 = 0.0
        cn = 0.0
        zn = 0.0
        un = 0.0
        for p in range(k):
            zold = z[p]
            ch = relax * c[p] + (1.0 - relax) * zold
            v = ch + u[p] * inv_rho
            t = tr[p]
            zp = v - min(max(v, -t), t)
            z[p] = zp
            up = u[p] + rho * (ch - zp)
            u[p] = up
            rhs[p] = b[p] + rho * zp - up   # the next iteration's right-hand side, while z and u are loaded
            diff = c[p] - zp
            r2 += diff * diff
            dz = zp - zold
            s2 += dz * dz
            cn += c[p] * c[p]
            zn += zp * zp
            un += up * up
        r = np.sqrt(r2)
        s = rho * np.sqrt(s2)
        eps_pri = sk * eps_abs + eps_rel * np.sqrt(max(cn, zn))
        eps_dual = sk * eps_abs + eps_rel * np.sqrt(un)
        if r <= eps_pri and s <= eps_dual:
            converged = True
            break
        if adaptive and it % BALANCE_EVERY == 0 and (r > BALANCE * s or s > BALANCE * r):
            rho_new = rho * 2.0 if r > BALANCE * s else rho * 0.5
            s1 = cached_inverse(G, ridge + rho_new, U, Y, cache, keys, state)
            if s1 < 0:             # rho halved to round-off: keep the current rho (its inverse is still held)
                continue
            rho = rho_new
            inv_rho = 1.0 / rho
            Minv = cache[s1]
            for p in range(k):
                tr[p] = thr[p] / rho
                rhs[p] = b[p] + rho * z[p] - u[p]
    return it, converged


#: columns per task of the ``prange`` loops: the scratch is allocated once per block
#: (not per column) and 64 columns still leave many blocks per thread to balance
COLUMN_BLOCK = 64
#: inverses of G + (ridge + rho) I kept per column (one per value of rho)
INVERSE_SLOTS = 4


@njit(parallel=True)
def admm_columns(D, X, nbr, thr, ridge, rho, eps_abs, eps_rel, max_iter, adaptive, relax, out_c, out_iter,
                 out_conv):
    """Per-column weighted-l1 ADMM over all columns (``prange`` over blocks of columns).

    D : IN (N, d) atoms.  X : IN (n, d) samples.  nbr : IN (n, k) atom indices.
    thr : IN (n, k) thresholds (``lam`` for SSC, ``lam + gamma * Theta`` for AkS-SSC).
    ridge : IN float (0 for SSC; lam for the l2-regularised AkS-LSR C-step).
    relax : IN float in (0, 2), over-relaxation (1 = plain ADMM).
    out_c : OUT (n, k) coefficients on the support.  out_iter : OUT (n,) int64.
    out_conv : OUT (n,) bool.
    Every column is computed alone from its own inputs: the results do not
    depend on the blocks, the threads or the number of columns per call.
    """
    n, k = nbr.shape
    n_blocks = (n + COLUMN_BLOCK - 1) // COLUMN_BLOCK
    for blk in prange(n_blocks):
        A = np.empty((k, D.shape[1]))
        G = np.empty((k, k))
        kp = padded(k)
        U = aligned_empty(kp * kp).reshape((kp, kp))
        Y = aligned_empty(kp * kp).reshape((kp, kp))
        cache = aligned_empty(INVERSE_SLOTS * kp * kp).reshape((INVERSE_SLOTS, kp, kp))
        keys = np.empty(INVERSE_SLOTS)
        state = np.zeros(1, dtype=np.int64)
        b = np.empty(k)
        c = aligned_empty(kp)   # the mat-vec writes the padded width
        z = np.empty(k)
        u = np.empty(k)
        rhs = np.empty(k)
        tr = np.empty(k)
        for i in range(blk * COLUMN_BLOCK, min(n, (blk + 1) * COLUMN_BLOCK)):
            gram_column(D, X, nbr, i, A, G, b)
            keys[:] = np.nan
            state[0] = 0
            its, ok = admm_one(G, b, thr[i], ridge, rho, eps_abs, eps_rel, max_iter, adaptive, relax, U, Y, cache,
                               keys, state, c, z, u, rhs, tr)
            for p in range(k):
                out_c[i, p] = z[p]
            out_iter[i] = its
            out_conv[i] = ok


@njit(parallel=True)
def ridge_columns(D, X, nbr, lam, out_c):
    """Closed-form LSR per column: ``c = (G + lam I)^{-1} b``.

    D : IN (N, d).  X : IN (n, d).  nbr : IN (n, k).  lam : IN float > 0.
    out_c : OUT (n, k).
    """
    n, k = nbr.shape
    for i in prange(n):
        A = np.empty((k, D.shape[1]))
        G = np.empty((k, k))
        L = np.empty((k, k))
        b = np.empty(k)
        c = np.empty(k)
        gram_column(D, X, nbr, i, A, G, b)
        cholesky_shifted(G, lam, L)
        cho_solve(L, b, c)
        for p in range(k):
            out_c[i, p] = c[p]


# ----------------------------------------------------------------------------- LRR helpers


@njit(parallel=True)
def gram_columns(D, X, nbr, out_G, out_b):
    """All per-column Gram matrices (for LRR, whose C-step is repeated).

    out_G : OUT (n, k, k).  out_b : OUT (n, k).
    """
    n, k = nbr.shape
    for i in prange(n):
        A = np.empty((k, D.shape[1]))
        gram_column(D, X, nbr, i, A, out_G[i], out_b[i])


@njit(parallel=True)
def lrr_c_step(Gs, bs, shift, rho, J, Y, out_c):
    """C-step of the support-restricted LRR ADMM, every column at once.

    ``c_i = (G_i + shift I)^{-1} (b_i + rho J_i - Y_i)`` on the support of column i
    (shift = rho for plain LRR, 2 rho with the extra l1 block of AkS-LRR).
    Gs : IN (n, k, k).  bs, J, Y : IN (n, k) (J, Y gathered on the support).
    shift, rho : IN float.  out_c : OUT (n, k).
    """
    n, k = bs.shape
    for i in prange(n):
        L = np.empty((k, k))
        rhs = np.empty(k)
        c = np.empty(k)
        cholesky_shifted(Gs[i], shift, L)
        for p in range(k):
            rhs[p] = bs[i, p] + rho * J[i, p] - Y[i, p]
        cho_solve(L, rhs, c)
        for p in range(k):
            out_c[i, p] = c[p]
