"""The composition root: one import line per method family's plug-in, which registers its methods, stages,
config sections and report columns (:mod:`bigclust.pipeline.methods`).  ``import bigclust`` imports this
module, so the registry is always filled.  A new family is its folder plus one line here.

The order is the registry's: K-means (in the NMF family's plug-in) comes first among the default methods
``[method] names`` stands for (kmeans, ra, ncut, sk, bbs), which the config hash of a config without
``[method] names`` depends on.
"""
from bigclust.nmf import plugin as nmf_plugin  # noqa: F401
from bigclust.normalize import plugin as normalize_plugin  # noqa: F401
from bigclust.subspace import plugin as subspace_plugin  # noqa: F401
