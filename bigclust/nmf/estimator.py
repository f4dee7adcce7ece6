"""NMFClustering: the nmf family's scikit-learn estimator (paper 001), on the estimators' fit template.

The linear model runs the pipeline's ``nmf`` method on the documents, the bilinear one ``binmf`` on the
kernel of ``kernel`` (:mod:`bigclust.estimators`); all-zero documents, which no factor can place, are
left out and labelled -1.
"""
from __future__ import annotations

import numpy as np

from bigclust._util.errors import UserError
from bigclust.estimators import PipelineEstimator, config_key, own_key
from bigclust.report.terms import NAMES_EXPECT, NAMES_TYPES, names_ok

#: the estimator's models and the methods that run them
MODELS = {"linear": "nmf", "bilinear": "binmf"}


class NMFClustering(PipelineEstimator):
    """NMF document clustering (paper 001), scikit-learn style: label = argmax of the document factor.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters, the rank k of the factorisation.
    model : {"linear", "bilinear"}, default="linear"
        ``linear``: ``X ~ V U^T`` (U: terms x k, V: documents x k);
        ``bilinear``: concept factorisation ``X ~ X W V^T`` on ``kernel``.
    kernel : {"linear", "cosine2", "gaussian", "knn", "cosine"}, default="linear"
        Bilinear model only (another kernel with the linear model is an error).  ``linear``:
        ``K = X X^T``, never formed (O(nnz k) per iteration); the others are built as in
        :class:`SpectralClustering`.
    gamma, n_neighbors : float or "median", int, default="median", 15
        Kernel parameters (Gaussian width ``exp(-d^2 / gamma)`` as a squared distance, the inverse of
        scikit-learn's; ``"median"`` as in :class:`SpectralClustering`; kNN size).
    ncw : bool, default=False
        Normalised cut weighting: documents weighted by ``d_i^(-1/2)``, ``d = K 1``.
    solver : {"mu", "hals"}, default="mu"
        Linear model: multiplicative updates (the paper's) or fast HALS.  The bilinear model has
        multiplicative updates only (``"hals"`` with it is an error).
    init : {"random", "nndsvd"}, default="random"
        Linear model; the bilinear model starts at random (``"nndsvd"`` with it is an error).
    n_init : int, default=10
        Restarts; the lowest objective wins.
    max_iter : int, default=500
        Iterations per restart.
    tol : float, default=1e-5
        Relative objective change to stop at.
    random_state : int, RandomState or None
        Seeds the restarts.
    max_memory : str or int, default="4GB"
        Budget that decides in memory vs out of core, as in :class:`SpectralClustering`.
    scheduler : str or None
        A ``dask.distributed`` scheduler's address, as in :class:`SpectralClustering`.
    feature_names : sequence of str or None, default=None
        The name of each column of X (a vectorizer's ``get_feature_names_out()``): ``top_terms_`` says what
        each cluster is about.

    Attributes
    ----------
    labels_ : ndarray (n_samples,)
        Cluster of each document; -1 for an all-zero document (no terms to place it by; a warning says so).
    components_ : ndarray
        Linear: U^T (k x n_features), the term factor.  Bilinear: W^T (k x n_samples).
    document_factor_ : ndarray (n_samples, k)
        V, normalised after the fit: linear, U's columns to unit length and V's scaled by U's former
        norms (so ``document_factor_ @ components_`` is unchanged); bilinear, by ``s = sqrt(diag(WᵀKW))``.
    objective_ : float
        Of the restart kept: linear ``1/2 ||X - V Uᵀ||_F²`` (scikit-learn's ``reconstruction_err_`` is
        the unsquared norm), bilinear ``1/2 tr((I - W Vᵀ)ᵀ K (I - W Vᵀ))``; with ``ncw`` of the NCW-weighted
        X (K), which ``document_factor_ @ components_`` then approximates.
    n_iter_ : int
        Iterations of the restart kept.
    affinity_matrix_ : ndarray, scipy.sparse matrix or None
        The bilinear model's kernel K when it was formed and fits ``max_memory`` (None for the linear
        kernel, which is never formed, and for the linear model).
    gamma_ : float or None
        The Gaussian / kNN kernel's width used (what ``gamma="median"`` stood for); None otherwise.
    top_terms_ : list of list of str, or None
        The 10 top terms of each cluster: the largest entries of its row of ``components_`` (linear), or of the
        centroid of its documents (bilinear); None when no feature names are known (``feature_names``, or a
        DataFrame's columns).
    n_features_in_ : int

    With ``n_clusters=1`` every label is 0, the factors are None and ``objective_`` is NaN.

    Out of core (X beyond ``max_memory``) the linear model takes ``init="random"`` without ``ncw``;
    the bilinear model streams a dense kernel's rows, and with the linear kernel needs X in memory.

    Examples
    --------
    >>> import numpy as np
    >>> from bigclust import NMFClustering
    >>> from bigclust.metrics import accuracy
    >>> X = np.array([[3, 2, 0, 0], [2, 3, 0, 0], [4, 4, 0, 1],
    ...               [0, 0, 3, 2], [0, 1, 2, 3], [0, 0, 4, 4]], dtype=float)
    >>> model = NMFClustering(n_clusters=2, max_iter=200, random_state=0).fit(X)
    >>> accuracy([0, 0, 0, 1, 1, 1], model.labels_), model.components_.shape
    (1.0, (2, 4))
    """

    def __init__(self, n_clusters=8, *, model="linear", kernel="linear", gamma="median", n_neighbors=15, ncw=False,
                 solver="mu", init="random", n_init=10, max_iter=500, tol=1e-5, random_state=None,
                 max_memory="4GB", scheduler=None, feature_names=None):
        self._keep(locals())   # scikit-learn: every parameter stored as given

    @classmethod
    def _parameters(cls):
        return {"model": own_key(str, lambda v: v in MODELS, "one of " + ", ".join(map(repr, MODELS))),
                "kernel": config_key("affinity", "kind"), "gamma": config_key("affinity", "gamma"),
                "n_neighbors": config_key("affinity", "n_neighbors"),
                # the linear model's keys (the bilinear model's are declared alike, and take mu / random only)
                **{name: config_key("nmf", name) for name in ("ncw", "solver", "init", "n_init", "max_iter", "tol")},
                "feature_names": own_key(NAMES_TYPES, names_ok, NAMES_EXPECT)}

    _fetch = {"affinity": ("K",)}
    _row_noun = "document"

    def _sections(self, p, y):
        model, kernel = p["model"], p["kernel"]
        if model == "linear" and kernel != "linear":
            raise UserError(f"NMFClustering: kernel={self.kernel!r} is for model='bilinear'; the linear model "
                            "factorises X itself (use model='bilinear' or leave kernel='linear')")
        if model == "bilinear" and (p["solver"], p["init"]) != ("mu", "random"):
            bad = "solver" if p["solver"] != "mu" else "init"
            raise UserError(f"NMFClustering: {bad}={getattr(self, bad)!r} is for model='linear'; the bilinear "
                            "model has multiplicative updates from a random start only")
        section = {name: p[name] for name in ("n_init", "max_iter", "tol", "ncw")}
        if model == "linear":
            section.update(solver=p["solver"], init=p["init"])
        return {"preprocess": {"l2_normalize": False, "tfidf": False},
                "affinity": {"kind": kernel, "gamma": p["gamma"], "n_neighbors": p["n_neighbors"]},
                "method": {"names": [MODELS[model]]}, MODELS[model]: section}

    def _check_data(self, X, p):
        if p["model"] == "linear" and not hasattr(X, "dask"):   # a Dask array is checked as it is read
            from sklearn.utils.validation import check_non_negative
            check_non_negative(X, "NMFClustering (model='linear'; the bilinear model takes any sign)")

    def _one_cluster(self, X, y, p, config):
        self.labels_ = np.zeros(X.shape[0], dtype=np.int64)
        self.components_ = self.document_factor_ = self.affinity_matrix_ = self.gamma_ = None
        self.objective_, self.n_iter_ = float("nan"), 0

    def _set_fitted(self, res, y):
        # linear: U (terms x k) is not per document; bilinear: W (documents x k) is
        W = res.arrays["U"] if self.model == "linear" else res.rows(res.arrays["W"])
        self.labels_, self.document_factor_ = res.labels, res.rows(res.arrays["V"])
        self.components_ = W.T
        self.affinity_matrix_ = res.square(res.get("affinity", "K"))
        self.gamma_ = res.gamma
        self.objective_ = res.inertia
        self.n_iter_ = int(res.attrs.get("n_iter", 0))

    _top_terms = True

    def _term_factor(self):
        """The linear model's term factor (terms x clusters); None for the bilinear model (the centroids)."""
        return self.components_.T if self.model == "linear" and self.components_ is not None else None

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = self.model == "linear"
        return tags
