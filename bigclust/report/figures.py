"""Figures of a run (matplotlib, Agg backend), written where people look.

- ``quality.png`` (output folder): MB and MC per iteration of the scaling
  methods, one row of panels per γ (paper 000, Figs. 1-2);
- ``figures/confusion-<name>.png`` and ``.csv``: the confusion matrix of the
  restart the method picks, clusters matched to classes by the Hungarian
  matching of :func:`bigclust.algo.metrics.accuracy` (matched clusters first, in
  class order), one per method, for its instance whose picked restart scores
  best over the sweep (paper 000 reports the best over γ);
- ``figures/embedding-<name>.png``: the spectral embedding (the row-normalised
  eigenvectors k-means clusters) of that instance, projected on its first two
  principal components (PCA of the embedding: a constant eigenvector, trivial
  for bi-stochastic matrices, has no variance and drops out), a seeded sample
  of at most 5000 points, coloured by cluster and, with labels, by class;
- ``figures/gamma-sweep.png``: score of the picked restart against γ (log
  axis), one line per method, when the run sweeps γ (paper 000's appendix
  tables).  Without labels: silhouette and MB.

Every file is written to a temporary name in the output folder and renamed, by the report's one atomic
writer (:func:`bigclust.report.labels.atomic_write`: the temporary file is removed when a write fails).
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from bigclust.pipeline.methods import label as method_label
from bigclust.report.labels import atomic_write

#: points drawn in the embedding view
EMBED_SAMPLE = 5000
#: classes or clusters beyond which a confusion matrix is drawn as a summary (its cells unreadable)
CONFUSION_MAX = 50


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out_dir: Path, path: Path):
    """Render ``fig`` as PNG and write it through the report's one atomic writer: its temporary file (in
    ``out_dir``, where the next run cleans what ``kill -9`` left) is removed on any failure (a full disk)."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=90)
    finally:
        _plt().close(fig)
    atomic_write(path, buf.getvalue(), tmp_dir=out_dir)


def _tag(params: dict) -> str:
    return " ".join(f"{'γ' if k == 'gamma' else k}={v}" for k, v in params.items()
                    if k in ("gamma", "gammas", "n_neighbors", "kind"))


def _short_g(params: dict) -> str:
    g = params.get("gamma", params.get("gammas"))
    return "" if g is None else "γ=" + (",".join(f"{x:g}" for x in g) if isinstance(g, list) else
                                         f"{g:g}" if isinstance(g, (int, float)) else str(g))


# -- MB / MC per iteration -----------------------------------------------------------------------------


def plot_quality(path, records, out_dir=None):
    """MB and MC per iteration, log scale: one row of panels per γ, one curve per method.

    The layout of paper 000's Figs. 1-2 (the scaling methods' curves side by side).
    Without labels MC is undefined and only MB is drawn.
    """
    plt = _plt()
    path = Path(path)
    rows = {}
    for r in records:
        if r.get("history"):
            rows.setdefault(_tag(r["params"]) or "(one kernel)", []).append(r)
    has_mc = any(math.isfinite(x[2]) for recs in rows.values() for r in recs for x in r["history"])
    names = ("MB", "MC") if has_mc else ("MB",)
    fig, axes = plt.subplots(len(rows), len(names), figsize=(4.5 * len(names), 2.8 * len(rows)), squeeze=False,
                             constrained_layout=True)
    dataset = records[0].get("dataset", "") if records else ""
    gammas = list(dict.fromkeys(_short_g(r["params"]) for recs in rows.values() for r in recs))
    gammas = [g for g in gammas if g]
    fig.suptitle(f"{dataset}" + (f", {', '.join(gammas)}" if gammas else "")
                 + f": {' and '.join(names)} per iteration (lower is better)", fontsize=10)
    for (key, recs), ax_row in zip(rows.items(), axes):
        for r in recs:
            it = [x[0] for x in r["history"]]
            for ax, col in zip(ax_row, (1, 2)):
                ax.semilogy(it, [max(x[col], 1e-300) for x in r["history"]], label=method_label(r["method"]))
        for ax, name in zip(ax_row, names):
            ax.set_title(f"{name}, {key}", fontsize=9)
            ax.set_xlabel("iteration", fontsize=8)
            ax.set_ylabel(f"{name} (log scale)", fontsize=8)
            ax.legend(fontsize=7, title="method", title_fontsize=7)
    _save(fig, Path(out_dir) if out_dir else path.parent, path)


# -- confusion matrix ----------------------------------------------------------------------------------


def matched_confusion(y, labels):
    """Contingency table with clusters reordered to match classes (Hungarian, as :func:`metrics.accuracy`).

    Parameters
    ----------
    y, labels : array-like, shape (n,)
        Classes and clusters.

    Returns
    -------
    table : ndarray of int64, shape (n_classes, n_clusters)
        ``table[i, j]`` = points of the i-th smallest class in the j-th
        column's cluster; column i holds the cluster matched to class i (as
        far as there are clusters), unmatched clusters follow in label order.
        With at least as many clusters as classes ``trace(table) / n`` is the accuracy.
    classes, clusters : ndarray
        The class value of each row and the cluster label of each column.
    """
    from scipy.optimize import linear_sum_assignment

    from bigclust.algo.metrics import contingency
    y, labels = np.asarray(y), np.asarray(labels)
    table = contingency(y, labels)
    classes, clusters = np.unique(y), np.unique(labels)
    rows, cols = linear_sum_assignment(table, maximize=True)
    order = list(cols[np.argsort(rows)])
    order += [j for j in range(table.shape[1]) if j not in set(order)]
    # a class left without a cluster (k < classes) keeps its row; columns follow the matched rows' order
    return table[:, order], classes, clusters[order]


def write_confusion(out_dir: Path, stem: str, y, labels, class_names=(), title=""):
    """``figures/confusion-<stem>.csv`` (class, then one count per matched cluster) and ``.png``."""
    table, classes, clusters = matched_confusion(y, labels)
    cname = [str(class_names[c]) if len(class_names) > int(c) >= 0 else str(c) for c in classes.tolist()]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["class"] + [f"cluster {c}" for c in clusters.tolist()])
    for name, row in zip(cname, table.tolist()):
        w.writerow([name] + row)
    folder = out_dir / "figures"
    atomic_write(folder / f"confusion-{stem}.csv", buf.getvalue(), tmp_dir=out_dir)

    plt = _plt()
    nr, nc = table.shape
    if max(nr, nc) > CONFUSION_MAX:
        _confusion_summary(plt, out_dir, folder / f"confusion-{stem}.png", table, title, accuracy_of(y, labels))
        return
    fig, ax = plt.subplots(figsize=(2.0 + 0.45 * max(nc, 6), 1.2 + 0.4 * max(nr, 5)), constrained_layout=True)
    frac = table / np.maximum(table.sum(axis=1, keepdims=True), 1)  # row-normalised: recall per class
    im = ax.imshow(frac, cmap="Blues", vmin=0, vmax=1, aspect="auto")
    if nr * nc <= 400:
        for i in range(nr):
            for j in range(nc):
                ax.text(j, i, str(table[i, j]), ha="center", va="center", fontsize=6,
                        color="white" if frac[i, j] > 0.6 else "black")
    ax.set_xticks(range(nc), [str(c) for c in clusters.tolist()], fontsize=7)
    ax.set_yticks(range(nr), cname, fontsize=7)
    ax.set_xlabel("cluster (matched to classes, in row order)", fontsize=8)
    ax.set_ylabel("class", fontsize=8)
    ax.set_title(f"{title}\naccuracy {accuracy_of(y, labels):.3f} (Hungarian matching)", fontsize=9)
    fig.colorbar(im, ax=ax).set_label("fraction of the class", fontsize=8)
    _save(fig, out_dir, folder / f"confusion-{stem}.png")


def accuracy_of(y, labels) -> float:
    from bigclust.algo.metrics import accuracy
    return accuracy(y, labels)


def _confusion_summary(plt, out_dir: Path, path: Path, table, title: str, acc: float):
    """More than :data:`CONFUSION_MAX` classes or clusters: a fixed-size summary, not a matrix whose cells
    no one can read (1000 classes drew a 19368 x 21847-pixel image in two minutes).  Left: each class's
    fraction in its matched cluster, sorted; right: the cluster sizes.  The CSV keeps the whole table."""
    nr, nc = table.shape
    matched = np.diagonal(table)            # class i's points in the cluster matched to it (min(nr, nc) of them)
    recall = np.sort(matched / np.maximum(table.sum(axis=1)[:matched.size], 1))[::-1]
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6), constrained_layout=True)
    axes[0].plot(np.arange(1, recall.size + 1), recall, lw=1)
    axes[0].set_xlabel("class (sorted)", fontsize=8)
    axes[0].set_ylabel("fraction in its matched cluster", fontsize=8)
    axes[0].set_ylim(0, 1.02)
    axes[1].hist(table.sum(axis=0), bins=min(50, max(nc, 1)))
    axes[1].set_xlabel("cluster size (points)", fontsize=8)
    axes[1].set_ylabel("clusters", fontsize=8)
    fig.suptitle(f"{title}: {nr} classes x {nc} clusters, accuracy {acc:.3f} (Hungarian matching); "
                 "the whole table is the CSV beside this file", fontsize=9)
    _save(fig, out_dir, path)


# -- the spectral embedding in 2-D ------------------------------------------------------------------


def embedding_2d(E, seed=0, m=EMBED_SAMPLE):
    """``(rows, Z)``: a seeded sample of at most ``m`` rows of ``E`` and their first two principal components."""
    n = E.shape[0]
    rows = np.arange(n) if n <= m else np.sort(np.random.default_rng(seed).choice(n, m, replace=False))
    S = np.asarray(E[rows] if n > m else E[...], dtype=np.float64)
    S = S - S.mean(axis=0)
    _, _, Vt = np.linalg.svd(S, full_matrices=False)
    Z = S @ Vt[:2].T
    if Z.shape[1] < 2:
        Z = np.column_stack([Z, np.zeros(Z.shape[0])])
    return rows, Z


def write_embedding(out_dir: Path, stem: str, E_node, labels, y=None, title="", seed=0):
    """``figures/embedding-<stem>.png``: PCA of the embedding, by cluster (and by class when labelled)."""
    rows, Z = embedding_2d(E_node, seed)
    plt = _plt()
    labels = np.asarray(labels)
    # with classes, a cluster takes the colour of the class it is matched to, so the panels compare by eye
    order = np.unique(labels) if y is None else matched_confusion(y, labels)[2]
    panels = [("cluster", labels[rows], list(order))]
    if y is not None:
        panels.append(("class", np.asarray(y)[rows], list(np.unique(y))))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.2), squeeze=False, constrained_layout=True)
    for ax, (what, col, vals) in zip(axes[0], panels):
        cmap = plt.get_cmap("tab10" if len(vals) <= 10 else "tab20")
        for i, v in enumerate(vals):
            sel = col == v
            ax.scatter(Z[sel, 0], Z[sel, 1], s=4, color=cmap(i % cmap.N), label=str(v), alpha=0.7, linewidths=0)
        ax.set_xlabel("principal component 1 of the embedding", fontsize=8)
        ax.set_ylabel("principal component 2", fontsize=8)
        ax.set_title(f"coloured by {what}", fontsize=9)
        if len(vals) <= 20:
            ax.legend(fontsize=6, markerscale=2, title=what, title_fontsize=7, loc="best")
    fig.suptitle(f"{title}: spectral embedding, {len(rows)} of {E_node.shape[0]} points", fontsize=10)
    _save(fig, out_dir, out_dir / "figures" / f"embedding-{stem}.png")


# -- scores against γ ------------------------------------------------------------------------------------


def gamma_sweep(records) -> dict:
    """``{method: [(γ, record), ...]}`` for the methods run at two or more numeric γ values."""
    by = {}
    for r in records:
        g = r["params"].get("gamma")
        if isinstance(g, (int, float)) and not isinstance(g, bool):
            by.setdefault(r["method"], []).append((float(g), r))
    return {m: sorted(v, key=lambda t: t[0]) for m, v in by.items() if len({g for g, _ in v}) >= 2}


def plot_gamma_sweep(out_dir: Path, records) -> bool:
    """``figures/gamma-sweep.png``; False (nothing written) when no method sweeps γ."""
    sweep = gamma_sweep(records)
    if not sweep:
        return False
    labelled = any("acc_best_inertia" in r for _, v in sweep.items() for _, r in v)
    panels = ([("acc_best_inertia", "accuracy (picked restart)"), ("nmi_best_inertia", "NMI (picked restart)")]
              if labelled else [("silhouette", "silhouette (picked restart)"), ("MB", "MB (log scale)")])
    flat = [r for r in records if r["method"] not in sweep and "gamma" not in r["params"]]
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False, constrained_layout=True)
    for ax, (key, name) in zip(axes[0], panels):
        for m, pts in sweep.items():
            xs = [g for g, r in pts if r.get(key) is not None and r[key] == r[key]]
            ys = [r[key] for g, r in pts if r.get(key) is not None and r[key] == r[key]]
            if xs:
                ax.plot(xs, ys, marker="o", ms=3, label=method_label(m))
        for r in flat:  # methods without γ (K-means on the data) as a level line
            if r.get(key) is not None and r[key] == r[key]:
                ax.axhline(r[key], ls="--", lw=1, color="gray", label=f"{r['method']} (no γ)")
        ax.set_xscale("log")
        gammas = sorted({g for pts in sweep.values() for g, _ in pts})
        if len(gammas) <= 12:  # tick the swept values themselves
            ax.set_xticks(gammas, [f"{g:g}" for g in gammas], fontsize=7)
            ax.minorticks_off()
        if key == "MB":
            ax.set_yscale("log")
        ax.set_xlabel("γ (Gaussian kernel exp(-d²/γ))", fontsize=8)
        ax.set_ylabel(name, fontsize=8)
        ax.legend(fontsize=7, title="method", title_fontsize=7)
    dataset = records[0].get("dataset", "")
    fig.suptitle(f"{dataset}: score of the restart each method picks, against γ", fontsize=10)
    _save(fig, out_dir, out_dir / "figures" / "gamma-sweep.png")
    return True


# -- all of them ------------------------------------------------------------------------------------------


def shown_instance(records, idx) -> int:
    """Of the records ``idx`` of one method, the one whose picked restart scores best (accuracy, else
    silhouette; the first one when neither is known)."""
    def score(i):
        r = records[i]
        v = r.get("acc_best_inertia", r.get("silhouette"))
        return -math.inf if v is None or v != v else v
    return max(idx, key=score)


def write_all(out_dir, records, picks, store, *, seed=0):
    """quality.png (when recorded), and with ``picks`` the confusion, embedding and γ-sweep figures."""
    out_dir = Path(out_dir)
    if any(r.get("history") for r in records):
        plot_quality(out_dir / "quality.png", records, out_dir)
    if not picks:
        return
    (out_dir / "figures").mkdir(exist_ok=True)
    by_method = {}
    for i, pk in enumerate(picks):
        by_method.setdefault(pk.method, []).append(i)
    for method, idx in by_method.items():
        i = shown_instance(records, idx)
        pk, rec = picks[i], records[i]
        title = f"{rec.get('dataset', '')}: {method} {_tag(pk.params)}".rstrip()
        if pk.y is not None:
            write_confusion(out_dir, pk.name, pk.y, pk.labels, pk.class_names, title)
        emb = pk.chain.get("embed")
        g = store.open("embed", emb) if emb is not None and store is not None else None
        if g is not None and "E" in set(g.array_keys()):  # absent if a store policy dropped it
            write_embedding(out_dir, pk.name, g["E"], pk.labels, pk.y, title, seed)
    plot_gamma_sweep(out_dir, records)
