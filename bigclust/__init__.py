"""bigclust: clustering data sets too big for the textbook code.

Numba kernels, zarr stores and Dask stages for spectral clustering with
bi-stochastic normalisation (BBS, Sinkhorn-Knopp, Ncut), NMF clustering and
augmented subspace clustering.  Submodules are imported lazily so that
``import bigclust`` stays fast.
"""
import os
from importlib import import_module

# Numba's OpenMP workers busy-wait after a parallel region by default; on a
# small machine they then fight BLAS threads for the cores (measured 5-40x
# slowdowns of sparse CG loops on 2 cores).  Passive waiting fixes it.  This is
# the one process-wide setting made at import: only when OMP_WAIT_POLICY is
# unset, and not at all under BIGCLUST_NO_ENV=1 (README, "Library").
if os.environ.get("BIGCLUST_NO_ENV", "").strip().lower() not in ("1", "true", "yes"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from bigclust._util.version import __version__

#: public submodules, importable as ``bigclust.<name>``: where each one lives
_SUBMODULES = {
    "affinity": "bigclust.algo.affinity", "kmeans": "bigclust.algo.kmeans", "metrics": "bigclust.algo.metrics",
    "spectral": "bigclust.algo.spectral", "preprocess": "bigclust.algo.preprocess",
    "datasets": "bigclust.datasets", "normalize": "bigclust.normalize", "nmf": "bigclust.nmf",
    "subspace": "bigclust.subspace", "pipeline": "bigclust.pipeline", "report": "bigclust.report",
    "estimators": "bigclust.estimators",
}
#: scikit-learn estimators, importable as ``bigclust.SpectralClustering``
_ESTIMATORS = {"NMFClustering", "SpectralClustering", "SubspaceClustering"}
#: the exceptions every user error is (``UserError`` is a ValueError)
_ERRORS = {"ConfigError", "DataError", "StoreError", "UserError"}

__all__ = sorted(set(_SUBMODULES) | _ESTIMATORS | _ERRORS | {"ConvergenceWarning", "__version__"})


def __getattr__(name):
    if name in _SUBMODULES:
        return import_module(_SUBMODULES[name])
    if name in _ESTIMATORS:
        return getattr(import_module("bigclust.estimators"), name)
    if name in _ERRORS:
        return getattr(import_module("bigclust._util.errors"), name)
    if name == "ConvergenceWarning":   # scikit-learn's, and a RuntimeWarning (bigclust._util.convergence)
        return import_module("bigclust._util.convergence").ConvergenceWarning
    raise AttributeError(f"module 'bigclust' has no attribute {name!r}")


def __dir__():
    return __all__


# the composition root: each family's plug-in registers its methods, stages and columns (cheap: dataclasses
# and register calls; the algorithms are imported when a hook first runs)
from bigclust import families  # noqa: E402,F401
