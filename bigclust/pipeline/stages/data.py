"""The stages that bring data in: ingest (stream a source into the store), preprocess, and the subset of
a few classes (paper 001's protocol); ``bigclust data ingest`` / ``data info`` (:func:`ingest_to_store`,
:func:`store_info`).  Their parameter dataclasses and registration are in :mod:`bigclust.pipeline.stages`.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import DataError, UserError
from bigclust.pipeline.methods import StageDef, hashed, stage_key, stage_names
from bigclust.pipeline.store import Store, is_sparse, read_matrix, write_csr, write_dense

if TYPE_CHECKING:
    from bigclust.pipeline.stages import IngestParams, PreprocessParams, SubsetParams


# -- ingest ---------------------------------------------------------------------


def open_source(data: dict, base):
    """The data source named by a ``[data]`` section (``base``: folder for relative paths)."""
    from pathlib import Path

    from bigclust.datasets import open_dataset, open_file

    if data.get("name"):
        root = data.get("root")
        if root is not None and not Path(root).is_absolute():
            root = Path(base) / root
        return open_dataset(data["name"], root)
    p = Path(data["path"])
    p = p if p.is_absolute() else Path(base) / p
    return open_file(p, label_column=data.get("label_column", -1), header=data.get("header", "auto"))


def _check_finite(X, row0, name):
    vals = X.data if sp.issparse(X) else X
    bad = ~np.isfinite(vals)
    if bad.any():
        if sp.issparse(X):
            row = int(np.searchsorted(X.indptr, np.flatnonzero(bad)[0], side="right") - 1)
        else:
            row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise DataError(f"data set {name!r} has NaN or inf values (first in row {row0 + row}, counting rows from 0): fill or drop them")


def ingest(store_path, key, attrs, p: IngestParams, *, source, progress=None, client=None, log=None, **_):
    """Stream ``source`` in row chunks into ``stages/ingest/<key>`` (arrays X, y; plus the per-row
    arrays of a source with ``row_extras``, e.g. mnist-1m's ``origin``).

    Dense X is appended chunk by chunk to a row-chunked zarr array, so the
    raw file is never in memory as a whole where its reader streams.  Sparse
    (text) X is stored as CSR parts.  A source that makes any row range on
    its own (``rows``: mnist-1m, mnist-8m) is written in resumable chunks
    instead (:func:`_ingest_resumable`), as its ``store_dtype`` (uint8 for mnist-8m).
    """
    if callable(getattr(source, "rows", None)):
        return _ingest_resumable(store_path, key, attrs, p, source=source, progress=progress, client=client,
                                 log=log)
    store = Store(store_path)
    info, chunk_rows = source.info, p.chunk_rows
    with store.write("ingest", key, attrs) as g:
        n_done = 0
        ys, sparse_parts = [], []
        X_arr = None
        extras = getattr(source, "row_extras", None)
        for Xc, yc in source.iter_chunks(chunk_rows):
            _check_finite(Xc, n_done, info.name)
            if sp.issparse(Xc):
                sparse_parts.append(sp.csr_matrix(Xc, dtype=np.float32))
            else:
                Xc = np.asarray(Xc, dtype=np.float32)
                if X_arr is None:
                    X_arr = g.create_array("X", shape=(0, Xc.shape[1]),  # a chunk is never longer than the data
                                           chunks=(max(1, min(chunk_rows, info.n_samples)), Xc.shape[1]),
                                           dtype=np.float32, fill_value=0)
                X_arr.resize((n_done + Xc.shape[0], Xc.shape[1]))
                X_arr[n_done:n_done + Xc.shape[0]] = Xc
            ys.append(np.asarray(yc, dtype=np.int64))
            if extras is not None:  # per-row arrays a generated source adds (mnist-1m: origin)
                for name, arr in extras(n_done, n_done + Xc.shape[0]).items():
                    if name not in g:
                        g.create_array(name, shape=(info.n_samples,), dtype=arr.dtype,
                                       chunks=(max(1, min(chunk_rows, info.n_samples)),), fill_value=0)
                    g[name][n_done:n_done + Xc.shape[0]] = arr
            n_done += Xc.shape[0]
            if progress is not None:
                progress(Xc.shape[0])
        if n_done == 0:
            raise DataError(f"data set {info.name!r} has no rows")
        if sparse_parts:
            X = sp.vstack(sparse_parts, format="csr")
            write_csr(g, "X", X)
            d = X.shape[1]
        else:
            d = X_arr.shape[1]
        y = np.concatenate(ys)
        write_dense(g, "y", y)
        g.attrs.update({"n_samples": int(n_done), "n_features": int(d),
                        "n_classes": int(np.unique(y).size) if y.size and y.min() >= 0 else 0,
                        "sparse": bool(sparse_parts), "dataset": info.name,
                        "class_names": list(source.class_names or []),
                        "has_labels": bool(y.size and y.min() >= 0)})


#: zarr chunks per task of the resumable ingest: 8 x 8192 rows, about 200 MB of float32 rows being generated
INGEST_CHUNKS_PER_TASK = 8


def _ingest_rows(src, work, r0, r1):
    """One task of :func:`_ingest_resumable`: rows ``r0:r1`` generated and written into the scratch group."""
    import zarr

    g = zarr.open_group(str(work), mode="r+")
    X, y = src.rows(r0, r1)
    g["X"][r0:r1] = X
    g["y"][r0:r1] = np.asarray(y, dtype=np.int64)
    for name, arr in src.row_extras(r0, r1).items():
        g[name][r0:r1] = arr


def _ingest_resumable(store_path, key, attrs, p, *, source, progress=None, client=None, log=None):
    """Ingest a source with random access (``source.rows(r0, r1)``) in chunks that survive ``kill -9``.

    The rows go to a scratch group (:mod:`bigclust.pipeline.resumable`) in
    tasks of :data:`INGEST_CHUNKS_PER_TASK` zarr chunks, each followed by its
    marker, on the cluster's workers when a distributed ``client`` is given
    (each reads the source images itself; the store must be on a path they
    share); a rerun writes only the tasks without a marker.  The finished
    arrays are then moved (renamed, not copied) into the stage's group: the
    same arrays and attributes as the streaming ingest, X in ``source.store_dtype``.
    """
    import os
    import shutil
    from pathlib import Path

    from bigclust.pipeline import resumable as rs

    info = source.info
    n, d = info.n_samples, info.n_features
    chunk = max(1, min(p.chunk_rows, n))
    dtype = np.dtype(getattr(source, "store_dtype", None) or np.float32)
    extras = {name: a.dtype for name, a in source.row_extras(0, 1).items()}
    arrays = {"X": dict(shape=(n, d), chunks=(chunk, d), dtype=dtype, fill_value=0),
              "y": dict(shape=(n,), chunks=(chunk,), dtype=np.int64, fill_value=0),
              **{name: dict(shape=(n,), chunks=(chunk,), dtype=dt, fill_value=0) for name, dt in extras.items()}}
    work = rs.work_dir(store_path, "ingest", key)
    rs.open_work(work, {"dataset": info.name, "n": n, "d": d, "chunk_rows": chunk, "dtype": dtype.name}, arrays)
    tasks = rs.chunk_bounds(n, chunk * INGEST_CHUNKS_PER_TASK)   # task bounds on zarr chunk bounds: no locks
    bounds = {i: b - a for i, a, b in tasks}
    every = max(1, len(tasks) // 10)
    say = log or rs.say

    def report(msg):  # a progress bar (or one line in ten), not a line per task
        if " done (" not in msg:
            say(msg)
            return
        i = int(msg.split("/")[0].split()[-1]) - 1
        if progress is not None:
            progress(bounds[i])
        elif int(msg.rsplit("; ", 1)[1].split("/")[0]) % every == 0:
            say(msg)

    rs.run_chunks(work, tasks, _ingest_rows, lambda i, a, b: (str(work), a, b), shared=(source,), client=client,
                  max_in_flight=2, title=f"ingest {info.name}: {len(tasks)} tasks of {bounds[0]} rows",
                  what="ingest task", log=report)
    store = Store(store_path)
    with store.write("ingest", key, attrs) as g:
        folder = Path(g.store.root) / g.path if g.path else Path(g.store.root)
        for name in arrays:                        # same file system (both inside the store): renames
            os.replace(work / name, folder / name)
        y = g["y"][...]
        g.attrs.update({"n_samples": int(n), "n_features": int(d),
                        "n_classes": int(np.unique(y).size) if y.size and y.min() >= 0 else 0,
                        "sparse": False, "dataset": info.name, "class_names": list(source.class_names or []),
                        "has_labels": bool(y.size and y.min() >= 0)})
    shutil.rmtree(work, ignore_errors=True)


# -- preprocess -----------------------------------------------------------------


def _l2_block(X, block_info=None):
    from bigclust.algo.preprocess import l2_normalize
    row0 = block_info[0]["array-location"][0][0] if block_info else 0
    return l2_normalize(X, row_offset=row0)


def preprocess(store_path, key, attrs, p: PreprocessParams, **_):
    """tf-idf (sparse text), standardisation, L2 normalisation and PCA, in that order, into
    ``stages/preprocess/<key>``.

    Dense data are transformed block by block through Dask (the standardisation's
    means and variances in a first streamed pass over the row chunks); sparse text
    (a few tens of thousands of documents) is weighted in memory because idf
    needs every document first, and is standardised by scaling only.
    """
    from bigclust.algo.preprocess import l2_normalize, pca_fit, pca_transform, standardize, standardize_fit, tfidf

    store = Store(store_path)
    src = store.open("ingest", p.input)
    params, chunk_rows = dataclasses.asdict(p), p.chunk_rows
    with store.write("preprocess", key, attrs) as g:
        if is_sparse(src, "X"):
            X = read_matrix(src, "X")
            if p.tfidf_local is not None:
                X, _ = tfidf(X, local=params["tfidf_local"], global_=params["tfidf_global"],
                             normalize=params["tfidf_normalize"])
                empty = np.flatnonzero(np.diff(X.indptr) == 0)
                if empty.size:
                    raise DataError(f"{empty.size} document(s) have no terms left after stop words and "
                                    f"min_df (first: row {int(empty[0])}); they cannot be clustered")
            if p.standardize:
                X = standardize(X, *standardize_fit([X]))
            if params["l2_normalize"]:
                X = l2_normalize(X)
            if params["pca"]:
                mean, comps = pca_fit(X, params["pca"], solver=p.pca_solver)
                write_dense(g, "X", pca_transform(X, mean, comps), chunk_rows=chunk_rows)
            else:
                write_csr(g, "X", X.astype(np.float32))
        elif getattr(store, "in_memory", False) and not (p.standardize or params["pca"]):
            # an estimator's memory store: row chunk by row chunk as Dask would, without Dask (none needed)
            X, step = src["X"], src["X"].chunks[0]
            out = g.create_array("X", shape=X.shape, chunks=X.chunks, dtype=np.float32)
            for r0 in range(0, X.shape[0], step):
                blk = np.array(X[r0:r0 + step], dtype=np.float32)   # a fresh chunk, as zarr reads it
                out[r0:r0 + blk.shape[0]] = l2_normalize(blk, row_offset=r0) if params["l2_normalize"] else blk
        else:
            Xd = read_matrix(src, "X", lazy=True)
            if Xd.dtype.kind in "iub":    # stored as integers (mnist-8m: uint8 pixels): float32, block by block
                Xd = Xd.astype(np.float32)
            if p.standardize:  # one streamed pass for the statistics, then block by block
                mean, scale = standardize_fit(Xd.blocks[i].compute() for i in range(Xd.numblocks[0]))
                Xd = Xd.map_blocks(functools.partial(standardize, mean=mean, scale=scale), dtype=np.float32)
            if params["l2_normalize"]:
                Xd = Xd.map_blocks(_l2_block, dtype=Xd.dtype)
            if params["pca"]:
                # streamed, never the whole X nor a centred copy: "covariance" sums the covariance in one pass
                # over the row chunks (a task each), "randomized" makes n_iter + 2 passes
                Xd = Xd.rechunk({1: -1})          # whole rows per block: the projection needs every column
                mean, comps = pca_fit(Xd, params["pca"], solver=p.pca_solver)
                Xd = Xd.map_blocks(pca_transform, mean, comps, dtype=np.float32,
                                   chunks=(Xd.chunks[0], (params["pca"],)))
            write_dense(g, "X", Xd, chunk_rows=chunk_rows, dtype=np.float32)


# -- subsets of classes (paper 001's protocol) ------------------------------------------------


def subset(store_path, key, attrs, p: SubsetParams, **_):
    """The rows of the classes ``p.classes`` (labels renumbered 0..k-1 in that order) and their row ids."""
    store = Store(store_path)
    y = read_matrix(store.open("ingest", p.labels), "y")
    rows = np.flatnonzero(np.isin(y, p.classes))
    X = read_matrix(store.open("preprocess", p.input), "X")
    lookup = {c: i for i, c in enumerate(p.classes)}
    with store.write("subset", key, attrs) as g:
        Xs = X[rows]
        (write_csr if sp.issparse(Xs) else write_dense)(g, "X", Xs)
        write_dense(g, "y", np.array([lookup[int(c)] for c in y[rows]], dtype=np.int64))
        write_dense(g, "rows", rows.astype(np.int64))
        g.attrs.update({"n_samples": int(rows.size), "n_classes": len(p.classes)})


# -- ingest on its own: `bigclust data ingest` / `data info` ----------------------------------------


def _ingest_with_progress(store_path, key, attrs, p, *, source, client=None, **_):
    from bigclust._util.progress import bar as progress_bar
    with progress_bar(source.info.n_samples, f"ingest {source.info.name}", "rows") as bar:
        ingest(store_path, key, attrs, p, source=source, progress=bar.update, client=client)


# ingest starts every chain; the Runner builds its parameters from [data]
INGEST = StageDef("ingest", None, _ingest_with_progress, "X")


def ingest_to_store(name, root, store_path, *, chunk_rows=4096, force=False):
    """``bigclust data ingest``: the pipeline's ingest stage on its own.

    The stage key is the one a pipeline with ``[data] name = NAME`` computes,
    so a later ``pipeline run`` on this store skips the ingest.  ``force``:
    use a store made for other data (its stages stay) and ingest again.
    """
    import sys
    from pathlib import Path

    from bigclust.pipeline.checks import check_writable
    from bigclust.pipeline.stages import IngestParams

    data = {"name": name, "path": None, "root": str(root) if root else None, "label_column": -1}
    check_writable(Path(store_path), "store")
    source = open_source(data, Path.cwd())
    store = Store(store_path, owner={"name": name, "path": None}, force=force)
    params = IngestParams(data={"name": name, "path": None, "label_column": -1}, chunk_rows=chunk_rows)
    key = stage_key(params)
    if store.has("ingest", key) and not force:
        print(f"{name}: already in {store_path}, skipped", file=sys.stderr, flush=True)
    else:
        _ingest_with_progress(str(store.path), key, {"params": hashed(params)}, params, source=source)
    a = store.open("ingest", key).attrs
    return a["n_samples"], a["n_features"]


def store_info(store_path) -> dict:
    """``bigclust data info``: what the data in a store look like, and how many instances of each stage it holds
    (every stage the registry knows, :func:`bigclust.pipeline.methods.stage_names`)."""
    store = Store(store_path)
    keys = store.stage_keys("ingest")
    if not keys:
        raise UserError(f"store {store_path} holds no ingested data")
    g = store.open("ingest", keys[0])
    a = g.attrs
    X = g["X"]
    dtype = str(X["data"].dtype if a["sparse"] else X.dtype)
    info = {"dataset": a["dataset"], "n_samples": a["n_samples"], "n_features": a["n_features"],
            "n_classes": a["n_classes"], "dtype": dtype, "sparse": a["sparse"]}
    if a["sparse"]:
        info["nnz"] = int(X["data"].shape[0])
    info["stages"] = {s: len(store.stage_keys(s)) for s in stage_names()}
    return info
