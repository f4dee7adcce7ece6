"""A toy method family, in its own folder as a real one is: its algorithm here, its pipeline plug-in in
``plugin.py`` (a method, a stage, a report column, an estimator) and its estimator in ``estimator.py``.

``tests/test_methods.py`` imports ``toy_family.plugin`` -- the one line :mod:`bigclust.families` would get --
and runs the method through ``bigclust pipeline run`` and through ``ToyClustering().fit_predict``.
"""
import numpy as np


def argmax_labels(X, k, shift=0.0):
    """Each row's largest feature among its first ``k`` (after adding ``shift``), and the mean margin between
    that feature and the runner-up (how sure the labelling is)."""
    Z = np.asarray(X, dtype=np.float64)[:, :k] + shift
    top = np.sort(Z, axis=1)
    return np.argmax(Z, axis=1), float(np.mean(top[:, -1] - top[:, -2]))
