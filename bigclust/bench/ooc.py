"""``bigclust bench ooc``: out-of-core Alg. 1 on a dense n x n kernel in zarr, seconds per iteration and peak RSS."""
from __future__ import annotations

import gc
import os
import shutil
import tempfile
import time

import numpy as np

from bigclust._util.errors import UserError
from bigclust.bench._data import load_points
from bigclust.bench._measure import GB, PeakRSS, machine, timed
from bigclust.bench.bbs import compile_kernels


def bench_ooc(n=30000, max_memory="1GB", iters=20, dtype="float64", workdir=None, chunk_bytes=16 << 20):
    """Out-of-core Alg. 1 on a dense Gaussian K of size n x n written to a temporary zarr store.

    K is built block by block from Dask (never whole in memory) into an
    uncompressed zarr array, then :func:`~bigclust.normalize.ooc.bbs_blocked`
    runs ``iters`` iterations; the peak RSS of this process is sampled every
    50 ms over them.  The store is deleted afterwards.
    """
    import dask
    import dask.array as da
    import psutil
    import zarr

    from bigclust._util.plan import consumer_rows
    from bigclust.algo.affinity import dense_kernel, kernel_block_rows
    from bigclust.algo.blocks import budget as parse_budget
    from bigclust.algo.blocks import create_like, row_blocks
    from bigclust.normalize.ooc import bbs_blocked

    dt, budget = np.dtype(dtype), parse_budget(max_memory)
    row_bytes = n * dt.itemsize
    rows = consumer_rows("normalize", n, dt.itemsize, budget)
    # chunks well below a block: Dask builds K in small tasks, and blocks (whole chunks)
    # can fill the budget closely
    chunk_rows = kernel_block_rows(n, dt.itemsize, min(rows, max(1, chunk_bytes // row_bytes)) * row_bytes)
    blocks = row_blocks(n, chunk_rows, rows)
    need = 2 * n * row_bytes
    parent = workdir or tempfile.gettempdir()
    free = shutil.disk_usage(parent).free
    if free < 1.05 * need:
        raise UserError(f"K and G need {need / GB:.1f} GB in {parent}, only {free / GB:.1f} GB free; "
                        "use --workdir on a larger disk")
    out = {**machine(), "bench": "ooc", "n": n, "dtype": dt.name, "iters": iters, "max_memory_bytes": budget,
           "rows_per_block": blocks[0][1], "n_blocks": len(blocks), "chunk_rows": chunk_rows,
           "block_bytes": blocks[0][1] * row_bytes, "store_bytes_K_plus_G": need, "disk_free_bytes_before": free,
           "workdir": parent, "kernel": "gaussian, gamma = 1"}
    folder = tempfile.mkdtemp(prefix="bigclust-bench-ooc-", dir=parent)
    try:
        def build(points):  # the points are loaded untimed (setup) and dropped when K is built
            X, _, data = points
            g = zarr.open_group(os.path.join(folder, "store.zarr"), mode="w")
            Kz = g.create_array("K", shape=(n, n), chunks=(chunk_rows, n), dtype=dt, compressors=None, fill_value=0)
            Kd = dense_kernel(X, "gaussian", 1.0, dtype=dt, block_bytes=chunk_rows * row_bytes)
            with dask.config.set(scheduler="threads"):
                da.store(Kd, Kz, lock=False)
            return g, Kz, data

        with PeakRSS() as build_mem:
            built = timed(build, setup=lambda: load_points(n))
        g, Kz, out["data"] = built.result
        out["build_seconds"] = built.median
        out["build_peak_rss_bytes"] = build_mem.peak
        G = create_like(Kz, g, "G")
        compile_kernels(dt)
        gc.collect()
        stamps = []  # the start, then the end of every pass (bbs_blocked's callback)

        def run():
            stamps.append(time.perf_counter())
            return bbs_blocked(Kz, G, n_iter=iters, max_memory=budget,
                               callback=lambda t, err: stamps.append(time.perf_counter()))

        with PeakRSS() as mem:
            ran = timed(run)
        info = ran.result
        per = np.diff(stamps)  # [first pass (reads K only), iteration 1 (reads K, writes G), ...]
        steady = per[2:] if iters > 1 else per[1:]
        out.update({"seconds_first_pass_read_K": per[0], "seconds_first_iter_K_to_G": per[1],
                    "seconds_per_iter": float(np.median(steady)), "seconds_per_iter_max": float(steady.max()),
                    "seconds_total": ran.median, "io_gbs": 2 * n * row_bytes / float(np.median(steady)) / GB,
                    "row_err": info.row_err, "rss_before_bytes": mem.start, "peak_rss_bytes": mem.peak,
                    "peak_rss_increase_bytes": mem.peak - mem.start,
                    "peak_rss_increase_over_budget": (mem.peak - mem.start) / budget,
                    "process_max_rss_bytes": PeakRSS.process_max(),
                    "page_cache_note": ("K and G together are smaller than RAM, so the page cache can hold them: "
                                        "the I/O measured is largely cached" if need < psutil.virtual_memory().total
                                        else "K and G together exceed RAM: I/O reaches the disk")})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out
