"""The normalize family's plug-in: RA, Ncut, SK, BBS, MBBS and RC as pipeline methods, and the embed stage.

Registers with :mod:`bigclust.pipeline.methods`: each method's parameter dataclass (its config section), its
chain (affinity -> embed -> cluster) and the hooks the embed stage calls -- in memory a hook gets K (a list of
kernels for MBBS) and the parameters and returns ``(P, info)``; out of core it gets the zarr kernels and the
stage's group, and returns ``(P, scale, info, extra)``: the zarr array whose eigenvectors are wanted (a
``*_scratch`` array of the stage, deleted before the stage is committed, or K itself), an optional diagonal
scaling applied on both sides, the solver's info and extra attributes.  The embed stage (normalise with the
method's hook, then the row-normalised spectral embedding; MB and MC of the normalised matrix as attributes
and report columns) is registered here too: any family whose chain normalises a kernel (the subspace
family's Ncut of W) runs it.  Cheap to import: the algorithms are imported inside the hooks.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

from bigclust._util.errors import DataError, UserError
from bigclust.pipeline.methods import (ADDED, RUNTIME, Method, StageDef, fmt_params, register, register_column,
                                       register_stage)
from bigclust.pipeline.schema import nonnegative, param, params_dict, positive


# -- parameters (one config section each) -----------------------------------------------------------


@dataclass(frozen=True)
class RAParams:
    """RA: the kernel itself (paper 000; paper 001's AW)."""


@dataclass(frozen=True)
class NcutParams:
    """Ncut: D^-1/2 K D^-1/2, iterated n_iter times (iterated, it tends to a bi-stochastic matrix)."""

    n_iter: int = positive(1, int)


@dataclass(frozen=True)
class SKParams:
    """Sinkhorn-Knopp: the KL-nearest symmetric bi-stochastic matrix."""

    n_iter: int = positive(1000, int)
    tol: float = nonnegative(0.0, float)      # max row-sum error to stop at; 0 = run n_iter
    record_every: int = nonnegative(0, int)   # MB/MC every this many iterations (0: never)


@dataclass(frozen=True)
class BBSParams:
    """Euclidean BBS (paper 000): Alg. 1, Dykstra or the exact dual Newton solver."""

    n_iter: int = positive(1000, int)
    tol: float = nonnegative(0.0, float)
    # "dual" (the exact minimiser, ~10-20 Newton steps): on optdigits (median gamma) ACC 0.87 in 14 s where
    # Alg. 1 ("alternating", paper 000's protocol, which its configs state) gets 0.79 in 73 s and is still
    # 0.19 from bi-stochastic after 1000 passes.  Out of core only "alternating" streams
    solver: str = param("dual", choices=("alternating", "dykstra", "dual"), was="alternating")
    record_every: int = nonnegative(0, int)
    # sparse (kNN) K only: the diagonal K_ii = 1 is the largest of ~k entries of its row and lets outlying
    # points keep their whole mass on it, cut off from the graph; "zero" keeps it in the support as slack
    # with no similarity (bigclust.normalize.bbs); "keep" is the behaviour before issue 13
    self_loops: str = param("zero", choices=("keep", "zero", "drop", "cap"))


@dataclass(frozen=True)
class MBBSParams:
    """MBBS (paper 000 section V): BBS of a learnt combination of the kernels of a γ sweep."""

    lam: float = positive(1.0, float)        # weight of ||alpha||^2
    n_outer: int = positive(20, int)         # outer (G, alpha) iterations
    n_iter: int = positive(100, int)         # budget of each G-step (Newton steps, or Alg. 1 passes out of core)
    tol: float = positive(1e-6, float)       # stop when the weights move less than this


@dataclass(frozen=True)
class RCParams:
    """Ratio cut (paper 001's RC): the k smallest eigenvectors of the Laplacian D - A."""


# -- hooks of the embed stage ------------------------------------------------------------------


def _record(p, y):
    return {"y": y if p.record_every else None, "record_every": p.record_every}


def ra_memory(K, p, y):
    from bigclust.normalize import ra
    return ra(K, return_info=True)


def ncut_memory(K, p, y):
    from bigclust.normalize import ncut
    return ncut(K, n_iter=p.n_iter, return_info=True)


def sk_memory(K, p, y):
    from bigclust.normalize import sinkhorn
    return sinkhorn(K, n_iter=p.n_iter, tol=p.tol or None, return_info=True, **_record(p, y))


def bbs_memory(K, p, y):
    from bigclust.normalize import bbs
    # copy=False: the stage's K is its own (read from the store), so its diagonal is zeroed in place for the
    # solve instead of a copy of its values (0.4 GB at 8.1M rows); K is as it was after, for the set-aside rows
    return bbs(K, solver=p.solver, n_iter=p.n_iter, tol=p.tol or None, return_info=True, self_loops=p.self_loops,
               copy=False, **_record(p, y))


def mbbs_memory(Ks, p, y):
    """The exact dual BBS as G-step (warm-started); float64 kernels."""
    import numpy as np

    from bigclust.normalize import mbbs
    Ks = [K.astype(np.float64) for K in Ks]
    return mbbs(Ks, lam=p.lam, n_outer=p.n_outer, solver="dual", n_iter=p.n_iter, tol=p.tol, return_info=True)


# -- checks before any work (Method.check) ------------------------------------------------------------


def check_bbs(p, point, n, d):
    """A BBS solver that cannot stream, on a dense kernel that will not fit ``[store] max_memory``: refused
    before any work, as ``pipeline validate`` (a registered data set) and ``run`` (before ingest) call it
    through :func:`bigclust.pipeline.checks.check_sizes`, and the estimator before its fit.

    Otherwise the embed stage (:func:`bbs_ooc`) would refuse it only after the n x n kernel was built.  Not
    said here: a budget too small for any solver (``check_sizes`` says that one), and the subset protocol,
    whose kernels are of the drawn classes only (their size unknown until the labels are read).
    """
    import numpy as np

    from bigclust._util.plan import format_bytes, min_budget, normalize_plan, parse_bytes

    a = point["affinity"]
    if p.solver == "alternating" or a["kind"] == "knn" or point["evaluate"]["protocol"] == "subsets":
        return
    itemsize, budget = np.dtype(a["dtype"]).itemsize, parse_bytes(point["store"]["max_memory"])
    plan = normalize_plan(n, itemsize, budget)
    if plan.in_memory or min_budget(n, itemsize) > budget:
        return
    raise UserError(f'[bbs] solver = "{p.solver}" needs the n={n} dense kernel and its iterate in memory '
                    f"({format_bytes(2 * n * n * itemsize)}), more than [store] max_memory="
                    f"{point['store']['max_memory']!r} ({format_bytes(budget)}), and out of core only the "
                    'alternating solver streams: set [bbs] solver = "alternating", or raise [store] max_memory '
                    'or use [affinity] kind = "knn"')


# -- out of core: K stays in zarr ------------------------------------------------------------------


def ra_ooc(Ks, group, p, y, max_memory, client):
    return Ks[0], None, None, {}


def ncut_ooc(Ks, group, p, y, max_memory, client):
    """Ncut only scales K: ``diag(d) K diag(d)`` is applied as an operator and never written."""
    import numpy as np

    from bigclust.normalize.ooc import blocked_matvec_operator, sinkhorn_blocked
    K = Ks[0]
    if p.n_iter == 1:  # D^-1/2 K D^-1/2; K may have negative entries
        deg = blocked_matvec_operator(K, max_memory=max_memory) @ np.ones(K.shape[0])
        if np.any(deg <= 0):
            raise DataError(f"K has a row with non-positive sum (row {int(np.argmin(deg))}); Ncut needs D > 0")
        return K, 1.0 / np.sqrt(deg), None, {}
    info = sinkhorn_blocked(K, None, n_iter=p.n_iter, max_memory=max_memory, client=client)
    return K, info.mu, info, {}  # iterated Ncut is the symmetric Sinkhorn iteration from d = 1


def sk_ooc(Ks, group, p, y, max_memory, client):
    from bigclust.algo.blocks import create_like
    from bigclust.normalize.ooc import sinkhorn_blocked
    P = create_like(Ks[0], group, "P_scratch")
    info = sinkhorn_blocked(Ks[0], P, n_iter=p.n_iter, tol=p.tol or None, max_memory=max_memory, client=client)
    return P, None, info, {}


def bbs_ooc(Ks, group, p, y, max_memory, client):
    from bigclust.algo.blocks import create_like
    from bigclust.normalize.ooc import bbs_blocked
    n = Ks[0].shape[0]
    if p.solver != "alternating":
        raise UserError(f"out-of-core BBS (n={n} does not fit [store] max_memory) supports solver = "
                        f"\"alternating\" only ([bbs] solver), not {p.solver!r}; raise max_memory or use "
                        "kind = \"knn\"")
    P = create_like(Ks[0], group, "P_scratch")
    info = bbs_blocked(Ks[0], P, n_iter=p.n_iter, tol=p.tol or None, max_memory=max_memory, client=client,
                       **_record(p, y))
    return P, None, info, {}


def mbbs_ooc(Ks, group, p, y, max_memory, client):
    """The m kernels stay in zarr; the G-step is the paper's Alg. 1 streamed (``n_iter`` passes)."""
    import numpy as np

    from bigclust.algo.blocks import create_like
    from bigclust.normalize.ooc import mbbs_blocked
    G = create_like(Ks[0], group, "G_scratch", np.float64)
    info = mbbs_blocked(Ks, G, create_like(Ks[0], group, "Kbar_scratch", np.float64), lam=p.lam,
                        n_outer=p.n_outer, n_iter=p.n_iter, tol=p.tol, max_memory=max_memory, client=client)
    return G, None, info, {"mbbs_solver": "alternating-ooc"}


def rc_memory(K, p, y):
    from bigclust.normalize import rc
    return rc(K, return_info=True)


@dataclass(frozen=True)
class EmbedParams:
    inputs: tuple                                 # affinity keys (several when the method combines a sweep)
    src: str                                      # their stage: affinity, or the subspace stage's W
    method: str
    method_params: dict
    k: int
    eigensolver: str
    in_memory: bool                               # from bigclust._util.plan; MBBS's G-step differs out of core
    seed: int
    max_memory: int = field(default=0, metadata=RUNTIME)
    min_component: float = field(default=0.01, metadata=ADDED)   # [embed] min_component
    n_samples: int = field(default=0, metadata=RUNTIME)


#: rows from which an in-memory embed stage runs on a worker restarted for it (``StageDef.fresh``): a restart
#: costs about 3 s; the 280 MiB it gives back matter near a worker's limit (8.1M rows), not at 1M (0.9 GB)
FRESH_WORKER_ROWS = 1 << 21


# -- the embed stage: normalise, then the spectral embedding ------------------------------------


def embed(store_path, key, attrs, p: EmbedParams, *, y=None, client=None, **_):
    """Normalise the kernel(s) with the method's hook and write the row-normalised spectral embedding.

    The normalised matrix P itself is not persisted: it is n x n like K and
    only its top eigenvectors are used.  Its quality (MB, MC), the solver's
    convergence and the MB/MC history are kept as attributes.  Out of core
    (``p.in_memory`` false) K stays in zarr and the method's streaming hook
    runs; with a distributed ``client`` its block passes are cluster tasks.
    """
    import scipy.sparse as sp

    from bigclust.algo.spectral import check_connected, components
    from bigclust.normalize import quality
    from bigclust.pipeline.methods import get
    from bigclust.pipeline.store import Store, is_sparse, read_matrix

    m = get(p.method)
    mp = m.make(p.method_params)
    store = Store(store_path)
    groups = [store.open(p.src, a) for a in p.inputs]
    if len({is_sparse(g, "K") for g in groups}) > 1:
        raise UserError(f"{p.method} needs kernels that are all dense or all sparse")
    t0, c0 = time.perf_counter(), time.process_time()
    if not p.in_memory:
        with store.write("embed", key, attrs) as g:
            P, scale, info, extra = m.normalize_ooc([gr["K"] for gr in groups], g, mp, y, p.max_memory, client)
            extra.update(_usage("normalize", t0, c0))
            _embed_streamed(g, P, scale, info, time.perf_counter() - t0, p, y, **extra, **_alpha(info))
        return
    Ks = [read_matrix(gr, "K") for gr in groups]  # float32 kernels stay float32 (half the bytes per pass)
    # disconnected graphs are said before the eigensolver meets them (one warning line, not a solver
    # failure); a kNN kernel said so when it was built (naming the cause: n_neighbors or gamma)
    n_in = [components(K)[0] if sp.issparse(K) else check_connected(K) for K in Ks]
    order, y = _renumber(Ks, n_in, m, y)
    P, info = m.normalize(Ks if m.combine else Ks[0], mp, y)
    t_norm = time.perf_counter() - t0
    extra = {**_alpha(info), **_usage("normalize", t0, c0)}
    n_out, labels = components(P)
    extra["components"] = [max(n_in), n_out]
    aside, R, n_small = _set_aside(Ks, n_in, n_out, labels, p)
    del Ks, labels   # the eigensolver needs P only: K's memory (~1 GB at 8.1M rows x 10 neighbours) goes back first
    mb, mc = quality(P, y)   # MB only without labels
    y = info.mu = None   # nor the labels or the dual vector (n each)
    said = (f"{p.method} split the affinity graph: {max(n_in)} connected component(s) before, {n_out} after "
            "normalisation")
    if n_small:
        extra["set_aside"] = [n_small, int(aside.size)]
        said += (f"; {n_small} of them ({aside.size} rows) are below [embed] min_component = {p.min_component} of "
                 f"n / {p.k} rows and get no eigenvector (their rows take their kernel neighbours' embedding)")
    # a split into at most k components is the clustering itself (well-separated blobs under the exact BBS):
    # only more components than clusters crowd the top of the spectrum
    if n_out > max(n_in) and n_out - n_small > p.k:
        warnings.warn(f"{said}; each of the {'other ' if n_small else ''}{n_out - n_small} components adds an "
                      "eigenvalue at the top of the spectrum, so the embedding sees them as separate clusters",
                      RuntimeWarning, stacklevel=2)
    elif n_small:
        warnings.warn(said, RuntimeWarning, stacklevel=2)
    _embed_and_write(store, key, attrs, P, info, t_norm, p, (mb, mc), order=order, aside=aside, aside_rows=R, **extra)


def _set_aside(Ks, n_in, n_out, labels, p):
    """``(rows, R, n)``: P's rows of the small components the normaliser split off (P's numbering), the first
    kernel's rows of them and their number of components (:mod:`bigclust.algo.small_components`)."""
    import numpy as np

    from bigclust.algo.small_components import small_component_rows
    rows = small_component_rows(labels, n_out, p.k, p.min_component) if n_out > max(n_in) else np.empty(0, int)
    if not rows.size:
        return rows, None, 0
    return rows, Ks[0][rows], int(np.unique(labels[rows]).size)


def _renumber(Ks, n_in, m, y):
    """``(order, y)``: one connected sparse float32 kernel of ``REORDER_MIN_ROWS`` rows or more, renumbered.

    Breadth-first order (:func:`bigclust.algo.renumber.local_order`) puts each row near its neighbours, so
    the normaliser's products and the eigensolver's gather nearby entries of x (8.1M rows: 1.88 -> 0.90 CPU s
    a product); the normalised P has K's pattern, hence the order ARPACK would compute from it.  ``Ks[0]`` is
    replaced (the list held the only reference to the original: never both kernels beyond the copy) and y is
    renumbered with it.  A disconnected graph keeps its numbering: the per-component solver numbers its
    blocks by the data's order.  Otherwise ``(None, y)``.  Each renumbered row is sorted by its new column
    numbers (a canonical K stays canonical), so the normaliser's input check shares it instead of copying it
    to sort it (0.9 GB at 8.1M rows): the same matrix it sorted.  float32 kernels only: sorted by the new
    numbers, each row's sum (the scaling d) moves in its last float64 bits; rounded to a float32 P they
    (almost always) vanish, and with the rows' old order restored E is the one of the data's order bit for
    bit.  A float64 P would keep them: float64 kernels keep the data's order here.
    """
    import numpy as np
    import scipy.sparse as sp

    from bigclust.algo import spectral

    K = Ks[0]
    if (m.combine or not sp.issparse(K) or K.dtype != np.float32 or n_in[0] != 1
            or K.shape[0] < spectral.REORDER_MIN_ROWS):
        return None, y
    canonical = K.has_canonical_format   # one read of the indices; a K with duplicates is left to the check
    del K
    Ks[0], order = spectral.local_order(Ks[0], sort_rows=canonical)
    return order, (None if y is None else np.asarray(y)[order])


#: what the embed stage records of its two steps, normalise and eigenvectors (``eigen``): wall and CPU seconds
#: (of the process running the stage, all its threads) and its peak RSS after the step, in MB; and
#: ``eigen_solves``, each large ARPACK solve's iterations and products (:func:`bigclust.algo.spectral.solve_log`)
STEP_ATTRS = tuple(f"{s}_{w}" for s in ("normalize", "eigen") for w in ("seconds", "cpu_seconds", "peak_rss_mb"))


def _usage(step, t0, c0):
    """``{<step>_seconds, <step>_cpu_seconds, <step>_peak_rss_mb}`` since ``perf_counter`` t0, ``process_time`` c0."""
    from bigclust._util.plan import peak_rss_mb

    return {f"{step}_seconds": time.perf_counter() - t0, f"{step}_cpu_seconds": time.process_time() - c0,
            f"{step}_peak_rss_mb": peak_rss_mb()}


def _alpha(info):
    alpha = getattr(info, "alpha", None)
    return {} if alpha is None else {"alpha": [float(a) for a in alpha]}


def _embed_streamed(g, P, scale, info, t_norm, p: EmbedParams, y, **extra):
    """Eigenvectors of the zarr ``P`` (times ``diag(scale)`` on both sides) by streaming, MB/MC, and the stage.

    Deletes the scratch arrays (``*_scratch``) of the stage group ``g`` before
    writing E, so that nothing n x n is committed.
    """
    import numpy as np
    from scipy.sparse.linalg import LinearOperator

    from bigclust.normalize import quality_from_sums, quality_partial
    from bigclust.normalize.ooc import blocked_matvec_operator
    from bigclust._util.plan import consumer_rows
    from bigclust.algo.spectral import embed as spectral_embed, solve_log
    from bigclust.pipeline.store import write_dense

    n = P.shape[0]
    op = blocked_matvec_operator(P, max_memory=p.max_memory)
    if scale is not None:
        base = op
        op = LinearOperator((n, n), matvec=lambda v: scale * (base @ (scale * np.ravel(v))), dtype=np.float64)
    t0, c0 = time.perf_counter(), time.process_time()
    with solve_log() as solves:
        E = spectral_embed(op, p.k, solver="eigsh", random_state=p.seed)
    extra.update(_usage("eigen", t0, c0), eigen_solves=solves)
    rows = consumer_rows("operator", n, 8, p.max_memory)  # one more streaming pass for MB (and MC)
    rs, rc = np.empty(n), np.empty(n)
    yq = y if y is not None else np.zeros(n, np.int64)
    for r0 in range(0, n, rows):
        blk = np.asarray(P[r0:r0 + rows], dtype=np.float64)
        if scale is not None:
            blk *= scale[r0:r0 + blk.shape[0], None] * scale[None, :]
        rs[r0:r0 + blk.shape[0]], rc[r0:r0 + blk.shape[0]] = quality_partial(blk, yq, r0)
    mb, mc = quality_from_sums(rs, rc)
    mc = mc if y is not None else float("nan")
    for name in [a for a in g.array_keys() if a.endswith("_scratch")]:
        del g[name]
    write_dense(g, "E", E)
    row_err = info.row_err if info and info.row_err == info.row_err else float(np.abs(rs - 1).max())
    g.attrs.update({"normalize_seconds": t_norm, "MB": float(mb), "MC": float(mc), "out_of_core": True,
                    "norm_n_iter": int(info.n_iter) if info else 0,
                    "norm_converged": bool(info.converged) if info else True, "row_err": float(row_err),
                    "history": [list(map(float, h)) for h in (info.history if info else [])], **extra})


def _embed_and_write(store, key, attrs, P, info, t_norm, p: EmbedParams, mbmc, order=None, aside=(), aside_rows=None,
                     **extra):
    """Spectral embedding and the stage's arrays/attributes (``mbmc``: P's MB and MC) for an in-memory P.
    ``order``: P is renumbered by it (:func:`embed`); E is written in the data's numbering.  ``aside``: P's rows
    that get no eigenvector (:func:`_set_aside`), embedded through the kernel's rows ``aside_rows`` (P's numbering).
    """
    import scipy.sparse as sp

    from bigclust.algo import renumber, small_components as small, spectral
    from bigclust.pipeline.resumable import release_heap
    from bigclust.pipeline.store import write_dense

    mb, mc = mbmc
    t0, c0 = time.perf_counter(), time.process_time()
    if order is not None and sp.issparse(P) and P.has_sorted_indices:
        # a normaliser's rows are sorted by the new numbers (and quality sorts them in place): in the old
        # order each product sums as it did before the renumbering.  Timed with the eigenvectors it serves
        renumber.in_original_row_order(P, order)
    if len(aside):
        small.drop_rows(P, aside)
    release_heap()   # the normaliser's freed temporaries, before the solve (the stage's peak): 1M BBS-dual, 32 MiB
    with spectral.solve_log() as solves:
        # P is not read after this: from 2^21 rows it is held as its upper triangle while ARPACK runs
        E = spectral.embed(P, p.k, solver=p.eigensolver, random_state=p.seed, order=order, overwrite=True)
    if len(aside):
        R = sp.csr_matrix(aside_rows)
        if order is not None:   # P's numbering -> the data's, where E's rows are
            aside, R = order[aside], sp.csr_matrix((R.data, order[R.indices], R.indptr), shape=R.shape)
        small.extend(E, aside, R)
    extra.update(_usage("eigen", t0, c0), eigen_solves=solves)
    with store.write("embed", key, attrs) as g:
        write_dense(g, "E", E)
        g.attrs.update({"normalize_seconds": t_norm, "MB": float(mb), "MC": float(mc),
                        "norm_n_iter": int(info.n_iter), "norm_converged": bool(info.converged),
                        "row_err": float(info.row_err), "out_of_core": False,
                        "history": [list(map(float, h)) for h in info.history], **extra})


def _build_embed(ctx, src, inputs):
    import numpy as np

    from bigclust._util.plan import normalize_plan

    n, emb = ctx.info["n_samples"], ctx.point["embed"]
    ncomp = emb["n_components"] or ctx.k
    if ncomp >= n:
        raise UserError(f"{ctx.cfg.path}: [embed] n_components={ncomp} must be below n={n}")
    K = ctx.store.open(src, inputs[0], dropped_ok=True)["K"]  # its metadata only
    sparse = K.attrs.get("format") == "csr"
    itemsize = np.dtype(ctx.point["affinity"]["dtype"]).itemsize
    in_memory = sparse or normalize_plan(n, itemsize, ctx.cfg.max_memory, n_kernels=len(inputs)).in_memory
    if not in_memory and ctx.method.normalize_ooc is None:
        raise UserError(f"{ctx.cfg.path}: {ctx.method.name} has no out-of-core path and its n={n} dense kernel "
                        "does not fit [store] max_memory; raise max_memory or use [affinity] kind = \"knn\"")
    return [EmbedParams(inputs=tuple(inputs), src=src, method=ctx.method.name, method_params=params_dict(ctx.params),
                        k=ncomp, eigensolver=emb["eigensolver"], min_component=emb["min_component"],
                        in_memory=in_memory, n_samples=n,
                        seed=ctx.point["cluster"]["seed"], max_memory=ctx.cfg.max_memory)]


register_stage(StageDef("embed", _build_embed, embed, "E",
                        where=lambda p: "task" if p.in_memory else "here",
                        fresh=lambda p: p.in_memory and p.n_samples >= FRESH_WORKER_ROWS,
                        report=("MB", "MC", "norm_n_iter", "row_err", "history", "alpha", "components", "set_aside",
                                *STEP_ATTRS, "eigen_solves"),
                        describe=lambda p: fmt_params(p.method_params) + ("" if p.in_memory else " (out of core)")))


# -- registration -----------------------------------------------------------------------------------------

SPECTRAL = ("affinity", "embed", "cluster")
_N_ITER, _TOL, _RECORD = ("method", "n_iter"), ("method", "tol"), ("method", "record_every")

register(Method("ra", RAParams, SPECTRAL, "spectral clustering on K itself", normalize=ra_memory,
                normalize_ooc=ra_ooc, default=True, papers={"000": "ra", "001": "AW"},
                hashed_unused=True))
register(Method("ncut", NcutParams, SPECTRAL, "normalised cut: D^-1/2 K D^-1/2 (optionally iterated)",
                normalize=ncut_memory, normalize_ooc=ncut_ooc, default=True, papers={"000": "ncut", "001": "NC"},
                moved={("method", "ncut_iter"): "n_iter"},
                hashed_unused=True))
register(Method("sk", SKParams, SPECTRAL, "Sinkhorn-Knopp bi-stochastic scaling (BBS with KL)",
                normalize=sk_memory, normalize_ooc=sk_ooc, default=True, papers={"000": "sk"},
                moved={_N_ITER: "n_iter", _TOL: "tol", _RECORD: "record_every"},
                hashed_unused=True))
register(Method("bbs", BBSParams, SPECTRAL, "Euclidean bi-stochastic projection (paper 000)",
                normalize=bbs_memory, normalize_ooc=bbs_ooc, check=check_bbs, default=True, papers={"000": "bbs"},
                moved={_N_ITER: "n_iter", _TOL: "tol", ("method", "solver"): "solver", _RECORD: "record_every"},
                hashed_unused=True))
register(Method("mbbs", MBBSParams, SPECTRAL, "BBS of learnt weights over the kernels of a gamma sweep",
                normalize=mbbs_memory, normalize_ooc=mbbs_ooc, combine=("affinity", "gamma"),
                moved={_N_ITER: "n_iter", ("method", "lam"): "lam", ("method", "mbbs_outer"): "n_outer"},
                hashed_unused=True))
register(Method("rc", RCParams, SPECTRAL, "ratio cut: smallest eigenvectors of the Laplacian D - A",
                normalize=rc_memory, papers={"001": "RC"},
                hashed_unused=True))
register_column("MB")
register_column("MC")

# the family's scikit-learn estimator, bigclust.SpectralClustering (imported on first use)
from bigclust.estimators import register_estimator  # noqa: E402

register_estimator("SpectralClustering", "bigclust.normalize.estimator")
