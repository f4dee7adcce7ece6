"""Issue 26, "Wrong or misleading messages": each message names the real cause and what to change.

Items of the issue and their tests:

 9. an embedding with fewer distinct rows than clusters names the embedding and its cause, not "X":
    ``[embed] n_components`` below k -> :func:`test_9_n_components_below_k_names_the_embedding`; a Gaussian
    kernel degenerate under its gamma (digits, gamma = 1: no eigenvectors at all) ->
    :func:`test_9_degenerate_kernel_names_gamma`
10. n_clusters = n names ``n_clusters``, the key the user set -> :func:`test_10_n_clusters_equal_to_n`;
    a one-row file -> :func:`test_10_one_row`
11. a CSV with only a label column -> :func:`test_11_label_column_only`; a semicolon (tab, bar) delimited
    CSV is read by its delimiter -> :func:`test_11_delimiter_detected`; decimal commas are refused ->
    :func:`test_11_decimal_comma_refused`; a folder as ``[data] path`` -> :func:`test_11_folder_as_data_path`
12. ``random_state=-1`` / ``2**40`` name the estimator and the parameter, every estimator ->
    :func:`test_12_random_state_out_of_range`
13. ``[aksc] n_neighbors`` beyond the dictionary and an augmentation of another image shape fail in
    ``validate`` (through the subspace plug-in's check hook) -> :func:`test_13_aksc_sizes_checked_before_work`,
    on a registered data set: :func:`test_13_validate_on_a_registered_data_set`
L.  ``bigclust labels`` on a finished run whose label files are not there says so and gives the command
    that writes them (the config found again by the tail of its recorded path) ->
    :func:`test_labels_of_a_run_without_label_files`

Probes of the same kind, one test per fix: a UTF-8 BOM (the first row was taken for a header and lost),
quoted fields, a trailing delimiter (the empty last field became the labels), plus empty lines, Windows
line ends and whitespace, which kept working -> :func:`test_probe_csv_variants_read_alike`,
:func:`test_probe_csv_bom_header_and_quoted_names`; a missing value (``NA``, an empty field) in the first
row (was taken for a header), ``?``, a header only -> :func:`test_probe_csv_missing_values_and_no_rows`;
UTF-16 and binary files -> :func:`test_probe_csv_not_text`; object, complex and string arrays in .npz /
.npy -> :func:`test_probe_arrays_of_objects_strings_complex`; a NaN row and one class in the labels ->
:func:`test_probe_nan_row_and_one_class`.
"""
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from bigclust._util.errors import DataError, UserError
from bigclust.pipeline.runner import run

from conftest import blobs


def _config(make_config, data, methods=("kmeans", "ra", "ncut"), extra="", name="run.toml"):
    """conftest's config over ``data`` with ``[method] names = methods`` and ``extra`` TOML."""
    cfg = make_config(data, extra, name=name)
    names = ", ".join(f'"{m}"' for m in methods)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', f"names = [{names}]"))
    return cfg


def _csv(path, rows, sep=","):
    path.write_text("".join(sep.join(str(v) for v in r) + "\n" for r in rows))
    return path


# -- 9 -------------------------------------------------------------------------------------------------


def test_9_n_components_below_k_names_the_embedding(tmp_path, blob_file, make_config):
    cfg = _config(make_config, blob_file, ["ncut"], "[embed]\nn_components = 1\n")
    with pytest.raises(DataError, match=r"spectral embedding \(150 x 1\) has only [12] distinct rows?, fewer than the 3 "
                                        r"clusters: \[embed\] n_components=1 is below n_clusters=3.*"
                                        r"n_components = 0 \(= n_clusters\) or at least 3") as e:
        run(cfg)
    assert "X has only" not in str(e.value)


def test_9_degenerate_kernel_names_gamma():
    from sklearn.datasets import load_digits

    import bigclust
    X = load_digits().data                 # squared distances ~ 2000: gamma = 1 makes K numerically I
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DataError, match=r"^SpectralClustering: the spectral embedding .*the 10 clusters: the "
                                            r"Gaussian kernel is degenerate under gamma=1 .*set gamma = \"median\""):
            bigclust.SpectralClustering(n_clusters=10, gamma=1.0, random_state=0).fit(X)


# -- 10 ------------------------------------------------------------------------------------------------


def test_10_n_clusters_equal_to_n(tmp_path, make_config):
    data = _csv(tmp_path / "two.csv", [(1.0, 2.0, 0), (3.0, 1.0, 1)])
    cfg = make_config(data)
    cfg.write_text(cfg.read_text().replace("[cluster]\n", "[cluster]\nn_clusters = 2\n"))
    with pytest.raises(UserError, match=r"\[cluster\] n_clusters=2 must be below n=2 for ra: its spectral embedding "
                                        r"takes 2 eigenvectors.*lower n_clusters") as e:
        run(cfg)
    assert "n_components" not in str(e.value)


def test_10_one_row(tmp_path, make_config):
    cfg = make_config(_csv(tmp_path / "one.csv", [(1.0, 2.0, 0)]))
    with pytest.raises(UserError, match=r"the data have 1 row\(s\); clustering needs at least 2"):
        run(cfg)


# -- 11 ------------------------------------------------------------------------------------------------


def test_11_label_column_only(tmp_path, make_config):
    from bigclust.datasets import open_file
    p = tmp_path / "labels.csv"
    p.write_text("class\n" + "".join(f"{i % 3}\n" for i in range(61)))
    with pytest.raises(DataError, match=r"no feature columns: its rows have 1 field\(s\), all of them the label "
                                        r"column"):
        open_file(p)
    with pytest.raises(DataError, match="no feature columns"):
        run(make_config(p))


@pytest.mark.parametrize("sep", [";", "\t", "|", " "])
def test_11_delimiter_detected(tmp_path, sep):
    from bigclust.datasets import open_file
    X, y = blobs(n=30)
    p = tmp_path / "d.csv"
    header = sep.join([f"feature {j}" if sep != " " else f"f{j}" for j in range(X.shape[1])] + ["class"])
    p.write_text(header + "\n" + "".join(sep.join([*(f"{v:.6g}" for v in row), str(c)]) + "\n"
                                         for row, c in zip(X, y)))
    src = open_file(p, label_column="class")
    Xs, ys = zip(*src.iter_chunks(100))
    np.testing.assert_allclose(np.concatenate(Xs), X, rtol=1e-5)
    np.testing.assert_array_equal(np.concatenate(ys), y)
    assert src.info.n_samples == 30 and src.feature_names[0] == ("feature 0" if sep != " " else "f0")


def test_11_decimal_comma_refused(tmp_path):
    from bigclust.datasets import open_file
    p = tmp_path / "eu.csv"
    p.write_text("a;b;class\n1,5;2,25;0\n2,5;1,0;1\n")
    with pytest.raises(DataError, match=r"separated by ';' and numbers written with a decimal comma .*decimal points"):
        open_file(p)


def test_11_folder_as_data_path(tmp_path, make_config):
    from bigclust.datasets import open_file
    from bigclust.pipeline.runner import validate
    (tmp_path / "data").mkdir()
    with pytest.raises(DataError, match=r"data is a folder, not a data file"):
        open_file(tmp_path / "data")
    with pytest.raises(DataError, match=r"\[data\] path: .*data is a folder, not a data file"):
        validate(make_config(tmp_path / "data"))


# -- 12 ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["SpectralClustering", "NMFClustering", "SubspaceClustering"])
@pytest.mark.parametrize("seed", [-1, 2**40, 1.5, np.random.default_rng(0)])
def test_12_random_state_out_of_range(name, seed):
    import bigclust
    est = getattr(bigclust, name)(n_clusters=2, random_state=seed)
    with pytest.raises(UserError, match=rf"^{name}: random_state must be None, an integer in \[0, 2\*\*32 - 1\] "
                                        r"or a numpy.random.RandomState, got "):
        est.fit(np.random.default_rng(0).random((10, 4)))


def test_12_random_state_accepted_values():
    import bigclust
    X, _ = blobs(n=30)
    a = bigclust.SpectralClustering(3, gamma="median", random_state=np.int64(2**32 - 1)).fit(X).labels_
    b = bigclust.SpectralClustering(3, gamma="median", random_state=2**32 - 1).fit(X).labels_
    np.testing.assert_array_equal(a, b)
    bigclust.SpectralClustering(3, gamma="median", random_state=np.random.RandomState(0)).fit(X)


# -- 13 ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("aksc, needle", [
    ("n_neighbors = 5000", r"\[aksc\] n_neighbors=5000 exceeds the 99 atoms a sample may use \(n=100 samples, "
                           r"less the sample itself\): lower n_neighbors"),
    ('n_neighbors = 1100\naugment = "mnist"', r"n_neighbors=1100 exceeds the 1089 atoms .*their 10 augmented "
                                               r"copies each"),
    ('augment = "coil20"', r'\[aksc\] augment = "coil20" takes 32 x 32 images \(1024 pixels\), but the data have '
                           r"784 features"),
    ('image = "coil20"\nfeatures = "scattering"', r'\[aksc\] image = "coil20" takes 32 x 32 images'),
])
def test_13_aksc_sizes_checked_before_work(tmp_path, blob_file, make_config, aksc, needle):
    from bigclust.pipeline.checks import check_sizes
    from bigclust.pipeline.config import load
    c = load(_config(make_config, blob_file, ["aksc"], f"[aksc]\n{aksc}\n"))
    with pytest.raises(UserError, match=needle):
        check_sizes(c, list(c.points()), 100, 784, 2, False)
    if "n_neighbors" not in aksc:   # the same config on images of the layout's shape passes
        check_sizes(c, list(c.points()), 100, 1024, 2, False)


def test_13_validate_on_a_registered_data_set(tmp_path, data_root):
    for aksc, needle in (("n_neighbors = 5000", "n_neighbors=5000 exceeds the 99 atoms"),
                         ('augment = "coil20"', 'augment = "coil20" takes 32 x 32 images')):
        cfg = tmp_path / "ak.toml"
        cfg.write_text(f'[data]\nname = "mnist-test-500-0-1"\nroot = "{data_root}"\n[method]\nnames = ["aksc"]\n'
                       f'[aksc]\n{aksc}\n[store]\npath = "s"\n[output]\ndir = "o"\n')
        r = subprocess.run([sys.executable, "-m", "bigclust.cli", "pipeline", "validate", str(cfg)],
                           capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "s").exists()


# -- 14: bigclust labels -------------------------------------------------------------------------------


def test_labels_of_a_run_without_label_files(tmp_path, monkeypatch):
    from bigclust.report.labels import read_index
    repo = tmp_path / "checkout"
    (repo / "pipelines").mkdir(parents=True)
    (repo / "pipelines" / "exp.toml").write_text("")
    out = repo / "pipelines" / "results" / "exp"
    out.mkdir(parents=True)
    # recorded in another checkout: found again by the tail of its path
    (out / "run.json").write_text(json.dumps({"complete": True, "config_file": "/elsewhere/wt/pipelines/exp.toml",
                                              "config": {"evaluate": {"protocol": "full"}}}))
    monkeypatch.chdir(repo)
    with pytest.raises(UserError, match=r"the run finished, but its label files .* are not there .*write them "
                                        r"again .*: bigclust pipeline run pipelines/exp.toml$"):
        read_index(out)
    (out / "run.json").write_text(json.dumps({"complete": False, "config_file": str(repo / "pipelines/exp.toml")}))
    with pytest.raises(UserError, match=r"has not finished.*bigclust pipeline run pipelines/exp.toml"):
        read_index(out)
    (out / "run.json").unlink()
    with pytest.raises(UserError, match=r"not the output folder of a finished run \(it has no run.json\)"):
        read_index(out)
    r = subprocess.run([sys.executable, "-m", "bigclust.cli", "labels", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no run.json" in r.stderr


# -- probes: one's own files ---------------------------------------------------------------------------


def _read(p, **kw):
    from bigclust.datasets import open_file
    src = open_file(p, **kw)
    chunks = list(src.iter_chunks(100))
    return np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks]), src


@pytest.mark.parametrize("text", [
    "\ufeff1.0,2.0,0\n3.0,4.0,1\n5,6,0\n",              # a spreadsheet's UTF-8 BOM: was a "header", row 1 lost
    '"1.0","2.0","0"\n"3.0","4.0","1"\n"5","6","0"\n',   # quoted fields: were "not a number"
    "1.0,2.0,0,\n3.0,4.0,1,\n5,6,0,\n",                  # a trailing delimiter: the labels were the empty field
    "\n1.0,2.0,0\n\n3.0,4.0,1\n\n5,6,0\n\n",             # empty lines (kept working)
    "1.0,2.0,0\r\n3.0,4.0,1\r\n5,6,0\r\n",               # Windows line ends (kept working)
    "1.0 2.0 0\n3.0\t4.0  1\n5 6 0\n",                   # whitespace (kept working)
])
def test_probe_csv_variants_read_alike(tmp_path, text):
    p = tmp_path / "v.csv"
    p.write_bytes(text.encode("utf-8"))
    X, y, src = _read(p)
    np.testing.assert_array_equal(X, [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(y, [0, 1, 0])
    assert src.class_names == ["0", "1"]


def test_probe_csv_bom_header_and_quoted_names(tmp_path):
    p = tmp_path / "h.csv"
    p.write_bytes('\ufeff"sepal, length",width,class\n1,2,setosa\n3,4,"virginica"\n'.encode("utf-8"))
    X, y, src = _read(p, label_column="class")
    assert src.feature_names == ["sepal, length", "width"] and src.class_names == ["setosa", "virginica"]
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])


@pytest.mark.parametrize("text, needle", [
    ("1,NA,0\n3,4,1\n5,6,0\n", r"line 1: field 2 is 'NA', a missing value; every value is needed"),   # was a header
    ("1,,0\n3,4,1\n5,6,0\n", r"line 1: field 2 is empty, a missing value"),                            # was a header
    ("a,b,class\n1,?,0\n", r"line 2: field 2 is '\?', a missing value"),
    ("a,b,class\n", r"no data rows \(only a header line\)"),
])
def test_probe_csv_missing_values_and_no_rows(tmp_path, text, needle):
    p = tmp_path / "m.csv"
    p.write_text(text)
    with pytest.raises(DataError, match=needle):
        _read(p)


@pytest.mark.parametrize("content", ["a,b,c\n1,2,0\n3,4,1\n".encode("utf-16"), bytes(range(256)) * 4])
def test_probe_csv_not_text(tmp_path, content):
    p = tmp_path / "t.csv"
    p.write_bytes(content)
    with pytest.raises(DataError, match=r"not a text table: it holds NUL bytes \(UTF-16 text\? save it as UTF-8"):
        _read(p)


def test_probe_arrays_of_objects_strings_complex(tmp_path):
    np.savez(tmp_path / "o.npz", X=np.array([[1, "a"], [2, "b"]], dtype=object))
    np.save(tmp_path / "o.npy", np.array([[1, "a"]], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "c.npz", X=np.ones((3, 2)) + 1j)
    np.savez(tmp_path / "s.npz", X=np.array([["a", "b"], ["c", "d"]]))
    for name, needle in (("o.npz", r"holds Python objects \(dtype object\), which are not loaded"),
                         ("o.npy", r"holds Python objects \(dtype object\), which are not loaded"),
                         ("c.npz", r"'X' is complex \(complex128\); clustering needs real numbers"),
                         ("s.npz", r"'X' \(<U1\) holds values that are not numbers")):
        with pytest.raises(DataError, match=needle):
            _read(tmp_path / name)


def test_probe_nan_row_and_one_class(tmp_path, make_config):
    p = _csv(tmp_path / "nan.csv", [(1, 2, 0), ("nan", 4, 1), (5, 6, 0)])
    with pytest.raises(DataError, match=r"NaN or inf values \(first in row 1, counting rows from 0\): fill or drop"):
        run(_config(make_config, p, ["kmeans"], "", name="a.toml"))
    p = _csv(tmp_path / "one_class.csv", [(1, 2, 0), (3, 4, 0), (5, 6, 0)])
    with pytest.raises(UserError, match=r"n_clusters=1 \(taken from the number of classes\) must be between 2 and "
                                        r"n=3: set \[cluster\] n_clusters"):
        run(_config(make_config, p, ["kmeans"], "", name="b.toml"))
