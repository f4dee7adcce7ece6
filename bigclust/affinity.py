"""Public path ``bigclust.affinity``: the module :mod:`bigclust.algo.affinity` itself, under its public name."""
import sys

from bigclust.algo import affinity as _module

sys.modules[__name__] = _module
