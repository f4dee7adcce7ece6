"""
Spectral clustering with BBS, Sinkhorn-Knopp and Ncut
=====================================================

The same Gaussian kernel is normalised three ways -- the Euclidean bi-stochastic projection (BBS),
Sinkhorn-Knopp (SK) and the normalised cut (Ncut) -- and each spectral embedding is coloured by the
cluster k-means finds in it, on a toy set (two moons) and on handwritten digits (optdigits).
The normalisation is the one choice that changes between the three columns, so this is where to see
what it does to the embedding before choosing one for your data.
"""
import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits, make_moons
from sklearn.decomposition import PCA

from bigclust import DataError, SpectralClustering, metrics
from bigclust.datasets import open_dataset


def optdigits(n, seed=0):
    """n digits drawn from optdigits under $BIGCLUST_DATA, else from scikit-learn's bundled copy."""
    try:
        src = open_dataset("optdigits")          # reads $BIGCLUST_DATA
        X, y = next(iter(src.iter_chunks(src.info.n_samples)))
        name = "optdigits ($BIGCLUST_DATA)"
    except DataError:                            # not there: the same digits, bundled with scikit-learn
        X, y = load_digits(return_X_y=True)
        name = "digits (scikit-learn's bundled copy)"
    rows = np.random.default_rng(seed).choice(len(X), n, replace=False)
    return X[rows].astype(np.float64), y[rows], name


# %%
# Two data sets: two noisy moons (k = 2, the embedding is 2-D as it is) and 600 digits (k = 10).
# ``gamma`` is the Gaussian width as a squared distance, ``exp(-||x - x'||^2 / gamma)``; the digits'
# rows are scaled to unit length first (``l2_normalize=True``), where ``gamma=1`` is a natural scale.
X_moons, y_moons = make_moons(400, noise=0.07, random_state=0)
X_dig, y_dig, dig_name = optdigits(600)
print(f"real data set: {dig_name}, {X_dig.shape[0]} x {X_dig.shape[1]}")
sets = [("two moons", X_moons, y_moons, 2, dict(gamma=0.05, l2_normalize=False)),
        (dig_name.split(" ")[0], X_dig, y_dig, 10, dict(gamma=1.0, l2_normalize=True))]
norms = [("bbs", "BBS"), ("sk", "SK"), ("ncut", "Ncut")]

# %%
# One estimator per (set, normalisation).  k-means on the data is the reference each row is read against.
fig, axes = plt.subplots(2, 3, figsize=(12, 8), constrained_layout=True)
for row, (name, X, y, k, params) in enumerate(sets):
    km = KMeans(k, n_init=10, random_state=0).fit_predict(X)
    print(f"{name:10s} k-means on the data    acc {metrics.accuracy(y, km):.3f}  NMI {metrics.nmi(y, km):.3f}")
    for col, (norm, label) in enumerate(norms):
        t = time.perf_counter()
        est = SpectralClustering(k, affinity="gaussian", normalization=norm, solver="dual", n_init=10,
                                 random_state=0, **params)
        labels = est.fit_predict(X)
        acc, nmi = metrics.accuracy(y, labels), metrics.nmi(y, labels)
        print(f"{name:10s} {label:5s} acc {acc:.3f}  NMI {nmi:.3f}  ({time.perf_counter() - t:.1f} s)")
        E = est.embedding_
        # k = 2: the two eigenvectors themselves; k = 10: the embedding's first two principal components
        xy = E if k == 2 else PCA(2, random_state=0).fit_transform(E)
        ax = axes[row, col]
        ax.scatter(xy[:, 0], xy[:, 1], c=labels, cmap="tab10", s=8, vmin=0, vmax=9)
        ax.set_title(f"{name}, {label}: accuracy {acc:.2f}")
        ax.set_xticks([])
        ax.set_yticks([])
    axes[row, 0].set_ylabel("spectral embedding" + (" (PCA)" if k > 2 else ""))
fig.suptitle("Spectral embeddings coloured by cluster: BBS vs Sinkhorn-Knopp vs Ncut")
plt.show()

# %%
# On the moons BBS sends each moon to (nearly) one point: the Euclidean projection clips the small
# kernel entries between the moons to zero, so almost no mass links them and k-means has nothing left
# to decide.  SK and Ncut only rescale K, keep every link and leave each moon as a curve.  On the
# digits the ten classes overlap in any two dimensions; read the accuracies printed above beside k-means.
