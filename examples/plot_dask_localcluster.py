"""
Running on a Dask LocalCluster
==============================

The estimators (and ``bigclust pipeline run --scheduler``) hand their row-block work to a
``dask.distributed`` scheduler when given its address; this example starts a two-worker
``LocalCluster``, clusters 1500 MNIST digits on it out of core, and checks that the labels are the
same as in this process.  The same call with a remote scheduler's ``tcp://`` address spreads the work
over several machines (which must see the same file system for the temporary store).
"""
import time

import dask.array as da
import matplotlib.pyplot as plt
import numpy as np
from dask.distributed import Client, LocalCluster
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA

from bigclust import DataError, SpectralClustering, metrics
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


X, y, name = mnist(1500)
X = PCA(40, random_state=0).fit_transform(X).astype(np.float32)
Xd = da.from_array(X, chunks=(500, -1))
print(f"{name}: {X.shape[0]} x {X.shape[1]} (40 principal components)")

# %%
# One set of parameters; ``max_memory="4MB"`` is below the 18 MB kernel, so its row blocks are
# streamed -- on the cluster, as Dask tasks on its workers.
params = dict(affinity="gaussian", gamma="median", l2_normalize=True, normalization="sk", n_iter=50,
              tol=1e-6, n_init=10, max_memory="4MB", random_state=0)
t = time.perf_counter()
local = SpectralClustering(10, **params).fit(Xd)
t_local = time.perf_counter() - t

# ``processes=False`` keeps the two workers in this process (a gallery script has no ``if __name__ ==
# "__main__"`` guard for worker processes to import it under); in a script of your own, drop it.
with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                  dashboard_address=None) as cluster, Client(cluster) as client:
    print("cluster:", cluster.scheduler_address, "with", len(client.scheduler_info()["workers"]), "workers")
    t = time.perf_counter()
    remote = SpectralClustering(10, scheduler=cluster.scheduler_address, **params).fit(Xd)
    t_cluster = time.perf_counter() - t

same = np.array_equal(local.labels_, remote.labels_)
print(f"this process: {t_local:.1f} s, accuracy {metrics.accuracy(y, local.labels_):.3f}")
print(f"LocalCluster: {t_cluster:.1f} s, accuracy {metrics.accuracy(y, remote.labels_):.3f}")
print("same labels:", same, "| out of core:", local.normalization_info_["out_of_core"],
      remote.normalization_info_["out_of_core"])

# %%
# The two spectral embeddings, each coloured by its own labels, and the agreement table
# (rows: labels in this process, columns: labels on the cluster) -- diagonal when they agree.
fig, axes = plt.subplots(1, 3, figsize=(14, 4.3), constrained_layout=True)
for ax, est, where, secs in ((axes[0], local, "this process", t_local),
                             (axes[1], remote, "LocalCluster (2 workers)", t_cluster)):
    xy = PCA(2, random_state=0).fit_transform(est.embedding_)
    ax.scatter(xy[:, 0], xy[:, 1], c=est.labels_, cmap="tab10", s=5, vmin=0, vmax=9)
    ax.set_title(f"{where}: {secs:.0f} s, accuracy {metrics.accuracy(y, est.labels_):.2f}")
    ax.set_xticks([])
    ax.set_yticks([])
C = metrics.contingency(local.labels_, remote.labels_)
axes[2].imshow(C, cmap="Greens")
axes[2].set_xlabel("cluster label on the LocalCluster")
axes[2].set_ylabel("cluster label in this process")
axes[2].set_title(f"agreement: identical labels = {same}")
fig.suptitle(f"SpectralClustering (SK, out of core) on {name.split(' (')[0]}: local vs Dask LocalCluster")
plt.show()
