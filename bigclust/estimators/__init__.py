"""scikit-learn estimators over the pipeline's own code path, found by name.

``SpectralClustering(...).fit_predict(X)`` runs exactly what ``bigclust pipeline run`` runs -- ingest,
preprocess, the method's stages -- so for the same data, parameters and seed its labels equal the
pipeline's (``tests/test_estimators.py``).  NumPy and scipy.sparse data whose run fits ``max_memory`` run
on a store held in memory (:mod:`bigclust.pipeline.memory`: no files, neither zarr nor Dask imported);
a Dask array, a larger run or a ``scheduler`` runs on a temporary zarr store deleted after the fit, the
data streamed into it in row chunks.  Both give the same labels to the bit (``tests/test_estimator_inmemory.py``).

Each family's estimator lives in its own folder (``bigclust/<family>/estimator.py``, on
:class:`PipelineEstimator`, the one ``fit`` template of :mod:`bigclust.estimators._base`) and its plug-in
registers it here with :func:`register_estimator`; ``bigclust.estimators.<Name>`` and ``bigclust.<Name>``
import it on first use, so ``import bigclust`` stays fast (scikit-learn is imported with the first
estimator).  This package names no family and no method.
"""
from __future__ import annotations

from importlib import import_module

#: estimator name -> the module that defines it, filled by the families' plug-ins
ESTIMATORS: dict[str, str] = {}

#: what a family's estimator module builds on, imported on first use
_BASE = {"PipelineEstimator": "bigclust.estimators._base", "FitResult": "bigclust.estimators._base",
         "NoneMeans": "bigclust.estimators._params", "config_key": "bigclust.estimators._params",
         "own_key": "bigclust.estimators._params", "drop_zero_rows": "bigclust.estimators._data"}


def register_estimator(name: str, module: str, *, replace: bool = False):
    """Make the estimator class ``name`` of ``module`` importable as ``bigclust.estimators.<name>``
    (``replace=True`` to redefine a name, e.g. in tests)."""
    if not replace and ESTIMATORS.get(name, module) != module:
        raise ValueError(f"estimator {name!r} is already registered from {ESTIMATORS[name]}")
    ESTIMATORS[name] = module


def __getattr__(name):
    if name in ESTIMATORS:
        return getattr(import_module(ESTIMATORS[name]), name)
    if name in _BASE:
        return getattr(import_module(_BASE[name]), name)
    raise AttributeError(f"module 'bigclust.estimators' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *ESTIMATORS, *_BASE})
