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
subspace_affinity, subspace_clustering                -- :mod:`.cluster`
augment, image_layout                                 -- :mod:`.augment` (presets, descriptions, callables;
                                                         descriptions and transforms: :mod:`.transforms`)
features_after_augmentation                           -- :mod:`.features`

Importing this package is cheap (the family's plug-in imports it when
``bigclust`` is imported): each name is loaded from its module on first use.
The Numba kernels (:mod:`.\\_numba`) are imported on first use too.
"""
from __future__ import annotations

from bigclust._util.lazy import lazy_names

# ``augment`` is both a submodule and a function: the submodule (numpy only) is loaded first, so that the
# name is then bound to the function, as it always was (a later first import would rebind it to the module)
from bigclust.subspace.augment import augment

#: public name -> the module that defines it (PEP 562: loaded on first access)
_WHERE = {
    "PRESETS": "augment", "augment_chunks": "augment", "augment_images": "augment", "interpolate": "augment",
    "image_layout": "augment",
    "Dictionary": "dictionary", "build_dictionary": "dictionary", "knn_dictionary": "dictionary",
    "image_features": "features", "scattering_features": "features", "features_after_augmentation": "features",
    "affinity": "fold", "fold_back": "fold",
    "ConvergenceWarning": "_common", "self_expression": "selfexpr", "ssc_lambda": "selfexpr",
    "aks_sc": "semi", "propagate_labels": "semi",
    "subspace_affinity": "cluster", "subspace_clustering": "cluster",
}

__all__ = ["ConvergenceWarning", "Dictionary", "PRESETS", "affinity", "aks_sc", "augment", "augment_chunks",
           "augment_images", "build_dictionary", "features_after_augmentation", "fold_back", "image_features",
           "image_layout", "interpolate", "knn_dictionary", "propagate_labels", "scattering_features",
           "self_expression", "ssc_lambda", "subspace_affinity", "subspace_clustering"]

__getattr__, __dir__ = lazy_names(globals(), _WHERE, __all__)
