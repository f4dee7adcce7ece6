"""scikit-learn estimators over the pipeline's own code path.

``SpectralClustering(...).fit_predict(X)`` runs exactly what ``bigclust
pipeline run`` runs -- ingest into a zarr store, preprocess, affinity,
normalisation + embedding, k-means restarts, each a stage of
:mod:`bigclust.pipeline.stages` -- on a temporary store that is deleted after the fit,
so for the same data, parameters and seed its labels equal the pipeline's
(``tests/test_estimators.py``).  The data are streamed into the store in row
chunks (a Dask array is computed one block at a time), and a dense kernel that
does not fit ``max_memory`` is normalised out of core.

As in the pipeline, data are stored as float32 and the Gaussian kernel is
``exp(-||x_i - x_j||^2 / gamma)`` -- gamma is a squared length, the inverse
of scikit-learn's ``rbf`` parameter; ``gamma="median"`` takes the data's
median squared distance.  Defaults follow scikit-learn's (``n_init=10``).
"""
from __future__ import annotations

import numbers
import shutil
import tempfile

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state

from bigclust.estimators import _params as check
from bigclust.estimators._data import (_check_X, _expand, _expand_square, _nonzero_rows, array_source,
                              in_estimator_words, warnings_at_caller)
from bigclust._util.errors import UserError

AFFINITIES = ("gaussian", "knn", "linear", "cosine", "cosine2")
NORMALIZATIONS = ("bbs", "sk", "ncut", "ra", "rc")
EIGENSOLVERS = ("auto", "eigh", "eigsh", "lobpcg", "amg")
AUGMENTS = (None, "coil20", "coil20_rotscale", "coil20_flip", "mnist", "interpolate")


def _seed(random_state) -> int:
    if isinstance(random_state, numbers.Integral) and 0 <= random_state < 2**32:
        return int(random_state)
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


class _PipelineEstimator(ClusterMixin, BaseEstimator):
    """What the estimators share: ``fit_predict``, and sparse input accepted (the subspace family densifies
    only the n x d data, never n x n)."""

    def fit_predict(self, X, y=None):
        """Cluster X and return ``labels_``."""
        return self.fit(X).labels_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class SpectralClustering(_PipelineEstimator):
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
    gamma : float or "median", default=1.0
        Width of the Gaussian ``exp(-||x_i - x_j||^2 / gamma)``, a squared distance: the inverse of
        scikit-learn's rbf ``gamma`` (theirs ``g`` is ours ``1 / g``).  ``"median"``: the median squared
        distance over the kernel's pairs (all pairs, or a seeded sample of 2**20 for large n; knn: the
        kNN pairs); ``gamma_`` holds the value used.
    n_neighbors : int, default=15
        Neighbours per point for ``affinity="knn"``.
    knn : {"auto", "exact", "approx", "pynndescent", "hnswlib", "faiss"}, default="auto"
        How ``affinity="knn"`` finds the neighbours (:mod:`bigclust.algo.knn`): exact blocked
        search, an approximate library, or ``"auto"`` (exact while ``n^2 d`` is small).
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
    l2_normalize : bool, default=False
        Scale every row to unit length first (paper 000's protocol; the pipeline's default).
    n_init : int, default=10
        k-means restarts on the embedding; the one of lowest inertia gives ``labels_``.
    max_iter : int, default=300
        Lloyd iterations per restart.
    eigensolver : {"auto", "eigh", "eigsh", "lobpcg", "amg"}, default="auto"
    random_state : int, RandomState or None, default=None
    max_memory : str or int, default="4GB"
        Budget that decides in memory vs out of core (``"512MB"``, bytes).
    scheduler : str or None, default=None
        ``None``: this process; ``"tcp://HOST:PORT"``: a ``dask.distributed`` scheduler.

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
        stopping test was set and not met; True without one), ``MB``, ``out_of_core``, ``components``.
    gamma_ : float or None
        The Gaussian width used (``gamma``, or what ``"median"`` stood for); None for the other affinities.
    n_features_in_ : int
    """

    def __init__(self, n_clusters=8, *, affinity="gaussian", gamma=1.0, n_neighbors=15, normalization="bbs",
                 solver="dual", n_iter=1000, tol=0.0, l2_normalize=False, n_init=10, max_iter=300,
                 eigensolver="auto", random_state=None, max_memory="4GB", scheduler=None, knn="auto"):
        self.n_clusters = n_clusters
        self.affinity = affinity
        self.gamma = gamma
        self.n_neighbors = n_neighbors
        self.knn = knn
        self.normalization = normalization
        self.solver = solver
        self.n_iter = n_iter
        self.tol = tol
        self.l2_normalize = l2_normalize
        self.n_init = n_init
        self.max_iter = max_iter
        self.eigensolver = eigensolver
        self.random_state = random_state
        self.max_memory = max_memory
        self.scheduler = scheduler

    def _config(self, n):
        """The pipeline config this estimator stands for, from its checked parameters (plain Python values)."""
        from bigclust.algo.knn import KNN_METHODS
        norm = check.choice(self, "normalization", NORMALIZATIONS)
        n_iter, tol = check.integer(self, "n_iter", 1), check.real(self, "tol", 0.0)
        method = {"bbs": {"n_iter": n_iter, "tol": tol,
                          "solver": check.choice(self, "solver", ("dual", "alternating", "dykstra"))},
                  "sk": {"n_iter": n_iter, "tol": tol}}.get(norm, {})
        return {
            "data": {"path": "<array>"},
            # sparse input is taken as it is (the pipeline's tf-idf defaults are for word counts)
            "preprocess": {"l2_normalize": check.boolean(self, "l2_normalize"), "tfidf": False},
            "affinity": {"kind": check.choice(self, "affinity", AFFINITIES), "gamma": check.gamma(self),
                         "n_neighbors": check.integer(self, "n_neighbors", 2),
                         "knn": check.choice(self, "knn", KNN_METHODS)},
            "method": {"names": [norm]},
            norm: method,
            "cluster": {"n_clusters": check.n_clusters(self, n), "n_init": check.integer(self, "n_init", 1),
                        "max_iter": check.integer(self, "max_iter", 1), "seed": _seed(self.random_state),
                        "algorithm": "lloyd"},
            "embed": {"eigensolver": check.choice(self, "eigensolver", EIGENSOLVERS)},
            "store": {"path": "<temporary>", "max_memory": check.max_memory(self)},
            "output": {"dir": "<none>", "plots": False},
        }

    def fit(self, X, y=None):
        """Cluster X.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix or dask.array of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        self
        """
        X = _check_X(self, X)
        config = self._config(X.shape[0])
        if config["cluster"]["n_clusters"] == 1:  # one cluster holds every sample; there is nothing to compute
            self.labels_ = np.zeros(X.shape[0], dtype=np.int64)
            self.affinity_matrix_ = self.embedding_ = None
            self.inertia_, self.n_iter_, self.normalization_info_, self.gamma_ = float("nan"), 0, {}, None
            return self
        res = run_estimator(config, X, check.scheduler(self), who=self)
        self.gamma_ = res["record"].get("gamma_used", res["record"]["params"].get("gamma"))
        self.labels_ = res["labels"]
        self.affinity_matrix_ = res["K"]
        self.embedding_ = res["E"]
        self.inertia_ = res["inertia"]
        self.n_iter_ = res["embed"].get("norm_n_iter", 0)
        self.normalization_info_ = {k: res["embed"].get(k) for k in
                                    ("norm_n_iter", "row_err", "norm_converged", "MB", "out_of_core", "components")}
        return self


def run_estimator(raw_config: dict, X, scheduler=None, y=None, who="bigclust") -> dict:
    """Run one method of a config dict on the array X in a temporary store; the picked restart's results.

    Returns a dict with ``labels`` (the restart of lowest inertia), ``inertia``,
    ``E`` (the embedding, if the chain has one), ``K`` (the kernel when it
    fits ``max_memory``, else None), ``embed`` (the embed stage's attributes)
    and ``record`` (the pipeline's record).  ``y``: int64 labels stored with X (-1 = unlabelled).
    ``who`` (the estimator, or a name) starts every error message that does not name it already, and a
    config key in it that is one of the estimator's parameters is named as that parameter; the
    pipeline's warnings are issued once each, at the caller's line.
    """
    try:
        with warnings_at_caller():
            return _run_estimator(raw_config, X, scheduler, y)
    except UserError as e:
        name, msg = (who, str(e)) if isinstance(who, str) else \
            (type(who).__name__, in_estimator_words(str(e), who.get_params(deep=False)))
        if msg.startswith(name):
            raise type(e)(msg) from None
        raise type(e)(f"{name}: {msg}") from None


def _run_estimator(raw_config, X, scheduler, y):
    from bigclust.pipeline.config import from_dict
    from bigclust.pipeline.runner import Runner, dask_client, instances
    from bigclust.pipeline.methods import get as get_method
    from bigclust.pipeline.store import Store, read_matrix

    folder = tempfile.mkdtemp(prefix="bigclust-fit-")
    try:
        cfg = from_dict(raw_config, "<estimator>")
        (point,) = list(cfg.points())
        store = Store(f"{folder}/store.zarr", owner={"array": "estimator"})
        with dask_client(scheduler) as client:
            runner = Runner(cfg, store, client, force=False, log=lambda msg: None)
            runner.source = array_source(X, point["data"]["chunk_rows"], y)
            method = get_method(cfg.methods[0])
            rec, (stage, key) = runner.run_instance(method, instances(cfg, [point], method)[0])
        out = {"record": rec, "embed": {}, "E": None, "K": None}
        g = store.open(stage, key)
        best = int(g.attrs.get("best", 0))
        labels = read_matrix(g, "labels")
        out["labels"] = np.asarray(labels[best] if labels.ndim == 2 else labels, dtype=np.int64)
        out["inertia"] = float(read_matrix(g, "inertia")[best]) if "inertia" in g else float("nan")
        out["final_attrs"] = dict(g.attrs)
        out["arrays"] = {name: read_matrix(g, name) for name in g.array_keys() if name not in ("labels", "inertia")}
        for (st, k) in runner.done:
            if st == "embed":
                out["embed"] = runner.done[(st, k)]
                out["E"] = read_matrix(store.open(st, k), "E")
            elif st in ("subspace", "semisup"):
                out["K"] = read_matrix(store.open(st, k), "K")
                out["subspace"] = dict(store.open(st, k).attrs)
            elif st == "affinity":
                ga = store.open(st, k)
                node = ga["K"]
                fmt = node.attrs.get("format")
                n = node["indptr"].shape[0] - 1 if fmt == "csr" else node.shape[0]
                dense_bytes = n * n * np.dtype(ga["K"].dtype).itemsize if fmt != "csr" else 0
                if dense_bytes <= cfg.max_memory:
                    out["K"] = read_matrix(ga, "K")
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class NMFClustering(_PipelineEstimator):
    """NMF document clustering (paper 001), scikit-learn style: label = argmax of the document factor.

    Parameters
    ----------
    n_clusters : int, default=8
    model : {"linear", "bilinear"}, default="linear"
        ``linear``: ``X ~ V U^T`` (U: terms x k, V: documents x k);
        ``bilinear``: concept factorisation ``X ~ X W V^T`` on ``kernel``.
    kernel : {"linear", "cosine2", "gaussian", "knn", "cosine"}, default="linear"
        Bilinear model only (another kernel with the linear model is an error).  ``linear``:
        ``K = X X^T``, never formed (O(nnz k) per iteration); the others are built as in
        :class:`SpectralClustering`.
    gamma, n_neighbors : float or "median", int
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
    tol : float, default=1e-5
        Relative objective change to stop at.
    random_state : int, RandomState or None
    max_memory : str or int, default="4GB"
    scheduler : str or None

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
    n_features_in_ : int

    With ``n_clusters=1`` every label is 0, the factors are None and ``objective_`` is NaN.
    Out of core (X beyond ``max_memory``) the linear model takes ``init="random"`` without ``ncw``;
    the bilinear model streams a dense kernel's rows, and with the linear kernel needs X in memory.
    """

    def __init__(self, n_clusters=8, *, model="linear", kernel="linear", gamma=1.0, n_neighbors=15, ncw=False,
                 solver="mu", init="random", n_init=10, max_iter=500, tol=1e-5, random_state=None,
                 max_memory="4GB", scheduler=None):
        self.n_clusters = n_clusters
        self.model = model
        self.kernel = kernel
        self.gamma = gamma
        self.n_neighbors = n_neighbors
        self.ncw = ncw
        self.solver = solver
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.max_memory = max_memory
        self.scheduler = scheduler

    def _config(self, n):
        """The pipeline config this estimator stands for, from its checked parameters (plain Python values)."""
        from bigclust.nmf import INITS, SOLVERS
        model = check.choice(self, "model", ("linear", "bilinear"))
        solver, init = check.choice(self, "solver", SOLVERS), check.choice(self, "init", INITS)
        kernel = check.choice(self, "kernel", AFFINITIES)
        if model == "linear" and kernel != "linear":
            raise UserError(f"NMFClustering: kernel={self.kernel!r} is for model='bilinear'; the linear model "
                            "factorises X itself (use model='bilinear' or leave kernel='linear')")
        if model == "bilinear" and (solver, init) != ("mu", "random"):
            bad = "solver" if solver != "mu" else "init"
            raise UserError(f"NMFClustering: {bad}={getattr(self, bad)!r} is for model='linear'; the bilinear "
                                  "model has multiplicative updates from a random start only")
        common = {"n_init": check.integer(self, "n_init", 1), "max_iter": check.integer(self, "max_iter", 1),
                  "tol": check.real(self, "tol", 0.0), "ncw": check.boolean(self, "ncw")}
        name, section = ("nmf", {**common, "solver": solver, "init": init}) if model == "linear" else ("binmf", common)
        return {
            "data": {"path": "<array>"},
            "preprocess": {"l2_normalize": False, "tfidf": False},
            "affinity": {"kind": kernel, "gamma": check.gamma(self),
                         "n_neighbors": check.integer(self, "n_neighbors", 2)},
            "method": {"names": [name]},
            name: section,
            "cluster": {"n_clusters": check.n_clusters(self, n), "seed": _seed(self.random_state)},
            "store": {"path": "<temporary>", "max_memory": check.max_memory(self)},
            "output": {"dir": "<none>", "plots": False},
        }

    def fit(self, X, y=None):
        """Factorise X and label each document by its largest factor entry.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix or dask.array, shape (n_samples, n_features)
            Non-negative for the linear model.
        y : ignored
        """
        X = _check_X(self, X)
        config = self._config(X.shape[0])
        k = config["cluster"]["n_clusters"]
        if self.model == "linear" and not hasattr(X, "dask"):   # checked for n_clusters=1 as well
            from sklearn.utils.validation import check_non_negative
            check_non_negative(X, "NMFClustering (model='linear'; the bilinear model takes any sign)")
        if k == 1:  # one cluster holds every sample
            self.labels_ = np.zeros(X.shape[0], dtype=np.int64)
            self.components_ = self.document_factor_ = self.affinity_matrix_ = self.gamma_ = None
            self.objective_, self.n_iter_ = float("nan"), 0
            return self
        keep, Xk = _nonzero_rows(X, k, "NMFClustering", "document")
        res = run_estimator(config, Xk, check.scheduler(self), who=self)
        arrays = res["arrays"]
        W = arrays["U"] if self.model == "linear" else arrays["W"]
        if self.model == "linear":
            self.labels_, self.document_factor_ = _expand(keep, res["labels"], arrays["V"])
        else:
            self.labels_, self.document_factor_, W = _expand(keep, res["labels"], arrays["V"], W)
        self.components_ = W.T
        self.affinity_matrix_ = _expand_square(keep, res["K"])
        self.gamma_ = res["record"].get("gamma_used", res["record"]["params"].get("gamma"))
        self.objective_ = res["inertia"]
        self.n_iter_ = int(res["final_attrs"].get("n_iter", 0))
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = self.model == "linear"
        return tags


class SubspaceClustering(_PipelineEstimator):
    """Augmented subspace clustering (paper 002): Ak-SSC / Ak-LSR / Ak-LRR and AkS-SC, scikit-learn style.

    Each sample is written as a combination of its ``n_neighbors`` nearest atoms of a dictionary of
    the samples and their augmented copies (never itself or its own copies); the coefficients are
    folded back onto the samples, ``W = |C̄| + |C̄|ᵀ``, then Ncut, spectral embedding and k-means.
    ``fit(X, y)`` with ``-1`` marking unlabelled samples in ``y`` runs the semi-supervised AkS-SC
    instead: label propagation alternated with the coefficients, ``labels_`` = argmax of the label
    matrix F, in ``y``'s classes (a fully labelled ``y`` is ignored, as clusterers do).

    Parameters
    ----------
    n_clusters : int, default=8
        With a partially labelled ``y``: must equal the number of labelled classes.
    regularizer : {"l1", "l2", "nuclear"}, default="l1"
        SSC (per-column ADMM), LSR (closed form), LRR (inexact ALM with singular value thresholding).
    n_neighbors : int, default=10
        Size of each sample's kNN dictionary; 0 uses the whole dictionary (classical SSC/LSR/LRR;
        not with a partially labelled ``y``).
    augment : {None, "coil20", "coil20_rotscale", "coil20_flip", "mnist", "interpolate"}, default=None
        None: no augmentation (kNN-SSC/LSR/LRR; the -LP variants of AkS-SC).  ``"coil20"``: 32x32
        images (column-major), flip + 5 rotations + 5 scalings; ``"coil20_rotscale"``: without the
        flip; ``"coil20_flip"``: the flip only; ``"mnist"``: 28x28, 5 rotations + 5 scalings;
        ``"interpolate"`` (AkS-SC only): ``n_interpolate`` random non-negative combinations of two
        labelled samples per class.
    lam : float, default=0.0
        Regularisation weight; 0 = the default rule (SSC: ``min_i ||A_iᵀ x_i||_inf / alpha``; LSR, LRR: 0.05).
    alpha : float, default=20.0
    gamma : float, default=0.1
        AkS-SC: coupling of the coefficients and the labels.
    n_interpolate : int, default=720
    features : {"pixels", "scattering"}, default="pixels"
        "scattering": kymatio's ``Scattering2D(J=3, L=8)`` of every image and augmented copy (zero-padded
        to a multiple of 8 pixels; the paper's MNIST features, extra ``bigclust[scattering]``).
    pca : int, default=0
        > 0: PCA to ``pca`` components of the features, after augmentation (the paper: scattering, then 100).
    image : {None, "mnist", "coil20"}, default=None
        The images' layout (28x28 row-major, 32x32 column-major) for the image augmentations and
        ``features="scattering"``, in place of the ``augment`` preset's; None: the preset's.
    max_iter : int or None, default=None
        Iterations per column of the l1 ADMM (None: 5000), or of LRR's inexact ALM (None: 1000 in
        AkS-LRR, 5000 otherwise); l2 is solved in closed form.  Columns that stop at the budget are
        reported in one ``ConvergenceWarning``.
    n_init : int, default=10
        k-means restarts on the embedding.
    random_state : int, RandomState or None
        Seeds the augmentation and the k-means restarts.
    max_memory, scheduler : as in :class:`SpectralClustering`.

    Attributes
    ----------
    labels_ : ndarray (n_samples,)
    affinity_matrix_ : scipy.sparse.csr_matrix (n_samples, n_samples)
    embedding_ : ndarray (n_samples, n_clusters), None for AkS-SC
    n_iter_ : int
        The self-expression solver's largest iteration count over the columns (ADMM, LRR's inexact
        ALM; 0 for the closed-form l2); AkS-SC: its outer C / F iterations.
    label_distributions_ : ndarray (n_samples, n_classes), AkS-SC only: F, rows summing to 1 (an all-zero
        sample, labelled -1 as it cannot be represented, gets its given label's one-hot row, else a uniform one)
    classes_ : ndarray, AkS-SC only: the labelled classes of ``y``
    n_features_in_ : int
    """

    def __init__(self, n_clusters=8, *, regularizer="l1", n_neighbors=10, augment=None, lam=0.0, alpha=20.0,
                 gamma=0.1, n_interpolate=720, features="pixels", pca=0, image=None, max_iter=None, n_init=10,
                 random_state=None, max_memory="4GB", scheduler=None):
        self.n_clusters = n_clusters
        self.regularizer = regularizer
        self.n_neighbors = n_neighbors
        self.augment = augment
        self.lam = lam
        self.alpha = alpha
        self.gamma = gamma
        self.n_interpolate = n_interpolate
        self.features = features
        self.pca = pca
        self.image = image
        self.max_iter = max_iter
        self.n_init = n_init
        self.random_state = random_state
        self.max_memory = max_memory
        self.scheduler = scheduler

    def _config(self, n, semi):
        """The pipeline config this estimator stands for, from its checked parameters (plain Python values)."""
        augment = check.choice(self, "augment", AUGMENTS)
        features = check.choice(self, "features", ("pixels", "scattering"))
        image = check.choice(self, "image", (None, "mnist", "coil20"))
        n_neighbors = check.integer(self, "n_neighbors", 0)
        if features == "scattering" and image is None and augment in (None, "interpolate"):
            raise UserError("SubspaceClustering: features='scattering' needs the image layout: set "
                                  "image='mnist' or 'coil20' (or augment to an image preset)")
        if image is not None and features == "pixels" and augment in (None, "interpolate"):
            raise UserError(f"SubspaceClustering: image={image!r} is the layout for image augmentations or "
                            "features='scattering', and neither is set; leave image=None")
        if semi and n_neighbors == 0:
            raise UserError("SubspaceClustering: a partially labelled y (AkS-SC) needs kNN supports: "
                                  "n_neighbors >= 1")
        if augment == "interpolate" and not semi:
            raise UserError("SubspaceClustering: augment='interpolate' interpolates labelled samples; "
                                  "it needs a partially labelled y in fit(X, y) (-1 = unlabelled)")
        aksc = {"regularizer": check.choice(self, "regularizer", ("l1", "l2", "nuclear")),
                "n_neighbors": n_neighbors, "augment": augment or "none", "lam": check.real(self, "lam", 0.0),
                "alpha": check.real(self, "alpha", 0.0, strict=True),
                "gamma": check.real(self, "gamma", 0.0, strict=True),
                "n_interpolate": check.integer(self, "n_interpolate", 1), "semi_supervised": semi,
                "features": features, "pca": check.integer(self, "pca", 0), "image": image or "auto",
                "max_iter": 0 if self.max_iter is None else check.integer(self, "max_iter", 1)}
        return {"data": {"path": "<array>"}, "preprocess": {"l2_normalize": False, "tfidf": False},
                "method": {"names": ["aksc"]}, "aksc": aksc,
                "cluster": {"n_clusters": check.n_clusters(self, n), "n_init": check.integer(self, "n_init", 1),
                            "seed": _seed(self.random_state), "algorithm": "lloyd"},
                "store": {"path": "<temporary>", "max_memory": check.max_memory(self)},
                "output": {"dir": "<none>", "plots": False}}

    def fit(self, X, y=None):
        """Cluster the rows of X (images flattened as the ``augment`` preset says); AkS-SC when y has -1 marks.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix or dask.array of shape (n_samples, n_features)
        y : array-like of shape (n_samples,), optional
            Integer class labels with -1 for unlabelled samples: the semi-supervised AkS-SC.  None, or a
            ``y`` with no -1 or no label at all, clusters (and ignores ``y``).

        Returns
        -------
        self
        """
        X = _check_X(self, X)
        for stale in ("classes_", "label_distributions_"):    # from an earlier semi-supervised fit
            self.__dict__.pop(stale, None)
        ys, classes = check.semi_labels(self, y, X.shape[0])
        cfg = self._config(X.shape[0], ys is not None)
        k = cfg["cluster"]["n_clusters"]
        if k == 1:
            check.subspace_shapes(self, cfg["aksc"], *X.shape)
            self.labels_ = np.zeros(X.shape[0], dtype=np.int64) if ys is None else np.full(X.shape[0], classes[0])
            self.affinity_matrix_ = self.embedding_ = None
            self.n_iter_ = 0
            if ys is not None:   # one class: every row of F is that class
                self.classes_, self.label_distributions_ = classes, np.ones((X.shape[0], 1))
            return self
        keep, Xk = _nonzero_rows(X, k, "SubspaceClustering", "sample",
                                 "labelled -1" if ys is None else "labelled -1 unless y gives their label")
        yk = None if ys is None else (ys if keep is None else ys[keep])
        if yk is not None and keep is not None:
            lost = np.setdiff1d(np.unique(ys[ys >= 0]), yk[yk >= 0])
            if lost.size:
                raise UserError(f"SubspaceClustering: every labelled sample of class {classes[lost[0]].item()!r} is an "
                                "all-zero row, which cannot be represented; label another sample of that class")
        res = run_estimator(cfg, Xk, check.scheduler(self), y=yk, who=self)
        self.affinity_matrix_ = _expand_square(keep, res["K"])   # a dropped (all-zero) sample has no links
        self.n_iter_ = int(res["subspace"].get("n_outer" if ys is not None else "n_iter", 0))
        if ys is None:
            self.labels_, self.embedding_ = _expand(keep, res["labels"], res["E"])
            return self
        lab, F = _expand(keep, res["labels"], res["arrays"]["F"])
        if keep is not None:   # an all-zero sample is not propagated: it keeps a given label, else stays -1
            drop = ~keep
            lab = np.where(drop & (ys >= 0), ys, lab)
            F[drop] = 1.0 / F.shape[1]                  # rows still sum to 1: no information, or ...
            given = np.flatnonzero(drop & (ys >= 0))
            F[given] = 0.0
            F[given, ys[given]] = 1.0                   # ... the given label
        self.labels_ = np.where(lab >= 0, classes[np.maximum(lab, 0)], -1)
        self.label_distributions_, self.classes_, self.embedding_ = F, classes, None
        return self

    def fit_predict(self, X, y=None):
        """Cluster X (AkS-SC when y has -1 marks) and return ``labels_``."""
        return self.fit(X, y).labels_
