"""The pipeline's ``semisup`` stage: AkS-SC (paper 002, section 4.2) on the preprocessed samples.

``[aksc] semi_supervised = true`` chains this one stage instead of
subspace -> embed -> cluster: AkS-SC labels the samples itself (argmax of the
propagated label matrix F), so there is no embedding and no k-means.

The known labels are the data's own (``-1`` = unlabelled, scikit-learn's
semi-supervised convention, which is how :class:`bigclust.SubspaceClustering`
passes ``fit(X, y)``); with ``labelled_per_class = m > 0`` only a seeded draw
of m labelled samples per class is kept (the papers' protocol: "randomly
select the labeled samples over 10 trials"), the rest become -1.  The seed
is the trial's ``[cluster] seed``: it draws the labelled samples, then the
augmentation (the same augmented images as Ak-SC for that seed).

Imported by the aksc chain on first use, which registers the stage.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from bigclust._util.errors import DataError
from bigclust.pipeline.methods import params_dict
from bigclust.pipeline.stages import STAGES, StageDef, _fmt, register_stage
from bigclust.pipeline.store import Store, read_matrix, write_csr, write_dense


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
    from bigclust.subspace import _augment_options, aks_sc, augment_images, interpolate
    from bigclust.subspace._hooks import features_of
    from bigclust.subspace.semi import check_semi_labels

    X = np.asarray(X, dtype=np.float64)
    check_semi_labels(y_known, X.shape[0], n_classes)        # one-line error before any augmentation
    if p.augment == "none":
        X_aug = origin = None
    elif p.augment == "interpolate":
        X_aug, origin, _ = interpolate(X, y_known, p.n_interpolate, n_mix=2, weights="uniform", random_state=seed)
    else:
        X_aug, origin = augment_images(X, random_state=seed, **_augment_options(p.augment, None, None))
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
    from bigclust.pipeline import methods

    store = Store(store_path)
    X = read_matrix(store.open(p.src, p.input), "X")
    X = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
    y = np.asarray(read_matrix(store.open(p.labels_src, p.labels), "y"), dtype=np.int64)
    mp = methods.get(p.method).make(p.method_params)
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


def _build(ctx, src, inputs):
    (key,) = inputs
    if src == "subset":
        lab_src, lab_key = "subset", key
    else:  # the preprocess group records the ingest key it was made from
        lab_src, lab_key = "ingest", ctx.store.open(src, key).attrs["params"]["input"]
    return [SemiParams(input=key, src=src, labels=lab_key, labels_src=lab_src, method=ctx.method.name,
                       method_params=params_dict(ctx.params), k=ctx.k, seed=ctx.point["cluster"]["seed"])]


if "semisup" not in STAGES:
    register_stage(StageDef("semisup", _build, semisup, "labels", where=lambda p: "task",
                            report=("n_labelled", "n_outer", "err_unlabelled", "F_min_entry", "F_max_row_err"),
                            describe=lambda p: _fmt(p.method_params) + f" k={p.k}"))
