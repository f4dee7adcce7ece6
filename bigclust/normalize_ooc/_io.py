"""Streaming row blocks of zarr arrays: planning, direct chunk I/O, the block loop and its runners.

Blocks are whole chunks of the written array, so no two writers share a chunk;
see the package docstring for the in-process and distributed runners.
"""
from __future__ import annotations

import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..errors import DataError, UserError
from ..normalize import NormalizeConvergenceWarning

#: rows sampled (evenly spaced) for the streaming symmetry check
N_SYMMETRY_ROWS = 16


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
    """K (and ``out`` unless None) square 2-D zarr arrays; ``out`` another float array a cluster can reach."""
    for A, name in ((K, "K"), (out, what)) if out is not None else ((K, "K"),):
        if not (hasattr(A, "chunks") and hasattr(A, "shape")) or len(A.shape) != 2 or A.shape[0] != A.shape[1] \
                or A.shape[0] == 0:
            raise DataError(f"{name} must be a non-empty square 2-D zarr array, got {type(A).__name__} "
                            f"of shape {getattr(A, 'shape', None)}")
    if out is None:
        return
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


# -- the two runners ---------------------------------------------------------------------


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


