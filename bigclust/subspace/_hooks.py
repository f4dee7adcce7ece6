"""How the pipeline runs the subspace family: the subspace stage's affinity and its Ncut normalisation."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp


def affinity(X, p, seed, knn_method="auto"):
    """``(W, n_iter)``: ``W = |C̄| + |C̄|ᵀ`` of Ak-SC (kNN-SC without augmentation, full SC with
    ``n_neighbors = 0``) and the solver's largest iteration count over the columns (0 for closed forms)."""
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
    return W, int(np.max(info["solver"]["n_iter"], initial=0))


def _layout(p):
    """``image_shape`` / ``order`` of ``[aksc] image`` (None: the augmentation preset's)."""
    from bigclust.subspace.augment import PRESETS
    if p.image == "auto":
        return {"image_shape": None, "order": None}
    return {"image_shape": PRESETS[p.image]["image_shape"], "order": PRESETS[p.image]["order"]}


def features_of(X, X_aug, p):
    """``[aksc] features`` (pixels or scattering) then ``pca`` of the samples and their augmented copies."""
    from bigclust.subspace import image_features, image_layout
    lay = _layout(p)
    shape, order = image_layout(p.augment, lay["image_shape"], lay["order"])   # "none" / "interpolate": no preset
    return image_features(X, X_aug, p.features, image_shape=shape, order=order, pca=p.pca)


def ncut_memory(W, p, y):
    """Ncut of W; a sample without any coefficient link gets a unit self-loop (and a warning)."""
    from bigclust.normalize import ncut
    deg = np.asarray(W.sum(axis=1)).ravel()
    isolated = deg <= 0
    if isolated.any():
        warnings.warn(f"{int(isolated.sum())} samples have no coefficient link; given a unit self-loop",
                      RuntimeWarning, stacklevel=2)
        W = (W + sp.diags(isolated.astype(W.dtype))).tocsr()
    return ncut(W, return_info=True)
