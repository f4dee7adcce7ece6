"""THE method registry: method name → parameter dataclass, config section, chain of stages.

Every clustering method the pipeline, the CLI and the estimators can run is one
:class:`Method` here.  A method declares

- ``params``: a frozen dataclass of its own parameters, read from the config
  section named after the method (``[bbs] n_iter = 500``); each field's
  :func:`param` carries its default, type, range check and the text of the
  one-line error;
- ``chain``: the stages it needs after ingest and preprocess (the stages
  themselves are in :mod:`bigclust.pipeline.stages`, which never names a method);
- the hooks those stages call: ``normalize`` / ``normalize_ooc`` for the
  embed stage (in memory, or streaming row blocks of a dense kernel);
- ``combine``: a ``(section, key)`` sweep whose values one instance of the
  method uses together (MBBS combines the kernels of a γ sweep);
- ``overrides``: values of shared sections the method sets for its own chain
  (K-means on raw data may use fewer restarts than on an embedding).

Adding a method family = one module with its algorithms + one :func:`register`
call (a test registers a toy method from its own file:
``tests/test_methods.py``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from bigclust.pipeline.config import Key
from bigclust._util.errors import ConfigError, UserError


def param(default, type_=None, *, check: Callable[[Any], bool] | None = None, expect: str = "",
          choices: tuple | None = None, sweep: bool = True, added: bool = False):
    """A dataclass field that is also a config key (see :class:`bigclust.pipeline.config.Key`).

    ``added=True`` marks a key added after stores and output folders were made with the method: at its
    default it is left out of the config hash and of the stage keys (:func:`params_dict`), so those stay valid.
    """
    if choices is not None:
        check, expect = (lambda v: v in choices), "one of " + ", ".join(map(repr, choices))
    t = type_ or type(default)
    return field(default=default, metadata={"key": Key(t, default, check, expect, sweep, added=added)})


def params_dict(params) -> dict:
    """A method's parameters as the stages hash and receive them: ``added`` keys only off their default."""
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)
            if not (f.metadata["key"].added and getattr(params, f.name) == f.default)}


def positive(default, type_=None):
    return param(default, type_, check=lambda v: v > 0, expect="> 0")


def nonnegative(default, type_=None):
    return param(default, type_, check=lambda v: v >= 0, expect=">= 0")


@dataclass(frozen=True)
class Method:
    """A registered clustering method (see the module docstring).

    Attributes
    ----------
    name : str
        Its name in ``[method] names`` and its config section ``[name]``.
    params : type
        Frozen dataclass of its parameters (fields made with :func:`param`).
    chain : tuple of str, or callable
        Stages after preprocess, each a name in :data:`bigclust.pipeline.stages.STAGES`;
        or ``chain(params, point) -> tuple`` when they depend on the parameters
        or the config point (bilinear NMF on the linear kernel skips the affinity).
    doc : str
        One line for ``bigclust methods`` and error messages.
    normalize : callable, optional
        Embed stage in memory: ``(K, params, y) -> (P, info)``; ``K`` is a
        list of kernels when ``combine`` is set.
    assign : callable, optional
        Assign stage: ``(X or K, params, k, seed, cluster_section, src) -> Assignment``
        (:class:`bigclust.nmf._hooks.Assignment`), for methods that label the
        points themselves (NMF: argmax of a factor; kernel k-means).
    assign_streamed : callable, optional
        Assign stage when its input does not fit ``max_memory`` (documents X:
        :func:`bigclust._util.plan.nmf_plan`; a dense kernel K: two float64 copies):
        ``(read_block, bounds, params, k, seed, map_blocks, cluster=cluster_section, src=src) -> Assignment``
        (``src``: ``"affinity"`` when the blocks are a kernel's rows, else the documents').
    normalize_ooc : callable, optional
        Embed stage out of core: ``(Ks, group, params, y, max_memory, client)
        -> (P, scale, info, extra_attrs)`` with ``Ks`` zarr arrays, ``P`` a
        zarr array (a ``*_scratch`` array of ``group`` or K itself) whose
        eigenvectors, scaled by ``diag(scale)`` on both sides, are embedded.
    combine : (section, key), optional
        One instance over all values of this sweep (MBBS: ``("affinity", "gamma")``).
    overrides : callable, optional
        ``params -> {section: {key: value}}`` applied to the point for this chain.
    """

    name: str
    params: type
    chain: tuple[str, ...] | Callable
    doc: str = ""
    normalize: Callable | None = None
    assign: Callable | None = None
    assign_streamed: Callable | None = None
    normalize_ooc: Callable | None = None
    combine: tuple[str, str] | None = None
    overrides: Callable | None = None

    def schema(self) -> dict[str, Key]:
        """The config keys of ``[name]``: one per field of ``params``."""
        return {f.name: f.metadata["key"] for f in dataclasses.fields(self.params)}

    def make(self, values: dict | None = None):
        """The parameter dataclass from a (validated) section dict; defaults for missing keys."""
        return self.params(**(values or {}))

    def stages(self, params, point) -> tuple[str, ...]:
        """The chain for these parameters at this config point."""
        return self.chain(params, point) if callable(self.chain) else self.chain


REGISTRY: dict[str, Method] = {}


def register(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` to the registry (``replace=True`` to redefine a name, e.g. in tests)."""
    if not replace and method.name in REGISTRY:
        raise ValueError(f"method {method.name!r} is already registered")
    from bigclust.pipeline.config import SCHEMA
    if method.name in SCHEMA:
        raise ValueError(f"method name {method.name!r} would shadow the config section [{method.name}]")
    for f in dataclasses.fields(method.params):
        if "key" not in f.metadata:
            raise ValueError(f"{method.params.__name__}.{f.name} must be declared with methods.param()")
    REGISTRY[method.name] = method
    return method


def unregister(name: str):
    """Remove a method (tests that register a toy method clean up with this)."""
    REGISTRY.pop(name, None)


def get(name: str) -> Method:
    """The registered method ``name``; a one-line UserError naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UserError(f"unknown method {name!r}; expected one of {', '.join(names())}") from None


def names() -> list[str]:
    return list(REGISTRY)


def check_names(value) -> bool:
    return isinstance(value, list) and len(value) > 0 and all(isinstance(v, str) and v in names() for v in value)


def _hook(name, module="bigclust.normalize._hooks"):
    """A hook of a family's ``_hooks`` module, imported on first call (``import bigclust`` stays fast)."""
    def call(*args, **kwargs):
        from importlib import import_module
        return getattr(import_module(module), name)(*args, **kwargs)
    call.__name__ = name
    return call


def _nmf(name):
    return _hook(name, "bigclust.nmf._hooks")


# -- the built-in methods --------------------------------------------------------------------------


@dataclass(frozen=True)
class KMeansParams:
    """K-means on the (preprocessed) data themselves."""

    n_init: int = nonnegative(0, int)   # restarts; 0 = [cluster] n_init (raw text can afford fewer)
    ncw: bool = param(False)            # paper 001's KM-NCW: k-means on d_i^(-1/2) x_i, d = X X^T 1


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
    solver: str = param("alternating", choices=("alternating", "dykstra", "dual"))
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


SPECTRAL = ("affinity", "embed", "cluster")

register(Method("kmeans", KMeansParams, lambda p, point: ("assign",) if p.ncw else ("cluster",),
                "K-means on the data (restarts or mini-batch; ncw: on NCW-weighted documents)",
                assign=_nmf("kmeans_ncw_assign"),
                overrides=lambda p: {"cluster": {"n_init": p.n_init}} if p.n_init else {}))
register(Method("ra", RAParams, SPECTRAL, "spectral clustering on K itself",
                normalize=_hook("ra_memory"), normalize_ooc=_hook("ra_ooc")))
register(Method("ncut", NcutParams, SPECTRAL, "normalised cut: D^-1/2 K D^-1/2 (optionally iterated)",
                normalize=_hook("ncut_memory"), normalize_ooc=_hook("ncut_ooc")))
register(Method("sk", SKParams, SPECTRAL, "Sinkhorn-Knopp bi-stochastic scaling (BBS with KL)",
                normalize=_hook("sk_memory"), normalize_ooc=_hook("sk_ooc")))
register(Method("bbs", BBSParams, SPECTRAL, "Euclidean bi-stochastic projection (paper 000)",
                normalize=_hook("bbs_memory"), normalize_ooc=_hook("bbs_ooc")))
register(Method("mbbs", MBBSParams, SPECTRAL, "BBS of learnt weights over the kernels of a gamma sweep",
                normalize=_hook("mbbs_memory"), normalize_ooc=_hook("mbbs_ooc"), combine=("affinity", "gamma")))
register(Method("rc", RCParams, SPECTRAL, "ratio cut: smallest eigenvectors of the Laplacian D - A",
                normalize=_hook("rc_memory")))
register(Method("nmf", NMFParams, ("assign",), "linear NMF on the documents (paper 001)",
                assign=_nmf("nmf_assign"), assign_streamed=_nmf("nmf_assign_streamed")))
register(Method("binmf", BiNMFParams,
                lambda p, point: ("assign",) if point["affinity"]["kind"] == "linear" else ("affinity", "assign"),
                "bilinear kernel NMF (paper 001); the linear kernel is never formed", assign=_nmf("binmf_assign"),
                assign_streamed=_nmf("binmf_assign_streamed")))
register(Method("kkmeans", KernelKMeansParams, ("affinity", "assign"), "kernel k-means on the affinity",
                assign=_nmf("kernel_kmeans_assign"), assign_streamed=_nmf("kernel_kmeans_assign_streamed")))


@dataclass(frozen=True)
class SubspaceParams:
    """Ak-SC (paper 002): self-expression on kNN dictionaries enlarged by augmented samples, Ncut, k-means."""

    regularizer: str = param("l1", choices=("l1", "l2", "nuclear"))   # SSC, LSR, LRR
    n_neighbors: int = nonnegative(10, int)   # k of the kNN dictionary; 0 = the full dictionary (SSC/LSR/LRR)
    # preset: image shape and transforms ("coil20_rotscale": without the flip, "coil20_flip": the flip only);
    # "interpolate": linear interpolation of labelled samples of a class (AkS-SC only)
    augment: str = param("none", choices=("none", "coil20", "coil20_rotscale", "coil20_flip", "mnist",
                                          "interpolate"))
    lam: float = nonnegative(0.0, float)      # 0: SSC's rule lambda = min_i ||A_i^T x_i||_inf / alpha; LSR/LRR 0.05
    alpha: float = positive(20.0, float)
    svt: str = param("exact", choices=("exact", "gram", "randomized"))  # LRR's singular value thresholding
    pca: int = nonnegative(0, int)            # > 0: PCA features computed after augmentation (originals + copies)
    # "scattering": kymatio's Scattering2D(J=3, L=8) of every original and augmented image, channels normalised,
    # PCA not centred ([50]'s recipe, the paper's MNIST features; extra bigclust[scattering]); image: the layout,
    # "auto" = the augment preset's
    features: str = param("pixels", choices=("pixels", "scattering"), added=True)
    image: str = param("auto", choices=("auto", "mnist", "coil20"), added=True)
    # AkS-SC (semi-supervised, labels = argmax F of label propagation): the data's labels, -1 = unlabelled;
    # labelled_per_class > 0 keeps a seeded draw of that many labelled samples per class (the rest -1)
    semi_supervised: bool = param(False)
    labelled_per_class: int = nonnegative(0, int)
    gamma: float = positive(0.1, float)       # AkS-SC: coupling of C and the labels F
    n_interpolate: int = positive(720, int)   # augment = "interpolate": new samples per class
    # iterations per column of the l1 ADMM (default 5000), of LRR's inexact ALM (default 1000 for AkS-LRR,
    # 5000 otherwise); 0 = those defaults
    max_iter: int = param(0, int, check=lambda v: v >= 0, expect=">= 0", added=True)


def _aksc_chain(p, point):
    """Ak-SC: W, Ncut embedding, k-means; AkS-SC: one stage that labels the samples itself."""
    if p.features == "scattering" and p.image == "auto" and p.augment in ("none", "interpolate"):
        raise UserError('[aksc] features = "scattering" needs the image layout: set image = "mnist" or "coil20" '
                        "(or augment to an image preset)")
    if not p.semi_supervised:
        if p.labelled_per_class or p.augment == "interpolate":
            raise UserError("[aksc] labelled_per_class and augment = \"interpolate\" need semi_supervised = true")
        return ("subspace", "embed", "cluster")
    if p.n_neighbors == 0:
        raise UserError("[aksc] semi_supervised = true needs kNN supports: n_neighbors >= 1")
    from bigclust.subspace import _stage  # noqa: F401  (registers the semisup stage on first use)
    return ("semisup",)


register(Method("aksc", SubspaceParams, _aksc_chain,
                "augmented subspace clustering (paper 002): Ak-SSC / Ak-LSR / Ak-LRR, kNN-* without augmentation; "
                "AkS-SC with semi_supervised",
                normalize=_hook("ncut_memory", "bigclust.subspace._hooks")))
