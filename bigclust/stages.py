"""The pipeline's stages: each reads named arrays from the store and writes its own.

Every stage function takes the store path, the keys of its inputs and its
parameters, and is importable at module level so that it can be shipped to a
``dask.distributed`` worker unchanged.  Stages that are data-parallel over row
blocks build Dask graphs (whatever scheduler is active runs the blocks);
stages that need all rows at once (normalisation in memory, eigenvectors,
k-means restarts) run as one task.
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from .errors import DataError, UserError
from .store import Store, is_sparse, read_matrix, write_csr, write_dense

# -- ingest ---------------------------------------------------------------------


def open_source(data: dict, base):
    """The data source named by a ``[data]`` section (``base``: folder for relative paths)."""
    from pathlib import Path

    from .datasets import open_dataset, open_file

    if data.get("name"):
        root = data.get("root")
        if root is not None and not Path(root).is_absolute():
            root = Path(base) / root
        return open_dataset(data["name"], root)
    p = Path(data["path"])
    p = p if p.is_absolute() else Path(base) / p
    return open_file(p, label_column=data.get("label_column", -1))


def _check_finite(X, row0, name):
    vals = X.data if sp.issparse(X) else X
    bad = ~np.isfinite(vals)
    if bad.any():
        if sp.issparse(X):
            row = int(np.searchsorted(X.indptr, np.flatnonzero(bad)[0], side="right") - 1)
        else:
            row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise DataError(f"data set {name!r} has NaN or inf values (first in row {row0 + row})")


def ingest(store_path, key, attrs, source, chunk_rows, progress=None):
    """Stream ``source`` in row chunks into ``stages/ingest/<key>`` (arrays X, y).

    Dense X is appended chunk by chunk to a row-chunked zarr array, so the
    raw file is never in memory as a whole where its reader streams.  Sparse
    (text) X is stored as CSR parts.
    """
    store = Store(store_path)
    info = source.info
    with store.write("ingest", key, attrs) as g:
        n_done = 0
        ys, sparse_parts = [], []
        X_arr = None
        for Xc, yc in source.iter_chunks(chunk_rows):
            _check_finite(Xc, n_done, info.name)
            if sp.issparse(Xc):
                sparse_parts.append(sp.csr_matrix(Xc, dtype=np.float32))
            else:
                Xc = np.asarray(Xc, dtype=np.float32)
                if X_arr is None:
                    X_arr = g.create_array("X", shape=(0, Xc.shape[1]), chunks=(chunk_rows, Xc.shape[1]),
                                           dtype=np.float32, fill_value=0)
                X_arr.resize((n_done + Xc.shape[0], Xc.shape[1]))
                X_arr[n_done:n_done + Xc.shape[0]] = Xc
            ys.append(np.asarray(yc, dtype=np.int64))
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


# -- preprocess -----------------------------------------------------------------


def _l2_block(X, block_info=None):
    from .preprocess import l2_normalize
    row0 = block_info[0]["array-location"][0][0] if block_info else 0
    return l2_normalize(X, row_offset=row0)


def preprocess(store_path, key, attrs, in_key, params, chunk_rows):
    """tf-idf (sparse text), L2 normalisation and PCA, into ``stages/preprocess/<key>``.

    Dense data are transformed block by block through Dask; sparse text
    (a few tens of thousands of documents) is weighted in memory because idf
    needs every document first.
    """
    import dask.array as da

    from .preprocess import l2_normalize, pca_fit, pca_transform, tfidf

    store = Store(store_path)
    src = store.open("ingest", in_key)
    with store.write("preprocess", key, attrs) as g:
        if is_sparse(src, "X"):
            X = read_matrix(src, "X")
            X, _ = tfidf(X, local=params["tfidf_local"], global_=params["tfidf_global"],
                         normalize=params["tfidf_normalize"])
            empty = np.flatnonzero(np.diff(X.indptr) == 0)
            if empty.size:
                raise DataError(f"{empty.size} document(s) have no terms left after stop words and "
                                f"min_df (first: row {int(empty[0])}); they cannot be clustered")
            if params["l2_normalize"]:
                X = l2_normalize(X)
            if params["pca"]:
                mean, comps = pca_fit(X, params["pca"])
                write_dense(g, "X", pca_transform(X, mean, comps), chunk_rows=chunk_rows)
            else:
                write_csr(g, "X", X.astype(np.float32))
        else:
            Xd = read_matrix(src, "X", lazy=True)
            if params["l2_normalize"]:
                Xd = Xd.map_blocks(_l2_block, dtype=Xd.dtype)
            if params["pca"]:
                X = Xd.compute()
                mean, comps = pca_fit(X, params["pca"])
                Xd = da.from_array(pca_transform(X, mean, comps), chunks=(chunk_rows, params["pca"]))
            write_dense(g, "X", Xd, chunk_rows=chunk_rows, dtype=np.float32)


# -- affinity -------------------------------------------------------------------


def affinity(store_path, key, attrs, in_key, params, seed, max_memory=None):
    """The kernel matrix K into ``stages/affinity/<key>`` (dense blocks or CSR)."""
    from .affinity import dense_kernel, knn_kernel

    store = Store(store_path)
    X = read_matrix(store.open("preprocess", in_key), "X")
    dtype = np.dtype(params["dtype"])
    with store.write("affinity", key, attrs) as g:
        if params["kind"] == "knn":
            K = knn_kernel(X, params["n_neighbors"], params["gamma"], random_state=seed, dtype=dtype)
            write_csr(g, "K", K)
        else:
            # row chunks small enough that the out-of-core passes can hold the blocks they need at once
            # (three for BBS/SK, five for MBBS: plan_rows' n_buffers)
            block_bytes = 64 << 20 if max_memory is None else int(min(64 << 20, max(1, max_memory // 6)))
            K = dense_kernel(X, params["kind"], params["gamma"], dtype=dtype, block_bytes=block_bytes)
            write_dense(g, "K", K, chunk_rows=K.chunks[0][0], compress=False)


# -- normalise + embed ----------------------------------------------------------


def embed(store_path, key, attrs, aff_key, method, params, k, y, max_memory, seed):
    """Normalise K with ``method`` and write the row-normalised spectral embedding.

    The normalised matrix P itself is not persisted: it is n x n like K and
    only its top eigenvectors are used, so storing one per (method, γ) would
    multiply the store's size for nothing.  Its quality (MB, MC), the solver's
    convergence and the MB/MC history are kept as attributes.
    """
    from .normalize import normalize

    store = Store(store_path)
    ga = store.open("affinity", aff_key)
    sparse = is_sparse(ga, "K")
    n = ga["K"]["indptr"].shape[0] - 1 if sparse else ga["K"].shape[0]
    itemsize = ga["K"]["data"].dtype.itemsize if sparse else ga["K"].dtype.itemsize
    if not sparse and 2 * n * n * itemsize > max_memory:  # K and the working copy G
        raise UserError(f"dense normalisation of n={n} needs {2 * n * n * itemsize / 1e9:.1f} GB > "
                        "[store] max_memory; raise max_memory or use [affinity] kind = \"knn\"")
    K = read_matrix(ga, "K")  # float32 kernels stay float32 (half the bytes per pass)
    t0 = time.perf_counter()
    mparams = _method_params(method, params)
    P, info = normalize(K, method, y=y if params["record_every"] else None,
                        record_every=params["record_every"], return_info=True, **mparams)
    _embed_and_write(store, key, attrs, P, info, time.perf_counter() - t0, k, y, params, seed)


def embed_ooc(store_path, key, attrs, aff_key, method, params, k, y, max_memory, seed, client=None):
    """Normalise and embed a dense K that does not fit ``max_memory``, streaming row blocks.

    K stays in zarr; SK and BBS (the paper's alternating Alg. 1) write their
    iterate into a scratch array of this stage, the spectral step runs ARPACK
    on an operator that streams that array, and the scratch array is deleted
    before the stage is committed (it is n x n, like K).  Ncut (also iterated)
    only scales K: ``diag(d) K diag(d)`` is applied as an operator and never
    written.  Memory is a few row blocks whatever n.  With a distributed
    ``client`` the block passes run as tasks on the cluster.
    """
    from .normalize_ooc import bbs_blocked, blocked_matvec_operator, create_like, sinkhorn_blocked

    store = Store(store_path)
    K = store.open("affinity", aff_key)["K"]
    n = K.shape[0]
    if method == "bbs" and params["solver"] != "alternating":
        raise UserError(f"out-of-core BBS (n={n} does not fit [store] max_memory) supports solver = "
                        f"\"alternating\" only, not {params['solver']!r}; raise max_memory or use kind = \"knn\"")
    tol = params["tol"] or None
    with store.write("embed", key, attrs) as g:
        t0 = time.perf_counter()
        P, scale, info = K, None, None
        if method == "sk":
            P = create_like(K, g, "P_scratch")
            info = sinkhorn_blocked(K, P, n_iter=params["n_iter"], tol=tol, max_memory=max_memory, client=client)
        elif method == "bbs":
            P = create_like(K, g, "P_scratch")
            info = bbs_blocked(K, P, n_iter=params["n_iter"], tol=tol, max_memory=max_memory,
                               y=y if params["record_every"] else None, record_every=params["record_every"],
                               client=client)
        elif method == "ncut" and params["ncut_iter"] == 1:  # D^-1/2 K D^-1/2; K may have negative entries
            deg = blocked_matvec_operator(K, max_memory=max_memory) @ np.ones(n)
            if np.any(deg <= 0):
                raise DataError(f"K has a row with non-positive sum (row {int(np.argmin(deg))}); Ncut needs D > 0")
            scale = 1.0 / np.sqrt(deg)
        elif method == "ncut":  # iterated Ncut is the symmetric Sinkhorn iteration from d = 1
            info = sinkhorn_blocked(K, None, n_iter=params["ncut_iter"], max_memory=max_memory, client=client)
            scale = info.mu
        _embed_streamed(g, P, scale, info, time.perf_counter() - t0, k, y, max_memory, seed)


def _embed_streamed(g, P, scale, info, t_norm, k, y, max_memory, seed, **extra):
    """Eigenvectors of the zarr ``P`` (times ``diag(scale)`` on both sides) by streaming, MB/MC, and the stage.

    Deletes the scratch arrays (``*_scratch``) of the stage group ``g`` before
    writing E, so that nothing n x n is committed.
    """
    from scipy.sparse.linalg import LinearOperator

    from .normalize import quality_from_sums, quality_partial
    from .normalize_ooc import blocked_matvec_operator, plan_rows
    from .spectral import embed as spectral_embed

    n = P.shape[0]
    op = blocked_matvec_operator(P, max_memory=max_memory)
    if scale is not None:
        base = op
        op = LinearOperator((n, n), matvec=lambda v: scale * (base @ (scale * np.ravel(v))), dtype=np.float64)
    E = spectral_embed(op, k, solver="eigsh", random_state=seed)
    mb = mc = float("nan")
    if y is not None:  # one more streaming pass for MB and MC
        rows = plan_rows(n, 8, max_memory, n_buffers=2)
        rs, rc = np.empty(n), np.empty(n)
        for r0 in range(0, n, rows):
            blk = np.asarray(P[r0:r0 + rows], dtype=np.float64)
            if scale is not None:
                blk *= scale[r0:r0 + blk.shape[0], None] * scale[None, :]
            rs[r0:r0 + blk.shape[0]], rc[r0:r0 + blk.shape[0]] = quality_partial(blk, y, r0)
        mb, mc = quality_from_sums(rs, rc)
    for name in [a for a in g.array_keys() if a.endswith("_scratch")]:
        del g[name]
    write_dense(g, "E", E)
    row_err = info.row_err if info and info.row_err == info.row_err else (
        float(np.abs(rs - 1).max()) if y is not None else float("nan"))
    g.attrs.update({"normalize_seconds": t_norm, "MB": float(mb), "MC": float(mc), "out_of_core": True,
                    "norm_n_iter": int(info.n_iter) if info else 0,
                    "norm_converged": bool(info.converged) if info else True, "row_err": float(row_err),
                    "history": [list(map(float, h)) for h in (info.history if info else [])], **extra})


def embed_multi(store_path, key, attrs, aff_keys, params, k, y, max_memory, seed, client=None):
    """MBBS (paper 000 section V) over several kernels, then the spectral embedding.

    The kernels are the affinities of a γ sweep; their learnt weights
    ``alpha`` are kept as an attribute.  In memory the G-step is the exact
    dual BBS; when the m dense kernels do not fit ``max_memory`` they stay in
    zarr and the G-step is the paper's Alg. 1 out of core (``n_iter`` passes).
    """
    from .normalize import mbbs

    store = Store(store_path)
    groups = [store.open("affinity", a) for a in aff_keys]
    if any(is_sparse(g, "K") for g in groups) and not all(is_sparse(g, "K") for g in groups):
        raise UserError("MBBS needs kernels that are all dense or all sparse")
    if not is_sparse(groups[0], "K") and mbbs_out_of_core(groups[0]["K"].shape[0], len(groups), max_memory):
        return _embed_multi_ooc(store, key, attrs, [g["K"] for g in groups], params, k, y, max_memory, seed,
                                    client)
    Ks = [read_matrix(g, "K") for g in groups]
    Ks = [K.astype(np.float64) for K in Ks]
    t0 = time.perf_counter()
    P, info = mbbs(Ks, lam=params["lam"], n_outer=params["mbbs_outer"], solver="dual",
                   n_iter=100, tol=1e-6, return_info=True)
    _embed_and_write(store, key, attrs, P, info, time.perf_counter() - t0, k, y, params, seed,
                     alpha=[float(a) for a in info.alpha])


def mbbs_out_of_core(n, m, max_memory) -> bool:
    """Whether in-memory MBBS on m dense n x n kernels (and their sum and G, float64) exceeds ``max_memory``."""
    return (m + 2) * n * n * 8 > max_memory


def _embed_multi_ooc(store, key, attrs, Ks, params, k, y, max_memory, seed, client):
    from .normalize_ooc import create_like, mbbs_blocked

    with store.write("embed", key, attrs) as g:
        t0 = time.perf_counter()
        G = create_like(Ks[0], g, "G_scratch", np.float64)
        info = mbbs_blocked(Ks, G, create_like(Ks[0], g, "Kbar_scratch", np.float64), lam=params["lam"],
                            n_outer=params["mbbs_outer"], n_iter=params["n_iter"], max_memory=max_memory,
                            client=client)
        _embed_streamed(g, G, None, info, time.perf_counter() - t0, k, y, max_memory, seed,
                        alpha=[float(a) for a in info.alpha], mbbs_solver="alternating-ooc")


def _embed_and_write(store, key, attrs, P, info, t_norm, k, y, params, seed, **extra):
    """Quality, spectral embedding and the stage's arrays/attributes for an in-memory P."""
    from .normalize import quality
    from .spectral import embed as spectral_embed

    mb, mc = quality(P, y) if y is not None else (float("nan"), float("nan"))
    E = spectral_embed(P, k, solver=params["eigensolver"], random_state=seed)
    with store.write("embed", key, attrs) as g:
        write_dense(g, "E", E)
        g.attrs.update({"normalize_seconds": t_norm, "MB": float(mb), "MC": float(mc),
                        "norm_n_iter": int(info.n_iter), "norm_converged": bool(info.converged),
                        "row_err": float(info.row_err),
                        "history": [list(map(float, h)) for h in info.history], **extra})


def _method_params(method, params):
    if method == "bbs":
        return {"solver": params["solver"], "n_iter": params["n_iter"], "tol": params["tol"] or None}
    if method == "sk":
        return {"n_iter": params["n_iter"], "tol": params["tol"] or None}
    if method == "ncut":
        return {"n_iter": params["ncut_iter"]}
    return {}


# -- cluster --------------------------------------------------------------------


def cluster(store_path, key, attrs, src_stage, src_key, array, params, k):
    """k-means with restarts (or mini-batch) on an embedding or on the data itself."""
    from .kmeans import kmeans, minibatch_kmeans

    store = Store(store_path)
    g_in = store.open(src_stage, src_key)
    sparse = is_sparse(g_in, array)
    n = g_in[array]["indptr"].shape[0] - 1 if sparse else g_in[array].shape[0]
    algo = params["algorithm"]
    if algo == "auto":  # sparse data (documents) stay sparse in Lloyd, which is exact and O(nnz k) per pass
        algo = "minibatch" if n > params["minibatch_threshold"] and not sparse else "lloyd"
    if algo == "lloyd":
        X = read_matrix(g_in, array)
        res = kmeans(X, k, n_init=params["n_init"], max_iter=params["max_iter"], random_state=params["seed"])
    else:
        # mini-batch reads only sampled rows and then one row chunk at a time from zarr;
        # sparse data are densified one batch (or final-pass block) at a time
        X = read_matrix(g_in, array, lazy=not sparse)
        import dask
        with dask.config.set(scheduler="synchronous"):  # zarr reads; may run inside a worker task
            res = minibatch_kmeans(X, k, n_init=params["n_init"], batch_size=params["batch_size"],
                                   max_iter=params["max_iter"], random_state=params["seed"])
    with store.write("cluster", key, attrs) as g:
        write_dense(g, "labels", res.labels.astype(np.int32))
        write_dense(g, "inertia", res.inertia)
        g.attrs.update({"algorithm": algo, "best": int(res.best), "n_empty_reseeded": int(res.n_empty_reseeded)})
