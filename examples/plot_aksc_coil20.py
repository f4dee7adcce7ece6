"""
Augmented subspace clustering on COIL-20
========================================

Ak-SSC writes every image as a sparse combination of its nearest neighbours in a dictionary that also
holds augmented copies of the images (a mirror image, five small rotations and five zooms), never
its own copies; this example shows those copies for three objects and compares Ak-SSC with plain
kNN-SSC and k-means on five objects.  Augmentation is what paper 002 adds: the copies fill in the
poses between the photographed ones, so images of one object find each other.
"""
import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits

from bigclust import DataError, SubspaceClustering, metrics, subspace
from bigclust.datasets import open_dataset


def coil20(n_objects):
    """The 72 images of each of the first ``n_objects`` COIL-20 objects, rows 32x32 column-major.

    Without COIL-20 under $BIGCLUST_DATA, scikit-learn's 8x8 digits stand in, enlarged to 32x32.
    """
    try:
        src = open_dataset("coil20")             # reads $BIGCLUST_DATA
        X, y = next(iter(src.iter_chunks(src.info.n_samples)))
        name = "COIL-20"
    except DataError:
        X, y = load_digits(return_X_y=True)
        # each 8x8 digit as a 32x32 image, stored column-major as COIL20.mat is
        X = np.stack([np.kron(img.reshape(8, 8) / 16, np.ones((4, 4))).ravel(order="F") for img in X])
        name = "digits (COIL-20 not under $BIGCLUST_DATA)"
    # the first 72 images of each object, as COIL-20 has (the digits have about 180 per class)
    keep = np.concatenate([np.flatnonzero(y == c)[:72] for c in range(n_objects)])
    return X[keep].astype(np.float64), y[keep], name


k = 5
X, y, name = coil20(k)
print(f"{name}: {X.shape[0]} images of {len(np.unique(y))} objects")

# %%
# The ``"coil20"`` preset: the mirror image, five rotations in [-15, 15] degrees and five zooms in
# [0.9, 1.1] per image (``origin`` says which image each copy comes from).
shown = [np.flatnonzero(y == c)[0] for c in (0, 2, 4)]
X_aug, origin = subspace.augment(X[shown], "coil20", random_state=0)
per = X_aug.shape[0] // len(shown)

# %%
# Clustering: kNN-SSC (no augmentation), Ak-SSC, and k-means on the pixels.
scores = {"k-means": metrics.accuracy(y, KMeans(k, n_init=10, random_state=0).fit_predict(X))}
for label, aug in (("kNN-SSC", None), ("Ak-SSC", "coil20")):
    t = time.perf_counter()
    est = SubspaceClustering(k, regularizer="l1", n_neighbors=10, augment=aug, n_init=10, random_state=0)
    labels = est.fit_predict(X)
    scores[label] = metrics.accuracy(y, labels)
    print(f"{label:8s} acc {scores[label]:.3f}  NMI {metrics.nmi(y, labels):.3f}  "
          f"({time.perf_counter() - t:.1f} s)")
print(f"k-means  acc {scores['k-means']:.3f}")

# %%
# Top: each shown image (left) and its eleven augmented copies.  Bottom: the accuracies.
fig = plt.figure(figsize=(13, 6.5), layout="constrained")
top, bottom = fig.subfigures(2, 1, height_ratios=[1.7, 1])
grid = top.add_gridspec(len(shown), per + 1)
captions = ["original", "mirror"] + [f"rotation {i}" for i in range(1, 6)] + [f"zoom {i}" for i in range(1, 6)]
for r, i in enumerate(shown):
    images = [X[i]] + list(X_aug[origin == r])
    for c, img in enumerate(images):
        ax = top.add_subplot(grid[r, c])
        ax.imshow(img.reshape(32, 32, order="F"), cmap="gray")
        ax.set_xticks([])
        ax.set_yticks([])
        if r == 0:
            ax.set_title(captions[c], fontsize=8)
ax = bottom.subplots()
bars = ax.barh(list(scores), list(scores.values()), color=["grey", "tab:blue", "tab:orange"])
ax.bar_label(bars, fmt="%.3f", padding=3)
ax.set_xlim(0, 1.1)
ax.set_xlabel(f"accuracy on {X.shape[0]} images of {k} objects")
fig.suptitle(f"Ak-SSC on {name.split(' (')[0]}: the augmented copies in its dictionary, and what they buy")
plt.show()
