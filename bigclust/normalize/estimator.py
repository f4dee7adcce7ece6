"""SpectralClustering: the normalize family's scikit-learn estimator (paper 000), on the estimators' fit template.

``fit`` runs the pipeline's chain of the normalisation asked for (affinity, normalisation + embedding,
k-means restarts) in memory, or on a temporary store (:mod:`bigclust.estimators`); a dense kernel that does
not fit ``max_memory`` is normalised out of core.  As in the pipeline, data are stored as float32 and the Gaussian
kernel is ``exp(-||x_i - x_j||^2 / gamma)`` -- gamma is a squared length, the inverse of scikit-learn's
``rbf`` parameter; ``gamma="median"`` takes the data's median squared distance.  Defaults follow
scikit-learn's (``n_init=10``, ``max_iter=300``) and are the pipeline's: every default here is the config
key's it stands for (``tests/test_trust_defaults.py``).
"""
from __future__ import annotations

import numpy as np

from bigclust.estimators import PipelineEstimator, config_key, own_key
from bigclust.report.terms import NAMES_EXPECT, NAMES_TYPES, names_ok

#: the normalisations the estimator offers: the methods of this family that embed one kernel
NORMALIZATIONS = ("bbs", "sk", "ncut", "ra", "rc")


class SpectralClustering(PipelineEstimator):
    """Spectral clustering with bi-stochastic normalisation (paper 000), scikit-learn style.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters (and of eigenvectors); 1 puts every sample in one
        cluster without computing anything.
    affinity : {"gaussian", "knn", "linear", "cosine", "cosine2"}, default="gaussian"
        ``gaussian``: dense ``exp(-||x_i - x_j||^2 / gamma)``; ``knn``: the same
        weights on the symmetrised k-nearest-neighbour graph (sparse);
        ``linear``, ``cosine``, ``cosine2``: inner products (cosine2 is its square).
    gamma : float or "median", default="median"
        Width of the Gaussian ``exp(-||x_i - x_j||^2 / gamma)``, a squared distance: the inverse of
        scikit-learn's rbf ``gamma`` (theirs ``g`` is ours ``1 / g``).  ``"median"``: the median squared
        distance over the kernel's pairs (all pairs, or a seeded sample of 2**20 for large n; knn: the
        kNN pairs); ``gamma_`` holds the value used.
    n_neighbors : int, default=15
        Neighbours per point for ``affinity="knn"``.
    normalization : {"bbs", "sk", "ncut", "ra", "rc"}, default="bbs"
        ``bbs``: Euclidean bi-stochastic projection; ``sk``: Sinkhorn-Knopp;
        ``ncut``: ``D^-1/2 K D^-1/2``; ``ra``: K itself; ``rc``: ratio cut (``K - D``).
    solver : {"dual", "alternating", "dykstra"}, default="dual"
        BBS solver: the exact dual Newton method, the paper's Alg. 1, or Dykstra's projections.
        Out of core only ``"alternating"`` streams; choose it with a small ``max_memory``.
    n_iter : int, default=1000
        Iteration budget of BBS / SK (Newton steps for the dual solver).
    tol : float, default=0.0
        Row-sum error to stop BBS / SK at.  0: ``"alternating"``, ``"dykstra"`` and SK run all
        ``n_iter`` iterations with no stopping test (paper 000's protocol) and never warn --
        ``normalization_info_["row_err"]`` says how far from bi-stochastic they got; ``"dual"``
        stops at its own tolerance and warns when ``n_iter`` Newton steps do not reach it.
    l2_normalize : bool or "auto", default=False
        Scale every row to unit length first (paper 000's protocol).  ``"auto"`` (the pipeline's default):
        sparse X (counts) gets unit rows, dense X is taken as it is.  False here: X is taken as given, as
        scikit-learn's estimators do (sparse X is often a TfidfVectorizer's, unit already, and may hold
        all-zero rows, which cannot be scaled).
    n_init : int, default=10
        k-means restarts on the embedding; the one of lowest inertia gives ``labels_``.
    max_iter : int, default=300
        Lloyd iterations per restart.
    eigensolver : {"auto", "arpack", "eigh", "eigsh", "lobpcg", "amg"}, default="auto"
        Eigensolver of the embedding; ``"auto"`` chooses by size and sparsity (on a sparse graph of 131 072
        rows or more, ARPACK on a Chebyshev filter of P); ``"arpack"`` as ``"auto"`` without the filter.
    min_component : float, default=0.01
        When normalisation splits the graph, components below this fraction of ``n_samples / n_clusters``
        rows get no eigenvector (each component would take one at the top of the spectrum) and their rows
        the mean embedding of their kernel neighbours; 0 turns it off.
    random_state : int, RandomState or None, default=None
        Seeds the k-means restarts (and the samples of the median rule and of approximate kNN).
    max_memory : str or int, default="4GB"
        Budget that decides in memory vs out of core (``"512MB"``, bytes).
    scheduler : str or None, default=None
        ``None``: this process; ``"tcp://HOST:PORT"``: a ``dask.distributed`` scheduler.
    knn : {"auto", "exact", "ivf-rows", "ivf", "approx", "pynndescent", "hnswlib", "faiss"}, default="auto"
        How ``affinity="knn"`` finds the neighbours (:mod:`bigclust.algo.knn`): exact blocked
        search, an inverted file, an approximate library, or ``"auto"`` (exact while ``n^2 d`` is
        small, ``"ivf-rows"`` above).
    feature_names : sequence of str or None, default=None
        The name of each column of X (a vectorizer's ``get_feature_names_out()``): ``top_terms_`` says what
        each cluster is about.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
    affinity_matrix_ : ndarray or scipy.sparse.csr_matrix, or None
        The kernel K (None when it did not fit ``max_memory``).
    embedding_ : ndarray of shape (n_samples, n_clusters)
        Row-normalised top eigenvectors of the normalised kernel.
    inertia_ : float
        k-means inertia of the chosen restart.
    n_iter_ : int
        Iterations of the normalisation solver.
    normalization_info_ : dict
        ``norm_n_iter`` (as ``n_iter_``), ``row_err`` (max row-sum error), ``norm_converged`` (False when a
        stopping test was set and not met; True without one), ``MB``, ``out_of_core``, ``components``
        (connected components before and after normalisation), ``set_aside`` (components and rows that got
        no eigenvector, see ``min_component``; None when none).
    gamma_ : float or None
        The Gaussian width used (``gamma``, or what ``"median"`` stood for); None for the other affinities.
    top_terms_ : list of list of str, or None
        The 10 top terms (largest features) of each cluster's centroid in X's space (for tf-idf documents,
        what the cluster is about); None when no feature names are known (``feature_names``, or a
        DataFrame's columns).
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from bigclust import SpectralClustering
    >>> from bigclust.metrics import accuracy
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal(c, 0.3, size=(10, 2)) for c in (0.0, 3.0, 6.0)])
    >>> y = np.repeat([0, 1, 2], 10)
    >>> model = SpectralClustering(n_clusters=3, random_state=0).fit(X)
    >>> accuracy(y, model.labels_), model.embedding_.shape
    (1.0, (30, 3))
    """

    def __init__(self, n_clusters=8, *, affinity="gaussian", gamma="median", n_neighbors=15, normalization="bbs",
                 solver="dual", n_iter=1000, tol=0.0, l2_normalize=False, n_init=10, max_iter=300,
                 eigensolver="auto", min_component=0.01, random_state=None, max_memory="4GB", scheduler=None,
                 knn="auto", feature_names=None):
        self._keep(locals())   # scikit-learn: every parameter stored as given

    @classmethod
    def _parameters(cls):
        return {"affinity": config_key("affinity", "kind"), "gamma": config_key("affinity", "gamma"),
                "n_neighbors": config_key("affinity", "n_neighbors"), "knn": config_key("affinity", "knn"),
                "normalization": own_key(str, lambda v: v in NORMALIZATIONS,
                                         "one of " + ", ".join(map(repr, NORMALIZATIONS))),
                # the BBS solver's keys (Sinkhorn-Knopp's n_iter and tol are declared alike)
                "solver": config_key("bbs", "solver"), "n_iter": config_key("bbs", "n_iter"),
                "tol": config_key("bbs", "tol"), "l2_normalize": config_key("preprocess", "l2_normalize"),
                "n_init": config_key("cluster", "n_init"), "max_iter": config_key("cluster", "max_iter"),
                "eigensolver": config_key("embed", "eigensolver"),
                "min_component": config_key("embed", "min_component"),
                "feature_names": own_key(NAMES_TYPES, names_ok, NAMES_EXPECT)}

    _fetch = {"affinity": ("K",), "embed": ("E",)}
    _config_words = (('[affinity] kind = "knn"', 'affinity="knn"'),)   # the way out of a dense kernel's size

    def _sections(self, p, y):
        norm = p["normalization"]
        method = {"bbs": {"n_iter": p["n_iter"], "tol": p["tol"], "solver": p["solver"]},
                  "sk": {"n_iter": p["n_iter"], "tol": p["tol"]}}.get(norm, {})
        return {
            # sparse input is taken as it is (the pipeline's tf-idf defaults are for word counts)
            "preprocess": {"l2_normalize": p["l2_normalize"], "tfidf": False},
            "affinity": {"kind": p["affinity"], "gamma": p["gamma"], "n_neighbors": p["n_neighbors"],
                         "knn": p["knn"]},
            "method": {"names": [norm]},
            norm: method,
            "cluster": {"n_init": p["n_init"], "max_iter": p["max_iter"], "algorithm": "lloyd"},
            "embed": {"eigensolver": p["eigensolver"], "min_component": p["min_component"]},
        }

    _top_terms = True

    def _one_cluster(self, X, y, p, config):
        self.labels_ = np.zeros(X.shape[0], dtype=np.int64)
        self.affinity_matrix_ = self.embedding_ = None
        self.inertia_, self.n_iter_, self.normalization_info_, self.gamma_ = float("nan"), 0, {}, None

    def _set_fitted(self, res, y):
        embed = res.stages.get("embed", {})
        self.gamma_ = res.gamma
        self.labels_ = res.labels
        self.affinity_matrix_ = res.get("affinity", "K")
        self.embedding_ = res.get("embed", "E")
        self.inertia_ = res.inertia
        self.n_iter_ = embed.get("norm_n_iter", 0)
        self.normalization_info_ = {k: embed.get(k) for k in
                                    ("norm_n_iter", "row_err", "norm_converged", "MB", "out_of_core", "components",
                                     "set_aside")}
