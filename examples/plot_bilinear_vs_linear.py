"""
Bilinear vs linear NMF
======================

Linear NMF factorises the documents themselves (``X ≈ V Uᵀ``); bilinear NMF (concept factorisation)
factorises their kernel, writing each topic as a non-negative combination of documents
(``X ≈ X W Vᵀ``), so it runs on any kernel and never needs the terms.  The bars compare both, with
and without NCW, against k-means on five newsgroups -- the choice paper 001 is about.
"""
import time

import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_digits

from bigclust import DataError, NMFClustering, kmeans, metrics, preprocess
from bigclust.datasets import open_dataset

GROUPS = ["comp.sys.mac.hardware", "rec.motorcycles", "sci.electronics", "soc.religion.christian",
          "talk.politics.misc"]


def newsgroups(groups, per_group, seed=0):
    """Term counts of ``per_group`` documents of each group (20 Newsgroups under $BIGCLUST_DATA).

    Without the corpus, the digits stand in: non-negative pixel counts.
    """
    try:
        src = open_dataset("news20")             # the bydate test split, read from $BIGCLUST_DATA
        X, y = next(iter(src.iter_chunks(src.info.n_samples)))
        classes, name = src.class_names, "20 Newsgroups"
    except DataError:
        X, y = load_digits(return_X_y=True)
        X, classes, groups = sp.csr_matrix(X), [str(d) for d in range(10)], ["0", "1", "4", "7", "9"]
        name = "digits (20 Newsgroups not under $BIGCLUST_DATA)"
    rng = np.random.default_rng(seed)
    rows = [rng.choice(np.flatnonzero(y == classes.index(g)), per_group, replace=False) for g in groups]
    X = X[np.concatenate(rows)]
    X = X[:, np.flatnonzero(X.getnnz(axis=0) >= 2)]
    return X, np.repeat(np.arange(len(groups)), per_group), name


counts, y, name = newsgroups(GROUPS, 120)
X, _ = preprocess.tfidf(counts)                   # tf-idf, rows scaled to unit length (and the idf)
k = 5
print(f"{name}: {X.shape[0]} documents x {X.shape[1]} terms")

# %%
# Four NMF variants on the same tf-idf rows.  With ``kernel="linear"`` the bilinear model uses
# ``K = X Xᵀ`` without ever forming it.  k-means on the tf-idf rows is the reference.
variants = {"linear": dict(model="linear"), "linear + NCW": dict(model="linear", ncw=True),
            "bilinear": dict(model="bilinear", kernel="linear"),
            "bilinear + NCW": dict(model="bilinear", kernel="linear", ncw=True)}
scores = {}
km = kmeans.kmeans(X, k, n_init=10, random_state=0)
scores["k-means"] = (metrics.accuracy(y, km.labels[km.best]), metrics.nmi(y, km.labels[km.best]))
for label, params in variants.items():
    t = time.perf_counter()
    est = NMFClustering(k, n_init=5, max_iter=300, random_state=0, **params)
    labels = est.fit_predict(X)
    scores[label] = (metrics.accuracy(y, labels), metrics.nmi(y, labels))
    print(f"{label:15s} acc {scores[label][0]:.3f}  NMI {scores[label][1]:.3f}  objective {est.objective_:.4g}  "
          f"({time.perf_counter() - t:.1f} s)")
print(f"{'k-means':15s} acc {scores['k-means'][0]:.3f}  NMI {scores['k-means'][1]:.3f}")

# %%
# Accuracy and NMI side by side for every method.
fig, ax = plt.subplots(figsize=(9, 4.5), constrained_layout=True)
names = list(scores)
pos = np.arange(len(names))
for j, (metric, color) in enumerate((("accuracy", "tab:blue"), ("NMI", "tab:orange"))):
    vals = [scores[m][j] for m in names]
    bars = ax.bar(pos + (j - 0.5) * 0.38, vals, 0.38, label=metric, color=color)
    ax.bar_label(bars, fmt="%.2f", fontsize=8)
ax.set_xticks(pos, names)
ax.set_ylim(0, 1.05)
ax.set_ylabel("score")
ax.legend(loc="lower right")
ax.set_title(f"Linear vs bilinear NMF, with and without NCW ({name.split(' (')[0]}, "
             f"{X.shape[0]} documents, {k} topics)")
plt.show()
