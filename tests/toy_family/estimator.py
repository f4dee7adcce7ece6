"""ToyClustering: the toy family's scikit-learn estimator, on the estimators' one ``fit`` template."""
from __future__ import annotations

import numpy as np

from bigclust.estimators import PipelineEstimator, config_key


class ToyClustering(PipelineEstimator):
    """Label each sample by its largest feature among the first ``n_clusters`` (after adding ``shift``).

    Attributes
    ----------
    labels_ : ndarray (n_samples,)
    margin_ : float
        Mean gap between each sample's largest feature and the runner-up.
    """

    def __init__(self, n_clusters=2, *, shift=0.0, random_state=None, max_memory="4GB", scheduler=None):
        self.n_clusters = n_clusters
        self.shift = shift
        self.random_state = random_state
        self.max_memory = max_memory
        self.scheduler = scheduler

    @classmethod
    def _parameters(cls):
        return {"shift": config_key("toy", "shift")}   # checked as [toy] shift is: one declaration

    def _sections(self, p, y):
        return {"preprocess": {"l2_normalize": False}, "method": {"names": ["toy"]}, "toy": {"shift": p["shift"]}}

    def _one_cluster(self, X, y, p, config):
        self.labels_, self.margin_ = np.zeros(X.shape[0], dtype=np.int64), float("nan")

    def _set_fitted(self, res, y):
        self.labels_, self.margin_ = res.labels, float(res.attrs["toy_margin"])
