"""Public path ``bigclust.kmeans``: the module :mod:`bigclust.algo.kmeans` itself, under its public name."""
import sys

from bigclust.algo import kmeans as _module

sys.modules[__name__] = _module
