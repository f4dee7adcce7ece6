"""recall@k of approximate neighbour lists, measured on a sample of rows against their exact lists, at any n.

The exact search of all n rows is quadratic; the recall of a sample of m rows
is not: :func:`exact_sample` streams over the n rows once, in chunks, with one
float32 GEMM (BLAS sgemm) of the m sampled rows against each chunk and a Numba
merge into each sampled row's running top k — ``2 m n d`` flops, memory of the
order of ``m * chunk_rows`` whatever n (at m = 2000, 8.1M x 50 rows: 1.6
TFLOP).  :func:`knn_recall` adds the distances of the approximate lists,
gathered from the same chunks as they pass, so the rows are read in one pass
and never held whole: a NumPy array, a zarr / dask / h5py array (sliced by
rows), or an iterable of row chunks that can be iterated twice (the first
pass gathers the sampled rows).  On mnist-1m's PCA-50 rows (1M x 50, m = 2000,
2 shared cores at load 11-13) the pass took 7.9 CPU s from memory, 8.2-9.2 from
the zarr store, against 12.1 for :func:`~bigclust.algo.knn.knn_exact` of the
sample in the same run; the GEMM is about two thirds of it.

Exactness.  GEMM in float32 only *screens* the candidates: an entry is dropped
when its float32 squared distance exceeds the row's current k-th one by more
than a bound on float32's rounding error; every candidate that passes has its
distance recomputed in float64 from the rows as given, and the kept lists are
ordered by (float64 squared distance, index).  The exact lists therefore do
not depend on the chunk size.

Ties.  A returned neighbour j of a sampled row q counts as correct when
``dist(q, j) <= (1 + rtol) * d_k(q)`` (Euclidean distances in float64, ``d_k``
the exact k-th distance, ``rtol = 1e-6``): a neighbour tied with the k-th
(duplicate rows, or float32 near-ties in the search that produced the lists)
is not a miss, whichever of the tied rows the exact order kept.  Each distinct
id counts once; -1 (no neighbour) is a miss.  recall@k = mean over the sample
of (correct neighbours) / k.

The row itself.  The kNN graph (:func:`bigclust.algo.affinity.knn_graph`, the
kNN stage) stores each row first, then its k - 1 nearest others; the search
:func:`bigclust.algo.knn.knn_search` returns the k nearest *others*.
``self_included`` follows the lists: with it, the exact list is the k nearest
rows counting the row itself (distance 0); without it, the k nearest others,
and the row itself in a list counts as a miss.  Default: detected — every list
starting with its own row means included.  The two are related: with the row
first in every list, the recall of its k - 1 others is ``(k r - 1) / (k - 1)``
(:func:`others_recall`), as the k-th distance counting the row is the (k-1)-th
of the others.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from bigclust._util.errors import UserError
from bigclust._util.jit import njit

#: default sampled rows (issue 28: recall measured on >= 2000 sampled rows)
SAMPLE = 2000
#: rows of one chunk of the stream: a (m x chunk) float32 score tile, 131 MB at m = 2000
CHUNK_ROWS = 16384
#: at most this many bytes of float32 scores per tile (the sampled rows are cut in blocks above it)
TILE_BYTES = 1 << 28
#: relative tolerance on the k-th distance (float64 rounding of distances computed in different orders)
RTOL = 1e-6
#: float32 unit roundoff
_U32 = 2.0 ** -24
#: entries of a row screened by one branch-free count (mnist-1m PCA-50, first 262144 rows, one thread: 0.89 ns
#: per entry with 256, 1.11 with 1024, 1.73 with 4096 — a sampled row has a candidate in about half the chunks
#: of 16384 rows early in the stream, one or two entries each; 0.35-0.44 ns where none passes)
_SCREEN = 256


__all__ = ["CHUNK_ROWS", "RTOL", "SAMPLE", "exact_sample", "knn_recall", "others_recall", "sample_rows"]


def sample_rows(n, m=SAMPLE, seed=0):
    """``m`` distinct row indices of ``range(n)`` drawn by a seeded RNG, sorted (int64)."""
    n, m = int(n), int(m)
    if not 1 <= m <= n:
        raise UserError(f"cannot sample m={m} of n={n} rows without replacement (need 1 <= m <= n)")
    return np.sort(np.random.default_rng(seed).choice(n, m, replace=False)).astype(np.int64)


def others_recall(r, k):
    """recall@(k-1) of the others, from recall@k ``r`` of lists whose first entry is every row itself."""
    return (k * r - 1.0) / (k - 1) if k > 1 else float("nan")


# -- the Numba kernels ------------------------------------------------------------------------------------------


@njit(inline="always")
def _before(da, ia, db, ib):
    """``(da, ia) < (db, ib)`` in the order (distance, then index)."""
    return da < db or (da == db and ia < ib)


@njit(parallel=True, nogil=True)
def _merge_chunk(G, qq, bb, bb_max, coef, Q, B, col0, qid, skip_self, top_d, top_i):
    """Merge one chunk's scores into the sampled rows' running top k (ascending, exact float64).

    IN G : (m, c) float32 ``q_i . b_j`` (one sgemm); qq : (m,) float32 ``|q_i|^2``; bb : (c,) float32
       ``|b_j|^2``; bb_max : max of bb; coef : the float32 error bound's factor (see :func:`exact_sample`).
    IN Q : (m, d) float64 sampled rows; B : (c, d) the chunk as given; col0 : global index of B's first row.
    IN qid : (m,) the sampled rows' global indices; skip_self : leave row qid[i] out of row i's list.
    INOUT top_d : (m, k) float64 squared distances, ascending (+inf = empty); top_i : (m, k) int64 (-1).

    The float32 value ``qq + bb - 2 g`` screens :data:`_SCREEN` entries at a time (a branch-free count LLVM
    vectorises): only an entry within the rounding bound of the k-th kept distance is recomputed exactly,
    so the lists are those of float64 arithmetic, whatever the chunking.
    """
    m, c = G.shape
    k = top_d.shape[1]
    d = Q.shape[1]
    for i in prange(m):
        td = top_d[i]
        ti = top_i[i]
        margin = coef * (qq[i] + bb_max)
        thr = np.float32(td[k - 1] + margin)          # +inf while the list is not full
        g = G[i]
        q2 = qq[i]
        two = np.float32(2.0)                         # float32 throughout: 8 lanes per vector, not 4
        for j0 in range(0, c, _SCREEN):
            gs = g[j0:j0 + _SCREEN]
            bs = bb[j0:j0 + _SCREEN]
            cnt = 0
            for j in range(gs.size):   # from 0: no negative-index wraparound, so LLVM vectorises (3x faster)
                cnt += q2 + bs[j] - two * gs[j] <= thr
            if cnt == 0:
                continue
            for j in range(gs.size):
                if q2 + bs[j] - two * gs[j] > thr:
                    continue
                gj = col0 + j0 + j
                if skip_self and gj == qid[i]:
                    continue
                s = 0.0
                for f in range(d):
                    diff = Q[i, f] - np.float64(B[j0 + j, f])
                    s += diff * diff
                if not _before(s, gj, td[k - 1], ti[k - 1]):
                    continue
                u = k - 1                               # insertion into the sorted list (k is small)
                while u > 0 and _before(s, gj, td[u - 1], ti[u - 1]):
                    td[u] = td[u - 1]
                    ti[u] = ti[u - 1]
                    u -= 1
                td[u] = s
                ti[u] = gj
                thr = np.float32(td[k - 1] + margin)


@njit(parallel=True, nogil=True)
def _pair_sqdist(Q, qrow, B, brow, out, pos):
    """``out[pos[t]] = |Q[qrow[t]] - B[brow[t]]|^2`` in float64: the approximate lists' distances, per chunk."""
    d = Q.shape[1]
    for t in prange(qrow.size):
        s = 0.0
        for f in range(d):
            diff = Q[qrow[t], f] - np.float64(B[brow[t], f])
            s += diff * diff
        out[pos[t]] = s


# -- reading rows ------------------------------------------------------------------------------------------------


def _is_array(rows):
    """A NumPy / zarr / dask / h5py array: sliced by rows (anything else is an iterable of row chunks)."""
    if not (hasattr(rows, "shape") and hasattr(rows, "__getitem__")):
        return False
    if len(rows.shape) != 2:
        raise UserError(f"the rows must be a 2-D array (n, d) or an iterable of row chunks, got shape {rows.shape}")
    return True


def _chunks(rows, chunk_rows):
    """``(row0, block)`` of the rows in order: slices of an array (aligned to its storage chunks, so a zarr
    chunk is decompressed once), or the blocks of an iterable as they come."""
    if _is_array(rows):
        n = rows.shape[0]
        store = getattr(rows, "chunks", None)
        if isinstance(store, tuple) and store and isinstance(store[0], (int, np.integer)) and store[0] > 0:
            chunk_rows = max(1, chunk_rows // int(store[0])) * int(store[0])
        for r0 in range(0, n, chunk_rows):
            yield r0, np.asarray(rows[r0:r0 + chunk_rows])
        return
    r0 = 0
    for block in rows:
        block = np.asarray(block)
        if block.ndim != 2:
            raise UserError(f"row chunks must be 2-D arrays, got a chunk of shape {block.shape} at row {r0}")
        yield r0, block
        r0 += block.shape[0]


def _take(rows, idx, chunk_rows):
    """Rows ``idx`` (sorted, distinct) as float64, and n: fancy indexing of an array, else one pass."""
    if _is_array(rows):
        if isinstance(rows, np.ndarray):
            return rows[idx].astype(np.float64), rows.shape[0]
        got = rows.oindex[idx] if hasattr(rows, "oindex") else rows[idx]     # zarr / dask / h5py
        return np.asarray(got, dtype=np.float64), rows.shape[0]
    if iter(rows) is rows:
        raise UserError("knn_recall reads the rows twice (the sampled rows, then the search): pass an array, or "
                        "an iterable of row chunks that can be iterated again (a list, not a generator)")
    out, n, d = [], 0, None
    for r0, block in _chunks(rows, chunk_rows):
        n = r0 + block.shape[0]
        d = block.shape[1] if d is None else d
        if block.shape[1] != d:
            raise UserError(f"row chunk at row {r0} has shape {block.shape}, expected (rows, {d})")
        lo, hi = np.searchsorted(idx, [r0, n])
        out.append(np.asarray(block[idx[lo:hi] - r0], dtype=np.float64))
    if d is None:
        raise UserError("knn_recall got no rows")
    return np.concatenate(out) if out else np.empty((0, d)), n


def _check(n, idx, k, self_included, approx):
    """One-line errors for a sample, k or lists that do not fit n rows."""
    if idx.size == 0:
        raise UserError("the sample of rows is empty")
    if idx.size > n:
        raise UserError(f"cannot sample m={idx.size} of n={n} rows (need m <= n)")
    if idx[0] < 0 or idx[-1] >= n:
        raise UserError(f"sampled row indices must lie in [0, {n}), got {idx[0]}..{idx[-1]}")
    if np.any(idx[1:] == idx[:-1]):
        raise UserError("sampled row indices must be distinct")
    most = n if self_included else n - 1
    if not 1 <= k <= most:
        which = "the rows" if self_included else "the rows other than the row itself"
        raise UserError(f"k={k} must be between 1 and {most} ({which})")
    if approx is not None and approx.size and approx.max() >= n:
        raise UserError(f"approximate neighbour ids must be < n={n}, got {approx.max()}")


# -- the exact lists and the recall ------------------------------------------------------------------------------


def _stream(rows, sample, k, self_included, chunk_rows, approx=None):
    """One pass over the rows: the exact lists of the sampled rows and (with ``approx``) the squared distances
    of the approximate lists' neighbours.  Returns ``(top_i, top_d, approx_d2 or None, n)`` in sample order."""
    idx = np.asarray(sample, dtype=np.int64)
    if idx.ndim != 1:
        raise UserError(f"the sample must be a 1-D array of row indices, got shape {idx.shape}")
    if not 1 <= int(chunk_rows):
        raise UserError(f"chunk_rows must be >= 1, got {chunk_rows}")
    order = np.argsort(idx, kind="stable")
    sidx = idx[order]
    if _is_array(rows):   # n is known: check before reading anything
        _check(rows.shape[0], sidx, k, self_included, approx)
    elif sidx.size and sidx[0] < 0:
        raise UserError(f"sampled row indices must lie in [0, n), got {sidx[0]}")
    Q, n = _take(rows, sidx, int(chunk_rows))
    if Q.shape[0] != sidx.size:   # an iterable's sample beyond its last row
        raise UserError(f"sampled row indices must lie in [0, {n}), got up to {sidx[-1]}")
    if not np.isfinite(Q).all():
        bad = sidx[np.flatnonzero(~np.isfinite(Q).all(axis=1))[0]]
        raise UserError(f"sampled row {bad} has NaN or infinite values")
    _check(n, sidx, k, self_included, approx)
    m, d = Q.shape
    Q32 = Q.astype(np.float32)
    qq = np.einsum("ij,ij->i", Q, Q).astype(np.float32)
    # |fl32(qq + bb - 2 q.b) - true| <= (2d + 6) u (qq + bb) for any summation order (q.b's error <= d u |q||b|,
    # 2 |q||b| <= qq + bb; the norms' and the two additions' roundings); twice that, for safety
    coef = np.float32(2 * (2 * d + 8) * _U32)
    top_d = np.full((m, k), np.inf)
    top_i = np.full((m, k), -1, dtype=np.int64)
    if approx is not None:   # the approximate lists' entries, sorted by neighbour id: a range of them per chunk
        A = approx[order]
        flat = A.ravel()
        valid = np.flatnonzero(flat >= 0)
        by_id = valid[np.argsort(flat[valid], kind="stable")]
        ids, qrow = flat[by_id], by_id // A.shape[1]
        ad2 = np.full(flat.size, np.inf)
    qb = max(1, TILE_BYTES // (4 * max(1, int(chunk_rows))))        # sampled rows per tile
    buf = None   # one score buffer for every tile: a fresh 100 MB array per chunk costs its page faults each time
    seen = 0
    for r0, B in _chunks(rows, int(chunk_rows)):
        if B.ndim != 2 or B.shape[1] != d:
            raise UserError(f"row chunk at row {r0} has shape {B.shape}, expected (rows, {d})")
        B = np.ascontiguousarray(B)
        if B.dtype not in (np.float32, np.float64):   # integers (uint8 pixels), float16: the kernels' types
            B = B.astype(np.float64)
        B32 = B.astype(np.float32, copy=False)
        bb = np.einsum("ij,ij->i", B32, B32, dtype=np.float64).astype(np.float32)
        if not np.isfinite(bb).all():   # a NaN would fail every comparison of the screen: never a neighbour
            raise UserError(f"row {r0 + int(np.flatnonzero(~np.isfinite(bb))[0])} has NaN or infinite values")
        bb_max = np.float32(bb.max()) if bb.size else np.float32(0)
        if buf is None or buf.size < min(m, qb) * B.shape[0]:
            buf = np.empty(min(m, qb) * B.shape[0], np.float32)
        for q0 in range(0, m, qb):
            G = buf[:min(qb, m - q0) * B.shape[0]].reshape(-1, B.shape[0])
            np.matmul(Q32[q0:q0 + qb], B32.T, out=G)                  # BLAS sgemm: the 2 m n d flops
            _merge_chunk(G, qq[q0:q0 + qb], bb, bb_max, coef, Q[q0:q0 + qb], B, r0, sidx[q0:q0 + qb],
                         not self_included, top_d[q0:q0 + qb], top_i[q0:q0 + qb])
        if approx is not None:
            lo, hi = np.searchsorted(ids, [r0, r0 + B.shape[0]])
            if hi > lo:
                _pair_sqdist(Q, qrow[lo:hi], B, ids[lo:hi] - r0, ad2, by_id[lo:hi])
        seen = r0 + B.shape[0]
    if seen != n:
        raise UserError(f"the row chunks hold {seen} rows, the first pass {n}: an iterable must give the same rows")
    back = np.empty_like(order)
    back[order] = np.arange(order.size)
    ad2 = None if approx is None else ad2.reshape(approx.shape)[back]
    return top_i[back], top_d[back], ad2, n


def exact_sample(rows, sample, k, *, self_included=False, chunk_rows=CHUNK_ROWS):
    """Exact k nearest rows of each sampled row, by one streamed pass over all n rows.

    Parameters
    ----------
    rows : ndarray (n, d), zarr / dask / h5py array, or an iterable of (rows, d) chunks
        An iterable is read twice (the sampled rows first), so it must not be a one-shot generator.
    sample : int array (m,)
        Distinct row indices.
    k : int
        Neighbours per sampled row.
    self_included : bool
        Count the row itself (distance 0) among its k; else its k nearest others.
    chunk_rows : int
        Rows per chunk of the stream (rounded to whole storage chunks of a zarr array): the answer does not
        depend on it.

    Returns
    -------
    indices : int64 (m, k), sqdist : float64 (m, k)
        In the sample's order, each row sorted by (float64 squared distance, index).
    """
    ind, d2, _, _ = _stream(rows, sample, int(k), bool(self_included), chunk_rows)
    return ind, d2


def knn_recall(rows, approx, sample, *, k=None, self_included=None, rtol=RTOL, chunk_rows=CHUNK_ROWS):
    """recall@k of the approximate lists ``approx`` (m, k) of the rows ``sample`` (m,), against their exact lists.

    A returned neighbour is correct when its float64 distance is at most ``(1 + rtol)`` times the exact k-th
    distance (ties and float32 near-ties are not misses; see the module docstring); each distinct id counts once
    and -1 is a miss.  ``k`` defaults to the lists' width and must equal it.  ``self_included``: whether the
    lists count each row itself (the kNN graph's convention: the row first); None detects it (every list
    starting with its own row).  ``rows`` and ``chunk_rows`` as in :func:`exact_sample`; one pass over the rows.

    Returns the mean over the sample of (correct neighbours) / k, a float in [0, 1].
    """
    A = np.asarray(approx)
    idx = np.asarray(sample)
    if A.ndim != 2 or idx.ndim != 1 or A.shape[0] != idx.shape[0]:
        raise UserError(f"approx must be (m, k) lists of the m sampled rows; got approx {A.shape}, "
                        f"sample {idx.shape}")
    if not (np.issubdtype(A.dtype, np.integer) and np.issubdtype(idx.dtype, np.integer)):
        raise UserError(f"approx and sample must hold integer row indices, got {A.dtype} and {idx.dtype}")
    kk = A.shape[1]
    if k is not None and int(k) != kk:
        raise UserError(f"k={k} but the approximate lists have {kk} neighbours per row")
    if kk < 1 or A.shape[0] == 0:
        raise UserError(f"approx must hold at least one list of at least one neighbour, got shape {A.shape}")
    if A.min() < -1:
        raise UserError(f"approximate neighbour ids must be >= 0 (or -1 for none), got {A.min()}")
    A = A.astype(np.int64)
    idx = idx.astype(np.int64)
    if self_included is None:
        self_included = bool(np.all(A[:, 0] == idx))
    _, top_d, ad2, n = _stream(rows, idx, kk, bool(self_included), chunk_rows, approx=A)
    # the test on squared distances: d^2 <= ((1 + rtol) d_k)^2
    ok = (ad2 <= top_d[:, -1:] * (1.0 + rtol) ** 2) & (A >= 0)
    if not self_included:
        ok &= A != idx[:, None]                 # the row itself is not one of its k nearest others
    S = np.sort(np.where(ok, A, -1), axis=1)    # each distinct id once
    hits = ((S[:, 1:] != S[:, :-1]) & (S[:, 1:] >= 0)).sum(axis=1) + (S[:, 0] >= 0)
    return float(np.mean(hits / kk))
