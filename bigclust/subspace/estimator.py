"""SubspaceClustering: the subspace family's scikit-learn estimator (paper 002), on the estimators' fit template.

Ak-SC runs the pipeline's ``aksc`` method (self-expression, Ncut embedding, k-means); a partially
labelled ``y`` in ``fit(X, y)`` runs AkS-SC, its semi-supervised chain, with ``y`` stored beside X.
All-zero samples, which cannot be represented, are left out and labelled -1 (or their given label).
The cross-parameter rules of ``[aksc]`` are the plug-in's chain's, said once; this module words them
for the estimator's parameters and ``y``.
"""
from __future__ import annotations

import numpy as np

from bigclust._util.errors import UserError
from bigclust.estimators import NoneMeans, PipelineEstimator, config_key, drop_zero_rows, own_key

#: what ``[aksc] semi_supervised = true`` is to an estimator user
_SEMI = "a partially labelled y (AkS-SC)"


class SubspaceClustering(PipelineEstimator):
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
    augment : None, str, dict or callable, default=None
        None: no augmentation (kNN-SSC/LSR/LRR; the -LP variants of AkS-SC).  A description of the copies
        of each image, every transform optional: ``{"flip": True, "rotate": {"count": 5, "max_degrees":
        15}, "scale": {"count": 5, "range": [0.9, 1.1]}, "shift": {"count": 4, "pixels": 2}}`` (angles and
        factors spread evenly, shifts over the four directions; needs ``image_shape``); a callable
        ``f(images, rng) -> copies`` (images (n, h, w[, c]), copies (n, m, h, w[, c])); or a preset name:
        ``"coil20"``: 32x32 images (column-major), flip + 5 rotations + 5 scalings; ``"coil20_rotscale"``:
        without the flip; ``"coil20_flip"``: the flip only; ``"mnist"``: 28x28, 5 rotations + 5 scalings;
        ``"interpolate"`` (AkS-SC only): ``n_interpolate`` random non-negative combinations of two
        labelled samples per class.
    lam : float, default=0.0
        Regularisation weight; 0 = the default rule (SSC: ``min_i ||A_iᵀ x_i||_inf / alpha``; LSR, LRR: 0.05).
    alpha : float, default=20.0
        SSC: the ADMM's penalty, and the divisor of the default ``lam`` rule.
    gamma : float, default=0.1
        AkS-SC: coupling of the coefficients and the labels.
    n_interpolate : int, default=720
        ``augment="interpolate"``: synthetic samples per class.
    features : {"pixels", "scattering"}, default="pixels"
        "scattering": kymatio's ``Scattering2D(J=3, L=8)`` of every image and augmented copy (zero-padded
        to a multiple of 8 pixels; the paper's MNIST features, extra ``bigclust[scattering]``).
    pca : int, default=0
        > 0: PCA to ``pca`` components of the features, after augmentation (the paper: scattering, then 100).
    image : {None, "mnist", "coil20"}, default=None
        The images' layout (28x28 row-major, 32x32 column-major) for the image augmentations and
        ``features="scattering"``, in place of the ``augment`` preset's; None: the preset's.
    image_shape : tuple of int or None, default=None
        (height, width[, channels]) of every image, for an augmentation description or callable (a
        preset knows its own); not with ``image``.
    order : {"C", "F"} or None, default=None
        How a row holds an image: "C" row-major, "F" column-major (COIL-20's MATLAB layout); None: the
        preset's, else "C".
    max_iter : int or None, default=None
        Iterations per column of the l1 ADMM (None: 5000), or of LRR's inexact ALM (None: 1000 in
        AkS-LRR, 5000 otherwise); l2 is solved in closed form.  Columns that stop at the budget are
        reported in one ``ConvergenceWarning``.
    n_init : int, default=10
        k-means restarts on the embedding.
    random_state : int, RandomState or None
        Seeds the augmentation and the k-means restarts.
    max_memory, scheduler : str or int, str or None
        As in :class:`SpectralClustering`.

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

    Examples
    --------
    Two lines through the origin in 3-D, 15 noisy samples on each:

    >>> import numpy as np
    >>> from bigclust import SubspaceClustering
    >>> from bigclust.metrics import accuracy
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([np.outer(rng.uniform(1, 2, 15), d) for d in ([1, 0, 0], [0, 1, 1])])
    >>> X += rng.normal(0, 0.01, X.shape)
    >>> model = SubspaceClustering(n_clusters=2, regularizer="l2", n_neighbors=5, random_state=0).fit(X)
    >>> accuracy(np.repeat([0, 1], 15), model.labels_), model.affinity_matrix_.shape
    (1.0, (30, 30))
    """

    def __init__(self, n_clusters=8, *, regularizer="l1", n_neighbors=10, augment=None, lam=0.0, alpha=20.0,
                 gamma=0.1, n_interpolate=720, features="pixels", pca=0, image=None, image_shape=None, order=None,
                 max_iter=None, n_init=10, random_state=None, max_memory="4GB", scheduler=None):
        self._keep(locals())   # scikit-learn: every parameter stored as given

    @classmethod
    def _parameters(cls):
        aksc = {name: config_key("aksc", name) for name in ("regularizer", "n_neighbors", "lam", "alpha", "gamma",
                                                            "n_interpolate", "features", "pca")}
        return {**aksc, "augment": NoneMeans(config_key("aksc", "augment"), "none"),
                "image": NoneMeans(config_key("aksc", "image"), "auto"),
                "image_shape": own_key((tuple, list, type(None)), _shape_ok,
                                       "None, (height, width) or (height, width, channels), positive integers"),
                "order": NoneMeans(config_key("aksc", "order"), "auto"),
                # the config's 0 (the solver's default budget) is None here
                "max_iter": NoneMeans(config_key("aksc", "max_iter"), 0, "an integer >= 1 or None"),
                "n_init": config_key("cluster", "n_init")}

    _fetch = {"subspace": ("K",), "semisup": ("K",), "embed": ("E",)}
    _fit_only = ("classes_", "label_distributions_")    # set by a semi-supervised fit only
    _row_noun = "sample"
    # the chain's rules name [aksc] semi_supervised, which a partially labelled y sets here, and
    # labelled_per_class, which the estimator never sets
    _config_words = (('[aksc] labelled_per_class and augment = "interpolate" need',
                      '[aksc] augment = "interpolate" needs'),
                     ("[aksc] semi_supervised = true", _SEMI), ("semi_supervised = true", _SEMI))

    def _check_y(self, y, n, p):
        return _semi_labels(self, y, n, p["n_clusters"])

    def _sections(self, p, y):
        if p["image"] != "auto" and p["features"] == "pixels" and p["augment"] in ("none", "interpolate"):
            raise UserError(f"SubspaceClustering: image={p['image']!r} is the layout for image augmentations or "
                            "features='scattering', and neither is set; leave image=None")
        aksc = {name: p[name] for name in ("regularizer", "n_neighbors", "augment", "lam", "alpha", "gamma",
                                           "n_interpolate", "features", "pca", "image", "order", "max_iter")}
        if callable(aksc["augment"]):   # through the config as a string that names it and carries it
            from bigclust.subspace.transforms import CallableAugment
            aksc["augment"] = CallableAugment(aksc["augment"])
        if p["image_shape"] is not None:
            aksc["image_shape"] = [int(v) for v in p["image_shape"]]
        return {"preprocess": {"l2_normalize": False, "tfidf": False},
                "method": {"names": ["aksc"]}, "aksc": {**aksc, "semi_supervised": y is not None},
                "cluster": {"n_init": p["n_init"], "algorithm": "lloyd"}}

    def _kept_rows(self, X, k, y):
        keep, Xk = drop_zero_rows(X, k, "SubspaceClustering", "sample",
                                  "labelled -1" if y is None else "labelled -1 unless y gives their label")
        if y is None:
            return keep, Xk, None
        ys, classes = y
        yk = ys if keep is None else ys[keep]
        if keep is not None:
            lost = np.setdiff1d(np.unique(ys[ys >= 0]), yk[yk >= 0])
            if lost.size:
                raise UserError(f"SubspaceClustering: every labelled sample of class {classes[lost[0]].item()!r} is an "
                                "all-zero row, which cannot be represented; label another sample of that class")
        return keep, Xk, yk

    def _one_cluster(self, X, y, p, config):
        _check_shapes(self, config["aksc"], *X.shape)
        self.labels_ = np.zeros(X.shape[0], dtype=np.int64) if y is None else np.full(X.shape[0], y[1][0])
        self.affinity_matrix_ = self.embedding_ = None
        self.n_iter_ = 0
        if y is not None:   # one class: every row of F is that class
            self.classes_, self.label_distributions_ = y[1], np.ones((X.shape[0], 1))

    def _set_fitted(self, res, y):
        stage = "subspace" if y is None else "semisup"
        self.affinity_matrix_ = res.square(res.get(stage, "K"))   # a dropped (all-zero) sample has no links
        self.n_iter_ = int(res.stages[stage].get("n_iter" if y is None else "n_outer", 0))
        if y is None:
            self.labels_, self.embedding_ = res.labels, res.rows(res.get("embed", "E"))
            return
        ys, classes = y
        lab, F = res.labels, res.rows(res.arrays["F"])
        if res.keep is not None:   # an all-zero sample is not propagated: it keeps a given label, else stays -1
            drop = ~res.keep
            lab = np.where(drop & (ys >= 0), ys, lab)
            F[drop] = 1.0 / F.shape[1]                  # rows still sum to 1: no information, or ...
            given = np.flatnonzero(drop & (ys >= 0))
            F[given] = 0.0
            F[given, ys[given]] = 1.0                   # ... the given label
        self.labels_ = np.where(lab >= 0, classes[np.maximum(lab, 0)], -1)
        self.label_distributions_, self.classes_, self.embedding_ = F, classes, None

    def fit(self, X, y=None):
        """Cluster the rows of X (images flattened as the ``augment`` preset says); AkS-SC when y has -1 marks.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix or dask.array of shape (n_samples, n_features)
            The samples (images flattened).
        y : array-like of shape (n_samples,), optional
            Integer class labels with -1 for unlabelled samples: the semi-supervised AkS-SC.  None, or a
            ``y`` with no -1 or no label at all, clusters (and ignores ``y``).

        Returns
        -------
        self
            The fitted estimator.
        """
        return super().fit(X, y)


def _semi_labels(est, y, n, k):
    """``y`` of ``fit(X, y)`` for AkS-SC: ``(codes 0..K-1 with -1 kept, classes)``, or None.

    None, a fully labelled or a fully unlabelled ``y`` means clustering (a fully labelled ``y`` is ignored,
    as clusterers ignore it).  Labels must be integers (integral floats such as ``-1.0`` included), one per
    sample; anything else is an error rather than a silent fall-back to clustering.
    """
    if y is None:
        return None
    name = type(est).__name__
    y = np.asarray(y)
    if y.ndim != 1:
        raise UserError(f"{name}: y must be 1-D (one label per sample, -1 = unlabelled), got shape {y.shape}")
    if y.shape[0] != n:
        raise UserError(f"{name}: y has {y.shape[0]} labels but X has {n} samples")
    if y.dtype.kind == "O":         # Python ints in an object array are integer labels all the same
        y = np.asarray(y.tolist())
    if y.dtype.kind not in "iuf":
        raise UserError(f"{name}: Unknown label type: y must hold integer class labels with -1 for unlabelled "
                        f"samples, got dtype {y.dtype}")
    if y.dtype.kind == "f":
        bad = ~np.isfinite(y) | (y != np.round(y))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise UserError(f"{name}: y must hold integer class labels with -1 for unlabelled samples; "
                            f"y[{i}] = {y[i].item()!r}")
        y = y.astype(np.int64)
    lab = y != -1
    if lab.all() or not lab.any():
        return None
    classes = np.unique(y[lab])
    if classes.size != k:
        raise UserError(f"{name}: y labels samples of {classes.size} classes but n_clusters={k}: AkS-SC needs at "
                        "least one labelled sample in every cluster (set n_clusters to the number of labelled "
                        "classes)")
    codes = np.full(n, -1, dtype=np.int64)
    codes[lab] = np.searchsorted(classes, y[lab])
    return codes, classes


def _shape_ok(v):
    import numbers
    return v is None or (len(v) in (2, 3) and all(isinstance(x, numbers.Integral) and not isinstance(x, bool)
                                                  and x >= 1 for x in v))


def _check_shapes(est, aksc: dict, n: int, d: int):
    """The data-shape checks a SubspaceClustering fit would meet in the pipeline, for ``n_clusters=1``,
    which skips it: an image layout of d pixels where one is used, and ``pca <= min(n, d)``."""
    from bigclust.algo.preprocess import check_pca_components
    from bigclust.subspace.augment import aksc_layout, image_layout, image_shape_of
    shape = image_layout(aksc["augment"], aksc_layout(aksc["image"], aksc.get("image_shape"), aksc["order"])[0])[0]
    try:   # the pipeline's own checks, named for the estimator
        if shape is not None and (aksc["features"] == "scattering" or aksc["augment"] not in ("none", "interpolate")):
            image_shape_of(shape, d, channels=True)
        if aksc["pca"]:
            check_pca_components(aksc["pca"], n, d)
    except UserError as e:
        raise type(e)(f"{type(est).__name__}: {e}") from None
