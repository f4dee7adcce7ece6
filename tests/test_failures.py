"""Issue 9: every failure a clear line, every degenerate result a warning.

Bad input: one ``error:`` line, exit 2, no traceback, nothing overwritten or
lost (checked through the CLI where the message is the point, in process
where only the exception matters).  Degenerate results: one ``warning:`` line.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bigclust._util.errors import ConfigError, DataError, StoreError, UserError
from bigclust.pipeline.runner import run, validate

from conftest import blobs

ROOT = Path(__file__).parents[1]


def _cli(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "bigclust.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout)


def _one_error_line(r, needle=None):
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    ok = r.returncode == 2 and "Traceback" not in r.stderr and len(errs) == 1
    return ok and (needle is None or needle in errs[0])


def _warnings(r):
    return [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]


def _with(path, old, new):
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))
    return path


@pytest.fixture
def small(tmp_path):
    """A 60-row, 3-class blob file (fast end to end)."""
    X, y = blobs(n=60)
    p = tmp_path / "small.npz"
    np.savez(p, X=X, y=y)
    return p


def _nothing_written(tmp_path):
    """No output folder, no stage in the store (for a file, its shape is only known once it is opened,
    which is after the empty store is made and before the ingest)."""
    return not (tmp_path / "out").exists() and not (tmp_path / "store.zarr" / "stages").exists()


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


# -- 5-6. store and output folders that cannot be written ------------------------------------------------

def _read_only_dir(tmp_path):
    """A folder nobody (not even root) can create entries in."""
    if os.geteuid() == 0:
        if not Path("/sys").is_dir():
            pytest.skip("running as root without /sys: no read-only folder to test with")
        return Path("/sys")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return ro


@pytest.mark.parametrize("which", ["store", "out"])
def test_read_only_store_or_output_refused_before_work(tmp_path, small, make_config, which):
    ro = _read_only_dir(tmp_path)
    cfg = make_config(small)
    if which == "store":
        _with(cfg, 'path = "store.zarr"', f'path = "{ro}/bigclust-test.zarr"')
    else:
        _with(cfg, 'dir = "out"', f'dir = "{ro}/bigclust-test-out"')
    for cmd in ("validate", "run"):
        r = _cli("pipeline", cmd, str(cfg))
        assert _one_error_line(r, "cannot be written"), r.stderr
    assert not (tmp_path / "store.zarr").exists()


def test_paths_under_a_file(tmp_path, small, make_config):
    f = tmp_path / "afile"
    f.write_text("keep me")
    cfg = make_config(small)
    r = _cli("pipeline", "run", str(cfg), "--out", str(f / "sub"))
    assert _one_error_line(r, "which is a file"), r.stderr
    r = _cli("pipeline", "run", str(cfg), "--out", str(f))
    assert _one_error_line(r, "is a file"), r.stderr
    _with(cfg, 'path = "store.zarr"', f'path = "{f}/s.zarr"')
    r = _cli("pipeline", "run", str(cfg))
    assert _one_error_line(r, "which is a file"), r.stderr
    r = _cli("pipeline", "validate", str(cfg))
    assert _one_error_line(r, "which is a file"), r.stderr
    r = _cli("data", "ingest", "optdigits", "--root", "data", "--store", str(f / "x.zarr"))
    assert _one_error_line(r, "which is a file"), r.stderr
    assert f.read_text() == "keep me" and not (tmp_path / "out").exists()


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


# -- 8-9. schedulers that are not there, not Dask, or lost mid-run ---------------------------------------

def test_scheduler_address_without_port(tmp_path, small, make_config):
    cfg = make_config(small)
    for addr in ("foo", "tcp://127.0.0.1"):
        r = _cli("pipeline", "run", str(cfg), "--scheduler", addr)
        assert _one_error_line(r, "is not an address"), r.stderr
        assert f"error: {cfg}: scheduler {addr!r}" in r.stderr      # names the config the run was for
    _with(cfg, "[store]", '[dask]\nscheduler = "foo"\n[store]')
    r = _cli("pipeline", "validate", str(cfg))
    assert _one_error_line(r, "is not an address"), r.stderr
    assert _nothing_written(tmp_path)


def _listener(kind):
    """A loopback server that is not a Dask scheduler: a silent socket or an HTTP server (daemon thread)."""
    import socket
    import threading
    if kind == "http":
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Quiet(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass
        srv = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv.server_address[1], srv.shutdown
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.2)
    conns, stop = [], threading.Event()

    def accept():  # accept and never say a word
        while not stop.is_set():
            try:
                conns.append(sock.accept()[0])
            except OSError:
                pass
    threading.Thread(target=accept, daemon=True).start()

    def close():
        stop.set()
        for c in conns:
            c.close()
        sock.close()
    return sock.getsockname()[1], close


@pytest.mark.parametrize("kind", ["silent", "http"])
def test_scheduler_port_held_by_something_else_is_one_line_within_timeout(tmp_path, small, make_config,
                                                                            monkeypatch, kind):
    import time

    from bigclust.pipeline import scheduler
    monkeypatch.setattr(scheduler, "SCHEDULER_TIMEOUT", 2.0)
    port, close = _listener(kind)
    try:
        t0 = time.perf_counter()
        with pytest.raises(UserError, match="no Dask scheduler at tcp://127.0.0.1") as e:
            run(make_config(small), scheduler=f"tcp://127.0.0.1:{port}")
        assert time.perf_counter() - t0 < 20
    finally:
        close()
    assert ("HTTP server" in str(e.value)) == (kind == "http") and "\n" not in str(e.value)
    assert _nothing_written(tmp_path)


def test_nothing_listening_is_one_line(tmp_path, small, make_config):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port nobody listens on
    r = _cli("pipeline", "run", str(make_config(small)), "--scheduler", f"tcp://127.0.0.1:{port}")
    assert _one_error_line(r, "cannot connect to Dask scheduler"), r.stderr


@pytest.mark.parametrize("exc", ["FutureCancelledError", "CommClosedError"])
def test_scheduler_lost_mid_run_is_one_line_and_resumes(tmp_path, small, make_config, monkeypatch, exc, capsys):
    import distributed
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError

    from bigclust.pipeline import runner as pipeline

    class GoneClient:  # stands for a client whose scheduler dies at the second task
        def __init__(self, *a, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            return False

    real, calls = pipeline._submit, []

    def dying(client, fn, *a, **kw):
        calls.append(fn)
        if len(calls) == 2:
            raise (FutureCancelledError("stage-1234", "scheduler-connection-lost") if exc == "FutureCancelledError"
                   else CommClosedError("in <TCP (closed) ConnectionPool.gather local=tcp://127.0.0.1:1>"))
        return real(None, fn, *a, **kw)

    monkeypatch.setattr(distributed, "Client", GoneClient)
    monkeypatch.setattr(pipeline, "check_scheduler", lambda a: None)
    monkeypatch.setattr(pipeline, "_submit", dying)
    cfg = make_config(small)
    with pytest.raises(UserError, match="lost the Dask scheduler tcp://127.0.0.1:1 mid-run") as e:
        run(cfg, scheduler="tcp://127.0.0.1:1")
    assert "running the same command again resumes" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setattr(pipeline, "_submit", real)
    capsys.readouterr()
    recs = run(cfg)
    assert "finished earlier, skipped" in capsys.readouterr().err
    assert len(recs) == 3 and all(r["acc_avg"] > 0.9 for r in recs)


# -- 17. warnings raised on a worker reach the client's one-line output ----------------------------------

def test_worker_warning_is_one_line_on_the_client(tmp_path, small, make_config):
    distributed = pytest.importorskip("distributed")
    cfg = _with(make_config(small), 'names = ["kmeans", "ra", "ncut"]',
                'names = ["bbs"]\n[bbs]\nn_iter = 3\ntol = 1e-12\nsolver = "alternating"')   # named below
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        r = _cli("pipeline", "run", str(cfg), "--scheduler", cluster.scheduler_address)
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in _warnings(r) if "did not converge" in ln]
    assert len(warn) == 1 and warn[0].startswith("warning: BBS (alternating) did not converge in 3 iterations")
    assert "Traceback" not in r.stderr and "Warning:" not in r.stderr


# -- 10. a run killed while writing its report resumes with the same command ------------------------------

class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (not even except Exception handlers)."""


@pytest.mark.parametrize("kill_at", range(5))
def test_kill_while_writing_the_report_then_same_command_resumes(tmp_path, small, make_config, monkeypatch,
                                                                  kill_at):
    from bigclust.report import tables as report
    real, calls = report._atomic_write, []

    def dying(path, text):
        if len(calls) == kill_at:  # die half-way through this file: its temporary name is left behind
            tmp = path.with_name(f".{path.name}.tmp-999999")
            tmp.write_text("half")
            raise _Killed
        calls.append(path.name)
        real(path, text)

    cfg = _with(make_config(small), 'names = ["kmeans", "ra", "ncut"]', 'names = ["kmeans"]')
    monkeypatch.setattr(report, "_atomic_write", dying)
    with pytest.raises(_Killed):
        run(cfg)
    monkeypatch.setattr(report, "_atomic_write", real)
    recs = run(cfg)  # the same command: the folder is recognised as this config's and completed
    out = tmp_path / "out"
    assert json.loads((out / "run.json").read_text())["complete"] is True
    assert json.loads((out / "results.json").read_text())[0]["acc_avg"] == recs[0]["acc_avg"]
    assert not list(out.glob(".*.tmp-*"))
    # and another config is still refused there, with its files kept
    other = _with(make_config(small, name="other.toml"), "n_init = 5", "n_init = 4")
    with pytest.raises(StoreError, match="holds results of another config") as e:
        run(other)
    assert str(e.value).startswith(f"{other}: output folder ")


# -- 11. a stage is never committed under a key its parameters do not hash to ------------------------------

def test_store_refuses_params_that_do_not_hash_to_the_key(tmp_path):
    from bigclust.pipeline import stages
    from bigclust.pipeline.store import Store, write_dense

    s = Store(tmp_path / "s.zarr", owner={"name": "a"})
    p = stages.ClusterParams(input="abc", src="embed", array="E", k=3, n_init=5, max_iter=10, algorithm="lloyd",
                             minibatch_threshold=None, batch_size=None, seed=0)
    stale = stages.ClusterParams(**{**stages.hashed(p), "seed": 1})   # what a stale task would carry
    key = stages.stage_key(p)
    with pytest.raises(StoreError, match="refusing to commit stage cluster/"):
        with s.write("cluster", key, {"params": stages.hashed(stale)}) as g:
            write_dense(g, "labels", np.zeros(4))
    tmp = tmp_path / "s.zarr" / "tmp"
    assert not s.has("cluster", key) and not (tmp.exists() and any(tmp.iterdir()))
    with s.write("cluster", key, {"params": stages.hashed(p)}) as g:
        write_dense(g, "labels", np.zeros(4))
    assert s.has("cluster", key)


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


def test_scheduler_probe_works_inside_a_running_event_loop(tmp_path):
    # as in Jupyter: the probe must not need to start an event loop of its own in this thread
    import asyncio

    from bigclust.pipeline.runner import check_scheduler
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://")

        async def inside():
            check_scheduler(address)
        asyncio.run(inside())
