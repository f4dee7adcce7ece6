"""Issue 12, part A: one's own data in (CSV headers, no labels, labels that look wrong, standardisation),
the conventions users expect (median γ, defaults next to the config, sk/bbs by default, scikit-learn's
n_init) and library ergonomics (``__all__``, docstrings, the import-time setting).

The own data are scikit-learn's wine and breast-cancer tables (shipped with scikit-learn), written to a
CSV with a header line and to an .npz in ``tmp_path``.
"""
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.spatial.distance import pdist
from sklearn.datasets import load_breast_cancer, load_wine

from bigclust.pipeline.config import from_dict, load
from bigclust._util.errors import ConfigError, DataError

ROOT = Path(__file__).parents[1]


def _cli(*args, cwd, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "bigclust.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=env)


def _write_csv(path, X, names, y=None, sep=","):
    header = list(names) + ([] if y is None else ["class"])
    rows = X if y is None else np.c_[X, y]
    np.savetxt(path, rows, delimiter=sep, header=sep.join(header), comments="", fmt="%.10g")
    return path


@pytest.fixture(scope="module")
def wine():
    d = load_wine()
    return d.data, d.target, list(d.feature_names)


@pytest.fixture
def wine_csv(tmp_path, wine):
    X, _, names = wine
    return _write_csv(tmp_path / "wine.csv", X, names)


# -- CSV header lines ---------------------------------------------------------------------------------


def test_csv_header_is_detected_and_its_names_kept(tmp_path, wine):
    from bigclust.datasets import open_file
    X, y, names = wine
    p = _write_csv(tmp_path / "w.csv", X, names, y)
    src = open_file(p, label_column="class")              # by name, from the header
    Xs, ys = zip(*src.iter_chunks(50))
    np.testing.assert_allclose(np.concatenate(Xs), X, rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate(ys), y)  # classes 0, 1, 2 in numeric order
    assert src.feature_names == names and src.info.n_samples == 178 and src.info.n_features == 13
    # the same by index, header detected automatically
    src = open_file(p, label_column=-1)
    np.testing.assert_array_equal(np.concatenate([c[1] for c in src.iter_chunks(1000)]), y)


def test_csv_word_labels_are_not_a_header(tmp_path):
    from bigclust.datasets import open_file
    (tmp_path / "w.csv").write_text("1.0,2.0,setosa\n1.5,2.5,virginica\n3.0,1.0,setosa\n")
    src = open_file(tmp_path / "w.csv")
    assert src.info.n_samples == 3 and src.class_names == ["setosa", "virginica"]


def test_csv_header_declared(tmp_path, wine):
    from bigclust.datasets import open_file
    X, _, names = wine
    p = _write_csv(tmp_path / "w.csv", X, names)
    with pytest.raises(DataError, match=r"line 1: 'alcohol' is not a number"):
        list(open_file(p, label_column=None, header=False).iter_chunks(100))
    q = tmp_path / "numbers.csv"
    np.savetxt(q, X[:20], delimiter=",")
    src = open_file(q, label_column=None, header=True)      # declared: the first row is taken as names
    assert src.info.n_samples == 19 and src.feature_names == [f"{v:.18e}" for v in X[0]]
    with pytest.raises(DataError, match="no column 'nope' in the header"):
        open_file(p, label_column="nope")
    with pytest.raises(DataError, match="has no header line"):
        open_file(q, label_column="nope", header=False)


def test_config_accepts_header_and_no_labels():
    base = {"data": {"path": "x.csv"}, "cluster": {"n_clusters": 3}}
    for off in (False, "none"):
        c = from_dict({**base, "data": {"path": "x.csv", "label_column": off}})
        assert c.sections["data"]["label_column"] is None
    for h in (True, False, "auto"):
        assert from_dict({**base, "data": {"path": "x.csv", "header": h}}).sections["data"]["header"] == h
    with pytest.raises(ConfigError, match=r"\[data\] header: expected true, false or \"auto\""):
        from_dict({**base, "data": {"path": "x.csv", "header": "yes"}})
    with pytest.raises(ConfigError, match=r"\[data\] label_column: expected a column index"):
        from_dict({**base, "data": {"path": "x.csv", "label_column": True}})
    with pytest.raises(ConfigError, match=r"label_column = false \(no labels\): set \[cluster\] n_clusters"):
        from_dict({"data": {"path": "x.csv", "label_column": False}}, "x.toml")


# -- unlabelled data --------------------------------------------------------------------------------


def test_unlabelled_csv_runs_and_needs_n_clusters(tmp_path, wine_csv):
    cfg = tmp_path / "wine.toml"
    cfg.write_text('[data]\npath = "wine.csv"\nlabel_column = false\n')
    r = _cli("pipeline", "validate", str(cfg), cwd=tmp_path)
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and len(errs) == 1 and "set [cluster] n_clusters" in errs[0], r.stderr
    cfg.write_text('[data]\npath = "wine.csv"\nlabel_column = false\n[preprocess]\nstandardize = true\n'
                   'l2_normalize = false\n[method]\nnames = ["kmeans", "ncut"]\n[cluster]\nn_clusters = 3\n'
                   'n_init = 3\n')
    from bigclust.pipeline.runner import run
    with warnings.catch_warnings():
        warnings.simplefilter("error")                       # no "implausible labels" warning: there are none
        recs = run(cfg)
    assert [r["method"] for r in recs] == ["kmeans", "ncut"] and all(r["k"] == 3 for r in recs)
    assert not any(k.startswith(("acc", "nmi")) for r in recs for k in r)
    out = tmp_path / "wine-results"                         # beside the config, named after it
    assert (out / "results.md").exists() and (tmp_path / "wine.zarr").is_dir()
    assert json.loads((out / "run.json").read_text())["complete"]


# -- labels that look wrong ------------------------------------------------------------------------


def test_warning_when_the_label_column_is_a_feature(tmp_path, wine_csv, wine):
    from bigclust.datasets import open_file
    with pytest.warns(RuntimeWarning, match=r"121 distinct values for 178 rows, implausibly many classes.*"
                                            r"label_column = false"):
        open_file(wine_csv)                                  # by default the last column (proline) is the label
    X, y, names = wine
    frac = _write_csv(tmp_path / "frac.csv", X[:, :3], names[:3], y + 0.5)
    with pytest.warns(RuntimeWarning, match=r"non-integer numbers \(0\.5, 1\.5, 2\.5\)"):
        open_file(frac)
    npz = tmp_path / "f.npz"
    np.savez(npz, X=X, y=X[:, 0])                            # a feature saved as y
    with pytest.warns(RuntimeWarning, match="implausibly many classes"):
        open_file(npz)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        open_file(_write_csv(tmp_path / "ok.csv", X, names, y))   # the real labels: no warning
        tiny = tmp_path / "tiny.csv"                          # under 20 rows: no n/2 rule
        tiny.write_text("".join(f"{i},{i % 7}\n" for i in range(10)))
        open_file(tiny)


def test_warning_reaches_the_cli(tmp_path, wine_csv):
    cfg = tmp_path / "w.toml"
    # label_column named: a warning (left unset, the same column is refused: test_trust_defaults)
    cfg.write_text('[data]\npath = "wine.csv"\nlabel_column = -1\n[method]\nnames = ["kmeans"]\n[cluster]\n'
                   'n_clusters = 3\nn_init = 2\n')
    r = _cli("pipeline", "run", str(cfg), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert any(ln.startswith("warning:") and "implausibly many classes" in ln for ln in r.stderr.splitlines())


# -- [preprocess] standardize --------------------------------------------------------------------------


def test_standardize_matches_sklearn_streamed():
    from sklearn.preprocessing import StandardScaler

    from bigclust.algo.preprocess import standardize, standardize_fit
    rng = np.random.default_rng(0)
    X = rng.normal(1e4, 3.0, (1000, 6)) * np.array([1, 10, 0.1, 1, 1, 1])
    X[:, 3] = 7.0                                            # a constant column keeps scale 1
    blocks = [X[a:b] for a, b in ((0, 1), (1, 300), (300, 301), (301, 1000))]
    mean, scale = standardize_fit(blocks)
    ref = StandardScaler().fit(X)
    np.testing.assert_allclose(mean, ref.mean_, rtol=1e-12)
    np.testing.assert_allclose(scale, ref.scale_, rtol=1e-9)
    np.testing.assert_allclose(standardize(X, mean, scale), ref.transform(X), atol=1e-8)
    S = sp.random(200, 30, density=0.2, random_state=1, format="csr") * 5
    Z = standardize(S, *standardize_fit([S[:77], S[77:]]))
    assert sp.issparse(Z)                                    # sparse: scaled only, never centred
    np.testing.assert_allclose(Z.toarray(), StandardScaler(with_mean=False).fit_transform(S).toarray(),
                               rtol=1e-5, atol=1e-6)


def test_standardize_stage_in_the_pipeline(tmp_path, wine):
    """Over several row chunks, the preprocess stage equals StandardScaler on the float32 data."""
    from sklearn.preprocessing import StandardScaler

    from bigclust.pipeline.runner import run
    from bigclust.pipeline.store import Store, read_matrix
    X, y, _ = wine
    np.savez(tmp_path / "w.npz", X=X, y=y)
    cfg = tmp_path / "w.toml"
    cfg.write_text('[data]\npath = "w.npz"\nchunk_rows = 50\n[preprocess]\nstandardize = true\n'
                   'l2_normalize = false\n[method]\nnames = ["kmeans"]\n[cluster]\nn_init = 10\n')
    recs = run(cfg)
    st = Store(tmp_path / "w.zarr")
    (key,) = st.stage_keys("preprocess")
    Z = read_matrix(st.open("preprocess", key), "X")
    np.testing.assert_allclose(Z, StandardScaler().fit_transform(X.astype(np.float32).astype(np.float64)),
                               atol=2e-5)
    assert recs[0]["acc_max"] > 0.9                          # wine standardised: k-means finds the cultivars


# -- gamma = "median" ----------------------------------------------------------------------------------


def test_median_sq_distance_against_numpy():
    from bigclust.algo.affinity import median_sq_distance
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5)) * np.arange(1, 6)
    assert median_sq_distance(X) == pytest.approx(np.median(pdist(X, "sqeuclidean")), rel=1e-12)
    assert median_sq_distance(sp.csr_matrix(X)) == pytest.approx(np.median(pdist(X, "sqeuclidean")), rel=1e-12)
    Y = rng.normal(size=(3000, 4))                           # 4.5M pairs: the seeded sample of 2**20
    est, exact = median_sq_distance(Y), np.median(pdist(Y, "sqeuclidean"))
    assert est == median_sq_distance(Y) and abs(est / exact - 1) < 0.01 and est != exact


def test_median_over_knn_pairs_against_sklearn():
    from sklearn.neighbors import NearestNeighbors

    from bigclust.algo.affinity import knn_kernel
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    K, g = knn_kernel(X, 10, "median", return_gamma=True)
    dist, _ = NearestNeighbors(n_neighbors=10).fit(X).kneighbors(X)
    assert g == pytest.approx(np.median(dist[:, 1:] ** 2), rel=1e-10)
    np.testing.assert_allclose(K.toarray(), knn_kernel(X, 10, g).toarray())


def test_median_gamma_in_config_sweep_and_pipeline(tmp_path, wine):
    from bigclust.pipeline.runner import run
    from bigclust.pipeline.store import Store, read_matrix
    c = from_dict({"data": {"name": "optdigits"}, "affinity": {"gamma": ["median", 2]}}, "x.toml")
    assert c.sweeps[("affinity", "gamma")] == ["median", 2.0]
    X, y, _ = wine
    np.savez(tmp_path / "w.npz", X=X, y=y)
    cfg = tmp_path / "w.toml"
    cfg.write_text('[data]\npath = "w.npz"\n[preprocess]\nl2_normalize = true\n[affinity]\ngamma = ["median", 1.0]\n'
                   '[method]\nnames = ["ncut"]\n[cluster]\nn_init = 3\n')
    recs = run(cfg)
    st = Store(tmp_path / "w.zarr")
    (key,) = st.stage_keys("preprocess")
    Z = read_matrix(st.open("preprocess", key), "X").astype(np.float64)   # L2-normalised rows
    med = [r for r in recs if r["params"]["gamma"] == "median"]
    assert len(med) == 1 and med[0]["gamma_used"] == pytest.approx(np.median(pdist(Z, "sqeuclidean")), rel=1e-9)
    assert not any("gamma_used" in r for r in recs if r["params"]["gamma"] == 1.0)
    saved = json.loads((tmp_path / "w-results" / "results.json").read_text())
    assert any(r.get("gamma_used") == med[0]["gamma_used"] for r in saved)


def test_estimator_gamma_median_equals_that_number(wine):
    from bigclust import SpectralClustering
    from sklearn.preprocessing import StandardScaler
    X = StandardScaler().fit_transform(wine[0])
    a = SpectralClustering(3, gamma="median", normalization="ncut", n_init=3, random_state=0).fit(X)
    assert a.gamma_ == pytest.approx(np.median(pdist(X.astype(np.float32).astype(np.float64), "sqeuclidean")),
                                     rel=1e-9)
    b = SpectralClustering(3, gamma=a.gamma_, normalization="ncut", n_init=3, random_state=0).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    with pytest.raises(ValueError, match="median"):
        SpectralClustering(3, gamma="mean").fit(X)


# -- defaults --------------------------------------------------------------------------------------------


def test_defaults_users_expect():
    from bigclust import NMFClustering, SpectralClustering, SubspaceClustering
    c = from_dict({"data": {"name": "optdigits"}}, "x.toml")
    assert {"kmeans", "sk", "bbs"} <= set(c.methods)
    assert all(est().n_init == 10 for est in (SpectralClustering, NMFClustering, SubspaceClustering))
    tomls = sorted((ROOT / "pipelines").rglob("*.toml"))
    assert tomls
    for p in tomls:   # the paper configs name their methods: a new default does not change their results
        import tomllib
        assert "names" in tomllib.loads(p.read_text()).get("method", {}), p


def test_new_keys_at_their_defaults_keep_the_config_hash():
    """An output folder written before [data] header / [preprocess] standardize existed is still this config's."""
    base = {"data": {"name": "optdigits"}}
    h = from_dict(base, "x.toml").hash
    assert from_dict({"data": {"name": "optdigits", "header": "auto"}, "preprocess": {"standardize": False}},
                     "x.toml").hash == h
    assert from_dict({**base, "preprocess": {"standardize": True}}, "x.toml").hash != h
    assert from_dict({"data": {"name": "optdigits", "header": True}}, "x.toml").hash != h


def test_quickstart_outputs_stay_where_the_readme_says():
    c = load(ROOT / "pipelines" / "quickstart.toml")
    assert c.resolve(c.sections["output"]["dir"]).resolve() == (ROOT / "runs" / "quickstart").resolve()
    assert "runs/quickstart/results.{md,csv,json}" in (ROOT / "README.md").read_text()


# -- library ergonomics -------------------------------------------------------------------------------------


def test_public_api_is_listed():
    import bigclust
    names = set(bigclust.__all__)
    assert {"SpectralClustering", "NMFClustering", "SubspaceClustering", "normalize", "metrics", "kmeans",
            "affinity", "datasets", "UserError", "ConfigError", "DataError", "__version__"} <= names
    assert set(dir(bigclust)) == names
    for n in names:
        assert getattr(bigclust, n) is not None
    assert issubclass(bigclust.UserError, ValueError)
    from sklearn.exceptions import ConvergenceWarning
    assert issubclass(bigclust.ConvergenceWarning, ConvergenceWarning) and "ConvergenceWarning" in names


def test_docstrings_reference_nothing_outside_the_package():
    bad = re.compile(r"DESIGN\.md|\.\./shared|papers/|/work/")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "bigclust").rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if bad.search(line)
            and "BIGCLUST_DATA" not in line]
    assert not hits, hits


@pytest.mark.parametrize("env, expect", [({}, "PASSIVE"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),
                                         ({"BIGCLUST_NO_ENV": "1"}, "None")])
def test_import_time_setting_is_documented_and_can_be_turned_off(env, expect):
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "BIGCLUST_NO_ENV")}
    r = subprocess.run([sys.executable, "-c", "import os, bigclust; print(os.environ.get('OMP_WAIT_POLICY'))"],
                       capture_output=True, text=True, env={**base, **env}, timeout=60)
    assert r.stdout.strip() == expect, r.stderr
    readme = (ROOT / "README.md").read_text()
    assert "OMP_WAIT_POLICY" in readme and "BIGCLUST_NO_ENV=1" in readme


# -- the journey of issue 12: own CSV with a header and no labels, then an .npz with labels --------------------


def test_own_data_journey_through_the_cli(tmp_path, wine):
    """The README's 'Your own data' steps, through the CLI with the default methods."""
    X, _, names = wine
    _write_csv(tmp_path / "wine.csv", X, names)
    (tmp_path / "wine.toml").write_text('[data]\npath = "wine.csv"\nlabel_column = false\n'
                                        '[preprocess]\nstandardize = true\n[affinity]\ngamma = "median"\n'
                                        '[cluster]\nn_clusters = 3\nn_init = 2\n')
    r = _cli("pipeline", "run", "wine.toml", cwd=tmp_path)
    assert r.returncode == 0 and "warning:" not in r.stderr, r.stderr
    recs = json.loads((tmp_path / "wine-results" / "results.json").read_text())
    assert [x["method"] for x in recs] == ["kmeans", "ra", "ncut", "sk", "bbs"]
    assert all(x.get("gamma_used", 1) > 0 for x in recs)
    b = load_breast_cancer()
    np.savez(tmp_path / "cancer.npz", X=b.data, y=b.target)
    (tmp_path / "cancer.toml").write_text('[data]\npath = "cancer.npz"\n[preprocess]\nstandardize = true\n'
                                          '[method]\nnames = ["kmeans", "bbs"]\n[cluster]\nn_init = 2\n')
    r = _cli("pipeline", "run", "cancer.toml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    recs = json.loads((tmp_path / "cancer-results" / "results.json").read_text())
    assert recs[0]["k"] == 2 and recs[0]["acc_max"] > 0.85   # two classes, from y
