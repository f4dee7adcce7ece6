"""Issue 9: every failure a clear line, every degenerate result a warning -- config values, input files, data.

Bad input: one ``error:`` line, exit 2, no traceback, nothing overwritten or
lost (checked through the CLI where the message is the point, in process
where only the exception matters).  Degenerate results: one ``warning:`` line.
Folders that cannot be written, Dask schedulers and kills mid-run are in
test_failures_run.py; the helpers both use are in _failures.py.
"""
import numpy as np
import pytest

from bigclust._util.errors import ConfigError, UserError
from bigclust.pipeline.runner import run, validate

from _failures import _cli, _nothing_written, _one_error_line, _warnings, _with
from conftest import blobs


# -- 1. the dense kinds without a width run end to end ------------------------------------------------

@pytest.mark.parametrize("kind", ["linear", "cosine", "cosine2"])
def test_kernels_without_gamma_run_and_validate(tmp_path, small, make_config, kind):
    cfg = _with(make_config(small), "gamma = 1.0", f'kind = "{kind}"')
    cfg = _with(cfg, 'names = ["kmeans", "ra", "ncut"]', 'names = ["ra", "ncut"]')
    validate(cfg)
    recs = run(cfg)
    assert [r["method"] for r in recs] == ["ra", "ncut"]
    assert all(r["acc_avg"] > 0.9 and "gamma" not in r["params"] for r in recs)


# -- 2-4. config values that pass the schema but cannot run: refused before any work -------------------

def _cfg_cases():
    return [
        ("seed", "n_init = 5", "n_init = 5\nseed = 4294967296", ConfigError, "0 <= seed < 2**32"),
        ("seed-neg", "n_init = 5", "n_init = 5\nseed = -1", ConfigError, "seed"),
        ("inf", 'path = "store.zarr"', 'path = "store.zarr"\nmax_memory = "infGB"', ConfigError, "max_memory"),
        ("1e400", 'path = "store.zarr"', 'path = "store.zarr"\nmax_memory = "1e400"', ConfigError, "max_memory"),
        ("1B", 'path = "store.zarr"', 'path = "store.zarr"\nmax_memory = "1B"', ConfigError, "max_memory"),
        # 60 rows x 5 features x 4 bytes = 1200 bytes fit; three kernel rows of 60 x 8 bytes do not
        ("kernel", 'path = "store.zarr"', 'path = "store.zarr"\nmax_memory = 1200', ConfigError,
         "too small for ra on n=60"),
        ("chunk", "[affinity]", 'chunk_rows = 1000000000\n[affinity]', ConfigError, "chunk_rows=1000000000: a chunk of 60 rows"),
        ("ncomp", "n_init = 5", "n_init = 5\n[embed]\nn_components = 60", UserError, "n_components=60 must be below n=60"),
        ("k", "n_init = 5", "n_init = 5\nn_clusters = 61", UserError, "n_clusters=61"),
    ]


@pytest.mark.parametrize("case", _cfg_cases(), ids=lambda c: c[0])
def test_bad_config_values_refused_before_any_work(tmp_path, small, make_config, case):
    name, old, new, exc, needle = case
    cfg = _with(make_config(small), old, new)
    if name == "chunk":
        cfg = _with(cfg, 'path = "store.zarr"', 'path = "store.zarr"\nmax_memory = "1kB"')
    with pytest.raises(exc, match=needle.replace("*", r"\*").replace("(", r"\(")):
        run(cfg)
    assert _nothing_written(tmp_path)


def test_huge_chunk_rows_on_small_data_allocates_nothing_big(tmp_path, small, make_config):
    cfg = _with(make_config(small), "[affinity]", "chunk_rows = 1000000000\n[affinity]")
    cfg = _with(cfg, 'names = ["kmeans", "ra", "ncut"]', 'names = ["kmeans"]')
    assert run(cfg)[0]["acc_avg"] > 0.9


def test_chunk_rows_over_budget_and_memory_of_registered_set_in_validate(tmp_path, make_config):
    # a chunk of 4096 rows x 64 features x 4 bytes = 1 MB > 100 kB; optdigits' shape is known without reading
    cfg = make_config("unused.npz")
    cfg = _with(cfg, 'path = "unused.npz"', 'name = "optdigits"\nroot = "nowhere"')
    cfg = _with(cfg, 'path = "store.zarr"', 'path = "store.zarr"\nmax_memory = "100kB"')
    r = _cli("pipeline", "validate", str(cfg))
    assert _one_error_line(r, "chunk_rows=4096"), r.stderr
    _with(cfg, "[affinity]", "chunk_rows = 300\n[affinity]")
    r = _cli("pipeline", "validate", str(cfg))       # the chunk fits; three rows of a 5620 x 5620 kernel do not
    assert _one_error_line(r, "too small for ra on n=5620"), r.stderr
    r = _cli("pipeline", "run", str(cfg))
    assert _one_error_line(r, "too small for ra on n=5620"), r.stderr
    _with(cfg, 'max_memory = "100kB"', 'max_memory = "4GB"')
    _with(cfg, "n_init = 5", "n_init = 5\n[embed]\nn_components = 5620")
    r = _cli("pipeline", "validate", str(cfg))
    assert _one_error_line(r, "n_components=5620 must be below n=5620"), r.stderr
    assert _nothing_written(tmp_path)


def test_cli_seed_and_memory_one_line(tmp_path, small, make_config):
    cfg = _with(make_config(small), "n_init = 5", "n_init = 5\nseed = 4294967296")
    for cmd in ("validate", "run"):
        r = _cli("pipeline", cmd, str(cfg))
        assert _one_error_line(r, "seed"), r.stderr
    cfg = _with(make_config(small, name="m.toml"), 'path = "store.zarr"', 'path = "store.zarr"\nmax_memory = "1B"')
    r = _cli("pipeline", "run", str(cfg))
    assert _one_error_line(r, "max_memory"), r.stderr
    assert _nothing_written(tmp_path)


# -- 7. files that are not what their extension says -----------------------------------------------------

def _png_bytes():
    import zlib
    raw = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(13) + zlib.compress(b"\x00" * 64)
    return raw


@pytest.mark.parametrize("kind", ["empty", "half", "png", "npy-png", "npy-empty"])
def test_invalid_npz_and_npy_files(tmp_path, small, make_config, kind):
    data = small.read_bytes()
    ext, content, needle = {
        "empty": (".npz", b"", "not a valid .npz file (a zip archive of .npy arrays): it is empty (0 bytes)"),
        "half": (".npz", data[:len(data) // 2], "not a valid .npz file: truncated or corrupt"),
        "png": (".npz", _png_bytes(), "not a valid .npz file (a zip archive of .npy arrays): it holds a PNG image"),
        "npy-png": (".npy", _png_bytes(), "not a valid .npy file: it holds a PNG image"),
        "npy-empty": (".npy", b"", "not a valid .npy file: it is empty"),
    }[kind]
    p = tmp_path / f"bad{ext}"
    p.write_bytes(content)
    r = _cli("pipeline", "run", str(make_config(p)))
    assert _one_error_line(r, needle), r.stderr
    assert not (tmp_path / "out").exists()


# -- 14. data without labels -----------------------------------------------------------------------------

def test_npz_without_labels(tmp_path, make_config):
    X, _ = blobs(n=60)
    p = tmp_path / "nolabels.npz"
    np.savez(p, X=X)
    cfg = make_config(p)
    r = _cli("pipeline", "run", str(cfg))
    assert _one_error_line(r, "no labels"), r.stderr
    assert "number of classes" not in r.stderr
    _with(cfg, "n_init = 5", "n_init = 5\nn_clusters = 3")
    recs = run(cfg)
    assert recs and all("acc_avg" not in r and "nmi_avg" not in r for r in recs)
    md = (tmp_path / "out" / "results.md").read_text()
    assert "acc_avg" not in md and "nmi" not in md


# -- 12. a Gaussian width that makes K the identity or constant ----------------------------------------------

@pytest.mark.parametrize("gamma, needle", [(1e-9, "numerically the identity"), (1e12, "numerically constant")])
def test_degenerate_gaussian_width_is_one_warning(tmp_path, small, make_config, gamma, needle):
    cfg = _with(make_config(small), "gamma = 1.0", f"gamma = {gamma}")
    cfg = _with(cfg, 'names = ["kmeans", "ra", "ncut"]', 'names = ["ra"]')
    r = _cli("pipeline", "run", str(cfg))
    assert r.returncode == 0, r.stderr
    w = [ln for ln in _warnings(r) if "gaussian kernel" in ln]
    assert len(w) == 1 and needle in w[0] and f"gamma={gamma:g}" in w[0] and "median squared distance" in w[0]


def test_sane_gaussian_width_is_silent():
    import warnings

    from bigclust.algo.affinity import check_gaussian_width
    X, _ = blobs(n=300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        med, d2 = check_gaussian_width(X, 50.0)
    assert 0 < med < 1 and d2 > 0


# -- 13. data with (almost) nothing to cluster -------------------------------------------------------------

@pytest.mark.parametrize("what", ["identical", "scaled"])
def test_rows_all_the_same_refused(tmp_path, make_config, what):
    rng = np.random.default_rng(0)
    row = rng.uniform(1, 2, 4).astype(np.float32)
    # identical rows; or rows equal up to scale, which are identical after L2 normalisation
    X = np.tile(row, (40, 1)) * (1 if what == "identical" else rng.uniform(1, 3, (40, 1)).astype(np.float32))
    p = tmp_path / "same.npz"
    np.savez(p, X=X, y=np.arange(40) % 2)
    r = _cli("pipeline", "run", str(make_config(p)))
    assert _one_error_line(r, "all rows are the same, fewer than the 2 clusters"), r.stderr
    assert not (tmp_path / "out").exists()


def test_mostly_duplicate_rows_warn(tmp_path, make_config):
    X, y = blobs(n=60)
    p = tmp_path / "dup.npz"
    np.savez(p, X=np.repeat(X[:20], 3, axis=0), y=np.repeat(y[:20], 3))
    cfg = _with(make_config(p), 'names = ["kmeans", "ra", "ncut"]', 'names = ["kmeans"]')
    r = _cli("pipeline", "run", str(cfg))
    assert r.returncode == 0, r.stderr
    w = [ln for ln in _warnings(r) if "distinct" in ln]
    assert len(w) == 1 and "only 20 of the 60 rows are distinct" in w[0]


def test_distinct_rows_dense_and_sparse(tmp_path):
    import scipy.sparse as sp

    from bigclust.pipeline.runner import n_distinct_rows
    from bigclust.pipeline.store import Store, write_csr, write_dense
    X = np.array([[1, 0, 2], [1, 0, 2], [0, 1, 2], [2, 0, 1], [0, 1, 2]], np.float32)
    s = Store(tmp_path / "s.zarr", owner={"name": "t"})
    with s.write("x", "k", {}) as g:
        write_dense(g, "D", X, chunk_rows=2)
        write_csr(g, "S", sp.csr_matrix(X))
    g = s.open("x", "k")
    assert n_distinct_rows(g["D"]) == (3, 5) and n_distinct_rows(g["S"]) == (3, 5)


# -- 15. a stray label in one row --------------------------------------------------------------------------

@pytest.mark.parametrize("sep", [",", " "])
def test_stray_non_numeric_label_warns(tmp_path, make_config, sep):
    X, y = blobs(n=60)
    lines = [sep.join(f"{v:.4f}" for v in x) + f"{sep}{c}" for x, c in zip(X, y)]
    lines[17] = lines[17].rsplit(sep, 1)[0] + f"{sep}x"
    p = tmp_path / "stray.csv"
    p.write_text("\n".join(lines) + "\n")
    cfg = _with(make_config(p), 'names = ["kmeans", "ra", "ncut"]', 'names = ["kmeans"]')
    r = _cli("pipeline", "run", str(cfg))
    assert r.returncode == 0, r.stderr
    w = [ln for ln in _warnings(r) if "label" in ln]
    assert len(w) == 1 and "line 18: label 'x' is not like the other labels" in w[0], r.stderr


def test_word_labels_and_a_lone_number(tmp_path):
    import warnings

    from bigclust.datasets import open_file
    p = tmp_path / "letters.csv"
    p.write_text("1,2,A\n3,4,B\n5,6,A\n7,8,B\n9,9,7\n")
    with pytest.warns(RuntimeWarning, match=r"line 5: label '7' is not like the other labels \(words"):
        open_file(p)
    q = tmp_path / "fine.csv"
    q.write_text("1,2,A\n3,4,B\n5,6,C\n")   # single-member classes of the same kind are fine
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        open_file(q)


# -- 16. a disconnected kNN graph names its cause ----------------------------------------------------------

def test_knn_disconnection_names_gamma_or_n_neighbors():
    from bigclust.algo.affinity import knn_kernel
    X, _ = blobs(n=90, k=3, d=4, sep=20.0)
    with pytest.warns(RuntimeWarning, match=r"gamma=1e-09 is too small .* raise gamma"):
        knn_kernel(X, 5, 1e-9)
    with pytest.warns(RuntimeWarning, match=r"neighbour lists themselves are disconnected; raise n_neighbors"):
        knn_kernel(X, 5, 100.0)
