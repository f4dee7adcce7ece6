"""The warning every iterative solver of bigclust gives when it stops on its iteration budget.

It is scikit-learn's :class:`sklearn.exceptions.ConvergenceWarning` (so ``warnings.filterwarnings("ignore",
category=ConvergenceWarning)`` and grid searches treat it as they treat scikit-learn's own) and a
RuntimeWarning (what it was before, so existing filters keep working).  Kept out of :mod:`bigclust._util.errors`
because importing scikit-learn costs the command line a second at start-up.
"""
from sklearn.exceptions import ConvergenceWarning as _SklearnConvergenceWarning


class ConvergenceWarning(_SklearnConvergenceWarning, RuntimeWarning):
    """A solver reached its iteration budget before its tolerance."""
