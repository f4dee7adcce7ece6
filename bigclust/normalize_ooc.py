"""Out-of-core normalisation: K and G live in zarr, every iteration streams row blocks.

When ``n^2`` entries do not fit ``max_memory``, K (read only) and the iterate
(G for BBS, P for Sinkhorn) are zarr arrays chunked by rows.  Each iteration
reads every row block once, runs the in-memory solver's Numba kernel on it and
(for BBS) writes it back; only length-``n`` vectors persist between blocks, so
memory is a few blocks whatever ``n`` (:func:`plan_rows`, DESIGN.md 3.7).

The results equal the in-memory ones bit for bit: every kernel works row by
row from the *full* vectors (``r`` and ``S`` for BBS, ``d`` for Sinkhorn), so
a row's values do not depend on its block, and the small state is reduced on
the driver as in memory.  Alg. 1's affine step needs the row sums of the whole
*previous* G; they are collected in the pass that writes the new G, so an
iteration is exactly one read and one write of G.

With ``client=None`` the blocks run in turn in this process with the ``prange``
kernels, a reader thread prefetching the next block and a writer thread writing
the previous one.  With a ``dask.distributed`` client there is one task per row
block per pass: it reads its block from the (shared) store, runs the serial
``nogil`` kernel, writes its rows back and returns its row sums.  Either way
blocks are whole chunks of the written array, so no two writers share a chunk
(one level of parallelism, DESIGN.md 3.3).
"""
from __future__ import annotations

import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
    n, itemsize : int
        Row length (the matrix is n x n) and bytes per entry.
    max_memory : int or str
        Budget in bytes (or a size string, ``"1GB"``).
    n_buffers : int
        Blocks alive at once: the streaming loop holds the block being
        computed, the next one being read and the previous one being written.

    Returns
    -------
    int
        ``min(n, max_memory // (n_buffers * n * itemsize))``; a UserError if
        that is 0.
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
    """The G or P to write: an uncompressed zarr array in ``group`` with K's shape and row chunks.

    Uncompressed because kernel values hardly compress and every iteration
    would pay the codec twice (and so that :func:`_direct` applies).
    """
    return group.create_array(name, shape=K.shape, chunks=(K.chunks[0], K.shape[1]),
                              dtype=np.dtype(dtype or K.dtype), compressors=None, fill_value=0)


def _check(K, out, what, client):
    for A, name in ((K, "K"), (out, what)):
        if not (hasattr(A, "chunks") and hasattr(A, "shape")) or len(A.shape) != 2 or A.shape[0] != A.shape[1] \
                or A.shape[0] == 0:
            raise DataError(f"{name} must be a non-empty square 2-D zarr array, got {type(A).__name__} "
                            f"of shape {getattr(A, 'shape', None)}")
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


def _direct(A):
    """``(folder, chunk_rows, fill)`` when A's chunks can be used as plain files, else None.

    True of an uncompressed zarr v3 array of full-width row chunks in a
    ``LocalStore`` (a single ``bytes`` codec, native order): each chunk file
    holds its rows in C order (the edge chunk padded to full size), so a block
    is read straight into a reused buffer and written from it.  Through zarr
    every chunk is allocated and copied, which here costs about three times
    the time and up to a block of extra memory per operation in flight.
    """
    try:
        from zarr.codecs import BytesCodec
        from zarr.storage import LocalStore

        meta, codec = A.metadata, A.metadata.codecs[0]
        if (isinstance(A.store, LocalStore) and meta.zarr_format == 3 and len(meta.codecs) == 1
                and isinstance(codec, BytesCodec) and A.chunks[1] == A.shape[1]
                and (codec.endian is None or codec.endian.value == sys.byteorder)):
            return Path(A.store.root) / A.path, A.chunks[0], meta.fill_value
    except (AttributeError, ImportError, IndexError):
        pass
    return None


def _chunk_files(A, where, r0, r1):
    """``(path, row0, row1)`` of the chunks covering rows ``r0:r1`` (which must be chunk aligned)."""
    folder, c, _ = where
    return [(folder / A.metadata.encode_chunk_key((ci, 0)), ci * c, min((ci + 1) * c, A.shape[0]))
            for ci in range(r0 // c, -(-r1 // c))]


def _aligned(where, r0, r1, n):
    return where is not None and r0 % where[1] == 0 and (r1 % where[1] == 0 or r1 == n)


def _read(A, r0, r1, dtype, buf=None):
    """Rows ``r0:r1`` of A as a C-contiguous ``dtype`` array, read into ``buf`` if :func:`_direct` allows.

    A reused buffer also saves page-faulting a fresh block in on every read.
    """
    where = _direct(A)
    if buf is None or np.dtype(A.dtype) != dtype or not _aligned(where, r0, r1, A.shape[0]):
        return np.ascontiguousarray(A[r0:r1], dtype=dtype)
    view = buf[:r1 - r0]
    for path, c0, c1 in _chunk_files(A, where, r0, r1):
        part = view[c0 - r0:c1 - r0]
        try:
            with open(path, "rb") as f:
                got = f.readinto(memoryview(part).cast("B"))
        except FileNotFoundError:  # zarr leaves chunks equal to the fill value unwritten
            part[...] = where[2]
            continue
        if got != part.nbytes:
            raise DataError(f"chunk file {path} holds {got} bytes, expected at least {part.nbytes}")
    return view


def _write(A, r0, r1, blk):
    """``A[r0:r1] = blk``, as plain file writes when :func:`_direct` allows."""
    where = _direct(A)
    if blk.dtype != np.dtype(A.dtype) or not blk.flags.c_contiguous or A.store.read_only \
            or not _aligned(where, r0, r1, A.shape[0]):
        A[r0:r1] = blk  # zarr's own path (and its read-only error)
        return
    for path, c0, c1 in _chunk_files(A, where, r0, r1):
        part = blk[c0 - r0:c1 - r0]
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(memoryview(part).cast("B"))
            missing = (where[1] - (c1 - c0)) * part.shape[1]  # the edge chunk is stored full size
            if missing:
                f.write(np.full(missing, where[2], dtype=part.dtype).tobytes())


def _reader(src, blocks, dtype):
    """``read(i, buf)`` for :func:`_stream`: block i into ``buf`` (allocated on first use)."""
    shape = (max(r1 - r0 for r0, r1 in blocks), src.shape[1])

    def read(i, buf):
        if buf is None or buf.shape != shape or buf.dtype != dtype:
            buf = np.empty(shape, dtype=dtype)
        return buf, _read(src, *blocks[i], dtype, buf)

    return read


def _stream(blocks, read, compute, write=None, ring=None):
    """Run ``compute(i, block)`` over all blocks, prefetching one and writing behind one.

    ``read(i, buf) -> (buf, block)`` fills a (possibly new) buffer; ``compute``
    returns the array for ``write(i, array)``.  Three blocks are alive -- the
    one computed, the next being read, the previous being written (``plan_rows``'s
    ``n_buffers=3``) -- so ``ring``'s three buffers serve in turn and are kept
    for the next call: block ``i + 1`` reuses block ``i - 2``'s, whose write is done.
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


def _first_pass(client, ring, blocks, fn, K, dtype, dst):
    """The first pass over K: ``fn``'s (n,) vector, and K checked finite, (maybe) >= 0 and symmetric.

    A full symmetry check would need column blocks (a read of all of K per
    block); comparing ``N_SYMMETRY_ROWS`` whole rows with the same columns
    costs two ``n x 16`` arrays and catches a K that is not symmetric at all.
    """
    n = K.shape[0]
    idx = np.unique(np.linspace(0, n - 1, min(n, N_SYMMETRY_ROWS)).astype(np.int64))
    vec, cols, rows, scale = np.empty(n), np.empty((n, idx.size)), np.empty((idx.size, n)), 0.0
    for v, (r0, r1, c, rw, sc) in _run(client, ring, blocks, fn, K, dtype, dst, idx):
        vec[r0:r1], cols[r0:r1], scale = v, c, max(scale, sc)
        rows[(idx >= r0) & (idx < r1)] = rw
    asym = float(np.abs(cols.T - rows).max())
    if asym > 64 * np.finfo(dtype).eps * max(scale, np.finfo(np.float64).tiny):
        raise DataError(f"K is not symmetric (max |K - K^T| = {asym:.3g} on sampled rows)")
    return vec


def _scan_part(blk, r0, idx, nonneg, what, rowsums):
    """Per-block part of :func:`_first_pass` (in-process or in a task); no block-sized temporaries.

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


def _check_args(n_iter, tol, record_every):
    for name, v in (("n_iter", n_iter), ("record_every", record_every)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise UserError(f"{name} must be an integer >= 0, got {v!r}")
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) or not tol > 0):
        raise UserError(f"tol must be a positive number or None, got {tol!r}")
    return int(n_iter), (None if tol is None else float(tol)), int(record_every)


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
    res, wbuf = fn(_read(src, r0, r1, dtype, np.empty((r1 - r0, src.shape[1]), dtype=dtype)), r0, True, *args)
    if dst is not None:
        _write(dst, r0, r1, wbuf)
    return res


def _run(client, ring, blocks, fn, src, dtype, dst, *args):
    """``fn`` over the row blocks of ``src`` (as ``dtype``), writing ``to_write`` into ``dst``.

    ``ring``: three reusable block buffers (in-process).  Returns the results in block order.
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
        _write(dst, *blocks[i], wbuf)

    _stream(blocks, _reader(src, blocks, dtype), compute, write if dst is not None else None, ring)
    return results


# -- BBS (paper 000, Alg. 1) --------------------------------------------------------------


def bbs_blocked(K, G, *, n_iter=1000, tol=None, max_memory, y=None, record_every=0, client=None,
                callback=None):
    """Alg. 1 (alternating projection) of Euclidean BBS with K and G in zarr.

    Each iteration reads every row block of G, applies
    ``G <- max(G + (1 + S/n)/n 11^T - (r 1^T + 1 r^T)/n, 0)`` with the row sums
    ``r`` and total ``S`` of the *previous* G, writes the block back and
    collects its new row sums.  The first iteration reads K instead of G (no
    copy of K).  G then equals the in-memory ``bbs(K, "alternating", n_iter,
    tol)`` bit for bit, for an exactly symmetric K (that solver symmetrises a
    K with round-off asymmetry first, which needs column blocks here).

    Parameters
    ----------
    K : zarr.Array, shape (n, n)
        Symmetric, finite kernel, chunked by rows (like G, so that no chunk is
        read twice).  Read only.
    G : zarr.Array, shape (n, n), float32 or float64
        Output, e.g. :func:`create_like`; its dtype is the iterate's storage
        type.  Blocks are whole chunks of G: chunk it in rows that fit.
    n_iter : int
        Iterations; 0 copies K into G.
    tol : float or None
        Stop when ``max_i |sum_j G_ij - 1| <= tol`` (None: run all).
    max_memory : int or str
        Budget for the blocks in flight (``"1GB"``); with a client, each task
        holds one block.
    y, record_every
        Class labels and the interval of the ``(iteration, MB, MC)`` history
        (0: none), as in :func:`bigclust.normalize.bbs`.
    client : distributed.Client, optional
        One task per row block on the cluster (store on a shared file system).
    callback : callable, optional
        ``callback(t, row_err)`` after every iteration, and with ``t = 0``
        after the first pass (which only reads K).

    Returns
    -------
    NormalizeInfo
        ``method="bbs/alternating-ooc"``; G holds the result.
    """
    _check(K, G, "G", client)
    n_iter, tol, record_every = _check_args(n_iter, tol, record_every)
    n, dt = K.shape[0], np.dtype(G.dtype)
    codes = None if y is None else np.unique(np.ravel(y), return_inverse=True)[1].astype(np.int64)
    if codes is not None and codes.size != n:
        raise DataError(f"y has {codes.size} labels but K has {n} rows")
    blocks = _blocks(G, plan_rows(n, max(dt.itemsize, np.dtype(K.dtype).itemsize), max_memory))
    ring = [None] * 3
    r = _first_pass(client, ring, blocks, _k_bbs_scan, K, dt, G if n_iter == 0 else None)
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

    Each iteration is one read of K (the row sums of the current P are
    ``d * (K d)``); at the end P is formed block by block into ``P_out``.
    Equals the in-memory ``sinkhorn(K, n_iter, tol)`` bit for bit.

    Parameters
    ----------
    K : zarr.Array, shape (n, n)
        Symmetric, finite, ``K >= 0`` with total support; read only.
    P_out : zarr.Array, shape (n, n), float32 or float64
        Output, chunked by rows (e.g. :func:`create_like`).
    n_iter, tol
        Maximum iterations; stop when the max row-sum error is ``<= tol``.
    max_memory, client
        As in :func:`bbs_blocked`.

    Returns
    -------
    NormalizeInfo
        ``method="sk/symmetric-ooc"``, ``mu`` holds ``d``; ``row_err`` is that
        of the written P.
    """
    _check(K, P_out, "P_out", client)
    n_iter, tol, _ = _check_args(n_iter, tol, 0)
    n, kt = K.shape[0], np.dtype(K.dtype)
    blocks = _blocks(P_out, plan_rows(n, max(kt.itemsize, np.dtype(P_out.dtype).itemsize), max_memory))
    ring = [None] * 3
    Kd = _first_pass(client, ring, blocks, _k_sk_scan, K, kt, None)
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
        Kd = np.concatenate(_run(client, ring, blocks, _k_sk_matvec, K, kt, None, d))
    r = np.concatenate(_run(client, ring, blocks, _k_sk_form, K, kt, P_out, d, np.dtype(P_out.dtype)))
    err = float(np.abs(r - 1.0).max())
    if tol is not None and not converged:
        _not_converged("Sinkhorn (symmetric, out of core)", t, err, tol)
    return NormalizeInfo(n_iter=t, converged=converged or tol is None, row_err=err, method="sk/symmetric-ooc",
                         mu=d)


# -- spectral step out of core -----------------------------------------------------------------


def blocked_matvec_operator(P, *, max_memory=None):
    """A symmetric ``scipy.sparse.linalg.LinearOperator`` streaming the row blocks of a zarr P.

    ``eigsh(blocked_matvec_operator(P), k, which="LA")`` computes the spectral
    embedding with only ``n``-length vectors (and one block) in memory.

    Parameters
    ----------
    P : zarr.Array, shape (n, n)
        Symmetric, chunked by rows.
    max_memory : int or str, optional
        Budget for the block buffer and one float64 block (``matmat``);
        default: one chunk of P per block.

    Returns
    -------
    LinearOperator
        float64, with attribute ``passes``: the sweeps over P so far.
    """
    from scipy.sparse.linalg import LinearOperator

    if not (hasattr(P, "chunks") and len(P.shape) == 2 and P.shape[0] == P.shape[1] > 0):
        raise DataError(f"P must be a non-empty square 2-D zarr array, got shape {getattr(P, 'shape', None)}")
    n = P.shape[0]
    dt = np.dtype(P.dtype) if np.dtype(P.dtype) in (np.float32, np.float64) else np.dtype(np.float64)
    blocks = _blocks(P, plan_rows(n, 8, max_memory, n_buffers=2) if max_memory is not None else P.chunks[0])
    read = _reader(P, blocks, dt)

    class _BlockedOperator(LinearOperator):
        passes, buf = 0, None

        def _sweep(self, apply):
            for i, (r0, r1) in enumerate(blocks):
                self.buf, blk = read(i, self.buf)
                apply(r0, r1, blk)
            self.passes += 1

        def _matvec(self, x):
            x, y = np.ascontiguousarray(np.ravel(x), dtype=np.float64), np.empty(n)
            self._sweep(lambda r0, r1, blk: _nb().sk_matvec_block(blk, x, y[r0:r1]))
            return y

        def _matmat(self, X):
            X, Y = np.asarray(X, dtype=np.float64), np.empty((n, X.shape[1]))
            self._sweep(lambda r0, r1, blk: Y.__setitem__(slice(r0, r1), blk.astype(np.float64) @ X))
            return Y

        def _adjoint(self):
            return self  # P is symmetric

    return _BlockedOperator(dtype=np.float64, shape=(n, n))
