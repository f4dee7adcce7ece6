"""Issue 26, items 18 and 19: the output reads right, and text clusters say what they are about.

18. Reading the output
    18a. `store du` / `store clean --dry-run` say what each stage instance is (kind, gamma, method, k, the
         input's kernel when only that differs), from the instances' recorded parameters.
    18b. `store du` shows an "(unfinished)" line only when there are unfinished writes (tmp/, work/).
    18c. `[kmeans] n_init = 0` is shown as the restarts run ([cluster] n_init), not as 0.
    18d. `gamma = "median"` is shown with the value it stood for (gamma=median(0.694)).
    18e. A method that keeps only its picked restart's labels (NMF) shows "-" for avg / max, says why, and a
         table of such methods only has no avg / max columns.
    18f. The subset protocol's trials.csv names the classes (class_names beside the numbers).
    18g. Paths print normalised (`pipelines/../runs/x` as `runs/x`; absolute when shorter).
19. Top terms of text clusters
    19a. terms.top_terms equals a plain NumPy reference (centroid of tf-idf rows, argsort; a factor's columns).
    19b. A pipeline run on documents writes clusters.csv and a "Top terms" section in results.md, equal to the
         reference from the stored tf-idf rows (NMF: its factor U); data that are not documents write neither.
    19c. NMFClustering / SpectralClustering: top_terms_ with feature_names (and a DataFrame's columns),
         None without; a wrong number of names is one line naming the estimator, before the fit.
    19d. 20 Newsgroups (BIGCLUST_DATA): the top terms of a cluster are the words of its newsgroup.
Probes (reading output, each a fix):
    P1. A sweep over two keys: the store listing tells the instances apart by both.
    P2. MBBS (a combined gamma sweep) with "median" among the widths: each median shown with its value.
    P3. A Dask array and a list input give the estimators' top_terms_ too.
    P4. Unlabelled documents: clusters.csv and results.md have no class columns.
    P5. Huge k: results.md lists at most MD_CLUSTERS clusters per method and points to clusters.csv.
"""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.pipeline import usage
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store, read_matrix
from bigclust.report import tables, terms

from conftest import blobs, docs, write_config


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "bigclust.cli", *args], capture_output=True, text=True, cwd=cwd)


def _blob_file(tmp_path):
    X, y = blobs(n=90, k=3, d=4, seed=1, sep=3)
    p = tmp_path / "d.npz"
    np.savez(p, X=X, y=y)
    return p


def _config(tmp_path, data, body, name="run.toml"):
    """A config with every setting the checks read written out (defaults may move, the tests should not)."""
    p = tmp_path / name
    p.write_text(f'[data]\npath = "{data}"\n[preprocess]\nl2_normalize = true\n' + body
                 + '\n[store]\npath = "store.zarr"\n[output]\ndir = "out"\nplots = false\n')
    return p


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """One run: K-means (n_init = 0), RA and Ncut over gamma = ["median", 1.0], NMF with 3 restarts."""
    tmp = tmp_path_factory.mktemp("swept")
    cfg = _config(tmp, _blob_file(tmp).name, '[affinity]\nkind = "gaussian"\ngamma = ["median", 1.0]\n'
                  '[method]\nnames = ["kmeans", "ra", "ncut", "nmf"]\n[nmf]\nn_init = 3\nmax_iter = 50\n'
                  '[cluster]\nn_init = 4\nseed = 0\n')
    records = run(cfg)
    return tmp, records


# -- 18a, 18b: what the store holds -------------------------------------------------------------------------


def test_18a_store_listing_says_what_each_instance_is(swept):
    tmp, _ = swept
    u = usage.usage(tmp / "store.zarr")
    about = u["about"]
    aff = {v for k, v in about.items() if k.startswith("affinity/")}
    assert len(aff) == 2 and all(v.startswith("kind=gaussian gamma=") for v in aff)
    used = Store(tmp / "store.zarr")
    g_used = [dict(used.open("affinity", k).attrs)["gamma_used"] for k in used.stage_keys("affinity")
              if dict(used.open("affinity", k).attrs)["params"]["gamma"] == "median"]
    assert f"kind=gaussian gamma=median({g_used[0]:.4g})" in aff and "kind=gaussian gamma=1" in aff
    # embeddings of one method on two kernels: told apart by the kernel they read
    emb = sorted(v for k, v in about.items() if k.startswith("embed/"))
    assert len(set(emb)) == 4 and all(v.startswith(("method=ra k=3", "method=ncut k=3")) for v in emb)
    assert sum("gamma=median(" in v for v in emb) == 2
    # a k-means of an embedding: the embedding's method
    clus = [v for k, v in about.items() if k.startswith("cluster/")]
    assert sum(v.startswith("method=ra ") for v in clus) == 2 and len(set(clus)) == len(clus)
    assert any(v.startswith("method=nmf ") and "n_init=3" in v for k, v in about.items() if k.startswith("assign/"))
    out = _cli("store", "du", str(tmp / "store.zarr"))
    assert out.returncode == 0, out.stderr
    assert "kind=gaussian gamma=median(" in out.stdout
    dry = _cli("store", "clean", str(tmp / "store.zarr"), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = [ln.split() for ln in dry.stdout.splitlines()[1:]]
    assert lines and all(len(ln) >= 2 for ln in lines if not ln[0].startswith("preprocess/"))
    assert any(ln[0].startswith("affinity/") and ln[1] == "kind=gaussian" for ln in lines)


def test_18b_unfinished_line_only_with_unfinished_writes(swept):
    tmp, _ = swept
    store = tmp / "store.zarr"
    text = usage.format_usage(usage.usage(store))
    assert "(other)" not in text and "unfinished" not in text
    work = store / "work" / "affinity-0123456789abcdef"
    (work / "done").mkdir(parents=True)
    (work / "done" / "chunk-0").write_text("0 10")
    try:
        text = usage.format_usage(usage.usage(store))
        line = [ln for ln in text.splitlines() if "(unfinished)" in ln]
        assert len(line) == 1 and "work/affinity-0123456789abcdef" in line[0] and "resumes" in line[0]
    finally:
        import shutil
        shutil.rmtree(store / "work")


# -- 18c..18e: the results table ---------------------------------------------------------------------------


def test_18c_kmeans_shows_the_restarts_run(swept):
    tmp, records = swept
    km = [r for r in records if r["method"] == "kmeans"]
    assert km[0]["params"]["n_init"] == 0 and km[0]["n_restarts"] == 4   # the record keeps the config's value
    md = (tmp / "out" / "results.md").read_text()
    assert "| kmeans | n_init=4 ncw=False |" in md and "n_init=0" not in md
    # the subset protocol's tables: [cluster] n_init of the config (when not swept)
    sub = {"method": "kmeans", "params": {"n_init": 0, "ncw": False}, "n_trials": 1, "acc_by_k": {2: 1.0},
           "acc_avg": 1.0}
    assert "| kmeans n_init=7 ncw=False |" in tables.subset_tables([sub], restarts=7)
    assert "| kmeans n_init=0 ncw=False |" in tables.subset_tables([sub])   # unknown: as the config says


def test_18d_median_gamma_shows_its_value(swept):
    tmp, records = swept
    med = [r for r in records if r["params"].get("gamma") == "median"]
    assert med and all(isinstance(r["gamma_used"], float) for r in med)
    md = (tmp / "out" / "results.md").read_text()
    assert f"gamma=median({med[0]['gamma_used']:.4g})" in md and "gamma=median |" not in md
    assert "the median rule's width" in md


def test_18e_one_restart_kept_shows_no_avg_or_max(swept):
    tmp, records = swept
    nmf = [r for r in records if r["method"] == "nmf"][0]
    assert nmf["restarts_kept"] == 1
    row = [ln for ln in (tmp / "out" / "results.md").read_text().splitlines() if ln.startswith("| nmf |")][0]
    head = [ln for ln in (tmp / "out" / "results.md").read_text().splitlines() if ln.startswith("| method")][0]
    cells = dict(zip([c.strip() for c in head.split("|")], [c.strip() for c in row.split("|")]))
    assert cells["acc_avg"] == cells["nmi_max (oracle)"] == "-" and cells["acc_picked"] != "-"
    assert "only the picked restart's labels are kept" in (tmp / "out" / "results.md").read_text()
    only = tables.markdown_table([nmf])   # a table of such methods only: one score column per score
    assert "acc_avg" not in only and "acc_picked" in only and "nmi_picked" in only
    assert "there is no avg or max" in tables.legend([nmf])


# -- 18f: trials.csv ---------------------------------------------------------------------------------------


def test_18f_trials_csv_names_the_classes(tmp_path):
    X, y = blobs(n=120, k=4, d=4, seed=2, sep=3)
    names = np.array(["cat", "dog", "eel", "fox"])[y]
    p = tmp_path / "d.csv"
    with open(p, "w") as f:
        f.write("a,b,c,d,label\n")
        f.writelines(",".join(f"{v:.5f}" for v in row) + f",{n}\n" for row, n in zip(X, names))
    cfg = _config(tmp_path, p.name, '[method]\nnames = ["kmeans"]\n[cluster]\nn_init = 2\nseed = 0\n'
                  '[evaluate]\nprotocol = "subsets"\nsubset_sizes = [2, 3]\nsubset_trials = 2\nsubset_seed = 0\n')
    run(cfg)
    with open(tmp_path / "out" / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    for r in rows:
        nums = [int(c) for c in r["classes"].split()]
        assert r["class_names"].split() == [["cat", "dog", "eel", "fox"][c] for c in nums]


# -- 18g: paths ---------------------------------------------------------------------------------------------


def test_18g_paths_print_normalised(tmp_path):
    (tmp_path / "pipelines").mkdir()
    data = _blob_file(tmp_path)
    cfg = tmp_path / "pipelines" / "c.toml"
    cfg.write_text(f'[data]\npath = "../{data.name}"\n[preprocess]\nl2_normalize = true\n[method]\n'
                   'names = ["kmeans"]\n[cluster]\nn_init = 2\n[store]\npath = "../runs/s.zarr"\n'
                   '[output]\ndir = "../runs/out"\nplots = false\n')
    out = _cli("pipeline", "run", "pipelines/c.toml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert "pipelines/../" not in text
    assert "store runs/s.zarr" in text and "results in runs/out" in text
    du = _cli("store", "du", "pipelines/../runs/s.zarr", cwd=tmp_path)
    assert du.stdout.startswith("runs/s.zarr: ")
    assert usage.shown_path(tmp_path / "pipelines" / ".." / "runs") in (os.path.relpath(tmp_path / "runs"),
                                                                         str(tmp_path / "runs"))


# -- 19a: the reference -------------------------------------------------------------------------------------


def _tfidf(counts):
    """A plain tf-idf (the reference side: NumPy only): tf * log(n / df), rows scaled to unit length."""
    counts = np.asarray(counts, dtype=np.float64)
    idf = np.log(counts.shape[0] / np.maximum((counts > 0).sum(0), 1))
    X = counts * idf
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-300)


def _ref_terms(X, labels, k, vocab, n_top=3):
    out = []
    for c in range(k):
        cen = X[labels == c].mean(0) if (labels == c).any() else np.zeros(X.shape[1])
        order = np.argsort(-cen, kind="stable")[:n_top]
        out.append([vocab[j] for j in order if cen[j] > 0])
    return out


VOCAB = ["ball", "goal", "team", "vote", "party", "law", "cell", "gene", "the"]
CORPUS = [[3, 2, 1, 0, 0, 0, 0, 0, 1], [2, 3, 2, 0, 0, 0, 0, 0, 2], [1, 1, 3, 0, 0, 1, 0, 0, 1],
          [0, 0, 0, 3, 2, 1, 0, 0, 1], [0, 0, 1, 2, 3, 2, 0, 0, 2], [0, 0, 0, 1, 2, 3, 0, 0, 1],
          [0, 0, 0, 0, 0, 1, 3, 2, 1], [0, 1, 0, 0, 0, 0, 2, 3, 2], [0, 0, 0, 0, 0, 0, 3, 3, 1]]


def test_19a_top_terms_equal_the_numpy_reference():
    X = _tfidf(CORPUS)
    labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, -1])   # the last document left out (-1)
    want = _ref_terms(X[:8], labels[:8], 3, VOCAB)
    assert terms.top_terms(X, labels, 3, feature_names=VOCAB, n_top=3) == want
    assert terms.top_terms(sp.csr_matrix(X), labels, 3, feature_names=VOCAB, n_top=3) == want
    assert want[0][:2] == ["ball", "goal"] or set(want[0]) <= {"ball", "goal", "team"}
    assert terms.top_terms(X, labels, 3, n_top=2)[0] == [f"#{VOCAB.index(t)}" for t in want[0][:2]]
    # an empty cluster lists nothing; a factor's columns give the terms
    assert terms.top_terms(X, labels, 4, feature_names=VOCAB)[3] == []
    U = np.array([[0.0, 2.0], [1.0, 0.0], [3.0, 0.0]])
    assert terms.top_terms(factor=U, feature_names=["a", "b", "c"]) == [["c", "b"], ["a"]]


# -- 19b: the pipeline on documents ------------------------------------------------------------------------


def _svm_docs(tmp_path, n=90, labelled=True):
    from sklearn.datasets import dump_svmlight_file
    X, y = docs(n=n, k=3, d=24, seed=4)
    p = tmp_path / ("docs.svm" if labelled else "docs_unl.svm")
    dump_svmlight_file(sp.csr_matrix(np.round(X * 3)), y if labelled else np.zeros(n), str(p))
    return p


def test_19b_pipeline_writes_top_terms_of_documents(tmp_path):
    svm = _svm_docs(tmp_path)
    cfg = tmp_path / "x.toml"
    cfg.write_text(f'[data]\npath = "{svm.name}"\n[preprocess]\ntfidf = true\ntfidf_normalize = true\n'
                   '[affinity]\nkind = "linear"\n[method]\nnames = ["kmeans", "ncut", "nmf"]\n'
                   '[nmf]\nn_init = 2\nmax_iter = 80\n[cluster]\nn_init = 3\nseed = 0\n'
                   '[store]\npath = "store.zarr"\n[output]\ndir = "out"\nplots = false\n')
    run(cfg)
    out = tmp_path / "out"
    with open(out / "clusters.csv") as f:
        rows = list(csv.DictReader(f))
    index = json.loads((out / "labels" / "labels.json").read_text())
    st = Store(tmp_path / "store.zarr")
    (pre,) = st.stage_keys("preprocess")
    X = read_matrix(st.open("preprocess", pre), "X").toarray()
    for e in index:
        lab = np.load(out / "labels" / f"{e['name']}.npy")
        mine = [r for r in rows if r["name"] == e["name"]]
        assert [int(r["size"]) for r in mine] == np.bincount(lab, minlength=3).tolist()
        if e["method"] == "nmf":
            (key,) = st.stage_keys("assign")
            U = np.asarray(st.open("assign", key)["U"][...])
            want = [[f"#{j}" for j in np.argsort(-U[:, c], kind="stable")[:10] if U[j, c] > 0] for c in range(3)]
        else:
            want = _ref_terms(X, lab, 3, [f"#{j}" for j in range(X.shape[1])], n_top=10)
        assert [r["top_terms"].split() for r in mine] == want, e["name"]
        # each cluster's terms lie in the block of terms of its largest class (docs() gives class c the
        # columns 8c..8c+7)
        for r in mine:
            assert int(r["top_terms"].split()[0][1:]) // 8 == int(r["class"])
    md = (out / "results.md").read_text()
    assert "## Top terms per cluster" in md and "### nmf (labels/nmf.csv)" in md
    # not documents: neither the file nor the section
    blob = _blob_file(tmp_path)
    cfg2 = _config(tmp_path, blob.name, '[method]\nnames = ["kmeans"]\n[cluster]\nn_init = 2\n', name="b.toml")
    run(cfg2, out=str(tmp_path / "out_b"), store=str(tmp_path / "b.zarr"))
    assert not (tmp_path / "out_b" / "clusters.csv").exists()
    assert "Top terms" not in (tmp_path / "out_b" / "results.md").read_text()


# -- 19c: the estimators -----------------------------------------------------------------------------------


def _corpus():
    X = _tfidf(np.repeat(CORPUS, 4, axis=0) + np.random.default_rng(0).integers(0, 2, (36, 9)))
    return sp.csr_matrix(X)


def test_19c_estimators_top_terms(recwarn):
    from bigclust import NMFClustering, SpectralClustering
    from bigclust._util.errors import UserError
    X = _corpus()
    sc = SpectralClustering(3, affinity="cosine", normalization="ncut", random_state=0, feature_names=VOCAB).fit(X)
    assert sc.top_terms_ == terms.top_terms(X.toarray(), sc.labels_, 3, feature_names=VOCAB)
    assert sc.top_terms_ == _ref_terms(X.toarray(), sc.labels_, 3, VOCAB, n_top=10)
    nm = NMFClustering(3, random_state=0, n_init=2, feature_names=np.array(VOCAB, dtype=object)).fit(X)
    U = nm.components_.T
    assert nm.top_terms_ == [[VOCAB[j] for j in np.argsort(-U[:, c], kind="stable")[:10] if U[j, c] > 0]
                             for c in range(3)]
    assert {nm.top_terms_[c][0] for c in range(3)} != {"the"}
    assert SpectralClustering(3, affinity="cosine", random_state=0).fit(X).top_terms_ is None
    assert NMFClustering(3, random_state=0, n_init=1).fit(X).top_terms_ is None
    with pytest.raises(UserError, match=r"^SpectralClustering: feature_names has 2 names, but X has 9"):
        SpectralClustering(3, feature_names=["a", "b"]).fit(X)
    with pytest.raises(UserError, match=r"^NMFClustering: feature_names must be None or a sequence of str"):
        NMFClustering(3, feature_names="ball goal").fit(X)


def test_19c_dataframe_columns_are_feature_names():
    pd = pytest.importorskip("pandas")
    from bigclust import SpectralClustering
    X = _corpus().toarray()
    sd = SpectralClustering(3, affinity="cosine", normalization="ncut", random_state=0)
    sd.fit(pd.DataFrame(X, columns=VOCAB))
    assert sd.top_terms_ == terms.top_terms(X, sd.labels_, 3, feature_names=VOCAB)


# -- 19d: 20 Newsgroups ------------------------------------------------------------------------------------


def test_19d_news20_terms_are_the_newsgroups_words(tmp_path, data_root):
    cfg = tmp_path / "news.toml"
    cfg.write_text(f'[data]\nname = "news20"\nroot = "{data_root}"\n[preprocess]\ntfidf_local = "tf"\n'
                   'tfidf_global = "idf"\ntfidf_normalize = true\n[affinity]\nkind = "linear"\n'
                   '[method]\nnames = ["kmeans"]\n[cluster]\nn_init = 1\nmax_iter = 50\nseed = 0\n'
                   '[store]\npath = "s.zarr"\n[output]\ndir = "out"\nplots = false\n')
    run(cfg)
    with open(tmp_path / "out" / "clusters.csv") as f:
        rows = list(csv.DictReader(f))
    by_class = {r["class"]: r["top_terms"].split() for r in rows if float(r["share"]) > 0.8}
    stems = {"sci.space": {"space", "orbit", "shuttl", "launch", "nasa"}, "rec.motorcycles": {"bike", "ride", "dod"},
             "sci.med": {"doctor", "drug", "medic", "patient"}, "rec.sport.baseball": {"pitcher", "hit", "basebal"},
             "talk.politics.mideast": {"israel", "armenian", "arab", "jew", "isra"}}
    hits = [c for c in stems if c in by_class and stems[c] & set(by_class[c])]
    assert len(hits) >= 2, by_class


# -- probes -----------------------------------------------------------------------------------------------


def test_P1_sweep_over_two_keys_is_told_apart_in_the_store(tmp_path):
    data = _blob_file(tmp_path)
    cfg = _config(tmp_path, data.name, '[affinity]\nkind = "gaussian"\ngamma = [0.5, 1.0]\n[method]\n'
                  'names = ["ncut"]\n[ncut]\nn_iter = [1, 3]\n[cluster]\nn_init = 2\nseed = 0\n')
    run(cfg)
    about = usage.usage(tmp_path / "store.zarr")["about"]
    emb = sorted(v for k, v in about.items() if k.startswith("embed/"))
    assert len(set(emb)) == 4 and {("n_iter=1" in v, "gamma=0.5" in v) for v in emb} == {
        (True, True), (True, False), (False, True), (False, False)}


def test_P2_combined_widths_show_each_median_value():
    rec = {"method": "mbbs", "params": {"gammas": ["median", 1.0, "median"]}, "gamma_used": [0.5, 0.25]}
    assert tables.fmt_params(rec) == "gammas=median(0.5),1.0,median(0.25)"
    assert tables.fmt_params({"params": {"gamma": "median"}}) == "gamma=median"   # no value recorded: as is


def test_P3_dask_and_list_inputs_give_top_terms():
    da = pytest.importorskip("dask.array")
    from bigclust import SpectralClustering
    X = _corpus().toarray()
    ref = SpectralClustering(3, affinity="cosine", normalization="ncut", random_state=0, feature_names=VOCAB).fit(X)
    dk = SpectralClustering(3, affinity="cosine", normalization="ncut", random_state=0, feature_names=VOCAB)
    dk.fit(da.from_array(X, chunks=(10, 9)))
    assert dk.top_terms_ == terms.top_terms(X, dk.labels_, 3, feature_names=VOCAB)
    ls = SpectralClustering(3, affinity="cosine", normalization="ncut", random_state=0, feature_names=VOCAB)
    assert ls.fit(X.tolist()).top_terms_ == ref.top_terms_


def test_P4_unlabelled_documents():
    # (an svmlight file always carries labels, so unlabelled documents reach the report as clusters without a
    # class: the rows cluster_rows makes when the pick has no y)
    rows = [{"name": "kmeans", "method": "kmeans", "cluster": c, "size": 3, "top_terms": "a b"} for c in range(2)]
    assert terms.clusters_csv(rows).splitlines()[0] == "name,method,cluster,size,top_terms"
    md = terms.markdown(rows)
    assert "| cluster | size | top terms |" in md and "| 0 | 3 | a b |" in md and "class" not in md


def test_P5_huge_k_is_capped_in_results_md():
    rows = [{"name": "kmeans", "method": "kmeans", "cluster": c, "size": 1, "top_terms": "a"} for c in range(200)]
    md = terms.markdown(rows)
    assert md.count("\n| ") == terms.MD_CLUSTERS + 1 and "170 more clusters in clusters.csv" in md
    assert terms.clusters_csv(rows).count("\n") == 201
