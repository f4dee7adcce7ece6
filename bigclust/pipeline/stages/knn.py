"""The kNN affinity stage in row chunks, resumable after a ``kill -9``.

For large n the neighbour search is the longest stage (quadratic for an exact
search).  Here the rows are cut into chunks of ``[affinity] knn_chunk_rows``;
each chunk's neighbour lists are one task (on the local machine, or on the
workers of a ``dask.distributed`` cluster through ``--scheduler``) which
writes them to the stage's scratch group, ``work/affinity-<key>``, then drops
a marker for the chunk (:mod:`bigclust.pipeline.resumable`), so a run killed in
this stage leaves every finished chunk and its marker; the same command then
computes only the chunks without a marker.  When all chunks are there the CSR
kernel is assembled (:func:`bigclust.algo.affinity.kernel_from_neighbors`),
committed atomically with the neighbour lists, and the scratch group removed.
The scratch group records n, k and the chunk size; a resume with other values
starts afresh.

The exact search is one function, :func:`neighbors_of_rows`.  With
``[affinity] knn = "ivf"`` the search is approximate (:mod:`bigclust.algo.knn.ivf`):
the k-means partition of the rows into cells is computed once, here, and kept
in the scratch group (behind a marker) so that a resume reuses it; a chunk is
then a run of consecutive cells holding about ``knn_chunk_rows`` rows, each
cell's rows searched exactly against the rows of its nearest cells, and each
chunk writes arrays of its own (its rows are scattered over X).  The IVF lists
do not depend on the chunk size: the same as :func:`bigclust.algo.knn.ivf.knn_ivf_lists`.

With ``knn = "ivf-rows"`` (:mod:`bigclust.algo.knn.ivf_rows`, work linear in n) the
partition (two-level k-means cells, each centroid's nearest centroids, the
rows' cell order) is made once and stored the same way; X is then put in cell
order in place (no second copy) and searched in chunks of ``knn_chunk_rows``
consecutive positions, each row probing its own nearest cells (pass 0), then
refined by its neighbours' lists (passes 1..R, each reading the whole previous
pass): every pass writes rows of its own arrays ``nbr<r>`` / ``d<r>`` and
markers ``p<r>_<i>``, so a kill resumes inside the pass it cut.  The lists are
those of :func:`bigclust.algo.knn.ivf_rows.knn_ivf_rows_lists`.
"""
from __future__ import annotations

import contextlib
import shutil
import time

import numpy as np

from bigclust.pipeline import resumable
from bigclust.pipeline.store import Store, read_matrix, write_csr, write_dense


def knn_rule(p, n: int, d: int):
    """The resolved IVF settings an approximate search of n rows in d dimensions uses under ``p``, or None.

    Recorded in the instance's attributes (``knn_rule``): ``ivf_probe = 0`` ("the default rule") is left out
    of the key (:data:`bigclust.pipeline.methods.ADDED`, so that committed configs keep their hashes), and a
    stored graph made under an older default rule would otherwise be reused without a word.  The in-memory
    ``ivf-rows`` search of rows over ``PROJECT_ABOVE`` dimensions may take either rule (the projection is used
    when it holds enough variance): both are recorded.
    """
    search = p.search if p.knn_chunk_rows else p.knn
    if p.kind != "knn" or search not in ("ivf", "ivf-rows"):
        return None
    if search == "ivf":
        from bigclust.algo.knn import ivf

        C, P = ivf.resolve(n, p.ivf_cells, p.ivf_probe)
        return {"search": search, "n": int(n), "d": int(d), "cells": C, "probe": P}
    from bigclust.algo.knn import ivf_rows

    C, P, R = ivf_rows.resolve(n, p.ivf_cells, p.ivf_probe)
    rule = {"search": search, "n": int(n), "d": int(d), "cells": C, "probe": P, "refine": R}
    if not p.knn_chunk_rows and d > ivf_rows.PROJECT_ABOVE:
        rule |= {"projected_probe": p.ivf_probe or min(C, ivf_rows.PROJECTED_PROBE),
                 "projected_refine": ivf_rows.PROJECTED_REFINE}
    return rule


def check_stored_rule(store, key, p):
    """Refuse to reuse the stored kNN graph ``affinity/<key>`` when it was searched under another IVF rule.

    One line naming ``bigclust store clean --stage affinity``; an instance stored before rules were recorded
    is reused with a warning when its probes were left to the default rule (it cannot be told apart).
    """
    import warnings

    from bigclust._util.errors import UserError

    if p.kind != "knn" or (p.search if p.knn_chunk_rows else p.knn) not in ("ivf", "ivf-rows") \
            or not store.has("affinity", key):
        return
    had = store.open("affinity", key).attrs.get("knn_rule")
    if had is None:
        if not p.ivf_probe:
            warnings.warn(f"the stored kNN graph affinity/{key} of {store.path} predates recorded IVF rules: it is "
                          "reused, though the default probe rule may have changed since (recompute it with "
                          f"`bigclust store clean --stage affinity` on {store.path}, then run again)",
                          RuntimeWarning, stacklevel=2)
        return
    now = knn_rule(p, had["n"], had["d"])
    if now != dict(had):
        diff = ", ".join(f"{k}={had.get(k)} now {now.get(k)}" for k in now if had.get(k) != now.get(k))
        raise UserError(f"the stored kNN graph affinity/{key} of {store.path} was searched under another IVF rule "
                        f"({diff}); remove it with `bigclust store clean --stage affinity` and run again")


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


def _rows_task(X, r0, r1, k, work):
    """One exact chunk (rows r0:r1): search, then its rows of the scratch arrays ``ind`` / ``dist``."""
    import zarr

    ind, _ = neighbors_of_rows(X, r0, r1, k)
    ind, dist = _exact_order(X, np.asarray(ind, dtype=np.int64), r0)
    g = zarr.open_group(str(work), mode="r+")
    g["ind"][r0:r1] = ind
    g["dist"][r0:r1] = dist


def _cells_task(X, order, off, probes, c0, c1, k, work, i):
    """One IVF chunk (cells c0:c1): search, then its rows and lists as arrays of its own (``part<i>_*``)."""
    import zarr

    from bigclust.algo.knn.ivf import search_cells

    rows, ind, dist = search_cells(X, k, order, off, probes, range(c0, c1))
    g = zarr.open_group(str(work), mode="r+")
    for name, a in (("rows", rows), ("ind", ind), ("dist", dist)):
        g.create_array(f"part{i}_{name}", shape=a.shape, dtype=a.dtype, overwrite=True)[...] = a


def _rows_pass_task(Xs, source, p0, p1, k, n_probe, work, r):
    """One chunk of pass r of ``ivf-rows`` (positions p0:p1 of the cell-sorted Xs), into rows of its arrays.

    ``source``: the :class:`~bigclust.algo.knn.ivf_rows.Partition` (pass 0 probes
    each row's nearest cells), or every row's lists of pass r - 1 (refined).
    """
    import zarr

    from bigclust.algo.knn import ivf_rows

    if r == 0:
        part = ivf_rows.Partition(*source) if isinstance(source, tuple) else source   # arrays loaded from work
        ind, d2 = ivf_rows.fill_missing(Xs, *ivf_rows.search_rows(Xs, part, k - 1, p0, p1, n_probe), p0)
    else:
        ind, d2 = ivf_rows.refine_rows(Xs, source, p0, p1)
    g = zarr.open_group(str(work), mode="r+")
    g[f"nbr{r}"][p0:p1] = ind
    g[f"d{r}"][p0:p1] = d2


def _ivf_rows(box, g, work, ivf, k, c, client, log):
    """The passes of ``knn = "ivf-rows"``: partition once, the rows put in cell order, then pass 0 (probed
    cells) and the refine passes in resumable chunks.  Returns ``(order, chunks, computed)``.

    ``box``: ``[X]``, this function's to empty.  Here X is sorted in place and passed to the chunks; on a
    cluster the sorted rows are written to the scratch group once (``xs``, before its marker ``sorted``) and
    X is let go: every worker loads them (:class:`~bigclust.pipeline.resumable.Stored`), so the driver holds
    neither them nor the serialisation buffers of sending them (mnist-8m: 1.62 GB each).
    """
    from bigclust.algo.knn import ivf_rows

    X = box.pop()
    names = ("cent", "graph", "order", "off")
    if not (work / "partition").exists():
        t0 = time.perf_counter()
        part = ivf_rows.partition(X, ivf["cells"], random_state=ivf["seed"])
        for name in names:
            a = getattr(part, name)
            g.create_array(name, shape=a.shape, dtype=a.dtype, overwrite=True)[...] = a
        resumable.mark(work, "partition", f"{time.perf_counter() - t0:.3f}", folder="")
        log(f"  kNN (ivf-rows): {part.cent.shape[0]} cells, {ivf['probe']} probed per row, {ivf['refine']} "
            f"refine pass(es); partition {time.perf_counter() - t0:.1f} s")

    def stored_partition():
        return ivf_rows.Partition(*(np.asarray(g[name][...]) for name in names))

    order = None   # the cell order, for the return; on a cluster read after the passes, not held through them
    if client is None:
        part = stored_partition()
        ivf_rows.sort_rows(X, part)  # X is this stage's own copy: cell order without a second 4 n d bytes
        xs, order = X, part.order
    else:
        if not (work / "sorted").exists():   # a resume past the marker needs neither X nor the partition here
            ivf_rows.sort_rows(X, stored_partition())
            g.create_array("xs", shape=X.shape, dtype=X.dtype, chunks=(c, X.shape[1]), overwrite=True)[...] = X
            resumable.mark(work, "sorted", "", folder="")
        xs, part = resumable.Stored(work, "xs"), (*(resumable.Stored(work, name) for name in names),)
    del X
    chunks = resumable.chunk_bounds(g["order"].shape[0], c)
    computed, total = [], 0
    try:
        for r in range(ivf["refine"] + 1):
            if r == 0:
                source = part
            elif client is None:   # int32 positions: half the bytes of the lists
                source = np.asarray(g[f"nbr{r - 1}"][...]).astype(np.int32)
            else:
                source = resumable.Stored(work, f"nbr{r - 1}", np.int32)
            done = resumable.run_chunks(work, chunks, _rows_pass_task,
                                        lambda i, a, b, r=r: (a, b, k, ivf["probe"], str(work), r),
                                        shared=(xs, source), prefix=f"p{r}_", client=client, log=log,
                                        title=f"kNN pass {r}: {len(chunks)} chunks of {c} rows",
                                        what=f"kNN pass {r} chunk")
            computed += [total + i for i in done]
            total += len(chunks)
            del source
    finally:
        if client is not None:   # the rows the workers loaded: their memory back for the stages after
            with contextlib.suppress(Exception):   # a lost cluster has nothing to free; its error is the one said
                client.run(resumable.forget_stored)
        resumable.release_heap()   # the scheduler's bookkeeping of the passes' tasks (8.1M rows: 0.83 GB)
    return (np.asarray(g["order"][...]) if order is None else order), total, computed


def _rows_lists(g, order, last, k, c):
    """The final pass's lists mapped to row ids, each row's own id first, assembled in blocks of c positions."""
    from bigclust.algo.knn import ivf_rows

    n = order.size
    ind, dist = np.empty((n, k), np.int64), np.empty((n, k))
    for p0 in range(0, n, c):
        rows, i, d = ivf_rows.to_rows(order, g[f"nbr{last}"][p0:p0 + c], g[f"d{last}"][p0:p0 + c], p0)
        ind[rows], dist[rows] = i, d
    return ind, dist


def open_work(work, n, k, chunk_rows, ivf=None):
    """The scratch group, reused when it was made for the same (n, k, chunk rows[, IVF settings]); else afresh.

    ``ivf``: ``{"cells", "probe", "seed"}`` of an IVF search, whose chunks
    write arrays of their own (``part<i>_*``) instead of rows of ``ind`` / ``dist``.
    """
    want = {"n": int(n), "k": int(k), "chunk_rows": int(chunk_rows)}
    arrays = None
    if ivf is not None and "refine" in ivf:  # ivf-rows: every pass writes rows of its own arrays
        want |= {"search": "ivf-rows"} | {key: int(v) for key, v in ivf.items()}
        arrays = {}
        for r in range(ivf["refine"] + 1):
            spec = {"shape": (n, k - 1), "chunks": (chunk_rows, k - 1)}
            arrays[f"nbr{r}"] = spec | {"dtype": np.int64, "fill_value": -1}
            arrays[f"d{r}"] = spec | {"dtype": np.float64, "fill_value": 0}
    elif ivf is not None:
        want |= {"search": "ivf"} | {key: int(v) for key, v in ivf.items()}
    else:
        arrays = {"ind": {"shape": (n, k), "chunks": (chunk_rows, k), "dtype": np.int64, "fill_value": -1},
                  "dist": {"shape": (n, k), "chunks": (chunk_rows, k), "dtype": np.float64, "fill_value": 0}}
    return resumable.open_work(work, want, arrays)


def _ivf_partition(X, g, work, ivf, log):
    """The IVF partition (cell of every row, probe lists) of the scratch group, computed once.

    Written before its marker ``partition`` (beside ``done/``), so a run killed
    while writing it computes it again, and a resume reuses it: the cells a
    finished chunk searched are the cells the remaining chunks search.
    """
    from bigclust.algo.knn.ivf import ivf_partition

    if not (work / "partition").exists():
        t0 = time.perf_counter()
        cent, cell, probes = ivf_partition(X, ivf["cells"], ivf["probe"], random_state=ivf["seed"])
        for name, a in (("centroids", cent), ("cell", cell), ("probes", probes)):
            g.create_array(name, shape=a.shape, dtype=a.dtype, overwrite=True)[...] = a
        resumable.mark(work, "partition", f"{time.perf_counter() - t0:.3f}", folder="")
        log(f"  kNN (ivf): {ivf['cells']} cells, {ivf['probe']} probed, partition {time.perf_counter() - t0:.1f} s")
    return np.asarray(g["cell"][...]), np.asarray(g["probes"][...])


def knn_chunked(store_path, key, attrs, p, *, client=None, log=resumable.say, **_):
    """The kNN affinity of stage ``affinity/<key>``, its neighbour search in resumable row chunks.

    ``p`` is the stage's :class:`bigclust.pipeline.stages.AffinityParams` (``knn_chunk_rows`` > 0).
    With a ``dask.distributed`` ``client`` every missing chunk is a task on
    the cluster (X is sent to every worker once); without one the chunks run
    here one after the other (the search is BLAS-parallel itself).  The stage's
    attributes say how many chunks were computed by this run and how many
    were found finished: ``knn_chunks`` = [total, computed, reused].
    """
    store = Store(store_path)
    X = np.ascontiguousarray(read_matrix(store.open(p.src, p.input), "X"))
    if hasattr(X, "toarray"):
        X = np.ascontiguousarray(X.toarray())
    n, k, c = X.shape[0], int(p.n_neighbors), int(p.knn_chunk_rows)
    shape = X.shape
    work = resumable.work_dir(store_path, "affinity", key)
    ivf = None
    if p.search == "ivf-rows":
        from bigclust.algo.knn import ivf_rows

        cells, probe, refine = ivf_rows.resolve(n, p.ivf_cells, p.ivf_probe)
        ivf = {"cells": cells, "probe": probe, "refine": refine, "seed": int(p.seed or 0)}
    elif p.search == "ivf":
        from bigclust.algo.knn.ivf import cell_groups, cell_order, resolve

        cells, probe = resolve(n, p.ivf_cells, p.ivf_probe)
        ivf = {"cells": cells, "probe": probe, "seed": int(p.seed or 0)}
    g = open_work(work, n, k, c, ivf)
    t0 = time.perf_counter()
    if p.search == "ivf-rows":
        box = [X]
        del X   # _ivf_rows holds the only reference: X goes before the passes on a cluster (1.6 GB at 8.1M x 50)
        order, n_chunks, computed = _ivf_rows(box, g, work, ivf, k, c, client, log)
        search_seconds = time.perf_counter() - t0
        return _commit(store, key, attrs, p, list(_rows_lists(g, order, ivf["refine"], k, c)), c, n_chunks,
                       computed, search_seconds, work, shape)
    if ivf is None:
        chunks = resumable.chunk_bounds(n, c)
        task, shared, args_of = _rows_task, (X,), lambda i, r0, r1: (r0, r1, k, str(work))
    else:  # a chunk = consecutive cells holding about c rows; the partition is made once, here
        cell, probes = _ivf_partition(X, g, work, ivf, log)
        order, off = cell_order(cell, ivf["cells"])
        chunks = [(i, c0, c1) for i, (c0, c1) in enumerate(cell_groups(off, c))]
        task, shared, args_of = _cells_task, (X, order, off, probes), lambda i, c0, c1: (c0, c1, k, str(work), i)
    computed = resumable.run_chunks(work, chunks, task, args_of, shared=shared, client=client, log=log,
                                    title=f"kNN: {len(chunks)} chunks of about {c} rows", what="kNN chunk")
    search_seconds = time.perf_counter() - t0
    if ivf is None:
        ind, dist = g["ind"][...], g["dist"][...]
    else:
        ind, dist = np.empty((n, k), np.int64), np.empty((n, k))
        for i, _, _ in chunks:
            rows = g[f"part{i}_rows"][...]
            ind[rows], dist[rows] = g[f"part{i}_ind"][...], g[f"part{i}_dist"][...]
    lists = [ind, dist]
    del ind, dist
    _commit(store, key, attrs, p, lists, c, len(chunks), computed, search_seconds, work, shape)


def _commit(store, key, attrs, p, lists, c, n_chunks, computed, search_seconds, work, shape):
    """The kernel of the neighbour lists, committed with them; the scratch folder removed.

    ``lists``: ``[ind, dist]``, this function's to empty.  The lists are written first and each goes as soon as
    the kernel's build no longer needs it (the distances once weighed, the indices once their pairs are placed):
    8.1M rows x 10 neighbours hold 1.3 GB of lists beside the build's 2.6 GB.
    """
    from bigclust.algo.affinity import kernel_from_weights, knn_pairs, knn_weights

    dist = lists.pop()
    ind = lists.pop()
    k = ind.shape[1]
    with store.write("affinity", key, attrs) as out:
        write_dense(out, "neighbors", ind, chunk_rows=c)
        write_dense(out, "distances", dist, chunk_rows=c)
        w, gamma = knn_weights(dist, k, p.gamma)
        del dist
        pairs = knn_pairs(ind)
        del ind
        K = kernel_from_weights(pairs, w, k, gamma, dtype=np.dtype(p.dtype),
                                neighbors=lambda: out["neighbors"][...], distances=lambda: out["distances"][...])
        del pairs, w
        write_csr(out, "K", K)
        rule = knn_rule(p, *shape)
        if rule is not None:
            out.attrs["knn_rule"] = rule
        out.attrs.update({"knn_chunks": [n_chunks, len(computed), n_chunks - len(computed)],
                          "knn_chunks_computed": computed, "knn_search_seconds": search_seconds,
                          "nnz": int(K.nnz), "gamma_used": float(gamma)})
    shutil.rmtree(work, ignore_errors=True)
