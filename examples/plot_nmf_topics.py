"""
NMF topics on 20 Newsgroups
===========================

Linear NMF factorises 600 tf-idf documents from four newsgroups as ``X ≈ V Uᵀ`` and labels each
document by its largest entry of V; each column of U is a topic, and its largest entries are the
terms the cluster is about, drawn here as one bar chart per cluster.
The top terms are how you check, without labels, that a document clustering found topics and not
noise -- and ``feature_names`` makes ``NMFClustering`` report them for you.
"""
import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_digits

from bigclust import DataError, NMFClustering, kmeans, metrics, preprocess
from bigclust.datasets import open_dataset

GROUPS = ["comp.graphics", "rec.sport.hockey", "sci.med", "soc.religion.christian"]


def newsgroups(groups, per_group, seed=0):
    """Term counts of ``per_group`` documents of each group (20 Newsgroups under $BIGCLUST_DATA).

    Without the corpus, the digits stand in: non-negative pixel counts, 'terms' named by pixel.
    """
    try:
        src = open_dataset("news20")             # the bydate test split, read from $BIGCLUST_DATA
        X, y = next(iter(src.iter_chunks(src.info.n_samples)))
        terms, classes = np.asarray(src.feature_names), src.class_names
        name = "20 Newsgroups"
    except DataError:
        X, y = load_digits(return_X_y=True)
        X, terms = sp.csr_matrix(X), np.array([f"px{r}{c}" for r in range(8) for c in range(8)])
        classes, groups = [str(d) for d in range(10)], ["0", "1", "4", "7"]
        name = "digits (20 Newsgroups not under $BIGCLUST_DATA; pixels stand in for terms)"
    rng = np.random.default_rng(seed)
    rows, labels = [], []
    for c, g in enumerate(groups):
        pick = rng.choice(np.flatnonzero(y == classes.index(g)), per_group[c], replace=False)
        rows.append(pick)
        labels.append(np.full(per_group[c], c))
    X = X[np.concatenate(rows)]
    used = np.flatnonzero(X.getnnz(axis=0) >= 2)        # terms in at least two of the chosen documents
    return X[:, used], np.concatenate(labels), terms[used], list(groups), name


counts, y, terms, groups, name = newsgroups(GROUPS, [150] * 4)
X, _ = preprocess.tfidf(counts)                   # tf-idf, rows scaled to unit length (and the idf)
print(f"{name}: {X.shape[0]} documents x {X.shape[1]} terms")

# %%
# The fit.  ``feature_names`` gives ``top_terms_``; ``components_`` (U transposed) holds the weights.
nmf = NMFClustering(4, model="linear", solver="mu", init="nndsvd", n_init=1, max_iter=300,
                    random_state=0, feature_names=list(terms))
labels = nmf.fit_predict(X)
km = kmeans.kmeans(X, 4, n_init=10, random_state=0)
print(f"NMF      acc {metrics.accuracy(y, labels):.3f}  NMI {metrics.nmi(y, labels):.3f}")
print(f"k-means  acc {metrics.accuracy(y, km.labels[km.best]):.3f}  NMI {metrics.nmi(y, km.labels[km.best]):.3f}")
for c, top in enumerate(nmf.top_terms_):
    print(f"cluster {c}: {' '.join(top[:8])}")

# %%
# One bar chart per cluster: its ten largest topic weights, titled by the newsgroup most of its
# documents come from.  The terms are word stems (the reader stems and drops stop words): "imag" is
# image, images and imaging.
fig, axes = plt.subplots(1, 4, figsize=(14, 4.2), constrained_layout=True)
for c, ax in enumerate(axes):
    w = nmf.components_[c]
    top = np.argsort(w)[::-1][:10]
    members = y[labels == c]
    major = groups[np.bincount(members, minlength=4).argmax()] if members.size else "(empty)"
    share = (members == groups.index(major)).mean() if members.size else 0.0
    ax.barh(np.arange(10), w[top][::-1], color=plt.cm.tab10(c))
    ax.set_yticks(np.arange(10), terms[top][::-1])
    ax.set_title(f"cluster {c}: {members.size} docs\n{share:.0%} {major}", fontsize=10)
    ax.set_xlabel("weight in the topic (column of U)")
fig.suptitle(f"Top terms of each NMF cluster ({name.split(' (')[0]}, accuracy "
             f"{metrics.accuracy(y, labels):.2f})")
plt.show()
