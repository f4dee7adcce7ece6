"""Issue 9: failures around a run -- folders that cannot be written, Dask schedulers, a kill mid-run.

Each is one ``error:`` line (or one ``warning:`` line), with nothing overwritten
or lost, and the same command resumes where it can.  Bad config values, input
files and degenerate data are in test_failures.py; the helpers both use are in
_failures.py.
"""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from bigclust._util.errors import StoreError, UserError
from bigclust.pipeline.runner import run

from _failures import _cli, _nothing_written, _one_error_line, _warnings, _with


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

        def scheduler_info(self):   # one worker: the method units run one after another
            return {"workers": {"tcp://127.0.0.1:2": {}}}

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
