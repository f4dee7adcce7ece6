"""k-means: Lloyd with many restarts, and mini-batch k-means for large or lazy data.

The papers "ran Matlab kmeans 100 times" and report the average and the
maximum of each metric over the restarts, so both functions return the labels
of every restart (:class:`KMeansResult`), not only the best one.

Randomness: ``random_state`` is turned into one
``uint64`` seed per restart up front, and the kernels draw from their own
per-restart generator (:mod:`bigclust.algo.kmeans.draws`), so labels depend
only on the seed -- not on the number of Numba threads, nor (for
:func:`minibatch_kmeans`) on the chunking of a Dask array.

The package only gathers the public names: Lloyd and assignment are in
:mod:`~bigclust.algo.kmeans.lloyd`, mini-batch in
:mod:`~bigclust.algo.kmeans.minibatch`, what they share in ``_common``; the
Numba kernels (``_numba``, ``_numba_csr``) are imported on first use.
"""
from __future__ import annotations

from bigclust.algo.kmeans._common import INIT_METHODS, KMeansResult, init_centers
from bigclust.algo.kmeans.lloyd import assign, kmeans
from bigclust.algo.kmeans.minibatch import minibatch_kmeans

__all__ = ["INIT_METHODS", "KMeansResult", "assign", "init_centers", "kmeans", "minibatch_kmeans"]
