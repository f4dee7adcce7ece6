"""Public path ``bigclust.metrics``: the module :mod:`bigclust.algo.metrics` itself, under its public name."""
import sys

from bigclust.algo import metrics as _module

sys.modules[__name__] = _module
