"""Numba kernels of :mod:`bigclust.nmf`: products with a CSR X or K, the fused factor updates.

Dense products go to BLAS (:mod:`bigclust.nmf.ops`); a dense X with few nonzeros is turned into CSR
once (``ops.product_form``) and multiplied here.

Kernel k-means has its own kernels in :mod:`bigclust.nmf._kkmeans_numba`.

Conventions: float64 C-contiguous inputs (the Python
side converts), preallocated outputs documented IN / OUT / INOUT, no
``fastmath`` (every update divides; the denominators are guarded by ``EPS``
explicitly).

Reductions over rows (Gram matrices ``F^T F``, the traces of the objective)
are summed per fixed row range -- ``_CHUNKS`` ranges whose bounds depend on n
only -- into partial arrays that Python adds in order.  The result is
therefore the same whatever the number of threads.
"""
import numpy as np
from numba import prange

from bigclust._util.jit import njit, prefetch_row

#: denominators below EPS are replaced by EPS (only 0/0 and underflow ever reach it)
EPS = 1e-300
#: fixed row ranges of every parallel loop with a reduction (bounds depend on n only)
_CHUNKS = 64
#: nonzeros ahead whose row of M :func:`csr_matmul` prefetches (``bigclust bench nmf``: 16 took
#: 0.7x the time of no prefetch on 20 Newsgroups; 8 and 24 were in between)
_PREFETCH = 16
#: ... but only when M is larger than this: a smaller M stays in the core's cache (2 MB of L2 here), where the
#: prefetches are wasted instructions -- MNIST test digits (k = 10, M of 63 KB and 800 KB, one thread): the two
#: products took 0.85-0.9x the time without them; 20 Newsgroups (k = 20, M of 3 and 7 MB): the same either way
_PREFETCH_BYTES = 1 << 20


@njit
def _bounds(n, c):
    step = (n + _CHUNKS - 1) // _CHUNKS
    return min(n, c * step), min(n, c * step + step)


@njit
def _chunk(n, c, parts):
    """Row range c of n rows and its partial ``parts[c]``, zeroed (the start of every reduction)."""
    lo, hi = _bounds(n, c)
    g = parts[c]
    g[:, :] = 0.0
    return lo, hi, g


@njit(inline="always")
def _add_outer(F, i, M, g):
    """``g += f_i^T m_i`` (g (k, q)), skipping the zeros of f_i (most of them in text factors)."""
    for a in range(F.shape[1]):
        fa = F[i, a]
        if fa != 0.0:
            for b in range(M.shape[1]):
                g[a, b] += fa * M[i, b]


@njit(inline="always")
def _add_split(v, M, j, outp, outm, i):
    """Row i of ``K+ M`` and ``K- M`` gets entry ``v = K_ij``'s share: ``v m_j`` to outp or ``-v m_j`` to outm."""
    if v > 0.0:
        for l in range(M.shape[1]):
            outp[i, l] += v * M[j, l]
    elif v < 0.0:
        for l in range(M.shape[1]):
            outm[i, l] -= v * M[j, l]


# -- products ---------------------------------------------------------------------------------------


@njit(parallel=True)
def csr_matmul(data, indices, indptr, M, out):
    """``out = X M`` for CSR X (r x c).

    data, indices, indptr : IN, CSR arrays.  M : IN (c, k).  out : OUT (r, k).
    O(nnz k), parallel over rows; the sum of each entry runs over the row's
    nonzeros in stored order (prefetching and the grouping below change no result).

    A row's k sums are kept in ``acc``, a buffer of this loop that LLVM knows
    aliases neither M nor out, and take four nonzeros per pass: one load and
    store of ``acc`` for four gathered rows of M, each added in turn, so the
    order of every sum is that of one nonzero at a time.  MNIST test digits
    (k = 10, one thread): 0.85x the time of one nonzero per pass into ``out``.
    """
    r = indptr.shape[0] - 1
    k = M.shape[1]
    # the rows of M are gathered in data order, which no hardware prefetcher predicts: prefetch them when M is
    # too large to stay in cache (``last`` = -1 turns the prefetches off)
    last = indices.shape[0] - _PREFETCH if M.shape[0] * k * 8 > _PREFETCH_BYTES else -1
    for c in prange(_CHUNKS):
        lo, hi = _bounds(r, c)
        acc = np.empty(k)
        for i in range(lo, hi):
            for l in range(k):
                acc[l] = 0.0
            p, end = indptr[i], indptr[i + 1]
            while p + 3 < end:
                if p + 3 < last:
                    for d in range(4):
                        prefetch_row(M, indices[p + d + _PREFETCH])
                a, ja = data[p], indices[p]
                b, jb = data[p + 1], indices[p + 1]
                e, je = data[p + 2], indices[p + 2]
                f, jf = data[p + 3], indices[p + 3]
                for l in range(k):
                    acc[l] = (((acc[l] + a * M[ja, l]) + b * M[jb, l]) + e * M[je, l]) + f * M[jf, l]
                p += 4
            while p < end:
                v, j = data[p], indices[p]
                for l in range(k):
                    acc[l] += v * M[j, l]
                p += 1
            for l in range(k):
                out[i, l] = acc[l]


@njit(parallel=True)
def dense_row_nnz(A, counts, nonfinite, negative):
    """Per row i of dense A (r x c): ``counts[i]`` nonzeros, ``nonfinite[i]`` / ``negative[i]`` entries that
    are not finite / below 0 (OUT (r,) int64 each): the checks of ``as_data`` and the count of ``product_form``
    in one parallel pass over X (numpy took three, each with a boolean temporary the size of X).
    """
    r, cdim = A.shape
    for i in prange(r):
        s = nf = ng = 0
        for j in range(cdim):
            v = A[i, j]
            s += v != 0.0
            nf += not (abs(v) < np.inf)
            ng += v < 0.0
        counts[i] = s
        nonfinite[i] = nf
        negative[i] = ng


@njit(parallel=True)
def dense_to_csr(A, indptr, indices, data):
    """The nonzeros of dense A as CSR, column indices ascending.

    A : IN (r, c).  indptr : IN (r + 1,), the prefix sums of :func:`dense_row_nnz`.
    indices, data : OUT (nnz,).
    """
    r, cdim = A.shape
    for i in prange(r):
        p = indptr[i]
        for j in range(cdim):
            v = A[i, j]
            if v != 0.0:
                indices[p] = j
                data[p] = v
                p += 1


@njit
def csr_transpose_into(indptr, indices, data, indptr_t, indices_t, data_t):
    """The CSR transpose by a counting sort: row i's entries go to the rows of their columns in order of i,
    so every row of the transpose comes out sorted.

    indptr, indices, data : IN, CSR of X (r x c).  indptr_t : OUT (c + 1,), zeroed by the caller.
    indices_t, data_t : OUT (nnz,).  Serial: one pass of cheap scatters (a few ms per million nonzeros).
    """
    r = indptr.shape[0] - 1
    for p in range(indices.shape[0]):
        indptr_t[indices[p] + 1] += 1
    for j in range(indptr_t.shape[0] - 1):
        indptr_t[j + 1] += indptr_t[j]
    nxt = indptr_t[:-1].copy()
    for i in range(r):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            q = nxt[j]
            indices_t[q] = i
            data_t[q] = data[p]
            nxt[j] = q + 1


@njit(parallel=True)
def csr_matmul_split(data, indices, indptr, M, outp, outm):
    """``outp = K+ M`` and ``outm = K- M`` in one pass, K+ = max(K, 0), K- = max(-K, 0).

    data, indices, indptr : IN, CSR arrays.  M : IN (c, k).  outp, outm : OUT (r, k).
    """
    for c in prange(_CHUNKS):
        lo, hi = _bounds(indptr.shape[0] - 1, c)
        outp[lo:hi] = 0.0
        outm[lo:hi] = 0.0
        for i in range(lo, hi):
            for p in range(indptr[i], indptr[i + 1]):
                _add_split(data[p], M, indices[p], outp, outm, i)


@njit(parallel=True)
def dense_matmul_split(A, M, outp, outm):
    """:func:`csr_matmul_split` for a dense A (r x c)."""
    r, cdim = A.shape
    for c in prange(_CHUNKS):
        lo, hi = _bounds(r, c)
        outp[lo:hi] = 0.0
        outm[lo:hi] = 0.0
        for i in range(lo, hi):
            for j in range(cdim):
                _add_split(A[i, j], M, j, outp, outm, i)


@njit(parallel=True)
def gram_parts(F, gram):
    """Partial Gram matrices: ``gram[c] = sum of f_i^T f_i`` over the rows of range c.

    F : IN (r, k).  gram : OUT (_CHUNKS, k, k); ``gram.sum(0) = F^T F``.
    """
    for c in prange(_CHUNKS):
        lo, hi, g = _chunk(F.shape[0], c, gram)
        i = lo
        while i + 3 < hi:
            _gram_quad(F, i, g, F.shape[1])
            i += 4
        for i in range(i, hi):
            _add_outer(F, i, F, g)


@njit(inline="always")
def _gram_quad(F, i, g, k):
    """``g += f_t^T f_t`` for the four rows t = i..i+3 in turn, entry by entry (one load and store of g).

    Bit for bit four single-row updates: adding ``0 * f`` for a zero of a row changes nothing
    (F finite and non-negative, g >= +0), where :func:`_add_outer` skips it.  :func:`gram_parts` of U of
    20 Newsgroups (44223 x 20, one thread): 0.78-0.87x the time of row pairs (the g traffic halves).
    """
    for a in range(k):
        f0 = F[i, a]
        f1 = F[i + 1, a]
        f2 = F[i + 2, a]
        f3 = F[i + 3, a]
        for b in range(k):
            g[a, b] = (((g[a, b] + f0 * F[i, b]) + f1 * F[i + 1, b]) + f2 * F[i + 2, b]) + f3 * F[i + 3, b]


# -- factor updates ---------------------------------------------------------------------------------


@njit(inline="always")
def _row_products(A, i, SA, B, j, SB, da, db):
    """``da = A_i SA`` and ``db = B_j SB`` (rows times k x k matrices; OUT da, db (k,)) in one loop.

    Each entry sums over q in order, as a dot product would, but the loop over
    l is innermost so that it vectorises.
    """
    k = da.shape[0]
    for l in range(k):
        da[l] = 0.0
        db[l] = 0.0
    for q in range(k):
        x = A[i, q]
        y = B[j, q]
        for l in range(k):
            da[l] += x * SA[q, l]
            db[l] += y * SB[q, l]


@njit(inline="always")
def _mu_update(F, i, A, d, t):
    """``F_i <- F_i o A_i / max(d_t, EPS)`` where F_i is nonzero (a zero stays zero, never 0 * inf)."""
    for l in range(F.shape[1]):
        f = F[i, l]
        if f != 0.0:
            den = d[t, l]
            F[i, l] = f * (A[i, l] / (den if den > EPS else EPS))


@njit
def _accumulate(F, i, A, g, k):
    """Row i's contribution to the Gram partial g and to ``sum F o A`` (returned)."""
    s = 0.0
    for a in range(k):
        s += F[i, a] * A[i, a]
    _add_outer(F, i, F, g)
    return s


@njit(parallel=True)
def mu_rows(F, A, L, S, gram, cross_old, cross_new, track_old, track_new):
    """One multiplicative update of every row of a factor, with the reductions of the objective.

    ``F <- F o A / max(L S, EPS)``  (3-2, 3-3, 3-13, 3-15): F : INOUT (r, k),
    the factor; A : IN (r, k), the numerator (``X U``, ``K V``, ...); L : IN
    (r, k), may be F itself (each row is read before it is written); S : IN
    (k, k).  A zero entry of F stays zero (never 0 * inf).  gram : OUT
    (_CHUNKS, k, k), partials of the new ``F^T F``.  cross_old, cross_new :
    OUT (_CHUNKS,), partials of ``sum F o A`` before and after the update.
    track_old / track_new : IN bool; False skips cross_old / (gram and
    cross_new), left 0 (callers that do not read them: a serial sum per row
    range costs time).

    Rows go in fours: the denominators of each pair share every load of S
    (:func:`_row_products`), and g gets the four rows in turn per entry, one
    load and store of g for four rows (:func:`_gram_quad`).  Every sum keeps
    its order, so the result is bit for bit that of one row at a time; a
    range's last rows (fewer than four) go one at a time.  Pairs took 0.85x
    the time of single rows (20 Newsgroups, k = 20); fours, against pairs, one
    thread, interleaved runs: 0.90x (V of 20 Newsgroups), 0.91-0.97x (U),
    1.05x (V of the MNIST test digits, k = 10: noise level).  Four
    denominators per load of S were slower for k = 10 (1.35x), and summing
    only the upper triangle of the symmetric g was slower too (the shorter
    loops vectorise worse).
    """
    r, k = F.shape
    for c in prange(_CHUNKS):
        lo, hi, g = _chunk(r, c, gram)
        d = np.empty((4, k))
        so = sn = 0.0
        i = lo
        while i < hi:
            nr = 4 if i + 3 < hi else 1
            so, sn = _mu_block(F, A, L, S, i, nr, d, g, so, sn, track_old, track_new)
            i += nr
        cross_old[c] = so
        cross_new[c] = sn


@njit(inline="always")
def _mu_block(F, A, L, S, i, nr, d, g, so, sn, track_old, track_new):
    """:func:`mu_rows` on rows i..i+nr-1 (nr = 4, or 1 for a range's last rows); returns the running sums
    ``so``, ``sn`` with these rows added in order."""
    k = F.shape[1]
    if track_old:
        for t in range(nr):
            for l in range(k):
                so += F[i + t, l] * A[i + t, l]
    if nr == 4:
        _row_products(L, i, S, L, i + 1, S, d[0], d[1])
        _row_products(L, i + 2, S, L, i + 3, S, d[2], d[3])
    else:
        _row_products(L, i, S, L, i, S, d[0], d[1])
    for t in range(nr):
        _mu_update(F, i + t, A, d, t)
    if track_new:
        for t in range(nr):
            s0 = 0.0
            for l in range(k):
                s0 += F[i + t, l] * A[i + t, l]
            sn += s0
        if nr == 4:
            _gram_quad(F, i, g, k)
        else:
            _add_outer(F, i, F, g)
    return so, sn


@njit(parallel=True)
def split_rows(F, A, Lp, Sp, Lm, Sm, gram, cross_new, track_new):
    """The multiplicative update with the split rules, for a kernel with negative entries.

    ``F <- F o (A + sqrt(A^2 + 4 P+ o P-)) / max(2 P+, EPS)``  (3-12, 3-14),
    ``P+ = Lp Sp``, ``P- = Lm Sm`` (Lp, Lm : IN (r, k); Sp, Sm : IN (k, k)).
    F, A, gram, cross_new, track_new : as in :func:`mu_rows`.
    """
    r, k = F.shape
    for c in prange(_CHUNKS):
        lo, hi, g = _chunk(r, c, gram)
        dp, dm = np.empty(k), np.empty(k)
        sn = 0.0
        for i in range(lo, hi):
            _row_products(Lp, i, Sp, Lm, i, Sm, dp, dm)
            for l in range(k):
                f = F[i, l]
                if f == 0.0:
                    continue
                a = A[i, l]
                den = 2.0 * dp[l]
                num = a + np.sqrt(a * a + 4.0 * dp[l] * dm[l])
                F[i, l] = f * (num / (den if den > EPS else EPS))
            if track_new:
                sn += _accumulate(F, i, A, g, k)
        cross_new[c] = sn


@njit(parallel=True)
def hals_rows(F, A, G, sweeps, delta, gram, cross_old, cross_new):
    """HALS (exact coordinate descent) on every row of a factor, up to ``sweeps`` sweeps per row.

    With the other factor fixed the rows of F are independent NNLS problems
    sharing A's row and G, so each row is swept over its k coordinates in
    order, always using its latest values:
    ``F_il <- max(0, F_il + (A_il - (F_i G)_l) / G_ll)``, skipped where
    ``G_ll = 0`` (a zero column of the other factor).  One sweep is fast HALS
    (Cichocki & Phan 2009) and scikit-learn's coordinate descent.  Further
    sweeps reuse A and G, which cost far more than a sweep (the accelerated
    HALS of Gillis & Glineur 2012); a row stops after the sweep whose squared
    change is at most ``delta^2`` times that of its first sweep.  Every step
    minimises J exactly in one coordinate, so J never increases, and the fixed
    points are those of one sweep.

    ``r = F_i G`` is kept up to date (O(k) per coordinate that moves) instead
    of recomputed per coordinate: coordinates that stay at 0, most of them in
    text factors, cost O(1).

    F : INOUT (r, k).  A : IN (r, k) (``X U`` or ``X^T V``).  G : IN (k, k)
    symmetric (``U^T U`` or ``V^T V``).  sweeps : IN int >= 1.  delta : IN
    float.  gram, cross_old, cross_new : OUT as in :func:`mu_rows`.
    """
    n, k = F.shape
    d2 = delta * delta
    for c in prange(_CHUNKS):
        lo, hi, g = _chunk(n, c, gram)
        r = np.empty(k)
        so = sn = 0.0
        for i in range(lo, hi):
            for l in range(k):
                so += F[i, l] * A[i, l]
                r[l] = 0.0
            for q in range(k):
                f = F[i, q]
                if f != 0.0:
                    for l in range(k):
                        r[l] += f * G[q, l]
            first = 0.0
            for t in range(sweeps):
                ch = 0.0
                for l in range(k):
                    h = G[l, l]
                    if h <= 0.0:
                        continue
                    f = F[i, l]
                    v = f + (A[i, l] - r[l]) / h
                    if v < 0.0:
                        v = 0.0
                    dv = v - f
                    if dv != 0.0:
                        F[i, l] = v
                        ch += dv * dv
                        for q in range(k):
                            r[q] += dv * G[l, q]
                if t == 0:
                    first = ch
                if ch <= d2 * first:
                    break
            sn += _accumulate(F, i, A, g, k)
        cross_old[c] = so
        cross_new[c] = sn


@njit(parallel=True)
def tdot_parts(F, M, parts):
    """Partials of ``F^T M``: ``parts[c] = sum of f_i^T m_i`` over the rows of range c.

    F : IN (r, k).  M : IN (r, q).  parts : OUT (_CHUNKS, k, q).
    """
    for c in prange(_CHUNKS):
        lo, hi, g = _chunk(F.shape[0], c, parts)
        for i in range(lo, hi):
            _add_outer(F, i, M, g)
