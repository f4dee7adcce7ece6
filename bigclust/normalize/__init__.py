"""Normalisation of a similarity matrix before spectral clustering.

RA (K itself), Ncut (``D^{-1/2} K D^{-1/2}``, optionally iterated),
Sinkhorn-Knopp (KL-nearest symmetric bi-stochastic matrix), Euclidean BBS
(paper 000: ``min ||G - K||_F`` over symmetric bi-stochastic G, by the paper's
alternating projection, Dykstra's method or a dual semismooth Newton method)
and MBBS (several kernels, learnt weights), plus the quality measures MB and
MC (paper 000, Eqs. 32-33).  Each submodule's docstring states the
mathematics it implements.

Every function takes a dense ndarray or a scipy.sparse matrix and returns the
same kind; sparse input is normalised on its stored pattern at O(nnz) per
pass.  The Numba kernels live in :mod:`bigclust.normalize._numba` and are
imported on first use.

Importing this package is cheap (the family's plug-in imports it when
``bigclust`` is imported): each public name is loaded from its module on
first use -- ``_scaling`` (RA, RC, Ncut, Sinkhorn), ``_bbs`` (BBS and the
dispatch by name), ``_multi`` (MBBS), ``_quality`` (MB, MC), ``_common``
(the info record and warning), :mod:`~bigclust.normalize.checks` (input
checks) and :mod:`~bigclust.normalize.ooc` (out of core).
"""
from __future__ import annotations

from bigclust._util.lazy import lazy_names

#: public name -> the module that defines it (PEP 562: loaded on first access)
_WHERE = {
    "NormalizeConvergenceWarning": "_common", "NormalizeInfo": "_common",
    "bbs": "_bbs", "normalize": "_bbs", "METHODS": "_bbs", "SOLVERS": "_bbs", "SELF_LOOPS": "_bbs", "DUAL_TOL": "_bbs",
    "mbbs": "_multi", "project_simplex": "_multi",
    "quality": "_quality", "quality_from_sums": "_quality", "quality_partial": "_quality",
    "ncut": "_scaling", "ra": "_scaling", "rc": "_scaling", "sinkhorn": "_scaling",
    "kernels": "_common",   # the Numba kernels module, loaded on call (``bench bbs`` warms them up)
}

__all__ = ["NormalizeConvergenceWarning", "NormalizeInfo", "bbs", "mbbs", "ncut", "normalize",
           "project_simplex", "quality", "quality_from_sums", "quality_partial", "ra", "rc", "sinkhorn", "SOLVERS",
           "METHODS"]

__getattr__, __dir__ = lazy_names(globals(), _WHERE)
