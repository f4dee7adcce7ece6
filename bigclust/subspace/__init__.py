"""Augmented subspace clustering: Ak-SC and AkS-SC (paper 002, Abdolali & Gillis).

Pipeline::

    augment -> unit-norm dictionary [X; X_aug] -> kNN supports N_i (without i and A(i))
            -> per-column self-expression C (SSC / LSR / LRR) -> fold back Cbar
            -> W = Cbar + Cbar^T -> Ncut -> spectral embedding -> k-means
    semi-supervised (AkS-SC): C-step and label propagation F-step alternated, labels = argmax F

Public API
----------
augment_images, augment_chunks, interpolate, PRESETS  -- :mod:`.augment`
build_dictionary, knn_dictionary, Dictionary          -- :mod:`.dictionary`
scattering_features, image_features (kymatio extra)   -- :mod:`.features`
self_expression, ssc_lambda                           -- :mod:`.selfexpr` (LRR in :mod:`.lrr`)
fold_back, affinity                                   -- :mod:`.fold`
aks_sc, propagate_labels                              -- :mod:`.semi`
subspace_affinity, subspace_clustering                -- here

The Numba kernels (:mod:`.\\_numba`) are imported on first use.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import DataError, UserError
from bigclust.subspace.augment import PRESETS, augment_chunks, augment_images, interpolate
from bigclust.subspace.dictionary import Dictionary, build_dictionary, knn_dictionary
from bigclust.subspace.features import image_features, scattering_features
from bigclust.subspace.fold import affinity, fold_back
from bigclust.subspace.selfexpr import ConvergenceWarning, self_expression, ssc_lambda
from bigclust.subspace.semi import aks_sc, propagate_labels

__all__ = ["ConvergenceWarning", "Dictionary", "PRESETS", "affinity", "aks_sc", "augment", "augment_chunks",
           "augment_images", "build_dictionary", "features_after_augmentation", "fold_back", "image_features",
           "image_layout", "interpolate", "knn_dictionary", "propagate_labels", "scattering_features",
           "self_expression", "ssc_lambda", "subspace_affinity", "subspace_clustering"]


def augment(X, augment="coil20", *, image_shape=None, order=None, random_state=None):
    """Augment image rows with a preset name or a dict of :func:`augment_images` options.

    Parameters
    ----------
    X : array-like (n, h*w)
    augment : str or dict
        ``"coil20"`` (32x32 column-major, flip + 5 rotations + 5 scalings),
        ``"mnist"`` (28x28 row-major, 5 rotations + 5 scalings), or a dict of
        keyword arguments of :func:`augment_images` (``image_shape`` and
        ``order`` may also be given here or as arguments).
    image_shape, order : override the preset's.
    random_state : None, int or RandomState

    Returns
    -------
    X_aug : ndarray (n*m, h*w)
    origin : ndarray of int64 (n*m,)
    """
    opts = _augment_options(augment, image_shape, order)
    return augment_images(X, random_state=random_state, **opts)


def _augment_options(augment, image_shape, order):
    if isinstance(augment, str):
        if augment not in PRESETS:
            raise UserError(f"unknown augmentation preset {augment!r}; expected {', '.join(PRESETS)} or a dict")
        opts = dict(PRESETS[augment])
    elif isinstance(augment, dict):
        opts = dict(augment)
    else:
        raise UserError(f"augment must be None, a preset name or a dict, got {type(augment).__name__}")
    if image_shape is not None:
        opts["image_shape"] = image_shape
    if order is not None:
        opts["order"] = order
    opts.setdefault("order", "C")
    if opts.get("image_shape") is None:
        raise DataError("augmentation needs image data: give image_shape=(height, width)")
    return opts


def image_layout(augment, image_shape=None, order=None):
    """``(image_shape, order)``: the arguments, else the augmentation preset's (``(None, "C")`` when neither)."""
    base = PRESETS.get(augment, {}) if isinstance(augment, str) else (augment if isinstance(augment, dict) else {})
    return (image_shape if image_shape is not None else base.get("image_shape"),
            order if order is not None else base.get("order", "C"))


def subspace_affinity(X, *, regularizer="l1", n_neighbors=10, augment=None, image_shape=None, order=None,
                      lam=None, random_state=None, knn_method="auto", pca=0, features="pixels", return_info=False,
                      **solver_options):
    """Ak-SC affinity: augment -> dictionary -> coefficients -> fold back -> W.

    Parameters
    ----------
    X : array-like (n, d)
        Samples as rows (images flattened, see ``order``).
    regularizer : {"l1", "l2", "nuclear"}
        SSC, LSR or LRR.
    n_neighbors : int or None
        k of the kNN dictionary (default 10, the paper's smallest and best
        value in its Table 6); None = full dictionary (the classical SSC /
        LSR / LRR baselines, paper scale only).
    augment : None, str or dict
        None = no augmentation (kNN-SSC/LSR/LRR baselines); else as in :func:`augment`.
    image_shape, order : image layout, overriding the preset's.
    lam : float or None
        See :func:`self_expression`.
    random_state : None or int
        Seed of the augmentation (and of the NN-descent index).
    knn_method : {"auto", "exact", "pynndescent"}
    pca : int
        0: the samples themselves are the features.  > 0: features = the first
        ``pca`` principal components, computed AFTER augmentation (the paper
        augments images, then computes features), fitted on the originals and
        their augmented copies together (:func:`features_after_augmentation`).
    features : {"pixels", "scattering"}
        "scattering": the paper's MNIST features, ``Scattering2D(J=3, L=8)``
        of every original and augmented image (zero-padded to a multiple of
        8 pixels, 3472 features for 28x28) before ``pca``; needs the optional
        extra kymatio (:mod:`.features`) and the image layout (``image_shape``
        / ``order``, or the ``augment`` preset's).
    **solver_options
        Passed to :func:`self_expression` (alpha, rho, eps_abs, eps_rel, max_iter, LRR options).

    Returns
    -------
    W : scipy.sparse.csr_matrix (n, n), symmetric, non-negative, zero diagonal.
    info : dict (dictionary, neighbors, C, Cbar, solver info), with ``return_info``.
    """
    X = np.asarray(X)
    if augment is None:
        X_aug = origin = None
    else:
        X_aug, origin = augment_images(X, random_state=random_state,
                                       **_augment_options(augment, image_shape, order))
    shape, order_ = image_layout(augment, image_shape, order)
    X, X_aug = image_features(X, X_aug, features, image_shape=shape, order=order_, pca=pca)
    D = build_dictionary(X, X_aug, origin)
    seed = random_state if isinstance(random_state, (int, np.integer)) else 0
    nb = None if n_neighbors is None else knn_dictionary(D, n_neighbors, method=knn_method, random_state=seed)
    C, sinfo = self_expression(None, D, nb, regularizer, lam, return_info=True, **solver_options)
    Cbar = fold_back(C, D)
    W = affinity(Cbar)
    if not return_info:
        return W
    return W, dict(dictionary=D, neighbors=nb, C=C, Cbar=Cbar, solver=sinfo)


def features_after_augmentation(X, X_aug, n_components):
    """Centred PCA features of the originals and the augmented samples, fitted on both together.

    Returns ``(F, F_aug)`` (``F_aug`` None without augmentation), ``n_components`` columns each.
    """
    from bigclust.algo.preprocess import pca_fit, pca_transform
    allx = X if X_aug is None else np.vstack([X, X_aug])
    mean, comps = pca_fit(allx, int(n_components))
    F = pca_transform(np.asarray(X, dtype=np.float64), mean, comps)
    return F, (None if X_aug is None else pca_transform(np.asarray(X_aug, dtype=np.float64), mean, comps))


def subspace_clustering(X, n_clusters, *, regularizer="l1", n_neighbors=10, augment=None, image_shape=None,
                        order=None, lam=None, n_init=100, random_state=None, knn_method="auto", pca=0,
                        features="pixels", return_info=False, **solver_options):
    """Ak-SC (or kNN-SC / full SC without augmentation) end to end.

    ``W`` from :func:`subspace_affinity`, Ncut normalisation
    ``D^{-1/2} W D^{-1/2}`` (:func:`bigclust.normalize.ncut`), the
    row-normalised top-``n_clusters`` eigenvectors
    (:func:`bigclust.algo.spectral.embed`) and k-means with ``n_init`` restarts
    (:func:`bigclust.algo.kmeans.kmeans`, the lowest-inertia restart).

    Returns
    -------
    labels : ndarray of int (n,)
    W : scipy.sparse.csr_matrix (n, n)
    info : dict, with ``return_info`` (also the k-means result)
    """
    from sklearn.utils import check_random_state

    from bigclust.algo.kmeans import kmeans
    from bigclust.normalize import ncut
    from bigclust.algo.spectral import EIGH_MAX_N, check_connected, embed

    if isinstance(random_state, (int, np.integer)):  # as the pipeline: one seed for augmentation and k-means
        aug_seed = km_seed = int(random_state)
    else:
        aug_seed, km_seed = (int(s) for s in check_random_state(random_state).randint(0, 2**31 - 1, size=2))
    W, info = subspace_affinity(X, regularizer=regularizer, n_neighbors=n_neighbors, augment=augment,
                                image_shape=image_shape, order=order, lam=lam, random_state=aug_seed,
                                knn_method=knn_method, pca=pca, features=features, return_info=True,
                                **solver_options)
    n = W.shape[0]
    if not 2 <= int(n_clusters) < n:
        raise UserError(f"n_clusters={n_clusters} must be between 2 and n-1={n - 1}")
    deg = np.asarray(W.sum(axis=1)).ravel()
    isolated = deg <= 0
    Wn = W
    if isolated.any():
        warnings.warn(f"{int(isolated.sum())} samples have no coefficient link; given a unit self-loop",
                      RuntimeWarning, stacklevel=2)
        Wn = (W + sp.diags(isolated.astype(np.float64))).tocsr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ncomp = check_connected(Wn)
    if ncomp > 1:
        warnings.warn(f"subspace affinity graph has {ncomp} connected components (k-means sees each as a "
                      f"cluster or part of one)", RuntimeWarning, stacklevel=2)
    P = ncut(Wn)
    # ARPACK (embed's default for sparse P) finds one vector per distinct eigenvalue in the Krylov
    # space of its start vector, so with c > 1 components it misses copies of the eigenvalue 1 and
    # the embedding is wrong (seen on COIL-20: 4 of 19 unit eigenvalues).  Dense eigh below
    # spectral.EIGH_MAX_N, block LOBPCG above it when the graph is disconnected.
    solver = "eigh" if n <= EIGH_MAX_N else ("lobpcg" if ncomp > 1 else "auto")
    V = embed(P, int(n_clusters), solver=solver, random_state=km_seed)
    km = kmeans(V, int(n_clusters), n_init=n_init, random_state=km_seed)
    labels = km.labels[km.best].astype(np.int64)
    if not return_info:
        return labels, W
    info.update(kmeans=km, n_components=ncomp)
    return labels, W, info
