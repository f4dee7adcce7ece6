"""Which scattering recipe: raw or channel-normalised features, centred or uncentred PCA (README, Table 2).

One MNIST [0:K] subset, one seed, kNN-SSC (``noaug``) or Ak-SSC (``aug``, the "mnist" preset), k = 10,
SSC lambda by the default rule, Ncut, dense eigenvectors, k-means with 20 restarts; prints the error rate of
each feature recipe.  The configs use the last-but-one ("chan+uncentredPCA", bigclust's features =
"scattering" with pca = 100).  Usage (BIGCLUST_DATA set, kymatio installed)::

    python scattering_variants.py 9 aug 0
"""
import sys
import warnings

import numpy as np

from bigclust.datasets.registry import open_dataset
from bigclust.algo.kmeans import kmeans
from bigclust.algo.metrics import accuracy
from bigclust.normalize import ncut
from bigclust.algo.spectral import embed
from bigclust.subspace import (PRESETS, affinity, augment_images, build_dictionary, features_after_augmentation,
                               fold_back, knn_dictionary, self_expression)
from bigclust.subspace.features import scattering_features, uncentred_pca

warnings.simplefilter("ignore")
K, aug, seed = int(sys.argv[1]), sys.argv[2] == "aug", int(sys.argv[3])
X, y = (np.concatenate(a) for a in zip(*open_dataset(f"mnist-test-500-0-{K}").iter_chunks(4096)))
X = np.asarray(X, dtype=np.float64)
Xa, org = augment_images(X, random_state=seed, **PRESETS["mnist"]) if aug else (None, None)


def run(F, Fa, name):
    D = build_dictionary(F, Fa, org)
    C = self_expression(None, D, knn_dictionary(D, 10, random_state=seed), "l1", None)
    V = embed(ncut(affinity(fold_back(C, D))), K + 1, solver="eigh", random_state=seed)
    km = kmeans(V, K + 1, n_init=20, random_state=seed)
    print(f"{name:28s} err {100 * (1 - accuracy(y, km.labels[km.best])):.2f}", flush=True)


for norm in ("none", "channel"):
    S = scattering_features(X, (28, 28), normalize=norm)
    Sa = None if Xa is None else scattering_features(Xa, (28, 28), normalize=norm)
    tag = "raw" if norm == "none" else "chan"
    run(*features_after_augmentation(S, Sa, 100), f"{tag}+centredPCA")
    run(*uncentred_pca(S, Sa, 100), f"{tag}+uncentredPCA")
run(S, Sa, "chan no PCA")
