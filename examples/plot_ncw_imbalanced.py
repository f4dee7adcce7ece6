"""
NCW on imbalanced topics
========================

Four newsgroups of very different sizes (300, 120, 60 and 30 documents) are clustered by linear NMF
with and without the normalised cut weighting (NCW), which weights each document by ``d_i^(-1/2)``
with ``d = X Xᵀ 1`` before the factorisation.  With unequal topics plain NMF tends to split the big
one and merge the small ones; the confusion matrices show whether NCW helps on your kind of data
(on the balanced full 20 Newsgroups, paper 001 finds it can also hurt).
"""
import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment
from sklearn.datasets import load_digits

from bigclust import DataError, NMFClustering, metrics, preprocess
from bigclust.datasets import open_dataset

GROUPS = ["rec.sport.hockey", "sci.space", "comp.graphics", "talk.politics.mideast"]
SIZES = [300, 120, 60, 30]


def newsgroups(groups, per_group, seed=0):
    """Term counts of ``per_group[c]`` documents of each group (20 Newsgroups under $BIGCLUST_DATA).

    Without the corpus, the digits stand in: non-negative pixel counts, 'terms' named by pixel.
    """
    try:
        src = open_dataset("news20")             # the bydate test split, read from $BIGCLUST_DATA
        X, y = next(iter(src.iter_chunks(src.info.n_samples)))
        classes, name = src.class_names, "20 Newsgroups"
    except DataError:
        X, y = load_digits(return_X_y=True)
        X, classes, groups = sp.csr_matrix(X), [str(d) for d in range(10)], ["0", "1", "4", "7"]
        name = "digits (20 Newsgroups not under $BIGCLUST_DATA)"
    rng = np.random.default_rng(seed)
    pools = [np.flatnonzero(y == classes.index(g)) for g in groups]
    sizes = [min(m, pool.size) for m, pool in zip(per_group, pools)]   # the digits hold fewer per class
    rows = [rng.choice(pool, m, replace=False) for pool, m in zip(pools, sizes)]
    X = X[np.concatenate(rows)]
    X = X[:, np.flatnonzero(X.getnnz(axis=0) >= 2)]
    return X, np.repeat(np.arange(len(groups)), sizes), list(groups), name


counts, y, groups, name = newsgroups(GROUPS, SIZES)
X, _ = preprocess.tfidf(counts)                   # tf-idf, rows scaled to unit length (and the idf)
print(f"{name}: {X.shape[0]} documents x {X.shape[1]} terms, class sizes {np.bincount(y)}")


def matched_confusion(y, labels, k):
    """Confusion matrix (classes x clusters) with the clusters reordered to match the classes."""
    C = metrics.contingency(y, labels)            # only the clusters that occur get a column
    full = np.zeros((k, max(k, C.shape[1])), dtype=int)
    full[:C.shape[0], :C.shape[1]] = C
    _, cols = linear_sum_assignment(-full)
    return full[:, cols]


# %%
# The same model, seed and restarts; only ``ncw`` changes.
fits = {}
for ncw in (False, True):
    est = NMFClustering(4, model="linear", ncw=ncw, solver="mu", init="random", n_init=5, max_iter=300,
                        random_state=0)
    labels = est.fit_predict(X)
    fits[ncw] = labels
    print(f"NMF{' + NCW' if ncw else '      '}  acc {metrics.accuracy(y, labels):.3f}  "
          f"NMI {metrics.nmi(y, labels):.3f}  cluster sizes {np.sort(np.bincount(labels, minlength=4))[::-1]}")

# %%
# Rows: the true topics (sizes on the left); columns: the clusters, matched to the topics.
# Everything off the diagonal is a misplaced document.  Without NCW the factorisation spends its
# factors on the big topic's sub-topics and lets the small ones share a cluster; the weighting
# ``d_i^(-1/2)`` lowers the pull of the many similar documents of the big topic.
fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
short = [f"{g} ({m})" for g, m in zip(groups, SIZES)]
for ax, ncw in zip(axes, (False, True)):
    C = matched_confusion(y, fits[ncw], 4)
    ax.imshow(C / C.sum(axis=1, keepdims=True), cmap="Blues", vmin=0, vmax=1)
    for i in range(4):
        for j in range(4):
            ax.text(j, i, C[i, j], ha="center", va="center",
                    color="white" if C[i, j] > 0.6 * C[i].sum() else "black")
    ax.set_xticks(range(4), [f"cluster {j}\n({C[:, j].sum()} docs)" for j in range(4)])
    ax.set_yticks(range(4), short if ncw is False else [""] * 4)
    acc = metrics.accuracy(y, fits[ncw])
    ax.set_title(f"NMF {'with' if ncw else 'without'} NCW: accuracy {acc:.2f}, "
                 f"NMI {metrics.nmi(y, fits[ncw]):.2f}")
fig.suptitle(f"Imbalanced topics ({name.split(' (')[0]}): documents per (topic, matched cluster); "
             "colour = share of the topic's row")
plt.show()
