"""Labels out (issue 12, part B): per-run label files of the picked restart, `bigclust labels`,
results.md's picked / avg / oracle columns, label-free quality, and the figures."""
import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store

from conftest import blobs


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "bigclust.cli", *args], capture_output=True, text=True)


def _read_csv(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    return rows[0], np.array(rows[1:], dtype=object)


def _is_png(path):
    import matplotlib.image as mpimg
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    return img


def _l2(X):
    X = np.asarray(X, dtype=np.float64)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _hard(tmp_path, labelled=True, seed=3):
    """Overlapping blobs: k-means restarts disagree and no method is perfect (the checks have teeth)."""
    X, y = blobs(n=150, k=4, d=3, seed=seed, sep=1.2)
    p = tmp_path / ("hard.npz" if labelled else "hard_nolabels.npz")
    np.savez(p, **({"X": X, "y": y} if labelled else {"X": X}))
    return p, X, y


def _restarts(store_path, stage="cluster"):
    """Every stored instance of ``stage``: key -> (labels (r, n), inertia (r,), best)."""
    st = Store(store_path)
    out = {}
    for key in st.stage_keys(stage):
        g = st.open(stage, key)
        out[key] = (g["labels"][...], g["inertia"][...], int(g.attrs["best"]))
    return out


# -- 1. labels out ---------------------------------------------------------------------------------------


def test_every_record_writes_the_restart_it_picks(tmp_path, make_config):
    p, X, y = _hard(tmp_path)
    cfg = make_config(p, "[bbs]\nn_iter = 30\n")
    cfg.write_text(cfg.read_text().replace("gamma = 1.0", "gamma = [0.5, 2.0]")
                   .replace('"ncut"]', '"bbs"]').replace("n_init = 5", "n_init = 6\nn_clusters = 4"))
    recs = run(cfg)
    out = tmp_path / "out"
    names = [r["labels_file"] for r in recs]
    assert names == ["labels/kmeans.csv", "labels/ra-gamma=0.5.csv", "labels/bbs-gamma=0.5.csv",
                     "labels/ra-gamma=2.csv", "labels/bbs-gamma=2.csv"]
    finals = _restarts(tmp_path / "store.zarr")
    assert len(finals) == 5
    by_labels = {}
    for key, (L, inertia, best) in finals.items():
        assert best == int(np.argmin(inertia))          # the method's own choice: lowest inertia
        by_labels[tuple(L[best])] = (L, inertia, best)
    distinct_restarts = 0
    Xp = _l2(X)
    for r in recs:
        header, rows = _read_csv(out / r["labels_file"])
        assert header == ["index", "label", "class"]
        assert rows[:, 0].astype(int).tolist() == list(range(150))
        lab = rows[:, 1].astype(int)
        assert (rows[:, 2].astype(int) == y).all()
        npy = np.load(out / r["labels_file"].replace(".csv", ".npy"))
        assert npy.dtype == np.int32 and (npy == lab).all()
        L, inertia, best = by_labels[tuple(lab)]          # the picked restart of one stored instance
        assert r["restart_picked"] == best and r["objective"] == pytest.approx(float(inertia[best]), rel=1e-12)
        distinct_restarts += len({tuple(row) for row in L}) > 1
        # the score of the picked restart, against a plain Hungarian reference
        T = np.zeros((4, 4), int)
        np.add.at(T, (y, lab), 1)
        ri, ci = linear_sum_assignment(-T)
        assert r["acc_best_inertia"] == pytest.approx(T[ri, ci].sum() / 150)
        if r["method"] == "kmeans":  # k-means on the (L2-normalised) data: the objective is its inertia
            C = np.array([Xp[lab == c].mean(axis=0) for c in range(4)])
            assert r["objective"] == pytest.approx(((Xp - C[lab]) ** 2).sum(), rel=1e-4)
    assert distinct_restarts >= 1  # restarts disagree somewhere: picking the right one matters
    index = json.loads((out / "labels" / "labels.json").read_text())
    assert [e["name"] for e in index] == [n[len("labels/"):-4] for n in names]
    assert all(e["n"] == 150 and e["n_clusters"] == 4 and e["n_restarts"] == 6 for e in index)


def test_nmf_picks_its_lowest_objective(tmp_path, make_config):
    p, X, y = _hard(tmp_path)
    cfg = make_config(p, "[nmf]\nmax_iter = 60\nn_init = 4\n")
    cfg.write_text(cfg.read_text().replace('["kmeans", "ra", "ncut"]', '["nmf"]').replace(
        "n_init = 5", "n_init = 5\nn_clusters = 4"))
    (rec,) = run(cfg)
    g = Store(tmp_path / "store.zarr")
    (key,) = g.stage_keys("assign")
    objs = g.open("assign", key).attrs["objectives"]
    assert len(objs) == 4 and rec["restart_picked"] == int(np.argmin(objs))
    assert rec["objective"] == pytest.approx(min(objs), rel=1e-12)
    lab = np.load(tmp_path / "out" / "labels" / "nmf.npy")
    assert (lab == g.open("assign", key)["labels"][0]).all()


def test_label_files_are_never_half_written(tmp_path, make_config, monkeypatch):
    import bigclust.report.labels as lb

    p, _, _ = _hard(tmp_path)
    cfg = make_config(p)
    real, calls = lb.labels_csv, []

    def dies_on_second(pk):
        calls.append(pk.name)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return real(pk)
    monkeypatch.setattr(lb, "labels_csv", dies_on_second)
    with pytest.raises(KeyboardInterrupt, match="^killed$"):   # the injected kill, no other
        run(cfg)
    folder = tmp_path / "out" / "labels"
    assert sorted(f.name for f in folder.iterdir()) == ["kmeans.csv", "kmeans.npy"]  # whole files or none
    assert not list((tmp_path / "out").glob(".*.tmp-*"))  # nothing half-written under a temporary name
    assert not json.loads((tmp_path / "out" / "run.json").read_text())["complete"]
    monkeypatch.setattr(lb, "labels_csv", real)
    run(cfg)  # the same command finishes the folder
    assert {f.name for f in folder.iterdir()} >= {"ra-gamma=1.csv", "ncut-gamma=1.npy", "labels.json"}


def test_labels_command_lists_and_exports(tmp_path, make_config):
    p, _, y = _hard(tmp_path)
    cfg = make_config(p)
    run(cfg)
    out = tmp_path / "out"
    r = _cli("labels", str(out))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:6] == ["name", "method", "n", "clusters", "restart", "objective"]
    assert [ln.split()[0] for ln in lines[1:]] == ["kmeans", "ra-gamma=1", "ncut-gamma=1"]
    index = {e["name"]: e for e in json.loads((out / "labels" / "labels.json").read_text())}
    assert lines[2].split()[4] == f"{index['ra-gamma=1']['restart']}/5"
    r = _cli("labels", str(out), "--export", "ncut")  # a method run once is its own name
    assert r.returncode == 0 and r.stdout == (out / "labels" / "ncut-gamma=1.csv").read_text()
    dest = tmp_path / "ra.npy"
    r = _cli("labels", str(out), "--export", "ra-gamma=1", "--format", "npy", "--out", str(dest))
    assert r.returncode == 0, r.stderr
    assert (np.load(dest) == np.load(out / "labels" / "ra-gamma=1.npy")).all()
    for args, needle in [(("--export", "bbs"), "no label file called 'bbs'"),
                         (("--export", "ra", "--format", "npy"), "give --out"),
                         (("--out", str(dest)), "--out needs --export")]:
        r = _cli("labels", str(out), *args)
        errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.returncode == 2 and len(errs) == 1 and needle in errs[0], r.stderr
    r = _cli("labels", str(tmp_path))
    assert r.returncode == 2 and "no labels/labels.json" in r.stderr


# -- 2. results.md: picked beside avg and max ------------------------------------------------------------


def test_results_md_shows_picked_avg_and_oracle(tmp_path, make_config):
    p, _, _ = _hard(tmp_path)
    recs = run(make_config(p))
    md = (tmp_path / "out" / "results.md").read_text()
    header = [c.strip() for c in md.splitlines()[2].strip("|").split("|")]
    assert header[:8] == ["method", "params", "acc_picked", "acc_avg", "acc_max (oracle)", "nmi_picked",
                          "nmi_avg", "nmi_max (oracle)"]
    assert "max: best over restarts (oracle" in md
    for line, r in zip(md.splitlines()[4:], recs):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[2]) == pytest.approx(r["acc_best_inertia"], abs=5e-5)
        assert float(cells[4]) == pytest.approx(r["acc_max"], abs=5e-5)
    # the existing keys stay (committed reproductions are compared by them); new ones are added
    js = json.loads((tmp_path / "out" / "results.json").read_text())
    old = {"method", "params", "dataset", "n", "k", "acc_avg", "acc_max", "nmi_avg", "nmi_max",
           "acc_best_inertia", "nmi_best_inertia", "seconds"}
    assert all(old | {"restart_picked", "objective", "labels_file"} <= set(r) for r in js)
    assert (tmp_path / "out" / "results.csv").read_text().startswith("method,params,dataset,n,k")


# -- 3. label-free quality ---------------------------------------------------------------------------


def _silhouette(X, lab):
    D = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    s = np.empty(len(X))
    for i in range(len(X)):
        same = lab == lab[i]
        a = D[i, same].sum() / max(same.sum() - 1, 1)
        b = min(D[i, lab == c].mean() for c in np.unique(lab) if c != lab[i])
        s[i] = 0.0 if same.sum() == 1 else (b - a) / max(a, b)
    return s.mean()


def test_label_free_quality(tmp_path, make_config):
    p, X, _ = _hard(tmp_path, labelled=False)
    cfg = make_config(p, "[bbs]\nn_iter = 200\n")
    cfg.write_text(cfg.read_text().replace('"ncut"]', '"bbs"]').replace("n_init = 5", "n_init = 5\nn_clusters = 4")
                   .replace("plots = false", "plots = true"))
    recs = run(cfg)
    out = tmp_path / "out"
    Xp = _l2(X)
    K = np.exp(-((Xp[:, None, :] - Xp[None, :, :]) ** 2).sum(-1) / 1.0)
    for r in recs:
        assert "acc_avg" not in r and "MC" not in r
        header, rows = _read_csv(out / r["labels_file"])
        assert header == ["index", "label"]
        lab = rows[:, 1].astype(int)
        assert r["silhouette"] == pytest.approx(_silhouette(Xp, lab), rel=1e-6)
        assert np.isfinite(r["objective"])
    ra, bbs = recs[1], recs[2]
    assert ra["MB"] == pytest.approx(np.abs(K.sum(1) - 1).mean(), rel=1e-6)  # RA's P is K itself
    assert bbs["MB"] < 1e-3 < ra["MB"]
    md = (out / "results.md").read_text()
    header = [c.strip() for c in md.splitlines()[2].strip("|").split("|")]
    assert header == ["method", "params", "MB", "objective", "silhouette", "seconds"]
    assert "acc" not in md and "nmi" not in md
    # without labels: no confusion matrix, an embedding coloured by cluster only, no γ plot (one γ)
    figs = sorted(f.name for f in (out / "figures").iterdir())
    assert figs == ["embedding-bbs-gamma=1.png", "embedding-ra-gamma=1.png"]
    img = _is_png(out / "figures" / "embedding-ra-gamma=1.png")
    assert img.shape[1] < 1.5 * img.shape[0]  # one panel


# -- 4. figures ---------------------------------------------------------------------------------------


def test_figures_of_a_gamma_sweep(tmp_path, make_config):
    p, X, y = _hard(tmp_path)
    cfg = make_config(p, "[bbs]\nn_iter = 30\nrecord_every = 5\n")
    cfg.write_text(cfg.read_text().replace("gamma = 1.0", "gamma = [0.25, 1.0, 4.0]")
                   .replace('"ncut"]', '"bbs"]').replace("n_init = 5", "n_init = 5\nn_clusters = 4")
                   .replace("plots = false", "plots = true"))
    recs = run(cfg)
    out, fig = tmp_path / "out", tmp_path / "out" / "figures"
    for name in ("quality.png", "figures/gamma-sweep.png"):
        _is_png(out / name)
    for method in ("kmeans", "ra", "bbs"):
        mine = [r for r in recs if r["method"] == method]
        shown = max(mine, key=lambda r: r["acc_best_inertia"])  # first of the best, as max() keeps
        stem = shown["labels_file"][len("labels/"):-4]
        assert sorted(f.name for f in fig.glob(f"confusion-{method}*")) == [f"confusion-{stem}.csv",
                                                                            f"confusion-{stem}.png"]
        _is_png(fig / f"confusion-{stem}.png")
        lab = np.load(out / "labels" / f"{stem}.npy")
        # reference: contingency by np.add.at, clusters matched to classes by the Hungarian algorithm
        T = np.zeros((4, 4), int)
        np.add.at(T, (y, lab), 1)
        ri, ci = linear_sum_assignment(-T)
        header, rows = _read_csv(fig / f"confusion-{stem}.csv")
        cols = [int(h.split()[-1]) for h in header[1:]]
        table = rows[:, 1:].astype(int)
        assert rows[:, 0].astype(int).tolist() == [0, 1, 2, 3]
        assert sorted(cols) == [0, 1, 2, 3]
        assert (table == T[:, cols]).all()
        assert cols == [ci[list(ri).index(i)] for i in range(4)]  # column i: the cluster matched to class i
        assert np.trace(table) == T[ri, ci].sum() == round(shown["acc_best_inertia"] * 150)
        assert np.trace(table) < 150  # not a trivial diagonal
        if method != "kmeans":
            _is_png(fig / f"embedding-{stem}.png")
    assert not list(fig.glob("embedding-kmeans*"))  # no spectral embedding behind k-means on the data


def test_single_gamma_has_no_sweep_plot_and_quality_has_title(tmp_path, make_config, monkeypatch):
    import matplotlib.figure

    seen = []
    real = matplotlib.figure.Figure.savefig

    def spy(self, *a, **k):
        seen.append(self)
        return real(self, *a, **k)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    p, _, _ = _hard(tmp_path)
    cfg = make_config(p, "[sk]\nn_iter = 30\nrecord_every = 5\n")
    cfg.write_text(cfg.read_text().replace('"ncut"]', '"sk"]').replace("plots = false", "plots = true"))
    run(cfg)
    out = tmp_path / "out"
    assert not (out / "figures" / "gamma-sweep.png").exists()
    assert (out / "figures" / "embedding-sk-gamma=1.png").exists()
    quality = [f for f in seen if "MB" in (f._suptitle.get_text() if f._suptitle else "")]
    assert len(quality) == 1
    title = quality[0]._suptitle.get_text()
    assert "hard.npz" in title  # the data set
    axes = quality[0].axes
    assert [a.get_title() for a in axes] == ["MB, γ=1.0", "MC, γ=1.0"]
    assert all(a.get_xlabel() == "iteration" and a.get_ylabel() and a.get_legend() for a in axes)
    emb = [f for f in seen if "spectral embedding" in (f._suptitle.get_text() if f._suptitle else "")]
    assert len(emb) == 2  # RA and SK
    assert all([a.get_title() for a in f.axes] == ["coloured by cluster", "coloured by class"] for f in emb)


def test_label_file_names_are_short_and_unique():
    from bigclust.report.labels import names
    methods = ["kmeans", "kmeans", "bbs", "bbs", "mbbs"]
    params = [{"n_init": 0}, {"n_init": 0}, {"gamma": 0.5, "n_iter": 100}, {"gamma": 0.5, "n_iter": 100},
              {"gammas": [0.5, 2.0], "lam": 1.0}]
    # a sweep the records do not show ([cluster] seed) still tells the files apart
    flats = [{"seed": 0, "l2_normalize": True}, {"seed": 1, "l2_normalize": True},
             {"gamma": 0.5, "seed": 0, "n_iter": 100}, {"gamma": 0.5, "seed": 1, "n_iter": 100},
             {"seed": 0, "lam": 1.0}]
    assert names(methods, params, flats) == ["kmeans-seed=0", "kmeans-seed=1", "bbs-gamma=0.5-seed=0",
                                             "bbs-gamma=0.5-seed=1", "mbbs-gammas=0.5,2"]
    # an unseen difference (nothing differs in what is recorded) still gives two files
    assert names(["ra", "ra"], [{"gamma": 1.0}] * 2, [{}, {}]) == ["ra-gamma=1-1", "ra-gamma=1-2"]
