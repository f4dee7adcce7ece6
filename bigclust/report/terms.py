"""What text clusters are about: the top terms of each cluster, for ``results.md``, ``clusters.csv`` and ``top_terms_``.

A cluster's terms are the largest entries of a weight vector over the features: the factor a method keeps
per cluster when it has one (``Method.term_factor``: NMF's term factor U, features x k), else the
cluster's centroid -- the mean of its rows in the preprocessed (tf-idf) space.  Ties go to the lower column;
terms of weight 0 are never listed (a small cluster may have fewer than ``n_top``).  The pipeline lists them
for document data (sparse input weighted by tf-idf) with the data set's vocabulary, or ``#<column>`` when the
columns have no names; the estimators (layer 5) call :func:`top_terms` with the names they were given.
"""
from __future__ import annotations

import csv
import io

import numpy as np

from bigclust.pipeline import methods

#: terms listed per cluster
N_TOP = 10
#: clusters per method shown in results.md (clusters.csv has every one)
MD_CLUSTERS = 30


def _sums(X, labels, k: int) -> np.ndarray:
    """``(k, d)`` sum of the rows of X (dense or scipy.sparse) in each cluster; rows labelled -1 left out."""
    import scipy.sparse as sp

    rows = np.flatnonzero((labels >= 0) & (labels < k))
    ind = sp.csr_matrix((np.ones(rows.size), (labels[rows], rows)), shape=(k, X.shape[0]))
    sums = ind @ X
    return sums.toarray() if sp.issparse(sums) else np.asarray(sums, dtype=np.float64)


def centroids(X, labels, k: int) -> np.ndarray:
    """``(k, d)`` mean of the rows of X (dense, scipy.sparse, or Dask: a block of rows at a time) in each
    cluster; rows labelled -1 are left out, an empty cluster's centroid is 0."""
    labels = np.asarray(labels, dtype=np.int64)
    if hasattr(X, "dask"):
        sums, r0 = np.zeros((k, X.shape[1])), 0
        for rows in X.chunks[0]:
            sums += _sums(np.asarray(X[r0:r0 + rows].compute(), dtype=np.float64), labels[r0:r0 + rows], k)
            r0 += rows
    else:
        sums = _sums(X, labels, k)
    counts = np.bincount(labels[(labels >= 0) & (labels < k)], minlength=k).astype(np.float64)
    return sums / np.maximum(counts, 1.0)[:, None]


def largest(weights, n_top: int = N_TOP) -> list[list[int]]:
    """Per row of ``weights`` (k, d): the columns of its ``n_top`` largest positive entries, largest first."""
    out = []
    for w in np.asarray(weights, dtype=np.float64):
        order = np.argsort(-w, kind="stable")[:n_top]
        out.append([int(j) for j in order if w[j] > 0])
    return out


def top_terms(X=None, labels=None, n_clusters: int | None = None, *, feature_names=None, factor=None,
              n_top: int = N_TOP) -> list[list[str]]:
    """The ``n_top`` top terms of each cluster ``0..n_clusters-1``.

    Parameters
    ----------
    X : array or scipy.sparse matrix (n, d), optional
        The rows clustered (tf-idf documents); their centroids give the terms when ``factor`` is None.
    labels : array of int (n,)
        Cluster of each row (-1: left out).
    n_clusters : int, optional
        Default: ``labels.max() + 1`` (or the factor's columns).
    feature_names : sequence of str, optional
        Name of each column (a vectorizer's ``get_feature_names_out()``); ``#<column>`` without.
    factor : array (d, k), optional
        A weight per feature and cluster (NMF's U): its columns give the terms.
    """
    if factor is not None:
        factor = np.asarray(factor, dtype=np.float64)
        k = factor.shape[1] if n_clusters is None else n_clusters
        cols = largest(factor[:, :k].T, n_top)
    else:
        k = int(np.max(labels)) + 1 if n_clusters is None else n_clusters
        cols = largest(centroids(X, labels, k), n_top)
    names = None if feature_names is None else [str(t) for t in feature_names]
    return [[names[j] if names is not None else f"#{j}" for j in c] for c in cols]


#: what an estimator's ``feature_names`` parameter takes (its declaration: ``own_key(NAMES_TYPES, names_ok, ...)``)
NAMES_TYPES = (list, tuple, np.ndarray, type(None))
NAMES_EXPECT = "None or a sequence of str, one per column of X (a vectorizer's get_feature_names_out())"


def names_ok(v) -> bool:
    return v is None or (np.ndim(v) == 1 and all(isinstance(t, (str, np.str_)) for t in v))


def feature_names(est, n_features: int):
    """An estimator's column names: its ``feature_names`` parameter, else scikit-learn's ``feature_names_in_``
    (a DataFrame's columns); None when it has none.  A UserError naming the estimator when their number is
    not X's."""
    from bigclust._util.errors import UserError

    names = getattr(est, "feature_names", None)
    if names is None:
        names = getattr(est, "feature_names_in_", None)
    if names is None:
        return None
    if isinstance(names, str) or not names_ok(names):   # said before the fit (the parameter check comes later)
        raise UserError(f"{type(est).__name__}: feature_names must be {NAMES_EXPECT}, got {str(names)[:60]!r}")
    names = [str(t) for t in names]
    if len(names) != n_features:
        raise UserError(f"{type(est).__name__}: feature_names has {len(names)} names, but X has {n_features} "
                        "features (columns)")
    return names


def fitted_top_terms(est, X, labels, factor=None, n_top: int = N_TOP):
    """``top_terms_`` of a fitted estimator: the top terms of each of its ``n_clusters`` clusters (``factor``:
    features x k, else the centroids of X's rows), or None when the estimator knows no feature names."""
    import scipy.sparse as sp

    if not (sp.issparse(X) or hasattr(X, "dask")):   # a list, a DataFrame
        X = np.asarray(X, dtype=np.float64)
    names = feature_names(est, X.shape[1])
    if names is None:
        return None
    labels = np.asarray(labels, dtype=np.int64)
    k = max(int(est.n_clusters), int(labels.max()) + 1 if labels.size else 0)
    return top_terms(X, labels, k, feature_names=names, factor=factor, n_top=n_top)


# -- the pipeline's report ----------------------------------------------------------------------------


def _vocabulary(cfg, ingest_attrs, d: int):
    """The data's column names when it has them (a registered text set's vocabulary), else None.

    Read from the ingest instance when it recorded them, else from the data source itself (a corpus is read
    and counted again: seconds for 20 Newsgroups).
    """
    names = ingest_attrs.get("feature_names")
    if not names and cfg is not None:
        try:
            from bigclust.pipeline.stages import open_source
            names = open_source(cfg.sections["data"], cfg.path.parent).feature_names
        except Exception:   # noqa: BLE001 -- names are a courtesy: a source that cannot say them gives #<column>
            names = None
    return list(names) if names is not None and len(names) == d else None


def cluster_rows(store, picks, cfg=None, n_top: int = N_TOP) -> list[dict]:
    """One row per cluster of every pick on document data: ``name, method, cluster, size, [class, share],
    top_terms``; empty when the run's data are not documents weighted by tf-idf."""
    from bigclust.pipeline.store import read_matrix

    rows, xs, vocab = [], {}, {}
    for pk in picks:
        pre, ing = pk.chain.get("preprocess"), pk.chain.get("ingest")
        if pre is None or ing is None:
            continue
        pre_attrs = dict(store.open("preprocess", pre, dropped_ok=True).attrs)
        if (pre_attrs.get("params") or {}).get("tfidf_local") is None:   # not documents under tf-idf
            continue
        if pre not in xs:
            xs[pre] = read_matrix(store.open("preprocess", pre), "X")
        X = xs[pre]
        if ing not in vocab:
            vocab[ing] = _vocabulary(cfg, dict(store.open("ingest", ing, dropped_ok=True).attrs), X.shape[1])
        k = int(pk.labels.max()) + 1
        name = methods.REGISTRY[pk.method].term_factor if pk.method in methods.REGISTRY else ""
        g = store.open(pk.stage, pk.key)
        factor = np.asarray(g[name][...]) if name and name in g and g[name].shape[0] == X.shape[1] else None
        terms = top_terms(X, pk.labels, k, feature_names=vocab[ing], factor=factor, n_top=n_top)
        sizes = np.bincount(pk.labels[pk.labels >= 0], minlength=k)
        for c in range(k):
            row = {"name": pk.name, "method": pk.method, "cluster": c, "size": int(sizes[c])}
            if pk.y is not None:
                row.update(_majority(pk.y[pk.labels == c], pk.class_names))
            rows.append({**row, "top_terms": " ".join(terms[c])})
    return rows


def _majority(y, class_names) -> dict:
    if y.size == 0:
        return {"class": "", "share": float("nan")}
    counts = np.bincount(y[y >= 0]) if (y >= 0).any() else np.zeros(1)
    c = int(np.argmax(counts))
    name = class_names[c] if c < len(class_names) else c
    return {"class": name, "share": float(counts[c] / y.size)}


def clusters_csv(rows) -> str:
    """``clusters.csv``: every cluster of every method on document data, with its top terms."""
    buf = io.StringIO()
    cols = [c for c in ("name", "method", "cluster", "size", "class", "share", "top_terms") if any(c in r for r in rows)]
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**r, **({"share": f"{r['share']:.3f}"} if "share" in r else {})})
    return buf.getvalue()


def markdown(rows) -> str:
    """The ``results.md`` section: per method instance, a table of its clusters' sizes and top terms."""
    if not rows:
        return ""
    with_factor = [methods.label(m) for m in dict.fromkeys(r["method"] for r in rows)
                   if m in methods.REGISTRY and methods.REGISTRY[m].term_factor]
    how = "the largest entries of each cluster's centroid in tf-idf space"
    if with_factor:
        how += f" ({', '.join(with_factor)}: of the cluster's factor)"
    out = [f"## Top terms per cluster\n\n{N_TOP} terms per cluster, {how}; every cluster in clusters.csv."]
    labelled = any("class" in r for r in rows)
    for name in dict.fromkeys(r["name"] for r in rows):
        mine = [r for r in rows if r["name"] == name]
        out.append(f"\n### {name} (labels/{name}.csv)\n")
        out.append("| cluster | size | " + ("largest class (share) | " if labelled else "") + "top terms |")
        out.append("|---|---|" + ("---|" if labelled else "") + "---|")
        for r in mine[:MD_CLUSTERS]:
            cls = f"{r['class']} ({r['share']:.2f}) | " if labelled and r.get("class") != "" else \
                "- | " if labelled else ""
            out.append(f"| {r['cluster']} | {r['size']} | {cls}{r['top_terms'] or '-'} |")
        if len(mine) > MD_CLUSTERS:
            out.append(f"\n... and {len(mine) - MD_CLUSTERS} more clusters in clusters.csv.")
    return "\n".join(out)
