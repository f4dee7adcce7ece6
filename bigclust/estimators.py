"""scikit-learn estimators over the pipeline's own code path.

``SpectralClustering(...).fit_predict(X)`` runs exactly what ``bigclust
pipeline run`` runs -- ingest into a zarr store, preprocess, affinity,
normalisation + embedding, k-means restarts, each a stage of
:mod:`bigclust.stages` -- on a temporary store that is deleted after the fit,
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
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state

AFFINITIES = ("gaussian", "knn", "linear", "cosine", "cosine2")
NORMALIZATIONS = ("bbs", "sk", "ncut", "ra", "rc")


def _array_source(X, chunk_rows, y=None):
    """A :class:`bigclust.datasets.Source` over an in-memory or Dask array (unlabelled: y = -1 unless given)."""
    from .datasets import DatasetInfo, Source

    n, d = X.shape
    info = DatasetInfo("array", "array given to fit", int(n), int(d), 0, bool(sp.issparse(X)), ())
    dask_array = hasattr(X, "dask") and hasattr(X, "compute")

    def blocks(hint):
        step = max(1, int(hint))
        for r0 in range(0, n, step):
            blk = X[r0:r0 + step]
            if dask_array:
                blk = blk.compute()
            blk = sp.csr_matrix(blk, dtype=np.float32) if sp.issparse(blk) else np.asarray(blk, dtype=np.float32)
            yield blk, (np.full(blk.shape[0], -1, dtype=np.int64) if y is None else y[r0:r0 + blk.shape[0]])

    return Source(info, blocks)


def _check_X(est, X):
    """NumPy / scipy.sparse / Dask input, checked the scikit-learn way (Dask arrays stay lazy)."""
    from sklearn.utils.validation import check_array

    if hasattr(X, "dask") and hasattr(X, "compute"):
        if X.ndim != 2:
            raise ValueError(f"Expected a 2D array, got a {X.ndim}D Dask array")
        n = X.shape[0]
        if n is None or any(c != c for c in X.shape):
            raise ValueError("Dask array with unknown chunk sizes; call X.compute_chunk_sizes() first")
        est.n_features_in_ = X.shape[1]
        return X
    X = check_array(X, accept_sparse="csr", dtype=[np.float64, np.float32], ensure_min_samples=2)
    est.n_features_in_ = X.shape[1]
    return X


def _gamma(gamma):
    """``"median"`` as it is, anything else as a float (the config refuses other strings, as a ValueError)."""
    return gamma if isinstance(gamma, str) else float(gamma)


def _seed(random_state) -> int:
    if isinstance(random_state, numbers.Integral) and 0 <= random_state < 2**32:
        return int(random_state)
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


def _nonzero_rows(X, k, who, what):
    """``(keep mask or None, X without its all-zero rows)``: such a row cannot be placed (label -1, as noise)."""
    if hasattr(X, "dask"):
        return None, X
    keep = np.asarray((abs(X) if sp.issparse(X) else np.abs(X)).sum(axis=1)).ravel() > 0
    if keep.all():
        return None, X
    if keep.sum() <= max(k, 2):
        raise ValueError(f"X has {int((~keep).sum())} all-zero rows and only {int(keep.sum())} others; "
                         f"n_clusters={k} needs more non-zero {what}s")
    warnings.warn(f"{who}: {int((~keep).sum())} all-zero {what}(s) (first: row {int(np.flatnonzero(~keep)[0])}) "
                  "cannot be placed; labelled -1", RuntimeWarning, stacklevel=3)
    return keep, X[np.flatnonzero(keep)]


def _expand(keep, labels, *arrays):
    """Labels (and row arrays) of the kept rows back to all rows: -1 (zeros) for the dropped ones."""
    if keep is None:
        return (labels, *arrays)
    full = np.full(keep.size, -1, dtype=np.int64)
    full[keep] = labels
    out = []
    for a in arrays:
        if a is None:
            out.append(None)
            continue
        b = np.zeros((keep.size,) + a.shape[1:])
        b[keep] = a
        out.append(b)
    return (full, *out)


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
        How ``affinity="knn"`` finds the neighbours (:mod:`bigclust.knn`): exact blocked
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
        Row-sum error to stop BBS / SK at (0: the solver's default).
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
        ``n_iter``, ``row_err`` (max row-sum error), ``MB``, ``out_of_core``, ``components``.
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

    def _config(self, seed):
        """The pipeline config this estimator stands for (validated by :func:`bigclust.config.from_dict`)."""
        method = {"bbs": {"n_iter": self.n_iter, "tol": float(self.tol), "solver": self.solver},
                  "sk": {"n_iter": self.n_iter, "tol": float(self.tol)}}.get(self.normalization, {})
        return {
            "data": {"path": "<array>"},
            # sparse input is taken as it is (the pipeline's tf-idf defaults are for word counts)
            "preprocess": {"l2_normalize": bool(self.l2_normalize), "tfidf": False},
            "affinity": {"kind": self.affinity, "gamma": _gamma(self.gamma), "n_neighbors": self.n_neighbors,
                         "knn": self.knn},
            "method": {"names": [self.normalization]},
            self.normalization: method,
            "cluster": {"n_clusters": self.n_clusters, "n_init": self.n_init, "max_iter": self.max_iter,
                        "seed": seed, "algorithm": "lloyd"},
            "embed": {"eigensolver": self.eigensolver},
            "store": {"path": "<temporary>", "max_memory": self.max_memory},
            "output": {"dir": "<none>", "plots": False},
        }

    def _check_params(self, n):
        if self.affinity not in AFFINITIES:
            raise ValueError(f"affinity must be one of {', '.join(AFFINITIES)}, got {self.affinity!r}")
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {', '.join(NORMALIZATIONS)}, got {self.normalization!r}")
        from .knn import check_method
        check_method(self.knn)                      # a UserError, i.e. a ValueError naming the choices
        k = self.n_clusters
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"n_clusters must be an integer >= 1, got {k!r}")
        if k >= n and k > 1:
            raise ValueError(f"n_clusters={k} must be below n_samples={n}")

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
        self._check_params(X.shape[0])
        if self.n_clusters == 1:  # one cluster holds every sample; there is nothing to compute
            self.labels_ = np.zeros(X.shape[0], dtype=np.int64)
            self.affinity_matrix_ = self.embedding_ = None
            self.inertia_, self.n_iter_, self.normalization_info_, self.gamma_ = float("nan"), 0, {}, None
            return self
        res = run_estimator(self._config(_seed(self.random_state)), X, self.scheduler)
        self.gamma_ = res["record"].get("gamma_used", res["record"]["params"].get("gamma"))
        self.labels_ = res["labels"]
        self.affinity_matrix_ = res["K"]
        self.embedding_ = res["E"]
        self.inertia_ = res["inertia"]
        self.n_iter_ = res["embed"].get("norm_n_iter", 0)
        self.normalization_info_ = {k: res["embed"].get(k) for k in
                                    ("norm_n_iter", "row_err", "norm_converged", "MB", "out_of_core", "components")}
        return self


def run_estimator(raw_config: dict, X, scheduler=None, y=None) -> dict:
    """Run one method of a config dict on the array X in a temporary store; the picked restart's results.

    Returns a dict with ``labels`` (the restart of lowest inertia), ``inertia``,
    ``E`` (the embedding, if the chain has one), ``K`` (the kernel when it
    fits ``max_memory``, else None), ``embed`` (the embed stage's attributes)
    and ``record`` (the pipeline's record).  ``y``: int64 labels stored with X (-1 = unlabelled).
    """
    from .config import from_dict
    from .pipeline import Runner, dask_client, instances
    from .methods import get as get_method
    from .store import Store, read_matrix

    folder = tempfile.mkdtemp(prefix="bigclust-fit-")
    try:
        cfg = from_dict(raw_config, "<estimator>")
        (point,) = list(cfg.points())
        store = Store(f"{folder}/store.zarr", owner={"array": "estimator"})
        with dask_client(scheduler) as client:
            runner = Runner(cfg, store, client, force=False, log=lambda msg: None)
            runner.source = _array_source(X, point["data"]["chunk_rows"], y)
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
        Bilinear model only.  ``linear``: ``K = X X^T``, never formed (O(nnz k)
        per iteration); the others are built as in :class:`SpectralClustering`.
    gamma, n_neighbors : float or "median", int
        Kernel parameters (Gaussian width ``exp(-d^2 / gamma)`` as a squared distance, the inverse of
        scikit-learn's; ``"median"`` as in :class:`SpectralClustering`; kNN size).
    ncw : bool, default=False
        Normalised cut weighting: documents weighted by ``d_i^(-1/2)``, ``d = K 1``.
    solver : {"mu", "hals"}, default="mu"
        Linear model: multiplicative updates (the paper's) or fast HALS.
    init : {"random", "nndsvd"}, default="random"
        Linear model (the bilinear model starts at random).
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
        V (normalised as in 3-4/3-5 or 3-16/3-17).
    objective_ : float
    n_iter_ : int
    n_features_in_ : int
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

    def _config(self, seed):
        common = {"n_init": self.n_init, "max_iter": self.max_iter, "tol": float(self.tol), "ncw": bool(self.ncw)}
        if self.model == "linear":
            name, section = "nmf", {**common, "solver": self.solver, "init": self.init}
        else:
            name, section = "binmf", common
        return {
            "data": {"path": "<array>"},
            "preprocess": {"l2_normalize": False, "tfidf": False},
            "affinity": {"kind": self.kernel, "gamma": _gamma(self.gamma), "n_neighbors": self.n_neighbors},
            "method": {"names": [name]},
            name: section,
            "cluster": {"n_clusters": self.n_clusters, "seed": seed},
            "store": {"path": "<temporary>", "max_memory": self.max_memory},
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
        if self.model not in ("linear", "bilinear"):
            raise ValueError(f"model must be 'linear' or 'bilinear', got {self.model!r}")
        if self.kernel not in AFFINITIES:
            raise ValueError(f"kernel must be one of {', '.join(AFFINITIES)}, got {self.kernel!r}")
        k = self.n_clusters
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1 or (k > X.shape[0]):
            raise ValueError(f"n_clusters must be an integer between 1 and n_samples={X.shape[0]}, got {k!r}")
        if k == 1:  # one cluster holds every sample
            self.labels_ = np.zeros(X.shape[0], dtype=np.int64)
            self.components_ = self.document_factor_ = None
            self.objective_, self.n_iter_ = float("nan"), 0
            return self
        if self.model == "linear" and not hasattr(X, "dask"):
            from sklearn.utils.validation import check_non_negative
            check_non_negative(X, "NMFClustering (model='linear'; the bilinear model takes any sign)")
        keep, Xk = _nonzero_rows(X, k, "NMFClustering", "document")
        res = run_estimator(self._config(_seed(self.random_state)), Xk, self.scheduler)
        arrays = res["arrays"]
        W = arrays["U"] if self.model == "linear" else arrays["W"]
        if self.model == "linear":
            self.labels_, self.document_factor_ = _expand(keep, res["labels"], arrays["V"])
        else:
            self.labels_, self.document_factor_, W = _expand(keep, res["labels"], arrays["V"], W)
        self.components_ = W.T
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
        The images' layout for ``features="scattering"`` (28x28 row-major, 32x32 column-major); None: the
        ``augment`` preset's.
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
    label_distributions_ : ndarray (n_samples, n_classes), AkS-SC only: F, rows summing to 1
    classes_ : ndarray, AkS-SC only: the labelled classes of ``y``
    n_features_in_ : int
    """

    def __init__(self, n_clusters=8, *, regularizer="l1", n_neighbors=10, augment=None, lam=0.0, alpha=20.0,
                 gamma=0.1, n_interpolate=720, features="pixels", pca=0, image=None, n_init=10, random_state=None,
                 max_memory="4GB", scheduler=None):
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
        self.n_init = n_init
        self.random_state = random_state
        self.max_memory = max_memory
        self.scheduler = scheduler

    def fit(self, X, y=None):
        """Cluster the rows of X (images flattened as the ``augment`` preset says); AkS-SC when y has -1 marks."""
        X = _check_X(self, X)
        k = self.n_clusters
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1 or (k >= X.shape[0] and k > 1):
            raise ValueError(f"n_clusters must be an integer between 1 and n_samples - 1, got {k!r}")
        ys, classes = _semi_labels(y, X.shape[0], k)
        if k == 1:
            self.labels_ = np.zeros(X.shape[0], dtype=np.int64) if ys is None else np.full(X.shape[0], classes[0])
            self.affinity_matrix_ = self.embedding_ = None
            return self
        cfg = {"data": {"path": "<array>"}, "preprocess": {"l2_normalize": False, "tfidf": False},
               "method": {"names": ["aksc"]},
               "aksc": {"regularizer": self.regularizer, "n_neighbors": self.n_neighbors,
                        "augment": "none" if self.augment is None else self.augment, "lam": float(self.lam),
                        "alpha": float(self.alpha), "gamma": float(self.gamma),
                        "n_interpolate": self.n_interpolate, "semi_supervised": ys is not None,
                        "features": self.features, "pca": self.pca, "image": self.image or "auto"},
               "cluster": {"n_clusters": k, "n_init": self.n_init, "seed": _seed(self.random_state),
                           "algorithm": "lloyd"},
               "store": {"path": "<temporary>", "max_memory": self.max_memory},
               "output": {"dir": "<none>", "plots": False}}
        keep, Xk = _nonzero_rows(X, k, "SubspaceClustering", "sample")
        yk = None if ys is None else (ys if keep is None else ys[keep])
        res = run_estimator(cfg, Xk, self.scheduler, y=yk)
        self.affinity_matrix_ = res["K"]  # over the non-zero samples
        if ys is None:
            self.labels_, self.embedding_ = _expand(keep, res["labels"], res["E"])
            return self
        lab, F = _expand(keep, res["labels"], res["arrays"]["F"])
        self.labels_ = np.where(lab >= 0, classes[np.maximum(lab, 0)], -1)
        self.label_distributions_, self.classes_, self.embedding_ = F, classes, None
        return self

    def fit_predict(self, X, y=None):
        """Cluster X (AkS-SC when y has -1 marks) and return ``labels_``."""
        return self.fit(X, y).labels_


def _semi_labels(y, n, k):
    """``(codes 0..K-1 with -1 kept, classes)`` when y marks some samples -1 and labels others, else (None, None)."""
    if y is None:
        return None, None
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != n or not np.issubdtype(y.dtype, np.integer):
        return None, None        # not a semi-supervised label vector: ignored, as clusterers ignore y
    lab = y != -1
    if lab.all() or not lab.any():
        return None, None
    classes = np.unique(y[lab])
    if classes.size != k:
        raise ValueError(f"y labels samples of {classes.size} classes but n_clusters={k}: AkS-SC needs at least "
                         "one labelled sample in every cluster (set n_clusters to the number of labelled classes)")
    codes = np.full(n, -1, dtype=np.int64)
    codes[lab] = np.searchsorted(classes, y[lab])
    return codes, classes
