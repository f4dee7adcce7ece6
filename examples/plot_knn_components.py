"""
A kNN graph on MNIST and the connected-components warning
=========================================================

A sparse kNN affinity scales where a dense kernel cannot, but with too few neighbours the graph falls
apart into pieces, and bigclust warns: ``kNN graph (k=...) has ... connected components``.  This
example counts the components of the graph of 1000 MNIST digits as ``n_neighbors`` grows and plots
the top of the Ncut spectrum, where every component adds an eigenvalue 1 -- the reason the warning
says to raise ``n_neighbors``.
"""
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

from bigclust import DataError, SpectralClustering, affinity, kmeans, metrics, normalize, spectral
from bigclust.datasets import open_dataset


def mnist(n, seed=0):
    """n images drawn from the MNIST test set under $BIGCLUST_DATA (pixels in [0, 1]), else the digits."""
    try:
        src = open_dataset("mnist-test")         # reads $BIGCLUST_DATA
        X, y = next(iter(src.iter_chunks(src.info.n_samples)))
        X, name = X / 255.0, "MNIST"
    except DataError:
        X, y = load_digits(return_X_y=True)
        X, name = X / 16.0, "digits (MNIST not under $BIGCLUST_DATA)"
    rows = np.random.default_rng(seed).choice(len(X), min(n, len(X)), replace=False)
    return X[rows], y[rows], name


X, y, name = mnist(1000)
print(f"{name}: {X.shape[0]} x {X.shape[1]}")

# %%
# The graph for several ``n_neighbors`` (each point's list includes itself, so ``n_neighbors=2`` is one
# other point).  Ncut, spectral embedding and k-means give the accuracy; the top 15 eigenvalues of the
# Ncut matrix are kept for the plot.
ks = [2, 3, 4, 10, 15]
ncomp, accs, spectra, first_warning = [], [], {}, None
for nn in ks:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        K = affinity.knn_kernel(X, n_neighbors=nn, gamma="median", method="exact")
    if caught and first_warning is None:
        first_warning = str(caught[0].message)
    c, _ = spectral.components(K)
    P = normalize.ncut(K)
    vals, V = spectral.top_eigenvectors(P, 15, random_state=0)
    top = np.argsort(vals)[::-1]
    spectra[nn] = vals[top]
    # the embedding spectral.embed would compute: the top 10 eigenvectors, rows scaled to unit length
    E = V[:, top[:10]]
    E = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-300)
    km = kmeans.kmeans(E, 10, n_init=10, random_state=0)
    ncomp.append(c)
    accs.append(metrics.accuracy(y, km.labels[km.best]))
    print(f"n_neighbors {nn:2d}: {c:4d} components, accuracy {accs[-1]:.3f}")
print("the function's warning:", first_warning)

# %%
# The estimator says the same when it meets such a graph; the warning is a RuntimeWarning, so
# ``warnings.filterwarnings`` can turn it into an error in a script that must not go on.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", RuntimeWarning)
    est = SpectralClustering(10, affinity="knn", n_neighbors=2, gamma="median", normalization="ncut",
                             l2_normalize=False, n_init=10, random_state=0).fit(X)
for w in caught:
    if "component" in str(w.message):
        print("SpectralClustering warns:", w.message)
print(f"SpectralClustering(n_neighbors=2): accuracy {metrics.accuracy(y, est.labels_):.3f}, "
      f"components {est.normalization_info_['components']}")

# %%
# Left: components and accuracy against ``n_neighbors``.  Right: the 15 largest eigenvalues of the
# Ncut matrix.  A graph with c components has the eigenvalue 1 c times, so with more than 10
# components the 10 eigenvectors k-means sees describe components, not digits.
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.6), constrained_layout=True)
ax1.plot(ks, ncomp, "o-", color="tab:red")
ax1.set_yscale("log")
ax1.set_xlabel("n_neighbors")
ax1.set_ylabel("connected components", color="tab:red")
ax1.axhline(1, color="tab:red", lw=0.6, ls=":")
ax1b = ax1.twinx()
ax1b.plot(ks, accs, "s--", color="tab:blue")
ax1b.set_ylim(0, 1)
ax1b.set_ylabel("accuracy (10 clusters)", color="tab:blue")
ax1.set_title("too few neighbours: many components, poor clusters")
for nn, color in zip((2, 4, 15), ("tab:red", "tab:orange", "tab:green")):
    ax2.plot(np.arange(1, spectra[nn].size + 1), spectra[nn], "o-", color=color, label=f"n_neighbors = {nn}")
ax2.axvline(10.5, color="grey", ls="--", lw=0.8)
ax2.text(10.4, 0.05, "← the 10 eigenvectors\n    k-means uses", fontsize=8, color="grey", ha="right",
         transform=ax2.get_xaxis_transform())
ax2.set_xlabel("eigenvalue rank")
ax2.set_ylabel("eigenvalue of D^-1/2 K D^-1/2")
ax2.set_title("top of the Ncut spectrum: one eigenvalue 1 per component")
ax2.legend()
fig.suptitle(f"A kNN graph on {name.split(' (')[0]} ({X.shape[0]} images)")
plt.show()
