"""Ak-SC end to end on an in-memory X: :func:`subspace_affinity` (augment -> dictionary -> self-expression ->
fold back -> W) and :func:`subspace_clustering` (W -> Ncut -> spectral embedding -> k-means).

The pipeline runs the same steps as separate stages (the family's plug-in);
these two functions are the library form, used by the estimator and ``bench subspace``.
"""
from __future__ import annotations

import time
import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util import progress
from bigclust._util.errors import UserError
from bigclust._util.plan import peak_rss_mb
from bigclust.subspace.augment import augment as augment_images, image_layout
from bigclust.subspace.dictionary import build_dictionary, knn_dictionary
from bigclust.subspace.features import image_features
from bigclust.subspace.fold import affinity, fold_back
from bigclust.subspace.selfexpr import self_expression


#: the steps of :func:`subspace_affinity` (its ``info["steps"]``) and what its progress bar calls them
_STEPS = {"augment": "augmentation", "features": "features (PCA) and dictionary", "knn": "dictionary kNN",
          "coef": "coefficients", "fold": "fold back"}


def subspace_affinity(X, *, regularizer="l1", n_neighbors=10, augment=None, image_shape=None, order=None,
                      lam=None, random_state=None, knn_method="auto", pca=0, features="pixels", return_info=False,
                      **solver_options):
    """Ak-SC affinity: augment -> dictionary -> coefficients -> fold back -> W.

    Parameters
    ----------
    X : array-like (n, d)
        Samples as rows (images flattened, see ``order``).
    regularizer : {"l1", "l2", "nuclear"}
        SSC, LSR or LRR.
    n_neighbors : int or None
        k of the kNN dictionary (default 10, the paper's smallest and best
        value in its Table 6); None = full dictionary (the classical SSC /
        LSR / LRR baselines, paper scale only).
    augment : None, str, dict or callable
        None = no augmentation (kNN-SSC/LSR/LRR baselines); else as in :func:`augment` (a preset
        name, a description of the copies, or ``f(images, rng) -> copies``).
    image_shape, order : tuple of int, {"C", "F"}
        The image layout ((h, w) or (h, w, c); row- or column-major), overriding the preset's.
    lam : float or None
        See :func:`self_expression`.
    random_state : None or int
        Seed of the augmentation (and of the NN-descent index).
    knn_method : {"auto", "exact", "pynndescent"}
        The neighbour search of the kNN dictionary.
    pca : int
        0: the samples themselves are the features.  > 0: features = the first
        ``pca`` principal components, computed AFTER augmentation (the paper
        augments images, then computes features), fitted on the originals and
        their augmented copies together (:func:`features_after_augmentation`).
    features : {"pixels", "scattering"}
        "scattering": the paper's MNIST features, ``Scattering2D(J=3, L=8)``
        of every original and augmented image (zero-padded to a multiple of
        8 pixels, 3472 features for 28x28) before ``pca``; needs the optional
        extra kymatio (:mod:`.features`) and the image layout (``image_shape``
        / ``order``, or the ``augment`` preset's).
    return_info : bool
        Also return the intermediate results.
    **solver_options
        Passed to :func:`self_expression` (alpha, rho, eps_abs, eps_rel, max_iter, LRR options).

    Returns
    -------
    W : scipy.sparse.csr_matrix (n, n)
        Symmetric, non-negative, zero diagonal.
    info : dict
        With ``return_info``: dictionary, neighbors, C, Cbar, solver info, and ``steps``: the wall and CPU
        seconds and the process's peak RSS (MB) after each step (augment, features, knn, coef, fold).
    """
    steps = {}     # step -> (wall s, CPU s of the process, all threads; its peak RSS in MB after the step)
    clock = [time.perf_counter(), time.process_time()]
    # one bar over the steps, naming the one running: the PCA passes and the dictionary search run for
    # seconds to minutes without a bar of their own (the augmentation and the ADMM show theirs under it);
    # no total, as the steps take very different times (an ETA from their mean would mislead)
    with progress.bar(None, "subspace affinity", "step") as bar:
        def timed(name):
            t, c = time.perf_counter(), time.process_time()
            steps[name] = (t - clock[0], c - clock[1], peak_rss_mb())
            clock[:] = [t, c]
            names = list(_STEPS)
            if names.index(name) + 1 < len(names):   # the step now starting
                bar.set_postfix_str(_STEPS[names[names.index(name) + 1]], refresh=False)
            bar.update(1)

        bar.set_postfix_str(_STEPS["augment"])
        X = np.asarray(X)
        if augment is None:
            X_aug = origin = None
        else:
            X_aug, origin = augment_images(X, augment, image_shape=image_shape, order=order,
                                           random_state=random_state)
        timed("augment")
        shape, order_ = image_layout(augment, image_shape, order)
        X, X_aug = image_features(X, X_aug, features, image_shape=shape, order=order_, pca=pca)
        D = build_dictionary(X, X_aug, origin)
        del X_aug
        timed("features")
        seed = random_state if isinstance(random_state, (int, np.integer)) else 0
        nb = None if n_neighbors is None else knn_dictionary(D, n_neighbors, method=knn_method, random_state=seed)
        timed("knn")
        C, sinfo = self_expression(None, D, nb, regularizer, lam, return_info=True, **solver_options)
        timed("coef")
        Cbar = fold_back(C, D)
        W = affinity(Cbar)
        timed("fold")
    if not return_info:
        return W
    return W, dict(dictionary=D, neighbors=nb, C=C, Cbar=Cbar, solver=sinfo, steps=steps)


def subspace_clustering(X, n_clusters, *, regularizer="l1", n_neighbors=10, augment=None, image_shape=None,
                        order=None, lam=None, n_init=100, random_state=None, knn_method="auto", pca=0,
                        features="pixels", return_info=False, **solver_options):
    """Ak-SC (or kNN-SC / full SC without augmentation) end to end.

    ``W`` from :func:`subspace_affinity`, Ncut normalisation
    ``D^{-1/2} W D^{-1/2}`` (:func:`bigclust.normalize.ncut`), the
    row-normalised top-``n_clusters`` eigenvectors
    (:func:`bigclust.algo.spectral.embed`) and k-means with ``n_init`` restarts
    (:func:`bigclust.algo.kmeans.kmeans`, the lowest-inertia restart).

    Parameters
    ----------
    X : array-like (n, d)
        Samples as rows (images flattened, see ``order``).
    n_clusters : int
        Number of clusters, ``2 <= n_clusters < n``.
    regularizer, n_neighbors, augment, image_shape, order, lam : optional
        As in :func:`subspace_affinity`.
    n_init : int, default 100
        k-means restarts.
    random_state : None or int
        One seed for the augmentation and the k-means restarts.
    knn_method, pca, features : optional
        As in :func:`subspace_affinity`.
    return_info : bool
        Also return the intermediate results.
    **solver_options
        Passed to :func:`self_expression`.

    Returns
    -------
    labels : ndarray of int (n,)
        Cluster of each sample.
    W : scipy.sparse.csr_matrix (n, n)
        The affinity of :func:`subspace_affinity`.
    info : dict
        With ``return_info``: the affinity's (its ``steps`` with the Ncut embedding's, ``embed``), and the
        k-means result.

    Examples
    --------
    Two lines through the origin in 3-D, 15 noisy samples on each:

    >>> import numpy as np
    >>> from bigclust.metrics import accuracy
    >>> from bigclust.subspace import subspace_clustering
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([np.outer(rng.uniform(1, 2, 15), d) for d in ([1, 0, 0], [0, 1, 1])])
    >>> X += rng.normal(0, 0.01, X.shape)
    >>> labels, W = subspace_clustering(X, 2, regularizer="l2", n_neighbors=5, n_init=10, random_state=0)
    >>> accuracy(np.repeat([0, 1], 15), labels), W.shape
    (1.0, (30, 30))
    """
    from sklearn.utils import check_random_state

    from bigclust.algo.kmeans import kmeans
    from bigclust.normalize import ncut
    from bigclust.algo.spectral import EIGH_MAX_N, check_connected, embed

    if isinstance(random_state, (int, np.integer)):  # as the pipeline: one seed for augmentation and k-means
        aug_seed = km_seed = int(random_state)
    else:
        aug_seed, km_seed = (int(s) for s in check_random_state(random_state).randint(0, 2**31 - 1, size=2))
    W, info = subspace_affinity(X, regularizer=regularizer, n_neighbors=n_neighbors, augment=augment,
                                image_shape=image_shape, order=order, lam=lam, random_state=aug_seed,
                                knn_method=knn_method, pca=pca, features=features, return_info=True,
                                **solver_options)
    n = W.shape[0]
    if not 2 <= int(n_clusters) < n:
        raise UserError(f"n_clusters={n_clusters} must be between 2 and n-1={n - 1}")
    deg = np.asarray(W.sum(axis=1)).ravel()
    isolated = deg <= 0
    Wn = W
    if isolated.any():
        warnings.warn(f"{int(isolated.sum())} samples have no coefficient link; given a unit self-loop",
                      RuntimeWarning, stacklevel=2)
        Wn = (W + sp.diags(isolated.astype(np.float64))).tocsr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ncomp = check_connected(Wn)
    if ncomp > 1:
        warnings.warn(f"subspace affinity graph has {ncomp} connected components (k-means sees each as a "
                      f"cluster or part of one)", RuntimeWarning, stacklevel=2)
    t0, c0 = time.perf_counter(), time.process_time()
    P = ncut(Wn)
    # ARPACK (embed's default for sparse P) finds one vector per distinct eigenvalue in the Krylov
    # space of its start vector, so with c > 1 components it misses copies of the eigenvalue 1 and
    # the embedding is wrong (seen on COIL-20: 4 of 19 unit eigenvalues).  Dense eigh below
    # spectral.EIGH_MAX_N, block LOBPCG above it when the graph is disconnected.
    solver = "eigh" if n <= EIGH_MAX_N else ("lobpcg" if ncomp > 1 else "auto")
    V = embed(P, int(n_clusters), solver=solver, random_state=km_seed)
    info["steps"]["embed"] = (time.perf_counter() - t0, time.process_time() - c0, peak_rss_mb())
    km = kmeans(V, int(n_clusters), n_init=n_init, max_iter=1000, random_state=km_seed)  # its results as before
    labels = km.labels[km.best].astype(np.int64)
    if not return_info:
        return labels, W
    info.update(kmeans=km, n_components=ncomp)
    return labels, W, info
