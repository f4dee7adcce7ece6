"""Out-of-core normalisation: K and G live in zarr, every iteration streams row blocks.

When ``n^2`` entries do not fit ``max_memory``, the in-memory solvers of
:mod:`bigclust.normalize` cannot hold K.  Here K (read only) and the iterate
(G for BBS, P for Sinkhorn) are zarr arrays chunked by rows; each iteration
reads every row block once, runs the same Numba kernel as the in-memory solver
on it, and (for BBS) writes it back.  Only length-``n`` vectors stay in memory
between blocks, so memory is bounded by a few blocks whatever ``n``
(:func:`plan_rows`, DESIGN.md 3.7).

Why the results equal the in-memory ones bit for bit: every kernel works row by
row from the *full* vectors (row sums ``r`` and total ``S`` for BBS, ``d`` for
Sinkhorn), so a row's new values do not depend on which block it was in, and
the small per-iteration state is reduced on the driver in the same order as in
memory.  Alg. 1's affine step needs the row sums of the whole *previous* G;
they are collected in the same pass that writes the new G, so one iteration is
exactly one read and one write of G.

Two ways to run the blocks (DESIGN.md 3.3, one level of parallelism):

* ``client=None``: blocks in turn in this process with the ``prange`` kernels;
  a reader thread prefetches the next block and a writer thread writes the
  previous one, so I/O overlaps the kernel (three blocks in flight).
* a ``dask.distributed`` client: one task per row block per iteration; the task
  opens its block from the (shared-file-system) store, runs the serial
  ``nogil`` kernel, writes its rows back and returns its row sums.  Blocks are
  whole chunks of the written array, so no two tasks ever write one chunk.
"""
from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .errors import DataError, UserError
from .normalize import NormalizeConvergenceWarning, NormalizeInfo

#: rows sampled (evenly spaced) for the streaming symmetry check
N_SYMMETRY_ROWS = 16


def _nb():
    from . import normalize_numba

    return normalize_numba


# -- planning ------------------------------------------------------------------------


def parse_memory(max_memory) -> int:
    """Bytes from an int or a string such as ``"1GB"`` / ``"512 MiB"``."""
    if isinstance(max_memory, str):
        from dask.utils import parse_bytes

        try:
            max_memory = parse_bytes(max_memory)
        except ValueError as e:
            raise UserError(f"max_memory: cannot read {max_memory!r} as a size ({e})") from None
    if isinstance(max_memory, bool) or not isinstance(max_memory, (int, np.integer)) or max_memory <= 0:
        raise UserError(f"max_memory must be a positive number of bytes or a size string, got {max_memory!r}")
    return int(max_memory)


def plan_rows(n, itemsize, max_memory, n_buffers=3) -> int:
    """Rows per block so that ``n_buffers`` blocks of ``rows x n`` items fit ``max_memory``.

    Parameters
    ----------
    n : int
        Row length (the matrix is n x n).
    itemsize : int
        Bytes per entry (4 for float32, 8 for float64).
    max_memory : int or str
        Budget in bytes (or a size string, ``"1GB"``).
    n_buffers : int
        Blocks alive at once: the streaming loop holds the block being
        computed, the next one being read and the previous one being written.

    Returns
    -------
    int
        ``min(n, max_memory // (n_buffers * n * itemsize))``.

    Raises
    ------
    UserError
        If the budget does not hold ``n_buffers`` single rows.
    """
    budget = parse_memory(max_memory)
    if n < 1 or itemsize < 1 or n_buffers < 1:
        raise UserError(f"plan_rows needs n, itemsize, n_buffers >= 1 (got {n}, {itemsize}, {n_buffers})")
    row_bytes = n * itemsize
    rows = budget // (n_buffers * row_bytes)
    if rows < 1:
        raise UserError(f"max_memory={budget} bytes cannot hold {n_buffers} rows of {row_bytes} bytes "
                        f"(n={n}); give at least {n_buffers * row_bytes} bytes")
    return int(min(n, rows))


def row_blocks(n, chunk_rows, rows):
    """``(row0, row1)`` pairs covering ``0..n``: whole chunks, at most ``rows`` rows (>= one chunk)."""
    step = max(1, rows // chunk_rows) * chunk_rows
    return [(r0, min(n, r0 + step)) for r0 in range(0, n, step)]


def _blocks(A, rows):
    if A.chunks[0] > rows:
        warnings.warn(f"the array's chunks hold {A.chunks[0]} rows but max_memory allows {rows} rows per "
                      f"block: every block is one chunk, over the memory budget; rechunk to <= {rows} rows",
                      RuntimeWarning, stacklevel=3)
    return row_blocks(A.shape[0], A.chunks[0], rows)


def create_like(K, group, name, dtype=None):
    """An uncompressed zarr array in ``group`` with K's shape and chunks (the G or P to write).

    Uncompressed because kernel values hardly compress and every iteration
    would pay the codec twice.
    """
    return group.create_array(name, shape=K.shape, chunks=K.chunks, dtype=np.dtype(dtype or K.dtype),
                              compressors=None, fill_value=0)


def _check_square(A, what):
    if not (hasattr(A, "chunks") and hasattr(A, "shape")) or len(A.shape) != 2 or A.shape[0] != A.shape[1]:
        raise DataError(f"{what} must be a square 2-D zarr array, got {type(A).__name__} "
                        f"of shape {getattr(A, 'shape', None)}")
    if A.shape[0] == 0:
        raise DataError(f"{what} is empty")


def _check_out(K, out, what, client):
    _check_square(out, what)
    if out.shape != K.shape:
        raise DataError(f"{what} has shape {out.shape}, K has {K.shape}")
    if np.dtype(out.dtype) not in (np.float32, np.float64):
        raise UserError(f"{what} must be float32 or float64, got {out.dtype}")
    if out is K or (str(out.store) == str(K.store) and out.path == K.path):
        raise UserError(f"{what} must be another array than K (K is read only)")
    if client is not None and type(out.store).__name__ == "MemoryStore":
        raise UserError(f"{what} is in an in-memory zarr store, which Dask workers cannot reach; "
                        "use a store on a shared file system")


# -- the streaming loop ----------------------------------------------------------------


def _read(A, r0, r1, dtype, buf=None):
    """Rows ``r0:r1`` of A as a C-contiguous ``dtype`` array, decoded into ``buf`` when given.

    Reading into a reused buffer matters: a fresh block-sized array is
    page-faulted in on every read (the allocator hands large blocks back to
    the system), which costs about as much as the read itself.
    """
    if buf is not None and np.dtype(A.dtype) == dtype:
        from zarr.core.buffer import default_buffer_prototype

        view = buf[:r1 - r0]
        A.get_basic_selection(slice(r0, r1), out=default_buffer_prototype().nd_buffer.from_numpy_array(view))
        return view
    return np.ascontiguousarray(A[r0:r1], dtype=dtype)


def _reader(src, blocks, dtype):
    """``read(i, buf)`` for :func:`_stream`: decode block i into ``buf`` (allocated on first use)."""
    shape = (max(r1 - r0 for r0, r1 in blocks), src.shape[1])

    def read(i, buf):
        if buf is None or buf.shape != shape or buf.dtype != dtype:
            buf = np.empty(shape, dtype=dtype)
        return buf, _read(src, *blocks[i], dtype, buf)

    return read


def _stream(blocks, read, compute, write=None, ring=None):
    """Run ``compute(i, block)`` over all blocks, prefetching one and writing behind one.

    ``read(i, buf)`` returns ``(buf, block)``: the (possibly new) buffer and
    the block read into it.  ``compute`` returns the array to hand to
    ``write(i, array)`` (often the block itself, updated in place).  At most
    three blocks are alive -- the one computed, the next being read and the
    previous being written (``plan_rows``'s ``n_buffers=3``) -- so the three
    buffers of ``ring`` are used in turn and kept for the next call: block
    ``i + 1`` reuses the slot of block ``i - 2``, whose write has finished.
    """
    ring = [None, None, None] if ring is None else ring

    def read_slot(i):
        ring[i % 3], blk = read(i, ring[i % 3])
        return blk

    with ThreadPoolExecutor(1) as reader, ThreadPoolExecutor(1) as writer:
        nxt = reader.submit(read_slot, 0)
        pending = None
        for i in range(len(blocks)):
            buf = nxt.result()
            if i + 1 < len(blocks):
                nxt = reader.submit(read_slot, i + 1)
            out = compute(i, buf)
            del buf
            if write is not None:
                if pending is not None:
                    pending.result()
                pending = writer.submit(write, i, out)
            del out
        if pending is not None:
            pending.result()


class _Scan:
    """Checks made while the first pass streams K: finite, maybe >= 0, and symmetric on sampled rows.

    A full symmetry check would need column blocks (a read of all of K per
    block); comparing ``N_SYMMETRY_ROWS`` whole rows with the same columns
    costs two ``n x 16`` arrays and catches a K that is not symmetric at all.
    """

    def __init__(self, n):
        self.idx = np.unique(np.linspace(0, n - 1, min(n, N_SYMMETRY_ROWS)).astype(np.int64))
        self.cols = np.empty((n, self.idx.size))
        self.rows = np.empty((self.idx.size, n))
        self.scale = np.finfo(np.float64).tiny

    def add(self, part):
        r0, r1, cols, rows, scale = part
        self.cols[r0:r1] = cols
        sel = (self.idx >= r0) & (self.idx < r1)
        self.rows[sel] = rows
        self.scale = max(self.scale, scale)

    def finish(self, dtype):
        asym = float(np.abs(self.cols.T - self.rows).max())
        if asym > 64 * np.finfo(dtype).eps * self.scale:
            raise DataError(f"K is not symmetric (max |K - K^T| = {asym:.3g} on sampled rows)")


def _scan_part(blk, r0, idx, nonneg, what, rowsums):
    """Per-block part of :class:`_Scan` (in-process or in a task); no block-sized temporaries.

    A non-finite entry makes its row sum non-finite, so only such rows are searched.
    """
    for i in np.flatnonzero(~np.isfinite(rowsums)):
        bad = np.flatnonzero(~np.isfinite(blk[i]))
        where = f"entry at ({r0 + i}, {bad[0]})" if bad.size else f"row sum in row {r0 + i} (overflow)"
        raise DataError(f"K has a non-finite {where}; {what} needs a finite K")
    lo, hi = float(blk.min()), float(blk.max())
    if nonneg and lo < 0:
        i, j = np.unravel_index(np.argmin(blk), blk.shape)
        raise DataError(f"K has negative entries ({lo:.3g} at ({r0 + i}, {j})); {what} needs K >= 0")
    r1 = r0 + blk.shape[0]
    mine = idx[(idx >= r0) & (idx < r1)] - r0
    return r0, r1, blk[:, idx].astype(np.float64), blk[mine].astype(np.float64), max(hi, -lo)


def _codes(y, n):
    if y is None:
        return None
    y = np.asarray(y).ravel()
    if y.shape[0] != n:
        raise DataError(f"y has {y.shape[0]} labels but K has {n} rows")
    return np.unique(y, return_inverse=True)[1].astype(np.int64)


def _check_iter(n_iter, tol):
    if isinstance(n_iter, bool) or not isinstance(n_iter, (int, np.integer)) or n_iter < 0:
        raise UserError(f"n_iter must be an integer >= 0, got {n_iter!r}")
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) or not tol > 0):
        raise UserError(f"tol must be a positive number or None, got {tol!r}")
    return int(n_iter), (None if tol is None else float(tol))


def _not_converged(what, t, err, tol):
    warnings.warn(f"{what} did not converge in {t} iterations: max row-sum error {err:.3g} > tol {tol:.3g}",
                  NormalizeConvergenceWarning, stacklevel=3)


# -- block kernels and the two runners ------------------------------------------------------
#
# A block kernel ``fn(blk, row0, serial, *args) -> (result, to_write)`` works on
# one row block already in memory; it is module level so that Dask can pickle
# it.  ``serial`` picks the nogil kernel inside Dask tasks and the prange one
# in-process (one level of parallelism).


def _k_bbs_scan(blk, r0, serial, idx):
    rs = blk.sum(axis=1, dtype=np.float64)  # what the in-memory solver starts from
    return (rs, _scan_part(blk, r0, idx, False, "BBS", rs)), blk


def _k_bbs_alt(blk, r0, serial, r, S, codes):
    nb, b = _nb(), blk.shape[0]
    out = np.empty(b)
    (nb.bbs_alt_pass_serial if serial else nb.bbs_alt_pass)(blk, r, S, r0, out)
    rc = None
    if codes is not None:  # same-class sums of the new rows, for MC (no extra I/O)
        rc, rs = np.empty(b), np.empty(b)
        (nb.quality_block_serial if serial else nb.quality_block)(blk, codes, r0, rs, rc)
    return (out, rc), blk


def _k_sk_matvec(blk, r0, serial, d):
    out = np.empty(blk.shape[0])
    (_nb().sk_matvec_block_serial if serial else _nb().sk_matvec_block)(blk, d, out)
    return out, None


def _k_sk_scan(blk, r0, serial, idx):
    Kd = _k_sk_matvec(blk, r0, serial, np.ones(blk.shape[1]))[0]  # K d for d = 1, as in memory
    return (Kd, _scan_part(blk, r0, idx, True, "Sinkhorn scaling", Kd)), None


def _k_sk_form(blk, r0, serial, d, dtype):
    if serial:
        # normalize_numba.sk_form has no serial twin; these are its operations,
        # ((d_i K_ij) d_j) in float64 then one rounding, so the values agree bit for bit
        P = ((d[r0:r0 + blk.shape[0], None] * blk) * d[None, :]).astype(dtype, copy=False)
        return P.sum(axis=1, dtype=np.float64), P
    P = blk if blk.dtype == dtype else np.empty(blk.shape, dtype=dtype)  # sk_form may work in place
    out = np.empty(blk.shape[0])
    _nb().sk_form(blk, d, d, r0, P, out)
    return out, P


def _task(fn, src, dtype, dst, r0, r1, *args):
    """One Dask task: read a block, run the serial kernel, write it back, return the small result."""
    res, wbuf = fn(_read(src, r0, r1, dtype), r0, True, *args)
    if dst is not None:
        dst[r0:r1] = wbuf
    return res


def _run(client, ring, blocks, fn, src, dtype, dst, *args):
    """``fn`` over all row blocks of ``src`` (cast to ``dtype``), writing ``to_write`` into ``dst``.

    ``ring``: the driver's three reusable block buffers (in-process only).
    Returns the per-block results in block order.
    """
    if client is not None:
        # vectors go to every worker once instead of once per task
        args = [client.scatter(a, broadcast=True, hash=False) if isinstance(a, np.ndarray) else a for a in args]
        return client.gather([client.submit(_task, fn, src, dtype, dst, r0, r1, *args, pure=False)
                              for r0, r1 in blocks])
    results = [None] * len(blocks)

    def compute(i, blk):
        results[i], wbuf = fn(blk, blocks[i][0], False, *args)
        return wbuf

    def write(i, wbuf):
        dst[blocks[i][0]:blocks[i][1]] = wbuf

    _stream(blocks, _reader(src, blocks, dtype), compute, write if dst is not None else None, ring)
    return results


# -- BBS (paper 000, Alg. 1) --------------------------------------------------------------


def bbs_blocked(K, G, *, n_iter=1000, tol=None, max_memory, y=None, record_every=0, client=None,
                callback=None):
    """Alg. 1 (alternating projection) of Euclidean BBS with K and G in zarr.

    Every iteration reads each row block of G, applies
    ``G <- max(G + (1 + S/n)/n 11^T - (r 1^T + 1 r^T)/n, 0)`` with the row sums
    ``r`` and total ``S`` of the *previous* G, writes the block back and
    collects its new row sums: one read and one write of G per iteration.
    The first iteration reads K instead of G, so ``G = K`` is never copied.
    The result equals ``bbs(K, "alternating", n_iter, tol)`` in memory bit for
    bit (module docstring) when K is exactly symmetric.

    Parameters
    ----------
    K : zarr.Array, shape (n, n)
        Symmetric, finite kernel, chunked by rows.  Read only.
    G : zarr.Array, shape (n, n), float32 or float64
        Output (e.g. :func:`create_like`); its dtype is the storage type of
        the iterate.  Blocks are whole chunks of G, so chunk G in rows that
        fit the budget (and K alike, so that no chunk is read twice).
    n_iter : int
        Iterations; 0 copies K into G.
    tol : float or None
        Stop when ``max_i |sum_j G_ij - 1| <= tol`` (None: run all).
    max_memory : int or str
        Budget for the blocks in flight in this process (``"1GB"``); with a
        client it bounds each worker task as well (one block per task).
    y : array-like, optional
        Class labels: the history then has MC as well as MB.
    record_every : int
        Record ``(iteration, MB, MC)`` every that many iterations (0: never).
    client : distributed.Client, optional
        Run one task per row block on the cluster (the store must be on a
        file system the workers share).
    callback : callable, optional
        Called as ``callback(t, row_err)`` after every iteration (progress,
        timing); ``t = 0`` after the first pass, which only reads K.

    Returns
    -------
    NormalizeInfo
        ``method="bbs/alternating-ooc"``; G holds the result.
    """
    _check_square(K, "K")
    _check_out(K, G, "G", client)
    n_iter, tol = _check_iter(n_iter, tol)
    if isinstance(record_every, bool) or not isinstance(record_every, (int, np.integer)) or record_every < 0:
        raise UserError(f"record_every must be an integer >= 0, got {record_every!r}")
    n, dt = K.shape[0], np.dtype(G.dtype)
    codes = _codes(y, n)
    blocks = _blocks(G, plan_rows(n, max(dt.itemsize, np.dtype(K.dtype).itemsize), max_memory))
    scan, ring = _Scan(n), [None] * 3
    r = np.empty(n)
    parts = _run(client, ring, blocks, _k_bbs_scan, K, dt, G if n_iter == 0 else None, scan.idx)
    for (r0, r1), (rs, part) in zip(blocks, parts):
        r[r0:r1] = rs
        scan.add(part)
    scan.finish(dt)
    err, converged, t, history = float(np.abs(r - 1.0).max()), False, 0, []
    if callback is not None:
        callback(0, err)
    r_new, rc = np.empty(n), np.empty(n)
    for t in range(1, n_iter + 1):
        due = record_every > 0 and t % record_every == 0
        want_rc = due and codes is not None
        src = K if t == 1 else G
        parts = _run(client, ring, blocks, _k_bbs_alt, src, dt, G, r, float(r.sum()), codes if want_rc else None)
        for (r0, r1), (rs, rcb) in zip(blocks, parts):
            r_new[r0:r1] = rs
            if want_rc:
                rc[r0:r1] = rcb
        r, r_new = r_new, r
        err = float(np.abs(r - 1.0).max())
        if due:
            history.append((t, float(np.mean(np.abs(r - 1.0))),
                            float(np.mean(np.abs(rc - 1.0))) if want_rc else float("nan")))
        if callback is not None:
            callback(t, err)
        if tol is not None and err <= tol:
            converged = True
            break
    if tol is not None and not converged:
        _not_converged("BBS (alternating, out of core)", t, err, tol)
    return NormalizeInfo(n_iter=t, converged=converged or tol is None, row_err=err, history=history,
                         method="bbs/alternating-ooc")


# -- Sinkhorn-Knopp (symmetric) -------------------------------------------------------------


def sinkhorn_blocked(K, P_out, *, n_iter=1000, tol=None, max_memory, client=None):
    """Symmetric Sinkhorn-Knopp ``d <- sqrt(d / (K d))`` streaming K, then ``P = diag(d) K diag(d)``.

    Each iteration is one read of K (a blocked matrix-vector product); the
    row sums of the current P come free as ``d * (K d)``.  At the end P is
    formed block by block into ``P_out``.  Equals the in-memory
    ``sinkhorn(K, n_iter, tol)`` bit for bit.

    Parameters
    ----------
    K : zarr.Array, shape (n, n)
        Symmetric, finite, ``K >= 0`` with total support; read only.
    P_out : zarr.Array, shape (n, n), float32 or float64
        Output, chunked by rows (e.g. :func:`create_like`).
    n_iter : int
        Maximum iterations (passes over K).
    tol : float or None
        Stop when the max row-sum error of the current P is ``<= tol``.
    max_memory : int or str
        Budget for the blocks in flight.
    client : distributed.Client, optional
        One task per row block per pass, as in :func:`bbs_blocked`.

    Returns
    -------
    NormalizeInfo
        ``method="sk/symmetric-ooc"``, ``mu`` holds ``d``; ``row_err`` is that
        of the written P.
    """
    _check_square(K, "K")
    _check_out(K, P_out, "P_out", client)
    n_iter, tol = _check_iter(n_iter, tol)
    n = K.shape[0]
    itemsize = max(np.dtype(K.dtype).itemsize, np.dtype(P_out.dtype).itemsize)
    blocks = _blocks(P_out, plan_rows(n, itemsize, max_memory))
    kt = np.dtype(K.dtype)
    scan, ring = _Scan(n), [None] * 3
    Kd = np.empty(n)
    for (r0, r1), (out, part) in zip(blocks, _run(client, ring, blocks, _k_sk_scan, K, kt, None, scan.idx)):
        Kd[r0:r1] = out
        scan.add(part)
    scan.finish(kt)
    d, t, converged = np.ones(n), 0, False
    while True:  # the loop of normalize._scaling._symmetric, step for step
        err = float(np.abs(d * Kd - 1.0).max())
        if tol is not None and err <= tol:
            converged = True
            break
        if t == n_iter:
            break
        bad = ~(Kd > 0) | ~np.isfinite(Kd)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(f"Sinkhorn scaling broke down at iteration {t} (K d = {Kd[i]:.3g} in row {i}): "
                            "K has no total support")
        d = np.sqrt(d / Kd)
        t += 1
        for (r0, r1), out in zip(blocks, _run(client, ring, blocks, _k_sk_matvec, K, kt, None, d)):
            Kd[r0:r1] = out
    r = np.empty(n)
    parts = _run(client, ring, blocks, _k_sk_form, K, kt, P_out, d, np.dtype(P_out.dtype))
    for (r0, r1), rs in zip(blocks, parts):
        r[r0:r1] = rs
    err = float(np.abs(r - 1.0).max())
    if tol is not None and not converged:
        _not_converged("Sinkhorn (symmetric, out of core)", t, err, tol)
    return NormalizeInfo(n_iter=t, converged=converged or tol is None, row_err=err, method="sk/symmetric-ooc",
                         mu=d)


# -- spectral step out of core -----------------------------------------------------------------


def blocked_matvec_operator(P, *, max_memory=None):
    """A symmetric ``scipy.sparse.linalg.LinearOperator`` that streams row blocks of a zarr P.

    ``eigsh(blocked_matvec_operator(P), k, which="LA")`` then computes the
    spectral embedding with ``n``-length vectors in memory only.

    Parameters
    ----------
    P : zarr.Array, shape (n, n)
        Symmetric matrix chunked by rows.
    max_memory : int or str, optional
        Budget for one block (and its float64 copy in ``matmat``); default:
        one chunk of P per block.

    Returns
    -------
    LinearOperator
        float64, with attribute ``passes``: the number of sweeps over P so far.
    """
    from scipy.sparse.linalg import LinearOperator

    _check_square(P, "P")
    n = P.shape[0]
    rows = plan_rows(n, 8, max_memory, n_buffers=2) if max_memory is not None else P.chunks[0]
    blocks = _blocks(P, rows)

    class _BlockedOperator(LinearOperator):
        passes = 0

        def _matvec(self, x):
            x = np.ascontiguousarray(np.ravel(x), dtype=np.float64)
            y = np.empty(n)
            for r0, r1 in blocks:
                blk = P[r0:r1]
                if blk.dtype not in (np.float32, np.float64):
                    blk = blk.astype(np.float64)
                _nb().sk_matvec_block(np.ascontiguousarray(blk), x, y[r0:r1])
            self.passes += 1
            return y

        def _matmat(self, X):
            X = np.asarray(X, dtype=np.float64)
            Y = np.empty((n, X.shape[1]))
            for r0, r1 in blocks:
                Y[r0:r1] = np.asarray(P[r0:r1], dtype=np.float64) @ X
            self.passes += 1
            return Y

        def _adjoint(self):
            return self  # P is symmetric

    return _BlockedOperator(dtype=np.float64, shape=(n, n))
