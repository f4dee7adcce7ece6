"""
Semi-supervised AkS-SC with 4 labels per class
==============================================

AkS-SC alternates the self-expression of augmented subspace clustering with label propagation: given
the class of 4 images per object (``-1`` for every other image in ``y``), ``fit(X, y)`` labels the
rest and returns the label matrix F.  When a few labelled samples are cheap to get, this shows how
much they add over clustering the same images without labels, and what augmentation adds on top.
"""
import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

from bigclust import DataError, SubspaceClustering, metrics
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
        X = np.stack([np.kron(img.reshape(8, 8) / 16, np.ones((4, 4))).ravel(order="F") for img in X])
        name = "digits (COIL-20 not under $BIGCLUST_DATA)"
    # the first 72 images of each object, as COIL-20 has (the digits have about 180 per class)
    keep = np.concatenate([np.flatnonzero(y == c)[:72] for c in range(n_objects)])
    return X[keep].astype(np.float64), y[keep], name


k = 10
X, y, name = coil20(k)
rng = np.random.default_rng(0)
labelled = np.concatenate([rng.choice(np.flatnonzero(y == c), 4, replace=False) for c in range(k)])
y_partial = np.full_like(y, -1)
y_partial[labelled] = y[labelled]
unlabelled = y_partial == -1
print(f"{name}: {X.shape[0]} images of {k} objects, {labelled.size} of them labelled")

# %%
# ``fit(X)`` clusters without labels (here kNN-SSC, no augmentation); ``fit(X, y_partial)`` propagates
# the 40 labels, without augmentation (the -LP variant) and with the COIL-20 copies (AkS-SSC).
# Accuracy is measured on the unlabelled images only; a semi-supervised ``labels_`` is in y's classes.
t = time.perf_counter()
unsup = SubspaceClustering(k, regularizer="l1", n_neighbors=10, augment=None, random_state=0).fit(X)
acc_unsup = metrics.accuracy(y[unlabelled], unsup.labels_[unlabelled])
print(f"kNN-SSC, no labels          acc {acc_unsup:.3f}  ({time.perf_counter() - t:.1f} s)")
semi = {}
for label, aug in (("no augmentation", None), ("COIL-20 augmentation", "coil20")):
    t = time.perf_counter()
    est = SubspaceClustering(k, regularizer="l1", n_neighbors=10, augment=aug, random_state=0).fit(X, y_partial)
    acc = (est.labels_[unlabelled] == y[unlabelled]).mean()
    semi[label] = (est, acc)
    print(f"AkS-SC, 4 labels, {label:20s} acc {acc:.3f}  ({time.perf_counter() - t:.1f} s)")

# %%
# Left: the labelled images, one row per object.  Right: F, the label distribution of every image
# (rows sorted by object), whose row-wise argmax is ``labels_``: without augmentation the look-alike
# objects (the two cars, 2 and 5; the two boxes, 4 and 8) share some of their mass; with the
# augmented copies every row is certain.
fig = plt.figure(figsize=(13, 6.5), layout="constrained")
left, right = fig.subfigures(1, 2, width_ratios=[1, 2.2])
grid = left.subplots(k, 4)
for c in range(k):
    for j, i in enumerate(labelled[c * 4:(c + 1) * 4]):
        ax = grid[c, j]
        ax.imshow(X[i].reshape(32, 32, order="F"), cmap="gray")
        ax.set_xticks([])
        ax.set_yticks([])
        if j == 0:
            ax.set_ylabel(f"{c}", fontsize=8, rotation=0, labelpad=8)
left.suptitle("the 40 labelled images", fontsize=10)
order = np.argsort(y, kind="stable")
axes = right.subplots(1, 2, sharey=True)
for ax, (label, (est, acc)) in zip(axes, semi.items()):
    im = ax.imshow(est.label_distributions_[order], aspect="auto", cmap="magma", vmin=0, vmax=1,
                   interpolation="nearest")
    ax.set_xticks(range(k), [str(c) for c in est.classes_])
    ax.set_xlabel("class")
    ax.set_title(f"F, {label}\naccuracy {acc:.3f}", fontsize=10)
axes[0].set_yticks(np.arange(k) * 72 + 36, [f"object {c}" for c in range(k)])
right.colorbar(im, ax=axes, shrink=0.8, label="F (rows sum to 1)")
fig.suptitle(f"Semi-supervised AkS-SC on {name.split(' (')[0]} with 4 labels per object "
             f"(kNN-SSC without labels: accuracy {acc_unsup:.3f})")
plt.show()
