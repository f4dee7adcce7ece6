"""
Out-of-core clustering under a small memory budget
==================================================

``max_memory`` is the budget that decides whether the n x n kernel is held in memory or streamed in
row blocks from a zarr store on disk; this example clusters 2000 MNIST digits twice -- once with room
for the 32 MB kernel, once with ``max_memory="8MB"`` -- and plots the memory the process used
over time.  When a kernel does not fit your machine, this is the switch, and the labels do not change.
"""
import threading
import time

import dask.array as da
import matplotlib.pyplot as plt
import numpy as np
import psutil
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


class MemoryTrace:
    """Samples this process's resident memory every ``every`` seconds in a background thread."""

    def __init__(self, every=0.02):
        self.every, self.t, self.rss = every, [], []
        self._proc, self._stop = psutil.Process(), threading.Event()

    def __enter__(self):
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.t.append(time.perf_counter() - self._t0)
            self.rss.append(self._proc.memory_info().rss / 2**20)
            time.sleep(self.every)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


X, y, name = mnist(2000)
# 50 principal components keep the per-row work small; the kernel stays n x n whatever d is
X = PCA(50, random_state=0).fit_transform(X).astype(np.float32)
n = X.shape[0]
print(f"{name}: {n} x {X.shape[1]}; a float64 kernel is {n * n * 8 / 2**20:.0f} MiB")

# %%
# Both runs use BBS with the streaming solver (``"alternating"``, the paper's Alg. 1: the exact
# ``"dual"`` solver needs K in memory) and the same seed.  The input is a Dask array, which is what
# lets the estimator stream; 30 passes keep the example short.
params = dict(affinity="gaussian", gamma="median", l2_normalize=True, normalization="bbs",
              solver="alternating", n_iter=30, n_init=10, random_state=0)
runs = {}
for budget in ("4GB", "8MB"):
    Xd = da.from_array(X, chunks=(500, -1))
    with MemoryTrace() as trace:
        est = SpectralClustering(10, max_memory=budget, **params).fit(Xd)
    runs[budget] = (est, trace)
    info = est.normalization_info_
    print(f"max_memory={budget:5s}: out of core {info['out_of_core']}, {trace.t[-1]:.1f} s, "
          f"peak {max(trace.rss) - trace.rss[0]:.0f} MiB above the start, "
          f"accuracy {metrics.accuracy(y, est.labels_):.3f}")
same = np.array_equal(runs["4GB"][0].labels_, runs["8MB"][0].labels_)
print("same labels in memory and out of core:", same)

# %%
# Memory above the level at the start of each fit.  In memory, the kernel and its normalised copy
# are held whole; out of core, only row blocks within the budget are.
fig, ax = plt.subplots(figsize=(10, 4.5), constrained_layout=True)
for (budget, (est, trace)), color in zip(runs.items(), ("tab:red", "tab:blue")):
    rss = np.array(trace.rss) - trace.rss[0]
    where = "out of core" if est.normalization_info_["out_of_core"] else "in memory"
    ax.plot(trace.t, rss, color=color, label=f'max_memory="{budget}" ({where}), peak {rss.max():.0f} MiB')
ax.axhline(8, color="tab:blue", ls="--", lw=0.8, label="8 MB budget")
ax.axhline(n * n * 8 / 2**20, color="grey", ls=":", lw=0.8, label="one float64 n x n kernel")
ax.set_xlabel("seconds since fit() started")
ax.set_ylabel("resident memory above start (MiB)")
ax.set_title(f"SpectralClustering (BBS) on {n} {name.split(' (')[0]} digits; same labels: {same}")
ax.legend(loc="center right")
plt.show()
