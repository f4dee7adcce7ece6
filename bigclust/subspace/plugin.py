"""The subspace family's plug-in: Ak-SC / AkS-SC (paper 002) as the pipeline method ``aksc``, and its stages.

Registers with :mod:`bigclust.pipeline.methods`:

- ``aksc``: its parameter dataclass :class:`AkscParams` (``[aksc]``), its chain -- Ak-SC: the ``subspace``
  stage (the self-expressive affinity W), the embed stage with the Ncut of W, k-means; AkS-SC
  (``semi_supervised = true``): the one ``semisup`` stage, which labels the samples itself (argmax of the
  propagated label matrix F: no embedding, no k-means) -- and the names paper 002 gives its results;
- the ``subspace`` stage (:class:`SubspaceStageParams`; ``[subspace] chunk_cols > 0`` runs it streamed and
  resumable, :mod:`bigclust.subspace._chunked`) and its config section ``[subspace]``;
- the ``semisup`` stage (:class:`SemiParams`) and its report columns.  Its known labels are the data's own
  (``-1`` = unlabelled, scikit-learn's semi-supervised convention, which is how
  :class:`bigclust.SubspaceClustering` passes ``fit(X, y)``); with ``labelled_per_class = m > 0`` only a
  seeded draw of m labelled samples per class is kept (the papers' protocol: "randomly select the labeled
  samples over 10 trials"), the rest become -1.  The seed is the trial's ``[cluster] seed``: it draws the
  labelled samples, then the augmentation (the same augmented images as Ak-SC for that seed).

Cheap to import: the algorithms are imported inside the stage functions and hooks.
"""
from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from bigclust._util.errors import DataError, UserError
from bigclust.normalize import plugin as _normalize_plugin  # noqa: F401  (registers the embed stage aksc chains)
from bigclust.pipeline.methods import (ADDED, RUNTIME, Method, StageDef, fmt_params, register, register_column,
                                       register_section, register_stage)
from bigclust.pipeline.schema import Key, nonnegative, nonnegative_key, param, params_dict, positive, positive_key


# -- the method's parameters ([aksc]) and chain ------------------------------------------------------------


@dataclass(frozen=True)
class AkscParams:
    """Ak-SC (paper 002): self-expression on kNN dictionaries enlarged by augmented samples, Ncut, k-means."""

    regularizer: str = param("l1", choices=("l1", "l2", "nuclear"))   # SSC, LSR, LRR
    n_neighbors: int = nonnegative(10, int)   # k of the kNN dictionary; 0 = the full dictionary (SSC/LSR/LRR)
    # preset: image shape and transforms ("coil20_rotscale": without the flip, "coil20_flip": the flip only);
    # a table of transforms {flip, rotate, scale, shift} (bigclust.subspace.transforms; a preset name hashes as
    # the same string as before tables existed); "interpolate": linear interpolation of labelled samples of a
    # class (AkS-SC only).  A callable comes only from Python (SubspaceClustering), never from TOML
    augment: str = param("none", (str, dict, Callable), check=lambda v: _check_augment(v),
                         expect="one of 'none', 'coil20', 'coil20_rotscale', 'coil20_flip', 'mnist', 'interpolate', "
                                "a table of transforms {flip, rotate, scale, shift} or a callable f(images, rng)")
    lam: float = nonnegative(0.0, float)      # 0: SSC's rule lambda = min_i ||A_i^T x_i||_inf / alpha; LSR/LRR 0.05
    alpha: float = positive(20.0, float)
    svt: str = param("exact", choices=("exact", "gram", "randomized"))  # LRR's singular value thresholding
    pca: int = nonnegative(0, int)            # > 0: PCA features computed after augmentation (originals + copies)
    # "scattering": kymatio's Scattering2D(J=3, L=8) of every original and augmented image, channels normalised,
    # PCA not centred ([50]'s recipe, the paper's MNIST features; extra bigclust[scattering]); image: the layout,
    # "auto" = the augment preset's
    features: str = param("pixels", choices=("pixels", "scattering"), added=True)
    image: str = param("auto", choices=("auto", "mnist", "coil20"), added=True)
    # any images' layout (a table of transforms needs it): [height, width] or [height, width, channels], and
    # how a row holds its image, "C" row-major or "F" column-major (MATLAB); "auto": image's or the preset's
    image_shape: list = param(None, list, check=lambda v: len(v) in (2, 3) and all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v),
        expect="[height, width] or [height, width, channels], positive integers", sweep=False, added=True)
    order: str = param("auto", choices=("auto", "C", "F"), added=True)
    # AkS-SC (semi-supervised, labels = argmax F of label propagation): the data's labels, -1 = unlabelled;
    # labelled_per_class > 0 keeps a seeded draw of that many labelled samples per class (the rest -1)
    semi_supervised: bool = param(False)
    labelled_per_class: int = nonnegative(0, int)
    gamma: float = positive(0.1, float)       # AkS-SC: coupling of C and the labels F
    n_interpolate: int = positive(720, int)   # augment = "interpolate": new samples per class
    # iterations per column of the l1 ADMM (default 5000), of LRR's inexact ALM (default 1000 for AkS-LRR,
    # 5000 otherwise); 0 = those defaults
    max_iter: int = param(0, int, check=lambda v: v >= 0, expect=">= 0", added=True)


def _check_augment(v):
    from bigclust.subspace.augment import check_augment
    return check_augment(v)


def _aksc_chain(p, point):
    """Ak-SC: W, Ncut embedding, k-means; AkS-SC: one stage that labels the samples itself."""
    from bigclust.subspace.augment import PRESETS
    if p.image != "auto" and p.image_shape is not None:
        raise UserError(f'[aksc] image = "{p.image}" and image_shape = {tuple(p.image_shape)} both set the image '
                        "layout: give one")
    known = p.image != "auto" or p.image_shape is not None or (isinstance(p.augment, str) and p.augment in PRESETS)
    if p.features == "scattering" and not known:
        raise UserError('[aksc] features = "scattering" needs the image layout: set image = "mnist" or "coil20" '
                        "or image_shape = (height, width) (or augment to an image preset)")
    if p.features == "scattering" and p.image_shape is not None and len(p.image_shape) != 2:
        raise UserError(f'[aksc] features = "scattering" takes grey images: image_shape = {tuple(p.image_shape)} '
                        "has channels")
    if p.augment not in ("none", "interpolate") and not known:
        raise UserError(f"[aksc] augment = {p.augment!r} needs the images' shape: set image_shape = (height, width) "
                        '(and order = "F" for column-major rows)')
    if not p.semi_supervised:
        if p.labelled_per_class or p.augment == "interpolate":
            raise UserError("[aksc] labelled_per_class and augment = \"interpolate\" need semi_supervised = true")
        return ("subspace", "embed", "cluster")
    if p.n_neighbors == 0:
        raise UserError("[aksc] semi_supervised = true needs kNN supports: n_neighbors >= 1")
    return ("semisup",)


# -- hooks -------------------------------------------------------------------------------------------


def check_shape(p, point, n, d):
    """What ``[aksc]`` asks of the data's shape, before any work: the image layout, the kNN support size and
    the family's sizing keys against ``[store] max_memory`` (:func:`_check_memory`).

    Called by :func:`bigclust.pipeline.checks.check_sizes` (``pipeline validate`` on a registered data set);
    the same conditions fail later in the augmentation and the dictionary search, after ingest.
    """
    import math

    from bigclust.subspace.augment import copies_per_image, image_layout

    key = (f"image_shape = {tuple(p.image_shape)}" if p.image_shape is not None else
           f'image = "{p.image}"' if p.image != "auto" else f'augment = "{p.augment}"')
    shape = image_layout(p.augment, _layout(p)["image_shape"])[0]
    if shape and d >= 0 and (p.augment not in ("none", "interpolate") or p.features == "scattering") \
            and math.prod(shape) != d:
        raise UserError(f"[aksc] {key} takes {' x '.join(map(str, shape))} images ({math.prod(shape)} pixels), but "
                        f"the data have {d} features: choose the layout of the data's images (image_shape = "
                        '(height, width); coil20* 32 x 32, mnist 28 x 28) or augment = "none"')
    m = copies_per_image(p.augment)   # None: a callable's copies are known when it runs
    if p.n_neighbors and m is not None:   # interpolation adds atoms per class, not per sample
        allowed = (n - 1) * (1 + m)   # every atom but the sample and its own copies (cannot-links take more)
        if p.n_neighbors > allowed:
            atoms = f"n={n} samples" + (f" and their {m} augmented copies each" if m else "")
            raise UserError(f"[aksc] n_neighbors={p.n_neighbors} exceeds the {allowed} atoms a sample may use "
                            f"({atoms}, less the sample itself{' and its copies' if m else ''}): lower n_neighbors "
                            "(0 = the full dictionary)")
    _check_memory(p, point, n, d)


def _check_memory(p, point, n, d):
    """The family's sizing keys against ``[store] max_memory``, by what one unit of each allocates.

    ``[subspace] chunk_cols``: a coefficient chunk's zarr chunk (c x k, allocated whole however few columns
    the data have) and its task's gathered atoms; ``augment_chunk_rows``: a chunk of the augmented images
    (allocated whole); ``[aksc] n_interpolate``: the interpolated samples of every class, their atoms and
    rows of the label matrix F.  Raises ConfigError naming the key and the largest value that fits.
    """
    from bigclust._util.errors import ConfigError
    from bigclust._util.plan import format_bytes, parse_bytes
    from bigclust.subspace.augment import copies_per_image

    budget = parse_bytes(point["store"]["max_memory"])
    sc = point.get("subspace", {})
    d = max(d, 1)
    dim = min(p.pca, d) if p.pca else d        # the atoms' width
    k = max(p.n_neighbors, 1)
    classes = point["cluster"]["n_clusters"] or 2   # the classes come from the labels: at least 2
    bounds = []
    if not p.semi_supervised and sc.get("chunk_cols", 0):
        c = sc["chunk_cols"]
        # the zarr chunks of coef / iters / conv are allocated whole; the gathered atoms only for the columns
        # the data have; so the bytes are not linear in c once c > n: the largest c that fits is searched
        bounds.append(("subspace", "chunk_cols", c, lambda v: v * (8 * k + 9) + min(v, n) * 8 * (k + 2) * dim,
                       f"a column's {k} coefficients and, for each of the n={n} columns a task may get, its sample "
                       f"and {k} atoms of {dim} features"))
    per = copies_per_image(p.augment)
    if not p.semi_supervised and sc.get("chunk_cols", 0) and per:
        bounds.append(("subspace", "augment_chunk_rows", sc.get("augment_chunk_rows", 1000),
                       lambda v: v * per * (d + 1) * 8, f"a source image's {per} augmented copies of {d} pixels"))
    if p.semi_supervised and p.augment == "interpolate":
        bounds.append(("aksc", "n_interpolate", p.n_interpolate, lambda v: v * classes * 8 * (d + dim + classes + 3),
                       f"an interpolated sample per class ({classes} classes) of {d} features, its atom and its "
                       "row of the label matrix F"))
    mem = f"[store] max_memory={point['store']['max_memory']!r} ({format_bytes(budget)})"
    for sec, key, value, cost, what in bounds:
        if cost(value) > budget:
            lo, hi = 0, value              # the largest value that fits: cost is non-decreasing in it
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if cost(mid) <= budget else (lo, mid - 1)
            raise ConfigError(f"[{sec}] {key}={value}: {what} take {format_bytes(cost(value))} in all, more than "
                              f"{mem}; " + (f"lower {key} to at most {lo} or raise max_memory" if lo
                                            else "raise max_memory"))


def subspace_affinity(X, p, seed, knn_method="auto"):
    """``(W, n_iter, steps)``: ``W = |C̄| + |C̄|ᵀ`` of Ak-SC (kNN-SC without augmentation, full SC with
    ``n_neighbors = 0``), the solver's largest iteration count over the columns (0 for closed forms) and
    every step's (wall, CPU seconds, peak RSS MB)."""
    import numpy as np

    from bigclust.subspace import subspace_affinity
    opts = {} if p.lam else {"alpha": p.alpha}
    if p.regularizer == "nuclear" and p.n_neighbors:
        opts["svt_method"] = p.svt
    if p.max_iter and p.regularizer != "l2":
        opts["max_iter"] = p.max_iter
    W, info = subspace_affinity(np.asarray(X), regularizer=p.regularizer, n_neighbors=p.n_neighbors or None,
                                augment=None if p.augment == "none" else p.augment, lam=p.lam or None,
                                random_state=seed, pca=p.pca, features=p.features, knn_method=knn_method,
                                return_info=True, **_layout(p), **opts)
    return W, int(np.max(info["solver"]["n_iter"], initial=0)), info["steps"]


def _layout(p):
    """``image_shape`` / ``order`` of ``[aksc] image_shape``, ``order`` and ``image`` (None: the augmentation
    preset's)."""
    from bigclust.subspace.augment import aksc_layout
    shape, order = aksc_layout(p.image, p.image_shape, p.order)
    return {"image_shape": shape, "order": order}


def features_of(X, X_aug, p):
    """``[aksc] features`` (pixels or scattering) then ``pca`` of the samples and their augmented copies."""
    from bigclust.subspace import image_features, image_layout
    lay = _layout(p)
    shape, order = image_layout(p.augment, lay["image_shape"], lay["order"])   # "none" / "interpolate": no preset
    return image_features(X, X_aug, p.features, image_shape=shape, order=order, pca=p.pca)


def ncut_memory(W, p, y):
    """Ncut of W; a sample without any coefficient link gets a unit self-loop (and a warning)."""
    import numpy as np
    import scipy.sparse as sp

    from bigclust.normalize import ncut
    deg = np.asarray(W.sum(axis=1)).ravel()
    isolated = deg <= 0
    if isolated.any():
        warnings.warn(f"{int(isolated.sum())} samples have no coefficient link; given a unit self-loop",
                      RuntimeWarning, stacklevel=2)
        W = (W + sp.diags(isolated.astype(W.dtype))).tocsr()
    return ncut(W, return_info=True)


@dataclass(frozen=True)
class SubspaceStageParams:
    input: str
    src: str
    method: str
    method_params: dict
    seed: int
    # [subspace]: > 0 runs the streamed, resumable path (bigclust.subspace._chunked) with this many columns per
    # coefficient chunk; the coefficients do not depend on it.  knn: the dictionary's search (None = "auto")
    chunk_cols: int = field(default=0, metadata=RUNTIME)
    augment_chunk_rows: int = field(default=0, metadata=RUNTIME)
    knn: str | None = field(default=None, metadata=ADDED)


# -- the subspace stage: self-expressive affinities (Ak-SC) ---------------------------------------


def subspace(store_path, key, attrs, p: SubspaceStageParams, *, client=None, **_):
    """The subspace family's affinity W (sparse) from the documents / images X, as the stage's K."""
    import scipy.sparse as sp

    from bigclust.pipeline.methods import get
    from bigclust.pipeline.store import Store, read_matrix, write_csr

    if p.chunk_cols:  # streamed through zarr, coefficient chunks as resumable tasks (bigclust.subspace._chunked)
        from bigclust.subspace._chunked import subspace_chunked
        return subspace_chunked(store_path, key, attrs, p, client=client)

    store = Store(store_path)
    X = read_matrix(store.open(p.src, p.input), "X")
    m = get(p.method)
    W, n_iter, steps = subspace_affinity(X.toarray() if sp.issparse(X) else X, m.make(p.method_params), p.seed,
                                         knn_method=p.knn or "auto")
    from bigclust.subspace._chunked import step_attrs
    with store.write("subspace", key, attrs) as g:
        write_csr(g, "K", W)
        g.attrs["nnz"] = int(W.nnz)
        g.attrs["n_iter"] = n_iter      # the solver's largest per-column count (ADMM, LRR's ALM; 0: closed form)
        g.attrs.update(step_attrs(steps))


def _build_subspace(ctx, src, inputs):
    (key,) = inputs
    # without augmentation, or with one that draws nothing ({flip}), W does not depend on the trial's seed
    # (exact kNN; NN-descent seeded with 0): the trials share one W and differ only in their k-means starts
    from bigclust.subspace.augment import draws_nothing
    seed = 0 if draws_nothing(ctx.params.augment) else ctx.point["cluster"]["seed"]
    sc = ctx.point.get("subspace", {})
    return [SubspaceStageParams(input=key, src=src, method=ctx.method.name,
                                method_params=params_dict(ctx.params), seed=seed,
                                chunk_cols=sc.get("chunk_cols", 0),
                                augment_chunk_rows=sc.get("augment_chunk_rows", 1000),
                                knn=None if sc.get("knn", "auto") == "auto" else sc["knn"])]


#: the steps whose wall and CPU seconds and peak RSS (MB, after the step) the stage records (``<step>_seconds``,
#: ``<step>_cpu_seconds``, ``<step>_peak_rss_mb``): augment is the making of the copies (inside the PCA passes
#: when streamed), pca the PCA fit, features the PCA and the atoms together.  Streamed, CPU and RSS count the
#: Dask workers that ran the step's chunks too (CPU summed, RSS of the largest process)
STEPS = ("augment", "pca", "features", "knn", "coef", "fold")

register_stage(StageDef("subspace", _build_subspace, subspace, "K",
                        where=lambda p: "here" if p.chunk_cols else "task",
                        report=("coef_chunks", *(f"{s}_{what}" for s in STEPS
                                                 for what in ("seconds", "cpu_seconds", "peak_rss_mb"))),
                        describe=lambda p: fmt_params(p.method_params)))


# -- the semisup stage: AkS-SC (paper 002, section 4.2) on the preprocessed samples ------------------


@dataclass(frozen=True)
class SemiParams:
    input: str                                    # preprocess / subset key of the samples X
    src: str
    labels: str                                   # key of the group holding y (ingest or subset)
    labels_src: str
    method: str
    method_params: dict
    k: int
    seed: int


def draw_labelled(y, per_class, seed):
    """Keep ``per_class`` labelled samples of every class (a seeded draw), set the others to -1.

    Parameters
    ----------
    y : array-like of int (n,), -1 for samples already unlabelled.
    per_class : int >= 1
    seed : int

    Returns
    -------
    ndarray of int64 (n,)
    """
    import numpy as np

    y = np.asarray(y, dtype=np.int64)
    rs = np.random.RandomState(seed)
    out = np.full(y.shape, -1, dtype=np.int64)
    for c in np.unique(y[y >= 0]):
        members = np.flatnonzero(y == c)
        if members.size < per_class:
            raise DataError(f"class {int(c)} has {members.size} labelled sample(s), fewer than "
                            f"labelled_per_class={per_class}")
        out[rs.choice(members, per_class, replace=False)] = c
    return out


def semi_fit(X, y_known, p, n_classes, seed):
    """AkS-SC of ``X`` with the known labels ``y_known`` under the method's parameters ``p``.

    The augmentation is ``p.augment``: a preset of image transforms, ``"interpolate"``
    (``p.n_interpolate`` random non-negative pairwise combinations of labelled
    samples per class, the paper's Table 3 strategy) or ``"none"`` (the -LP
    variants).  Returns ``(labels, info)`` of :func:`bigclust.subspace.aks_sc`.
    """
    import numpy as np

    from bigclust.subspace import aks_sc, augment, interpolate
    from bigclust.subspace.semi import check_semi_labels

    X = np.asarray(X, dtype=np.float64)
    check_semi_labels(y_known, X.shape[0], n_classes)        # one-line error before any augmentation
    if p.augment == "none":
        X_aug = origin = None
    elif p.augment == "interpolate":
        X_aug, origin, _ = interpolate(X, y_known, p.n_interpolate, n_mix=2, weights="uniform", random_state=seed)
    else:
        X_aug, origin = augment(X, p.augment, random_state=seed, **_layout(p))
    X, X_aug = features_of(X, X_aug, p)
    opts = {"svt_method": p.svt} if p.regularizer == "nuclear" else {}
    if p.max_iter:
        opts["max_iter"] = p.max_iter
    return aks_sc(X, y_known, X_aug=X_aug, origin=origin, regularizer=p.regularizer, n_neighbors=p.n_neighbors,
                  lam=p.lam or None, alpha=p.alpha, gamma=p.gamma, n_classes=n_classes, random_state=seed,
                  return_info=True, **opts)


def semisup(store_path, key, attrs, p: SemiParams, **_):
    """AkS-SC labels of the samples (``labels`` (1, n), int32), F's rows of the samples, the folded
    affinity ``K`` of the last C-step and the run's propagation checks."""
    import numpy as np

    from bigclust.pipeline.methods import get
    from bigclust.pipeline.store import Store, read_matrix, write_csr, write_dense

    store = Store(store_path)
    X = read_matrix(store.open(p.src, p.input), "X")
    X = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
    y = np.asarray(read_matrix(store.open(p.labels_src, p.labels), "y"), dtype=np.int64)
    mp = get(p.method).make(p.method_params)
    known = draw_labelled(y, mp.labelled_per_class, p.seed) if mp.labelled_per_class else y
    if known.min() >= 0:   # every sample given its label: propagation would only hand the truth back
        raise DataError(f"[aksc] semi_supervised = true, but every one of the {y.size} samples has a label, so none "
                        "is left to cluster; set [aksc] labelled_per_class = m to keep m labelled samples per class "
                        "(the paper's protocol), or mark the unlabelled ones -1 in the data")
    t0 = time.perf_counter()
    labels, info = semi_fit(X, known, mp, p.k, p.seed)
    seconds = time.perf_counter() - t0
    unl = known < 0
    extra = {}
    if unl.any() and y.min() >= 0:  # the truth is known (the papers' protocol): error on the unlabelled part too
        extra["err_unlabelled"] = float(np.mean(labels[unl] != y[unl]))
    from bigclust.subspace.fold import affinity, fold_back
    W = affinity(fold_back(info["C"], info["dictionary"]))   # the last C-step's graph, as Ak-SC's W
    with store.write("semisup", key, attrs) as g:
        write_csr(g, "K", W)
        write_dense(g, "labels", labels.astype(np.int32)[None, :])
        write_dense(g, "inertia", np.array([np.nan]))
        write_dense(g, "F", info["F"][:X.shape[0]])
        write_dense(g, "labelled", np.flatnonzero(known >= 0).astype(np.int64))
        g.attrs.update({"best": 0, "n_outer": int(info["n_outer"]), "n_labelled": int((known >= 0).sum()),
                        "lam": float(info["lam"]), "aks_seconds": seconds,
                        "F_min_entry": min(c["min_entry"] for c in info["propagation"]),
                        "F_max_row_err": max(c["max_row_err"] for c in info["propagation"]), **extra})


def _build_semisup(ctx, src, inputs):
    (key,) = inputs
    if src == "subset":
        lab_src, lab_key = "subset", key
    else:  # the preprocess group records the ingest key it was made from
        lab_src, lab_key = "ingest", ctx.store.open(src, key).attrs["params"]["input"]
    return [SemiParams(input=key, src=src, labels=lab_key, labels_src=lab_src, method=ctx.method.name,
                       method_params=params_dict(ctx.params), k=ctx.k, seed=ctx.point["cluster"]["seed"])]


register_stage(StageDef("semisup", _build_semisup, semisup, "labels", where=lambda p: "task",
                        report=("n_labelled", "n_outer", "err_unlabelled", "F_min_entry", "F_max_row_err"),
                        describe=lambda p: fmt_params(p.method_params) + f" k={p.k}"))


# -- registration ------------------------------------------------------------------------------------------

REG = {"l1": "SSC", "l2": "LSR", "nuclear": "LRR"}


def paper_002_name(r):
    """``(setting, method, k cell)`` of an aksc record in paper 002's naming: SSC / LSR / LRR (full dictionary),
    kNN-* (no augmentation), Ak-* (augmented); semi-supervised *-LP (no augmentation) and AkS-*.  The k cell
    (``k=10 aug=coil20``) is the supplement's sensitivity tables' (Tables 6-7), for unsupervised kNN records."""
    p = r["params"]
    reg = REG[p["regularizer"]]
    setting = r.get("setting", "")
    if p.get("semi_supervised"):
        setting = f"labelled={p.get('labelled_per_class', 0)} aug={p['augment']}"
        return setting, (f"{reg}-LP" if p["augment"] == "none" else f"AkS-{reg}"), None
    if not p["n_neighbors"]:
        return setting, reg, None
    name = f"kNN-{reg}" if p["augment"] == "none" else f"Ak-{reg}"
    return setting, name, f"k={p['n_neighbors']} aug={p['augment']}"


register(Method("aksc", AkscParams, _aksc_chain,
                "augmented subspace clustering (paper 002): Ak-SSC / Ak-LSR / Ak-LRR, kNN-* without augmentation; "
                "AkS-SC with semi_supervised",
                normalize=ncut_memory, papers={"002": paper_002_name}, check=check_shape,
                hashed_unused=True))
#: the dictionary kNN searches of [subspace] knn (bigclust.subspace.knn_dictionary)
SUBSPACE_KNN = ("auto", "exact", "pynndescent", "ivf", "ivf-rows")
# the subspace stage at scale (bigclust.subspace._chunked); keys added later, so configs keep their hashes
register_section("subspace", {
    # > 0: augmentation and features streamed into zarr, the coefficient columns in resumable chunks of this
    # many columns (Dask tasks; on the cluster with --scheduler); 0: one in-memory call
    "chunk_cols": nonnegative_key(int, 0, sweep=False, added=True),
    "augment_chunk_rows": positive_key(int, 1000, sweep=False, added=True),   # source images per augmentation chunk
    # the dictionary kNN: "auto" = exact up to 20000 originals, NN-descent above; "ivf" / "ivf-rows":
    # bigclust.algo.knn's inverted-file searches (no per-process compilation: the million-point path;
    # "ivf-rows" with chunk_cols > 0 in resumable chunks of chunk_cols atoms, Dask tasks)
    "knn": Key(str, "auto", lambda v: v in SUBSPACE_KNN, "one of " + ", ".join(map(repr, SUBSPACE_KNN)),
               sweep=False, added=True),
}, after="method")
register_column("n_labelled", before="MB")
register_column("err_unlabelled", before="MB",
                legend=" AkS-SC (semi-supervised): acc/nmi over every sample, the n_labelled given ones included; "
                       "err_unlabelled: error rate over the others.")

# the family's scikit-learn estimator, bigclust.SubspaceClustering (imported on first use)
from bigclust.estimators import register_estimator  # noqa: E402

register_estimator("SubspaceClustering", "bigclust.subspace.estimator")
