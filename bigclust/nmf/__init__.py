"""NMF clustering (paper 001): linear NMF, bilinear (kernel) NMF, NCW weighting, kernel k-means.

Orientation.  The paper's data matrix X is m x n (terms x documents, one
document per *column*) and its models are ``X ~ U V^T`` (linear) and
``X ~ X W V^T`` (bilinear, ``K = X^T X``).  Our data have documents as
*rows*: X is n x m, so the linear model reads ``X ~ V U^T`` with V (n x k)
the document factor and U (m x k) the term factor, and the linear kernel is
``K = X X^T`` (n x n).  Equation numbers (3-1)..(3-17) refer to the paper;
the formulas in comments keep the paper's names.

Functions
---------
linear_nmf            J = 1/2 ||X - V U^T||^2 by multiplicative updates or HALS (dense or CSR X)
linear_nmf_streamed   the same iterates with X read as row blocks, one pass per iteration
bilinear_nmf          concept factorisation on a kernel (dense, CSR kNN, or the linear kernel unformed)
ncw_weights           d^(-1/2), d = K 1, of the normalised-cut weighting
ncw_vectors           rows of X scaled by d^(-1/2) (NCW for k-means on X)
kernel_kmeans         Lloyd in feature space on a dense kernel, restarts in parallel
kernel_kmeans_streamed  the same with K read as row blocks, one pass per iteration (out of core)

Every clustering function returns ``labels`` plus its factors, and an
:class:`NMFInfo` as well with ``return_info=True``.  Kernels live in
:mod:`bigclust.nmf._numba` and are imported on first use.

Importing this package is cheap: the names above are looked up in their
modules on first use (``_linear``, ``_bilinear``, ``_kkmeans``, ``_common``,
:mod:`~bigclust.nmf.init`; :mod:`~bigclust.nmf.ops` holds the shared
products and the HALS settings), so the plug-in can import it at start-up.
"""
from __future__ import annotations

from bigclust._util.lazy import lazy_names

#: public name -> the module that defines it (PEP 562: loaded on first access)
_WHERE = {
    "linear_nmf": "_linear", "linear_nmf_streamed": "_linear",
    "bilinear_nmf": "_bilinear", "ncw_weights": "_bilinear", "ncw_vectors": "_bilinear", "KERNELS": "_bilinear",
    "kernel_kmeans": "_kkmeans", "kernel_kmeans_streamed": "_kkmeans",
    "NMFConvergenceWarning": "_common", "NMFInfo": "_common", "INITS": "_common", "SOLVERS": "_common",
    "random_factors": "init",
}

__all__ = sorted(_WHERE)

__getattr__, __dir__ = lazy_names(globals(), _WHERE)
