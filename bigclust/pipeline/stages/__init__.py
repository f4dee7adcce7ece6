"""The pipeline's generic stages: affinity, assign, cluster (and, from :mod:`.data`, ingest, preprocess, subset).

A stage instance is described by one frozen dataclass (``*Params`` below): it
is both what is hashed into the instance's store key (:func:`stage_key`) and
what the stage function receives, so key and behaviour cannot drift.  Fields
marked :data:`RUNTIME` (a memory budget that only changes block sizes, with
results equal to the bit) are passed but not hashed.

The stages are registered in :data:`bigclust.pipeline.methods.STAGES` (a
:class:`StageDef` each: how to build its parameters for a chain step, from the
config point, the method and the keys of its inputs; the stage function, the
array it outputs and where it runs).  The families register their own stages
(normalise + embed, the subspace family's self-expression) in their plug-ins;
nothing here names a method or a family.

Every stage function ``fn(store_path, key, attrs, params, **runtime)`` is
importable at module level so that it can be shipped to a ``dask.distributed``
worker unchanged.  Stages that are data-parallel over row blocks build Dask
graphs (whatever scheduler is active runs the blocks); stages that need all
rows at once run as one task.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bigclust._util.errors import DataError, StoreError, UserError
from bigclust.pipeline.methods import (ADDED, RUNTIME, STAGES, StageDef, hashed, register_stage,  # noqa: F401
                                       stage_key)
from bigclust.pipeline.methods import fmt_params as _fmt
from bigclust.pipeline.schema import params_dict
from bigclust.pipeline.store import Store, is_sparse, read_matrix, write_csr, write_dense
# the stages of the data, re-exported
from bigclust.pipeline.stages.data import ingest, open_source, preprocess, subset  # noqa: F401


@dataclass(frozen=True)
class IngestParams:
    data: dict                                    # name / path (+ size, mtime) / label column
    chunk_rows: int = field(default=4096, metadata=RUNTIME)


@dataclass(frozen=True)
class PreprocessParams:
    input: str
    l2_normalize: bool
    pca: int
    tfidf_local: str | None                       # None: no tf-idf (dense data, or [preprocess] tfidf = false)
    tfidf_global: str | None
    tfidf_normalize: bool | None
    chunk_rows: int = field(default=4096, metadata=RUNTIME)
    standardize: bool = field(default=False, metadata=ADDED)
    pca_solver: str = field(default="randomized", metadata=ADDED)   # [preprocess] pca_solver


@dataclass(frozen=True)
class SubsetParams:
    input: str                                    # preprocess key
    labels: str                                   # ingest key (the classes)
    classes: tuple                                # class ids kept, in the order of the new labels 0..k-1


@dataclass(frozen=True)
class AffinityParams:
    input: str
    src: str                                      # stage of the input: preprocess, or subset
    kind: str
    dtype: str
    gamma: float | str | None                     # None for the kinds without a width; "median": from the data
    n_neighbors: int | None                       # kNN only
    seed: int | None                              # kNN only (approximate search)
    chunk_rows: int = field(default=0, metadata=RUNTIME)   # rows per stored chunk (dense); values do not depend on it
    knn: str | None = field(default=None, metadata=ADDED)  # kNN search ([affinity] knn); None = "auto"
    search: str | None = field(default=None, metadata=ADDED)  # "exact"/"ivf": chunked resumable search (knn_stage)
    knn_chunk_rows: int = field(default=0, metadata=RUNTIME)    # its rows per chunk (a task each)
    ivf_cells: int = field(default=0, metadata=ADDED)           # knn = "ivf": cells, 0 = by rule (knn_ivf)
    ivf_probe: int = field(default=0, metadata=ADDED)           # knn = "ivf": cells probed, 0 = by rule


@dataclass(frozen=True)
class AssignParams:
    input: str
    src: str                                      # preprocess / subset (documents X) or affinity (a kernel K)
    method: str
    method_params: dict
    k: int
    cluster: dict                                 # [cluster] n_init, max_iter (the k-means variants use them)
    seed: int
    stream: tuple | None = None                   # row bounds when X is streamed from the store (bigclust._util.plan)


@dataclass(frozen=True)
class ClusterParams:
    input: str
    src: str                                      # stage of the input
    array: str                                    # its array: X (data) or E (embedding)
    k: int
    n_init: int
    max_iter: int
    algorithm: str
    minibatch_threshold: int | None               # None for algorithm = "lloyd"
    batch_size: int | None
    seed: int
    max_memory: int = field(default=0, metadata=RUNTIME)   # 0: no budget (read lazily from zarr)


@dataclass
class Context:
    """What a stage's ``build`` sees for one chain step of one method instance."""

    cfg: Any
    store: Store
    method: Any                                   # bigclust.pipeline.methods.Method
    params: Any                                   # its parameter dataclass
    group: list                                   # config points used together (one unless the method combines)
    info: dict                                    # ingest attrs (n_samples, n_classes, ...)
    k: int

    @property
    def point(self) -> dict:
        return self.group[0]


# -- affinity -------------------------------------------------------------------


def affinity(store_path, key, attrs, p: AffinityParams, *, client=None, **_):
    """The kernel matrix K into ``stages/affinity/<key>`` (dense row chunks or CSR).

    ``gamma = "median"`` is resolved here, from the stage's input rows, and
    the width used is kept as the attribute ``gamma_used`` (reported).
    """
    from bigclust.algo.affinity import (check_gaussian_width, dense_kernel, kernel_block_rows, knn_kernel,
                                        resolve_gamma)

    if p.kind == "knn" and p.knn_chunk_rows:  # resumable row chunks, tasks on the cluster (knn_stage)
        from bigclust.pipeline.stages.knn import knn_chunked
        return knn_chunked(store_path, key, attrs, p, client=client)
    store = Store(store_path)
    X = read_matrix(store.open(p.src, p.input), "X")
    dtype = np.dtype(p.dtype)
    with store.write("affinity", key, attrs) as g:
        gamma = p.gamma
        if p.kind == "knn":
            K, gamma = knn_kernel(X, p.n_neighbors, p.gamma, random_state=p.seed, dtype=dtype,
                                  method=p.knn or "auto", return_gamma=True, n_cells=p.ivf_cells,
                                  n_probe=p.ivf_probe)
            write_csr(g, "K", K)
            from bigclust.pipeline.stages.knn import knn_rule
            if (rule := knn_rule(p, *X.shape)) is not None:  # the IVF rule resolved, checked on reuse
                g.attrs["knn_rule"] = rule
        else:
            if p.kind == "gaussian":
                gamma = resolve_gamma(X, p.gamma)
                check_gaussian_width(X, gamma)
            lazy = not getattr(store, "in_memory", False)   # an estimator's memory store: no Dask graph
            K = dense_kernel(X, p.kind, 1.0 if gamma is None else gamma, dtype=dtype,
                             block_bytes=p.chunk_rows * X.shape[0] * dtype.itemsize, lazy=lazy)
            rows = K.chunks[0][0] if lazy else kernel_block_rows(X.shape[0], dtype.itemsize,
                                                                 p.chunk_rows * X.shape[0] * dtype.itemsize)
            write_dense(g, "K", K, chunk_rows=rows, compress=False)
        if gamma is not None:
            g.attrs["gamma_used"] = float(gamma)


# -- assign: methods that label the points themselves ---------------------------------------


def assign(store_path, key, attrs, p: AssignParams, *, client=None, **_):
    """Run the method's assign hook on X or K; write the labels it keeps, their objectives and its factors."""
    from bigclust.pipeline import methods

    m = methods.get(p.method)
    store = Store(store_path)
    name = STAGES[p.src].output if p.src in STAGES else "X"
    if p.stream:  # X stays in the store: row blocks are read every iteration (Dask tasks on a cluster)
        from bigclust.algo.blocks import task_mapper
        from bigclust.pipeline.stored_rows import RowReader
        reader = RowReader(store_path, p.src, p.input, name, p.stream)
        res = m.assign_streamed(reader, p.stream, m.make(p.method_params), p.k, p.seed,
                                task_mapper(client) if client is not None else None, cluster=p.cluster,
                                src=p.src)
    else:
        data = read_matrix(store.open(p.src, p.input), name)
        res = m.assign(data, m.make(p.method_params), p.k, p.seed, p.cluster, p.src)
    with store.write("assign", key, attrs) as g:
        write_dense(g, "labels", np.asarray(res.labels, dtype=np.int32))
        write_dense(g, "inertia", np.asarray(res.objective, dtype=np.float64))
        for name, arr in res.arrays.items():
            write_dense(g, name, np.asarray(arr))
        g.attrs.update({"best": int(res.best), **res.attrs})


# -- cluster --------------------------------------------------------------------


def cluster(store_path, key, attrs, p: ClusterParams, **_):
    """k-means with restarts (or mini-batch) on an embedding or on the data itself."""
    from bigclust.algo.kmeans import kmeans, minibatch_kmeans

    store = Store(store_path)
    g_in = store.open(p.src, p.input)
    sparse = is_sparse(g_in, p.array)
    n = g_in[p.array]["indptr"].shape[0] - 1 if sparse else g_in[p.array].shape[0]
    if p.array != "X":   # a stage's output (an embedding), not the data: say why it cannot hold k clusters
        _check_embedding(store, g_in, p)
    algo = p.algorithm
    if algo == "auto":  # sparse data (documents) stay sparse in Lloyd, which is exact and O(nnz k) per pass
        algo = "minibatch" if n > p.minibatch_threshold and not sparse else "lloyd"
    if algo == "lloyd":
        X = read_matrix(g_in, p.array)
        res = kmeans(X, p.k, n_init=p.n_init, max_iter=p.max_iter, random_state=p.seed)
    else:
        # mini-batch reads only sampled rows and then one row chunk at a time from zarr;
        # sparse data are densified one batch (or final-pass block) at a time
        # a batch's random rows touch every zarr chunk: an array that fits a quarter of the budget is read
        # once (8.1M x 10 float64, 0.65 GB: each of 1000 steps decompressed all of it), the same rows and sums
        fits = not sparse and p.max_memory and n * g_in[p.array].shape[1] * 8 <= p.max_memory // 4
        X = read_matrix(g_in, p.array, lazy=not (sparse or fits))
        import dask
        with dask.config.set(scheduler="synchronous"):  # zarr reads; may run inside a worker task
            res = minibatch_kmeans(X, p.k, n_init=p.n_init, batch_size=p.batch_size,
                                   max_iter=p.max_iter, random_state=p.seed)
    with store.write("cluster", key, attrs) as g:
        write_dense(g, "labels", res.labels.astype(np.int32))
        write_dense(g, "inertia", res.inertia)
        g.attrs.update({"algorithm": algo, "best": int(res.best), "n_empty_reseeded": int(res.n_empty_reseeded)})


def _n_distinct(E, at_least: int) -> int:
    """Distinct rows of a dense (n, c) array, or any number >= ``at_least`` once a head of rows has that many."""
    def count(rows):
        rows = np.ascontiguousarray(rows, dtype=np.float64) + 0.0   # -0.0 and 0.0 compare equal
        return np.unique(rows.view(np.dtype((np.void, 8 * rows.shape[1]))).ravel()).size

    head = count(E[:4 * at_least])
    return head if head >= at_least else count(E[...])


def _check_embedding(store, g_in, p: ClusterParams):
    """A DataError naming the embedding and its cause when it has fewer distinct rows than the k clusters.

    k-means would otherwise say "X has only m distinct rows", which reads as a fault of the data.  The
    causes: fewer components than clusters (``[embed] n_components`` set below k: unit rows in c dimensions
    take few values), or a degenerate affinity -- a Gaussian kernel that is numerically the identity or
    constant under its gamma (the eigensolver may then return no eigenvectors at all), or a graph with too few
    links.
    """
    node = g_in[p.array]
    if is_sparse(g_in, p.array) or len(node.shape) != 2:
        return
    n, c = node.shape
    m = _n_distinct(node, p.k) if c else 0
    if m >= p.k:
        return
    params = dict(g_in.attrs.get("params", {}))
    src, inputs = params.get("src"), params.get("inputs") or []
    what = (f"the spectral embedding is empty ({n} x 0: the eigensolver found no eigenvectors), so it cannot hold "
            f"the {p.k} clusters" if not c else
            f"the spectral embedding ({n} x {c}) has only {m} distinct row{'s' if m != 1 else ''}, fewer than the "
            f"{p.k} clusters")
    if 0 < c < p.k:
        raise DataError(f"{what}: [embed] n_components={c} is below n_clusters={p.k} (its rows, of unit length, "
                        f"take few distinct values in {c} dimension(s)); set [embed] n_components = 0 (= n_clusters) "
                        f"or at least {p.k}")
    try:
        kernel = dict(store.open(src, inputs[0], dropped_ok=True).attrs) if src and inputs else {}
    except StoreError:   # the kernel's instance was cleaned from the store since: no diagnosis from it
        kernel = {}
    kp = kernel.get("params", {})
    if kp.get("kind") == "gaussian" and "gamma_used" in kernel:
        cause = (f"the Gaussian kernel is degenerate under gamma={kernel['gamma_used']:.4g} (numerically the "
                 "identity or constant, see the warning above; its eigenvectors carry no clusters): set "
                 "[affinity] gamma = \"median\" or near the data's squared distances")
    elif kp.get("kind") == "knn":
        cause = ("the kNN graph is too sparse or its gamma degenerate: raise [affinity] n_neighbors or set "
                 "[affinity] gamma = \"median\"")
    else:
        cause = f"the affinity ({src or 'its input'}) is degenerate: its eigenvectors carry no clusters"
    raise DataError(f"{what}: {cause}")


# -- building each stage's parameters for a chain step -----------------------------------------------


def _build_affinity(ctx: Context, src, inputs):
    """One kernel per config point of the instance (several when the method combines a γ sweep)."""
    from bigclust.algo.knn import resolve_method
    from bigclust._util.plan import kernel_chunk_rows

    (pre_key,) = inputs
    out = []
    for point in ctx.group:
        a = point["affinity"]
        knn = a["kind"] == "knn"
        if knn and a["knn_chunk_rows"] and a.get("knn", "auto") not in ("auto", "exact", "ivf", "ivf-rows"):
            raise UserError(f"[affinity] knn_chunk_rows searches exactly or by \"ivf\" in chunks; it cannot use "
                            f"knn = \"{a['knn']}\" (set knn = \"exact\", \"ivf\", \"ivf-rows\" or knn_chunk_rows = 0)")
        method = a.get("knn", "auto")
        if knn and method == "auto":
            # resolved here, so that the key says which search made the graph; "exact" stays "auto"
            # (no key entry), the key of stores made before [affinity] knn existed
            d = point["preprocess"].get("pca") or ctx.info["n_features"]
            method = resolve_method("auto", ctx.info["n_samples"], d)
            if method == "exact" or (a["knn_chunk_rows"] and method not in ("ivf", "ivf-rows")):
                method = "auto"  # the chunked stage searches exactly unless it is IVF
        ivf = knn and method in ("ivf", "ivf-rows")
        itemsize = np.dtype(a["dtype"]).itemsize
        out.append(AffinityParams(
            input=pre_key, src=src, kind=a["kind"], dtype=a["dtype"],
            gamma=a["gamma"] if a["kind"] in ("gaussian", "knn") else None,
            n_neighbors=a["n_neighbors"] if knn else None, seed=point["cluster"]["seed"] if knn else None,
            chunk_rows=0 if knn else kernel_chunk_rows(ctx.info["n_samples"], itemsize, ctx.cfg.max_memory),
            # "auto" is left out of the key: stores made before [affinity] knn existed keep their keys
            knn=method if knn and method != "auto" else None,
            search=(method if ivf else "exact") if knn and a["knn_chunk_rows"] else None,
            knn_chunk_rows=a["knn_chunk_rows"] if knn else 0,
            ivf_cells=a.get("ivf_cells", 0) if ivf else 0, ivf_probe=a.get("ivf_probe", 0) if ivf else 0))
        from bigclust.pipeline.stages.knn import check_stored_rule
        check_stored_rule(ctx.store, stage_key(out[-1]), out[-1])  # a graph of an older default rule: refused
    return out


def _build_cluster(ctx: Context, src, inputs):
    (key,) = inputs
    cl = ctx.point["cluster"]
    lloyd = cl["algorithm"] == "lloyd"
    return [ClusterParams(input=key, src=src, array=STAGES[src].output if src in STAGES else "X", k=ctx.k,
                          n_init=cl["n_init"], max_iter=cl["max_iter"], algorithm=cl["algorithm"],
                          minibatch_threshold=None if lloyd else cl["minibatch_threshold"],
                          batch_size=None if lloyd else cl["batch_size"], seed=cl["seed"],
                          max_memory=ctx.cfg.max_memory)]


def _build_assign(ctx: Context, src, inputs):
    from bigclust.algo.blocks import row_blocks
    from bigclust.pipeline.stored_rows import stored_shape
    from bigclust._util.plan import consumer_rows, fits, nmf_plan

    (key,) = inputs
    cl = ctx.point["cluster"]
    stream, budget = None, ctx.cfg.max_memory
    node = ctx.store.open(src, key, dropped_ok=True)[STAGES[src].output if src in STAGES else "X"]  # metadata
    if src == "affinity" and node.attrs.get("format") != "csr":
        n = node.shape[0]
        if not fits(2, n, 8, budget):  # a float64 copy of K beside the stored one
            if ctx.method.assign_streamed is None:
                raise UserError(f"{ctx.cfg.path}: {ctx.method.name} has no out-of-core path and its n={n} dense "
                                "kernel does not fit [store] max_memory; raise max_memory")
            stream = tuple(b for b, _ in row_blocks(n, node.chunks[0], consumer_rows("normalize", n, 8, budget))) \
                + (n,)
    elif ctx.method.assign_streamed is not None and src != "affinity":
        n, m, row_bytes = stored_shape(node)
        plan = nmf_plan(n, row_bytes, m, ctx.k, getattr(ctx.params, "n_init", 1), budget)
        stream = None if plan.in_memory else plan.bounds
    return [AssignParams(input=key, src=src, method=ctx.method.name, method_params=params_dict(ctx.params),
                         k=ctx.k, cluster={"n_init": cl["n_init"], "max_iter": cl["max_iter"]}, seed=cl["seed"],
                         stream=stream)]


def _show(p) -> str:
    return " ".join(f"{k}={v}" for k, v in hashed(p).items()
                    if v is not None and k not in ("input", "inputs", "src", "array", "method_params"))  # noqa: E501


register_stage(StageDef("affinity", _build_affinity, affinity, "K",
                        # dense kernels are Dask graphs of row blocks; the kNN graph needs every row in one process
                        # unless searched in chunks (tasks of their own, driven from here)
                        where=lambda p: "task" if p.kind == "knn" and not p.knn_chunk_rows else "here",
                        report=("knn_chunks",), describe=lambda p: _show(p)))
register_stage(StageDef("cluster", _build_cluster, cluster, "labels", where=lambda p: "task",
                        describe=lambda p: f"k={p.k}"))
register_stage(StageDef("assign", _build_assign, assign, "labels",
                        where=lambda p: "here" if p.stream else "task",
                        report=("n_iter", "converged"),
                        describe=lambda p: f"{_fmt(p.method_params)} k={p.k}"
                                           + (f" (streamed, {len(p.stream) - 1} blocks)" if p.stream else "")))
# the rows of a few classes, for the subset protocol (built by the runner, not chained by methods)
register_stage(StageDef("subset", None, subset, "X", describe=lambda p: f"classes={list(p.classes)}"))
