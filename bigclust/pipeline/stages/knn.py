"""The kNN affinity stage in row chunks, resumable after a ``kill -9``.

For large n the neighbour search is the longest stage (quadratic for an exact
search).  Here the rows are cut into chunks of ``[affinity] knn_chunk_rows``;
each chunk's neighbour lists are one task (on the local machine, or on the
workers of a ``dask.distributed`` cluster through ``--scheduler``) which
writes them to a scratch zarr group of the store, then drops a marker file
for the chunk.  The scratch group lives in the store's ``work`` folder, as ``affinity-<key>``
(not under ``tmp/``, which the store empties of dead writers' leftovers), so
a run killed in this stage leaves every finished chunk and its marker; the
same command then computes only the chunks without a marker.  When all
chunks are there the CSR kernel is assembled (:func:`bigclust.algo.affinity.kernel_from_neighbors`),
committed atomically with the neighbour lists, and the scratch group removed.

A chunk is written before its marker (an atomic rename), so a chunk cut off
mid-write has no marker and is recomputed.  The scratch group records n, k
and the chunk size; a resume with other values starts afresh.

The exact search is one function, :func:`neighbors_of_rows`.  With
``[affinity] knn = "ivf"`` the search is approximate (:mod:`bigclust.algo.knn.ivf`):
the k-means partition of the rows into cells is computed once, here, and kept
in the scratch group (behind a marker) so that a resume reuses it; a chunk is
then a run of consecutive cells holding about ``knn_chunk_rows`` rows, each
cell's rows searched exactly against the rows of its nearest cells, and each
chunk writes arrays of its own (its rows are scattered over X).  The IVF lists
do not depend on the chunk size: the same as :func:`bigclust.algo.knn.ivf.knn_ivf_lists`.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from bigclust.pipeline.store import Store, read_matrix, write_csr, write_dense


def neighbors_of_rows(X, r0: int, r1: int, k: int):
    """The k nearest rows of X (Euclidean, the row itself included) of each row ``r0:r1``.

    Exact blocked search (:func:`bigclust.algo.knn.knn_exact`: float32 GEMM tiles
    and a Numba top-k per row, never an (r1 - r0) x n matrix).  Returns
    ``(ind int64, dist)`` of shape (r1 - r0, k); the caller recomputes and
    orders the distances itself.
    """
    from bigclust.algo.knn import knn_exact

    ind, d2 = knn_exact(X, k, queries=X[r0:r1])
    return ind, np.sqrt(d2)


def _exact_order(X, ind, r0):
    """Distances recomputed per pair in float64 (so they do not depend on the search's tiling), rows
    sorted by (distance, index), each row's own point first."""
    from bigclust.algo.affinity import self_first

    Q = np.asarray(X[r0:r0 + ind.shape[0]], dtype=np.float64)
    dist = np.empty(ind.shape)
    for j in range(ind.shape[1]):  # one neighbour column at a time: (rows x d) temporaries only
        diff = np.asarray(X[ind[:, j]], dtype=np.float64) - Q
        dist[:, j] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    order = np.lexsort((ind, dist), axis=-1)
    ind = np.take_along_axis(ind, order, axis=1)
    dist = np.take_along_axis(dist, order, axis=1)
    return self_first(ind, dist, r0)


def chunk_bounds(n: int, chunk_rows: int):
    """``(i, row0, row1)`` of every chunk."""
    return [(i, r0, min(n, r0 + chunk_rows)) for i, r0 in enumerate(range(0, n, chunk_rows))]


def _chunk_task(X, r0, r1, k, work, i):
    """One chunk: search, write its rows to the scratch arrays, then its marker; returns (i, seconds)."""
    import zarr

    t0 = time.perf_counter()
    ind, _ = neighbors_of_rows(X, r0, r1, k)
    ind, dist = _exact_order(X, np.asarray(ind, dtype=np.int64), r0)
    g = zarr.open_group(str(work), mode="r+")
    g["ind"][r0:r1] = ind
    g["dist"][r0:r1] = dist
    done = Path(work) / "done"
    tmp = done / f".{i}.{os.getpid()}"
    tmp.write_text(f"{r0} {r1} {time.perf_counter() - t0:.3f}\n")
    os.replace(tmp, done / str(i))  # the marker appears only once the rows are written
    return i, time.perf_counter() - t0


def _open_work(work: Path, n, k, chunk_rows, ivf=None):
    """The scratch group, reused when it was made for the same (n, k, chunk rows[, IVF settings]); else afresh.

    ``ivf``: ``{"cells", "probe", "seed"}`` of an IVF search, whose chunks
    write arrays of their own (``part<i>_*``) instead of rows of ``ind`` / ``dist``.
    """
    import zarr

    want = {"n": int(n), "k": int(k), "chunk_rows": int(chunk_rows)}
    if ivf is not None:
        want |= {"search": "ivf"} | {key: int(v) for key, v in ivf.items()}
    if (work / "zarr.json").exists():
        g = zarr.open_group(str(work), mode="r+")
        if {key: g.attrs.get(key) for key in want} == want and (ivf is not None or ("ind" in g and "dist" in g)):
            return g
        shutil.rmtree(work)
    work.parent.mkdir(parents=True, exist_ok=True)
    g = zarr.open_group(str(work), mode="w")
    g.attrs.update(want)
    if ivf is None:
        g.create_array("ind", shape=(n, k), chunks=(chunk_rows, k), dtype=np.int64, fill_value=-1)
        g.create_array("dist", shape=(n, k), chunks=(chunk_rows, k), dtype=np.float64, fill_value=0)
    (work / "done").mkdir(exist_ok=True)
    return g


def _ivf_partition(X, g, work: Path, ivf, log):
    """The IVF partition (cell of every row, probe lists) of the scratch group, computed once.

    Written before its marker ``partition`` (an atomic rename), so a run killed
    while writing it computes it again, and a resume reuses it: the cells a
    finished chunk searched are the cells the remaining chunks search.
    """
    from bigclust.algo.knn.ivf import ivf_partition

    mark = work / "partition"
    if not mark.exists():
        t0 = time.perf_counter()
        cent, cell, probes = ivf_partition(X, ivf["cells"], ivf["probe"], random_state=ivf["seed"])
        for name, a in (("centroids", cent), ("cell", cell), ("probes", probes)):
            g.create_array(name, shape=a.shape, dtype=a.dtype, overwrite=True)[...] = a
        tmp = work / f".partition.{os.getpid()}"
        tmp.write_text(f"{time.perf_counter() - t0:.3f}\n")
        os.replace(tmp, mark)
        log(f"  kNN (ivf): {ivf['cells']} cells, {ivf['probe']} probed, partition {time.perf_counter() - t0:.1f} s")
    return np.asarray(g["cell"][...]), np.asarray(g["probes"][...])


def _ivf_task(X, order, off, probes, c0, c1, k, work, i):
    """One IVF chunk (cells c0:c1): search, write its rows and lists as arrays of its own, then its marker."""
    import zarr

    from bigclust.algo.knn.ivf import search_cells

    t0 = time.perf_counter()
    rows, ind, dist = search_cells(X, k, order, off, probes, range(c0, c1))
    g = zarr.open_group(str(work), mode="r+")
    for name, a in (("rows", rows), ("ind", ind), ("dist", dist)):
        g.create_array(f"part{i}_{name}", shape=a.shape, dtype=a.dtype, overwrite=True)[...] = a
    done = Path(work) / "done"
    tmp = done / f".{i}.{os.getpid()}"
    tmp.write_text(f"cells {c0} {c1} {time.perf_counter() - t0:.3f}\n")
    os.replace(tmp, done / str(i))
    return i, time.perf_counter() - t0


def finished_chunks(work: Path) -> set[int]:
    """Chunks whose marker exists."""
    d = Path(work) / "done"
    return {int(f.name) for f in d.iterdir() if f.name.isdigit()} if d.exists() else set()


def _say(msg):
    print(msg, file=sys.stderr, flush=True)


def knn_chunked(store_path, key, attrs, p, *, client=None, log=_say, **_):
    """The kNN affinity of stage ``affinity/<key>``, its neighbour search in resumable row chunks.

    ``p`` is the stage's :class:`bigclust.pipeline.stages.AffinityParams` (``knn_chunk_rows`` > 0).
    With a ``dask.distributed`` ``client`` every missing chunk is a task on
    the cluster (X is sent to every worker once); without one the chunks run
    here one after the other (the search is BLAS-parallel itself).  The stage's
    attributes say how many chunks were computed by this run and how many
    were found finished: ``knn_chunks`` = [total, computed, reused].
    """
    from bigclust.algo.affinity import kernel_from_neighbors

    store = Store(store_path)
    X = np.ascontiguousarray(read_matrix(store.open(p.src, p.input), "X"))
    if hasattr(X, "toarray"):
        X = np.ascontiguousarray(X.toarray())
    n, k, c = X.shape[0], int(p.n_neighbors), int(p.knn_chunk_rows)
    work = Path(store_path) / "work" / f"affinity-{key}"
    ivf = None
    if p.search == "ivf":
        from bigclust.algo.knn.ivf import cell_groups, cell_order, resolve

        cells, probe = resolve(n, p.ivf_cells, p.ivf_probe)
        ivf = {"cells": cells, "probe": probe, "seed": int(p.seed or 0)}
    g = _open_work(work, n, k, c, ivf)
    t0 = time.perf_counter()
    if ivf is None:
        chunks = chunk_bounds(n, c)
        task, args = _chunk_task, (X,)
    else:  # a chunk = consecutive cells holding about c rows; the partition is made once, here
        cell, probes = _ivf_partition(X, g, work, ivf, log)
        order, off = cell_order(cell, ivf["cells"])
        chunks = [(i, c0, c1) for i, (c0, c1) in enumerate(cell_groups(off, c))]
        task, args = _ivf_task, (X, order, off, probes)
    have = finished_chunks(work)
    todo = [ch for ch in chunks if ch[0] not in have]
    log(f"  kNN: {len(chunks)} chunks of about {c} rows, {len(have)} finished earlier, {len(todo)} to compute")
    computed = []
    if client is not None and todo:
        from distributed import as_completed
        sent = [client.scatter(a, broadcast=True, hash=False) for a in args]
        futures = [client.submit(task, *sent, a, b, k, str(work), i, pure=False) for i, a, b in todo]
        for fut in as_completed(futures):
            i, sec = fut.result()
            computed.append(i)
            log(f"  kNN chunk {i + 1}/{len(chunks)} done ({sec:.1f} s; {len(have) + len(computed)}/{len(chunks)})")
    else:
        for i, a, b in todo:
            _, sec = task(*args, a, b, k, work, i)
            computed.append(i)
            log(f"  kNN chunk {i + 1}/{len(chunks)} done ({sec:.1f} s; {len(have) + len(computed)}/{len(chunks)})")
    search_seconds = time.perf_counter() - t0
    missing = set(range(len(chunks))) - finished_chunks(work)
    if missing:  # pragma: no cover - a task that returned without its marker
        raise RuntimeError(f"kNN chunks {sorted(missing)[:5]} have no completion marker")
    if ivf is None:
        ind, dist = g["ind"][...], g["dist"][...]
    else:
        ind, dist = np.empty((n, k), np.int64), np.empty((n, k))
        for i, _, _ in chunks:
            rows = g[f"part{i}_rows"][...]
            ind[rows], dist[rows] = g[f"part{i}_ind"][...], g[f"part{i}_dist"][...]
    K, gamma = kernel_from_neighbors(ind, dist, k, p.gamma, dtype=np.dtype(p.dtype), return_gamma=True)
    with store.write("affinity", key, attrs) as out:
        write_csr(out, "K", K)
        write_dense(out, "neighbors", ind, chunk_rows=c)
        write_dense(out, "distances", dist, chunk_rows=c)
        out.attrs.update({"knn_chunks": [len(chunks), len(computed), len(chunks) - len(computed)],
                          "knn_chunks_computed": sorted(computed), "knn_search_seconds": search_seconds,
                          "nnz": int(K.nnz), "gamma_used": float(gamma)})
    shutil.rmtree(work, ignore_errors=True)
