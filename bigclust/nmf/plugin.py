"""The NMF family's plug-in: K-means (KM / KM-NCW), linear NMF, bilinear NMF and kernel k-means as pipeline methods.

Registers with :mod:`bigclust.pipeline.methods` each method's parameter dataclass (its config section), its
chain and its hooks.  An assign hook gets the assign stage's input -- the preprocessed documents X (rows) or
a kernel K from the affinity stage -- the method's parameter dataclass, k and the seed, and returns an
:class:`bigclust.pipeline.methods.Assignment`: the labels of every restart it keeps (one row for NMF, which
keeps its best restart; all restarts for the k-means variants), their objectives, the picked restart, and
the arrays worth keeping (the factors).  Cheap to import: the algorithms are imported inside the hooks.
"""
from __future__ import annotations

from dataclasses import dataclass

from bigclust.pipeline.methods import Assignment, Method, register
from bigclust.pipeline.schema import nonnegative, param, positive


# -- parameters (one config section each) -----------------------------------------------------------


@dataclass(frozen=True)
class KMeansParams:
    """K-means on the (preprocessed) data themselves."""

    n_init: int = nonnegative(0, int)   # restarts; 0 = [cluster] n_init (raw text can afford fewer)
    ncw: bool = param(False)            # paper 001's KM-NCW: k-means on d_i^(-1/2) x_i, d = X X^T 1


@dataclass(frozen=True)
class NMFParams:
    """Linear NMF (paper 001, 3-1..3-5): X ~ V U^T, label = argmax of V's row."""

    solver: str = param("mu", choices=("mu", "hals"))
    init: str = param("random", choices=("random", "nndsvd"))
    n_init: int = positive(10, int)           # restarts, the lowest objective wins ("best of 10 runs")
    max_iter: int = positive(500, int)
    tol: float = nonnegative(1e-5, float)     # relative objective change to stop at
    ncw: bool = param(False)                  # NMF-NCW: documents weighted by d^(-1/2)


@dataclass(frozen=True)
class BiNMFParams:
    """Bilinear (kernel) NMF, concept factorisation (3-6..3-17) on [affinity]'s kernel (linear: never formed)."""

    init: str = param("random", choices=("random",))
    n_init: int = positive(10, int)
    max_iter: int = positive(500, int)
    tol: float = nonnegative(1e-5, float)
    ncw: bool = param(False)                  # BiNMF-NCW: on D^(-1/2) K D^(-1/2)


@dataclass(frozen=True)
class KernelKMeansParams:
    """Kernel k-means on [affinity]'s kernel (restarts and iterations from [cluster])."""

    ncw: bool = param(False)                  # on D^(-1/2) K D^(-1/2)


# -- hooks of the assign stage -----------------------------------------------------------------


def _info_attrs(info):
    return {"n_iter": int(info.n_iter), "converged": bool(info.converged), "solver": info.method,
            "objectives": [float(o) for o in info.objectives]}


def nmf_assign(X, p, k, seed, cl, src):
    """Linear NMF (3-1..3-5), NCW when ``p.ncw``: label = argmax of V's row."""
    import numpy as np

    from bigclust.nmf import linear_nmf
    labels, U, V, info = linear_nmf(X, k, solver=p.solver, init=p.init, n_init=p.n_init, max_iter=p.max_iter,
                                    tol=p.tol, random_state=seed, ncw=p.ncw, return_info=True)
    return Assignment(labels[None, :], np.array([info.objectives[info.best]]), 0,
                      {"U": U, "V": V}, _info_attrs(info))


def nmf_assign_streamed(read_block, bounds, p, k, seed, map_blocks, cluster=None, src=None):
    """Linear NMF with X read from the store in row blocks, one pass per iteration (out of core)."""
    import numpy as np

    from bigclust.nmf import linear_nmf_streamed
    from bigclust.nmf._common import UserError
    if p.ncw or p.init != "random":
        raise UserError(f"linear NMF streamed out of core takes init = \"random\" without ncw (got init={p.init!r}, "
                        f"ncw={p.ncw}); raise [store] max_memory to run it in memory")
    Xb = read_block(0)
    labels, U, V, info = linear_nmf_streamed(read_block, bounds, Xb.shape[1], k, solver=p.solver, n_init=p.n_init,
                                             max_iter=p.max_iter, tol=p.tol, random_state=seed,
                                             map_blocks=map_blocks, return_info=True)
    return Assignment(labels[None, :], np.array([info.objectives[info.best]]), 0,
                      {"U": U, "V": V}, {**_info_attrs(info), "streamed_blocks": len(bounds) - 1})


def binmf_assign(data, p, k, seed, cl, src):
    """Bilinear NMF (3-6..3-17) on X with the linear kernel never formed, or on a kernel K."""
    import numpy as np

    from bigclust.nmf import bilinear_nmf
    kernel = "precomputed" if src == "affinity" else "linear"
    labels, W, V, info = bilinear_nmf(data, k, kernel=kernel, init=p.init, n_init=p.n_init, max_iter=p.max_iter,
                                      tol=p.tol, random_state=seed, ncw=p.ncw, return_info=True)
    return Assignment(labels[None, :], np.array([info.objectives[info.best]]), 0,
                      {"W": W, "V": V}, _info_attrs(info))


def binmf_assign_streamed(read_block, bounds, p, k, seed, map_blocks, cluster=None, src="affinity"):
    """Bilinear NMF on a dense kernel left in the store: every product streams K's row blocks.

    The blocks must be K's: with the linear kernel (``src`` is X, K = X X^T never formed) there is no
    streamed path, and X's blocks read as K's would factorise the wrong matrix.
    """
    import numpy as np

    from bigclust.nmf import bilinear_nmf
    from bigclust.nmf._bilinear import StoredKernel
    from bigclust.nmf._common import UserError
    if src != "affinity":
        raise UserError("bilinear NMF with the linear kernel (K = X X^T, never formed) needs X in memory, and X "
                        "with the factors does not fit max_memory; raise max_memory (out of core, bilinear NMF "
                        "streams only a stored dense kernel, such as the cosine-square one)")
    labels, W, V, info = bilinear_nmf(StoredKernel(read_block, bounds), k, kernel="precomputed", init=p.init,
                                      n_init=p.n_init, max_iter=p.max_iter, tol=p.tol, random_state=seed,
                                      ncw=p.ncw, return_info=True)
    return Assignment(labels[None, :], np.array([info.objectives[info.best]]), 0,
                      {"W": W, "V": V}, {**_info_attrs(info), "streamed_blocks": len(bounds) - 1})


def kmeans_ncw_assign(X, p, k, seed, cl, src):
    """KM-NCW: k-means restarts on the NCW-weighted documents ``d_i^(-1/2) x_i``, d = X X^T 1."""
    from bigclust.algo.kmeans import kmeans
    from bigclust.nmf import ncw_vectors
    res = kmeans(ncw_vectors(X), k, n_init=cl["n_init"], max_iter=cl["max_iter"], random_state=seed)
    return Assignment(res.labels, res.inertia, int(res.best))


def kernel_kmeans_assign(K, p, k, seed, cl, src):
    """Kernel k-means on K (``p.ncw``: on ``D^-1/2 K D^-1/2``), restarts in parallel."""
    import numpy as np
    import scipy.sparse as sp

    from bigclust.nmf import kernel_kmeans, ncw_weights
    K = K.toarray() if sp.issparse(K) else np.asarray(K, dtype=np.float64)
    if p.ncw:
        w = ncw_weights(K, kernel="precomputed")
        K = w[:, None] * K * w[None, :]
    labels, obj, info = kernel_kmeans(K, k, n_init=cl["n_init"], max_iter=cl["max_iter"], random_state=seed,
                                      return_info=True)
    return Assignment(info.extra["labels_all"], np.asarray(info.objectives, dtype=np.float64), int(info.best),
                      attrs={"n_empty_reseeded": int(info.n_empty_reseeded)})


def kernel_kmeans_assign_streamed(read_block, bounds, p, k, seed, map_blocks, cluster=None, src="affinity"):
    """Kernel k-means on a dense kernel left in the store: one pass over K's row blocks per iteration."""
    import numpy as np

    from bigclust.nmf import kernel_kmeans_streamed
    labels, obj, info = kernel_kmeans_streamed(read_block, bounds, k, n_init=cluster["n_init"],
                                               max_iter=cluster["max_iter"], random_state=seed, ncw=p.ncw,
                                               map_blocks=map_blocks, return_info=True)
    return Assignment(info.extra["labels_all"], np.asarray(info.objectives, dtype=np.float64), int(info.best),
                      attrs={"n_empty_reseeded": int(info.n_empty_reseeded), "streamed_blocks": len(bounds) - 1,
                             "passes": int(info.extra["passes"])})


# -- registration -----------------------------------------------------------------------------------------


def _ncw_name(plain):
    """Paper 001's name of a result: ``plain``, or ``plain-NCW`` when the method ran with ``ncw``."""
    return lambda r: plain + ("-NCW" if r["params"].get("ncw", False) else "")


register(Method("kmeans", KMeansParams, lambda p, point: ("assign",) if p.ncw else ("cluster",),
                "K-means on the data (restarts or mini-batch; ncw: on NCW-weighted documents)",
                assign=kmeans_ncw_assign, overrides=lambda p: {"cluster": {"n_init": p.n_init}} if p.n_init else {},
                # n_init = 0 stands for [cluster] n_init: tables show the restarts run, not the 0
                show=lambda shown, facts: {**shown, "n_init": facts["restarts"]}
                if shown.get("n_init") == 0 and facts.get("restarts") else shown,
                label="K-means", default=True, papers={"000": "kmeans", "001": _ncw_name("KM")},
                moved={("cluster", "kmeans_n_init"): "n_init"},
                hashed_unused=True))
register(Method("nmf", NMFParams, ("assign",), "linear NMF on the documents (paper 001)",
                assign=nmf_assign, assign_streamed=nmf_assign_streamed, papers={"001": _ncw_name("NMF")},
                term_factor="U",
                hashed_unused=True))
register(Method("binmf", BiNMFParams,
                lambda p, point: ("assign",) if point["affinity"]["kind"] == "linear" else ("affinity", "assign"),
                "bilinear kernel NMF (paper 001); the linear kernel is never formed", assign=binmf_assign,
                assign_streamed=binmf_assign_streamed, papers={"001": _ncw_name("BiNMF")},
                hashed_unused=True))
register(Method("kkmeans", KernelKMeansParams, ("affinity", "assign"), "kernel k-means on the affinity",
                assign=kernel_kmeans_assign, assign_streamed=kernel_kmeans_assign_streamed,
                papers={"001": _ncw_name("KM")},
                hashed_unused=True))

# the family's scikit-learn estimator, bigclust.NMFClustering (imported on first use)
from bigclust.estimators import register_estimator  # noqa: E402

register_estimator("NMFClustering", "bigclust.nmf.estimator")
