"""Defaults a first user cannot trip on, and one default everywhere (issue 26, points 14-17 and 20).

1. (#14) Three Gaussian blobs on one ray (centres 0, 3·1, 6·1 in 4-D, σ = 0.3) come out at Ncut accuracy 1
   with the defaults (no row normalisation for dense features, γ = the median squared distance); paper
   000's unit rows merge two of them (the reason the protocol is no default).
2. (#14) The README's .npz example (standardize = true, every other key at its default) runs without the
   "kernel is numerically the identity" warning and clusters well above chance.
3. (#14) ``l2_normalize = "auto"`` gives unit rows to sparse (count) data and leaves dense features as they are.
4. (#14) The committed configs state the old defaults they rely on (their hashes: test_store_compat), and a
   method a config does not run is hashed with the defaults it had before (``Key.was``).
5. (#15) The Quickstart's config runs the exact BBS solver, converged SK, γ from the data, plain features.
6. (#16) A CSV whose default label column is a feature (non-integer numbers; more values than n/2) is
   refused by ``validate`` and ``run`` in one line naming ``label_column = false``; an explicit
   ``label_column`` runs with a warning.
7. (#16) A confusion matrix of more than 50 classes is a fixed-size summary, its CSV complete.
8. (#17) Running an edited config into the same output folder is refused with the settings that differ
   (key: old -> new) and the one command that proceeds; that command moves the old results aside.
9. (#20) Every parameter that is a library function argument, a config key and/or an estimator parameter
   has one default (the config key's declaration), checked by ``inspect.signature``.
10. (#20) ``normalize.bbs`` on a kNN kernel does what ``[bbs]`` does by default (self_loops "zero", dual).
Probe cases (first-user data of other shapes) that needed a fix:
11. An unlabelled CSV with integer features and no label declared: refused before any work when its last
    column has more than n/2 values, runs when it is declared unlabelled.
12. Tiny n (six rows) with k = 2 and every default: runs, no warning.
13. (#16) ``label_column = false`` on an svmlight / LibSVM file (a label field on every line: placeholders
    in unlabelled documents) is honoured: every row unlabelled (y = -1), n_clusters from the config, no
    scores against the placeholders; without it the labels are read as before.
"""
import dataclasses
import inspect
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import bigclust
from bigclust import UserError
from bigclust.pipeline import run, validate
from bigclust.pipeline.config import load, schema

ROOT = Path(__file__).parents[1]


def _cfg(folder: Path, body: str, name="run.toml") -> Path:
    p = folder / name
    p.write_text(body)
    return p


def _ray_blobs(n=300, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    return np.array([0.0, 3.0, 6.0])[y][:, None] + rng.normal(0, 0.3, (n, 4)), y


def _csv(path, X, y=None):
    cols = [X] if y is None else [X, np.asarray(y)[:, None]]
    np.savetxt(path, np.hstack(cols), delimiter=",", fmt="%.6g")
    return path


def _run(cfg, **kw):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        recs = run(cfg, **kw)
    return recs, [str(x.message) for x in w if "cache compiled" not in str(x.message)]


# 1 -------------------------------------------------------------------------------------------------------


def test_three_blobs_on_one_ray_with_the_defaults(tmp_path):
    X, y = _ray_blobs()
    _csv(tmp_path / "blobs.csv", X, y)
    recs, warned = _run(_cfg(tmp_path, '[data]\npath = "blobs.csv"\n[method]\nnames = ["ncut", "bbs"]\n'))
    assert {r["method"]: round(r["acc_best_inertia"], 2) for r in recs} == {"ncut": 1.0, "bbs": 1.0}
    assert not warned
    unit = _cfg(tmp_path, '[data]\npath = "blobs.csv"\n[preprocess]\nl2_normalize = true\n[method]\n'
                          'names = ["ncut"]\n[output]\ndir = "unit"\n', "unit.toml")
    assert _run(unit)[0][0]["acc_best_inertia"] < 0.7      # paper 000's unit rows merge the blobs on one ray


# 2 -------------------------------------------------------------------------------------------------------


def test_readme_npz_example_is_not_an_identity_kernel(tmp_path):
    from sklearn.datasets import load_breast_cancer
    X, y = load_breast_cancer(return_X_y=True)
    np.savez(tmp_path / "cancer.npz", X=X, y=y)
    recs, warned = _run(_cfg(tmp_path, '[data]\npath = "cancer.npz"\n[preprocess]\nstandardize = true\n'))
    assert not [m for m in warned if "identity" in m or "constant" in m], warned
    acc = {r["method"]: r["acc_best_inertia"] for r in recs}
    assert set(acc) == {"kmeans", "ra", "ncut", "sk", "bbs"}
    # chance is 0.63, which gamma = 1 gave RA..BBS.  At the median width Ncut, SK and BBS still isolate outlying
    # points (k = 2); they reach 0.91-0.92 from 4-8 x the median (measured), RA at 1 x
    assert min(acc["kmeans"], acc["ra"]) > 0.85, acc


# 3 -------------------------------------------------------------------------------------------------------


def _preprocessed(store_path):
    from bigclust.pipeline.store import Store
    st = Store(store_path)
    (key,) = list(st.root["stages/preprocess"].group_keys())
    node = st.open("preprocess", key)["X"]
    if node.attrs.get("format") == "csr":
        return sp.csr_matrix((node["data"][...], node["indices"][...], node["indptr"][...])).toarray()
    return node[...]


def test_l2_normalize_auto_depends_on_the_data_kind(tmp_path):
    from sklearn.datasets import dump_svmlight_file
    X, y = _ray_blobs(60)
    counts = np.rint(np.abs(X) * 3) * (np.random.default_rng(0).random(X.shape) < 0.3)   # stored as CSR
    counts[:, 0] += 1                                                                     # no empty row
    dump_svmlight_file(sp.csr_matrix(counts), y, str(tmp_path / "c.svm"))
    _csv(tmp_path / "d.csv", X + 10, y)
    for name, unit in (("c.svm", True), ("d.csv", False)):
        stem = name.split(".")[0]
        cfg = _cfg(tmp_path, f'[data]\npath = "{name}"\n[preprocess]\ntfidf = false\n[method]\nnames = ["ncut"]\n',
                   f"{stem}.toml")
        assert load(cfg).sections["preprocess"]["l2_normalize"] == "auto"
        _run(cfg)
        norms = np.linalg.norm(_preprocessed(tmp_path / f"{stem}.zarr"), axis=1)
        assert np.allclose(norms, 1, atol=1e-5) == unit, name


# 4 -------------------------------------------------------------------------------------------------------


def test_paper_configs_state_the_old_defaults_and_unused_methods_keep_their_hash(tmp_path):
    pinned = json.loads((ROOT / "tests/fixtures/config_hashes.json").read_text())["hashes"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert all(load(ROOT / rel).hash == h for rel, h in pinned.items())
    full = schema()
    assert full["bbs"]["solver"].default == "dual" and full["bbs"]["solver"].was == "alternating"
    base = '[data]\nname = "optdigits"\n[method]\nnames = ["ncut"]\n'

    def hash_of(body, where):
        (tmp_path / where).mkdir()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # [bbs] is not used
            return load(_cfg(tmp_path / where, body)).hash
    a = hash_of(base, "a")
    # not running bbs, its solver at the new default hashes as at the old one, and any other value differs
    assert hash_of(base + '[bbs]\nsolver = "alternating"\n', "b") == a
    assert hash_of(base + '[bbs]\nsolver = "dykstra"\n', "c") != a
    # running it, the default is the default
    assert hash_of(base.replace('"ncut"', '"bbs"'), "d") != hash_of(
        base.replace('"ncut"', '"bbs"') + '[bbs]\nsolver = "alternating"\n', "e")


# 5 -------------------------------------------------------------------------------------------------------


def test_quickstart_config_is_the_measured_one():
    cfg = load(ROOT / "pipelines/quickstart.toml")
    s = cfg.sections
    assert s["bbs"]["solver"] == "dual" and s["sk"]["tol"] > 0
    assert s["preprocess"]["l2_normalize"] == "auto" and "median" in s["affinity"]["gamma"]
    readme = (ROOT / "README.md").read_text()
    assert "every solver converged and no warning" in readme
    assert "numerically the identity" not in readme.split("## Commands")[0]


# 6 -------------------------------------------------------------------------------------------------------


def test_a_feature_taken_for_labels_is_refused_unless_declared(tmp_path):
    rng = np.random.default_rng(1)
    _csv(tmp_path / "u.csv", rng.normal(size=(200, 4)))       # unlabelled: the last column is a feature
    cfg = _cfg(tmp_path, '[data]\npath = "u.csv"\n[cluster]\nn_clusters = 3\n[method]\nnames = ["kmeans"]\n')
    for call in (validate, run):
        with pytest.raises(UserError, match=r"label_column = false and \[cluster\] n_clusters") as e:
            call(cfg)
        assert "\n" not in str(e.value) and "200 distinct values for 200 rows" in str(e.value)
    assert not (tmp_path / "run.zarr").exists()
    _cfg(tmp_path, '[data]\npath = "u.csv"\nlabel_column = false\n[cluster]\nn_clusters = 3\n[method]\n'
                   'names = ["kmeans"]\n')
    assert _run(cfg)[0][0]["method"] == "kmeans"
    named = _cfg(tmp_path, '[data]\npath = "u.csv"\nlabel_column = -1\n[cluster]\nn_clusters = 3\n[method]\n'
                           'names = ["kmeans"]\n[output]\ndir = "named"\n[store]\npath = "named.zarr"\n', "n.toml")
    with pytest.warns(RuntimeWarning, match="implausibly many"):
        run(named)


# 7 -------------------------------------------------------------------------------------------------------


def test_confusion_of_many_classes_is_a_summary(tmp_path):
    from PIL import Image

    from bigclust.report.figures import write_confusion
    (tmp_path / "figures").mkdir()
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(300), 4)
    labels = np.where(rng.random(y.size) < 0.8, y, rng.integers(0, 300, y.size))
    write_confusion(tmp_path, "big", y, labels, title="many")
    w, h = Image.open(tmp_path / "figures/confusion-big.png").size
    assert w < 2000 and h < 1000
    rows = (tmp_path / "figures/confusion-big.csv").read_text().splitlines()
    assert len(rows) == 301 and len(rows[0].split(",")) == 301


# 8 -------------------------------------------------------------------------------------------------------


def test_an_edited_config_is_refused_with_the_diff_and_the_command(tmp_path):
    X, y = _ray_blobs(60)
    _csv(tmp_path / "b.csv", X, y)
    body = '[data]\npath = "b.csv"\n[method]\nnames = ["kmeans"]\n'
    cfg = _cfg(tmp_path, body)
    _run(cfg)
    _cfg(tmp_path, body + "[cluster]\nn_init = 3\n")
    with pytest.raises(UserError) as e:
        run(cfg)
    msg = str(e.value)
    assert "[cluster] n_init: 10 -> 3" in msg and f"bigclust pipeline run {cfg} --replace" in msg
    assert "nothing is lost" in msg and "\n" not in msg
    _run(cfg, replace=True)
    assert list((tmp_path / "run-results").glob("replaced-*/results.json"))


# 9 -------------------------------------------------------------------------------------------------------

#: (function, {argument: (config section, key)}) for every library function whose argument is a config key
LIBRARY = [
    ("bigclust.normalize:bbs", {"solver": ("bbs", "solver"), "n_iter": ("bbs", "n_iter"), "tol": ("bbs", "tol"),
                                "record_every": ("bbs", "record_every"), "self_loops": ("bbs", "self_loops")}),
    ("bigclust.normalize:sinkhorn", {"n_iter": ("sk", "n_iter"), "tol": ("sk", "tol"),
                                     "record_every": ("sk", "record_every")}),
    ("bigclust.normalize:ncut", {"n_iter": ("ncut", "n_iter")}),
    ("bigclust.normalize:mbbs", {"lam": ("mbbs", "lam"), "n_outer": ("mbbs", "n_outer"), "n_iter": ("mbbs", "n_iter"),
                                 "tol": ("mbbs", "tol")}),
    ("bigclust.affinity:dense_kernel", {"kind": ("affinity", "kind"), "gamma": ("affinity", "gamma")}),
    ("bigclust.affinity:knn_kernel", {"n_neighbors": ("affinity", "n_neighbors"), "gamma": ("affinity", "gamma"),
                                      "method": ("affinity", "knn")}),
    ("bigclust.algo.affinity:knn_graph", {"n_neighbors": ("affinity", "n_neighbors"), "method": ("affinity", "knn")}),
    ("bigclust.kmeans:kmeans", {"n_init": ("cluster", "n_init"), "max_iter": ("cluster", "max_iter")}),
    ("bigclust.nmf:kernel_kmeans", {"n_init": ("cluster", "n_init"), "max_iter": ("cluster", "max_iter")}),
    ("bigclust.nmf:linear_nmf", {k: ("nmf", k) for k in ("solver", "init", "n_init", "max_iter", "tol", "ncw")}),
    ("bigclust.nmf:bilinear_nmf", {k: ("binmf", k) for k in ("init", "n_init", "max_iter", "tol", "ncw")}),
    ("bigclust.subspace:subspace_affinity", {"regularizer": ("aksc", "regularizer"),
                                             "n_neighbors": ("aksc", "n_neighbors"), "pca": ("aksc", "pca"),
                                             "features": ("aksc", "features")}),
    ("bigclust.algo.spectral:embed", {"solver": ("embed", "eigensolver")}),
    ("bigclust.algo.preprocess:tfidf", {"local": ("preprocess", "tfidf_local"),
                                        "global_": ("preprocess", "tfidf_global"),
                                        "normalize": ("preprocess", "tfidf_normalize")}),
]

#: where a library spelling means the config's value: tol None = the config's 0 ("run n_iter" / the solver's own)
SAME = {(None, 0.0)}

#: estimator parameters whose default differs on purpose, with the reason
DIFFERENT = {
    # the linear model (the default) takes only the linear kernel; [affinity] kind's default serves the spectral
    # methods.  NMFClustering(model="bilinear") says which kernel in its own words
    ("NMFClustering", "kernel"),
    # X as given, as scikit-learn's estimators take it: sparse X (a TfidfVectorizer's: unit already) may hold
    # all-zero rows, which "auto" (unit rows for sparse data) would refuse
    ("SpectralClustering", "l2_normalize"),
}


def _fn(spec):
    import importlib
    mod, name = spec.split(":")
    return getattr(importlib.import_module(mod), name)


def _same(a, b) -> bool:
    return a == b or (a, b) in SAME or (b, a) in SAME


def test_one_default_everywhere():
    from bigclust.estimators._params import NoneMeans
    full = schema()
    bad = []
    for spec, args in LIBRARY:
        sig = inspect.signature(_fn(spec))
        for arg, (sec, key) in args.items():
            if not _same(sig.parameters[arg].default, full[sec][key].default):
                bad.append(f"{spec}({arg}={sig.parameters[arg].default!r}) vs [{sec}] {key} = "
                           f"{full[sec][key].default!r}")
    for name in ("SpectralClustering", "NMFClustering", "SubspaceClustering"):
        est = getattr(bigclust, name)
        sig = inspect.signature(est.__init__)
        for p, key in est._parameters().items():
            value, kd = sig.parameters[p].default, (key.key if isinstance(key, NoneMeans) else key).default
            if isinstance(key, NoneMeans) and value is None:
                value = key.value
            if kd is not None and (name, p) not in DIFFERENT and not _same(value, kd):
                bad.append(f"{name}({p}={value!r}) vs its config key's {kd!r}")
    assert not bad, bad
    # and the declarations themselves are the one place: the dataclass field default is its Key's
    from bigclust.pipeline import methods
    for m in methods.names():
        for f in dataclasses.fields(methods.get(m).params):
            assert f.default == f.metadata["key"].default, (m, f.name)


# 10 ------------------------------------------------------------------------------------------------------


def test_library_bbs_on_a_knn_kernel_is_the_pipelines():
    from bigclust import affinity, normalize
    X, _ = _ray_blobs(90)
    K = affinity.knn_kernel(X, 8)
    np.testing.assert_allclose(normalize.bbs(K).toarray(),
                               normalize.bbs(K, "dual", self_loops="zero").toarray())
    assert normalize.bbs(K, self_loops="keep").diagonal().max() > normalize.bbs(K).diagonal().max()


# 11 ------------------------------------------------------------------------------------------------------


def test_integer_feature_taken_for_labels(tmp_path):
    rng = np.random.default_rng(2)
    _csv(tmp_path / "ints.csv", rng.integers(0, 1000, (100, 5)))    # last column: ~95 values for 100 rows
    body = '[data]\npath = "ints.csv"\n[cluster]\nn_clusters = 2\n[method]\nnames = ["kmeans"]\n'
    with pytest.raises(UserError, match=r"distinct values for 100 rows.*label_column = false"):
        validate(_cfg(tmp_path, body))
    cfg = _cfg(tmp_path, body.replace('"ints.csv"\n', '"ints.csv"\nlabel_column = false\n'))
    assert "acc_best_inertia" not in _run(cfg)[0][0]


# 12 ------------------------------------------------------------------------------------------------------


def test_tiny_data_k2_every_default(tmp_path):
    X = np.array([[0, 0], [0.1, 0], [0, 0.1], [5, 5], [5.1, 5], [5, 5.1]])
    _csv(tmp_path / "t.csv", X, [0, 0, 0, 1, 1, 1])
    recs, warned = _run(_cfg(tmp_path, '[data]\npath = "t.csv"\n'))
    assert all(r["acc_best_inertia"] == 1.0 for r in recs), recs
    assert not warned, warned


# 13 ------------------------------------------------------------------------------------------------------


def test_svmlight_label_column_false_is_unlabelled(tmp_path):
    from sklearn.datasets import dump_svmlight_file

    from bigclust.datasets import open_file
    from bigclust.pipeline.store import Store, read_matrix

    rng = np.random.default_rng(3)
    y = np.arange(90) % 3
    X = sp.csr_matrix(rng.random((90, 40)) * (rng.random((90, 40)) < 0.2)
                      + np.kron(np.eye(3)[y], np.ones((1, 40 // 3 + 1)))[:, :40] * 2)
    dump_svmlight_file(X, y, str(tmp_path / "docs.svm"))
    assert open_file(tmp_path / "docs.svm").class_names == ["0", "1", "2"]          # labels read by default
    src = open_file(tmp_path / "docs.svm", label_column=None)
    assert src.class_names is None and src.info.n_classes == 0 and src.info.sparse
    assert all((blk[1] == -1).all() for blk in src.iter_chunks(1024))
    body = '[data]\npath = "docs.svm"\nlabel_column = false\n[method]\nnames = ["kmeans", "nmf"]\n'
    with pytest.raises(UserError, match=r"label_column = false \(no labels\): set \[cluster\] n_clusters"):
        validate(_cfg(tmp_path, body))
    recs, _ = _run(_cfg(tmp_path, body + "[cluster]\nn_clusters = 3\n"))
    assert [r["method"] for r in recs] == ["kmeans", "nmf"] and all("acc_best_inertia" not in r for r in recs)
    store = Store(tmp_path / "run.zarr")
    (key,) = store.stage_keys("ingest")
    assert (read_matrix(store.open("ingest", key), "y") == -1).all()
