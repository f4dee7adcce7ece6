"""Row-block streaming over zarr arrays, in this process or as Dask tasks (any method family).

A 2-D zarr array chunked by rows is processed block by block: a block is one
or more *whole* chunks (:func:`row_blocks`), so no two writers ever share a
chunk.  :func:`map_blocks` runs a block function over every block and returns
the per-block results in order:

- ``client=None``: in this process, a reader thread prefetching the next block
  and a writer thread writing the previous one (:func:`stream`) -- three
  blocks alive, which is what :func:`bigclust._util.plan.block_rows` plans for;
- a ``dask.distributed`` client: one task per block, which reads its block
  from the (shared) store, runs the block function and writes its rows back.

:func:`read_rows` / :func:`write_rows` move whole chunks of uncompressed
arrays as plain file reads into reused buffers (:func:`_direct`); anything
else goes through zarr.  How many rows a block holds is decided by
:mod:`bigclust._util.plan`.
"""
from __future__ import annotations

import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bigclust._util.errors import DataError, UserError
from bigclust._util.plan import parse_bytes


def budget(max_memory) -> int:
    """Bytes from an int or a size string (``"1GB"``, ``"512 MiB"``); one-line UserError otherwise."""
    try:
        return parse_bytes(max_memory.item() if isinstance(max_memory, np.integer) else max_memory)
    except ValueError:
        raise UserError(f"max_memory must be a positive number of bytes or a size such as \"4GB\", "
                        f"got {max_memory!r}") from None


def row_blocks(n, chunk_rows, rows):
    """``(row0, row1)`` pairs covering ``0..n``: whole chunks, at most ``rows`` rows (>= one chunk)."""
    step = max(1, rows // chunk_rows) * chunk_rows
    return [(r0, min(n, r0 + step)) for r0 in range(0, n, step)]


def blocks_for(A, rows):
    """:func:`row_blocks` of A for ``rows`` rows per block (warns when one chunk is already larger)."""
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


def read_rows(A, r0, r1, dtype, buf=None):
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


def write_rows(A, r0, r1, blk):
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


def reader(src, blocks, dtype):
    """``read(i, buf)`` for :func:`stream`: block i into ``buf`` (allocated on first use)."""
    shape = (max(r1 - r0 for r0, r1 in blocks), src.shape[1])

    def read(i, buf):
        if buf is None or buf.shape != shape or buf.dtype != dtype:
            buf = np.empty(shape, dtype=dtype)
        return buf, read_rows(src, *blocks[i], dtype, buf)

    return read


def stream(blocks, read, compute, write=None, ring=None):
    """Run ``compute(i, block)`` over all blocks, prefetching one and writing behind one.

    ``read(i, buf) -> (buf, block)`` fills a (possibly new) buffer; ``compute``
    returns the array for ``write(i, array)``.  Three blocks are alive -- the
    one computed, the next being read, the previous being written (``block_rows``'s
    ``n_buffers=3``) -- so ``ring``'s three buffers serve in turn and are kept
    for the next call: block ``i + 1`` reuses block ``i - 2``'s, whose write is done.
    """
    ring = [None, None, None] if ring is None else ring

    def read_slot(i):
        ring[i % 3], blk = read(i, ring[i % 3])
        return blk

    with ThreadPoolExecutor(1) as reading, ThreadPoolExecutor(1) as writer:
        nxt = reading.submit(read_slot, 0)
        pending = None
        for i in range(len(blocks)):
            buf = nxt.result()
            if i + 1 < len(blocks):
                nxt = reading.submit(read_slot, i + 1)
            out = compute(i, buf)
            del buf
            if write is not None:
                if pending is not None:
                    pending.result()
                pending = writer.submit(write, i, out)
            del out
        if pending is not None:
            pending.result()


def _task(fn, src, dtype, dst, r0, r1, *args):
    """One Dask task: read a block, run the serial kernel, write it back, return the small result."""
    res, wbuf = fn(read_rows(src, r0, r1, dtype, np.empty((r1 - r0, src.shape[1]), dtype=dtype)), r0, True, *args)
    if dst is not None:
        write_rows(dst, r0, r1, wbuf)
    return res


def map_blocks(client, ring, blocks, fn, src, dtype, dst, *args):
    """``fn`` over the row blocks of ``src`` (read as ``dtype``); returns its results in block order.

    ``fn(block, row0, serial, *args) -> (result, to_write)``: ``serial`` is True
    inside a Dask task (use the serial ``nogil`` kernel there: one level of
    parallelism per stage); ``to_write`` is written to the same rows of
    ``dst`` unless ``dst`` is None.  ``ring``: three reusable block buffers
    (in-process runs; keep it across passes to avoid re-allocating).
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
        write_rows(dst, *blocks[i], wbuf)

    stream(blocks, reader(src, blocks, dtype), compute, write if dst is not None else None, ring)
    return results


def task_mapper(client):
    """``map_blocks(fn, args_list)`` running one Dask task per block on ``client`` (results in order)."""
    def run(fn, args_list):
        from bigclust._util.progress import gather
        return gather(client, [client.submit(fn, *args, pure=False) for args in args_list],
                      f"{getattr(fn, '__name__', 'blocks')}: blocks on the cluster")
    return run
