"""Issue 12, progress: bars with an ETA on stderr when asked for, only the stage lines otherwise, and
results to the bit whether bars (and the slicing of restarts / columns they bring) are on or off.
"""
import re

import numpy as np
import pytest
from click.testing import CliRunner

from bigclust import nmf, normalize
from bigclust.algo import kmeans
from bigclust._util import progress
from bigclust.cli import main

from conftest import blobs, write_config

#: a tqdm line with a known ETA: "... 3/20 [00:00<00:01, 12.3it/s]"
ETA = re.compile(r"\d+/\d+ \[\d\d:\d\d<\d\d:\d\d")
#: what stderr holds without bars: the run's header, sweep points, stage lines, the store line, the end
STAGE_LINE = re.compile(r"^(bigclust \S+: |\[\d+/\d+\] |  [a-z]+ +.*: (running|done in .* s|finished earlier.*)$"
                        r"|store .* on disk|done in .* s; results in |warning: )")


def _kernel(n=120, seed=0):
    X, _ = blobs(n=n, seed=seed)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    return np.exp(-((X[:, None, :] - X[None, :, :]) ** 2).sum(-1) / 0.5)


@pytest.fixture
def bars_on(monkeypatch):
    monkeypatch.setenv("BIGCLUST_PROGRESS", "1")
    monkeypatch.setattr(progress, "MININTERVAL", 0)  # draw every update (no timing in the test)


@pytest.fixture
def sk_config(tmp_path):
    X, y = blobs(n=90)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    cfg = write_config(tmp_path, "d.npz")
    cfg.write_text(cfg.read_text().replace('"kmeans", "ra", "ncut"', '"sk"') + "\n[sk]\nn_iter = 30\n")
    return cfg


def _run(cfg, *extra):
    r = CliRunner().invoke(main, ["pipeline", "run", str(cfg), *extra])
    assert r.exit_code == 0, r.stderr
    return r.stderr


def test_switch_rules(monkeypatch):
    monkeypatch.delenv("BIGCLUST_PROGRESS", raising=False)
    assert not progress.enabled()            # pytest's stderr is not a terminal
    monkeypatch.setenv("BIGCLUST_PROGRESS", "1")
    assert progress.enabled()
    with progress.disabled():                 # a stage on a Dask worker
        assert not progress.enabled()
    progress.set_quiet(True)                  # --quiet wins over the variable
    try:
        assert not progress.enabled() and isinstance(progress.bar(5, "x"), progress._NoBar)
    finally:
        progress.set_quiet(False)
    monkeypatch.setenv("BIGCLUST_PROGRESS", "0")
    assert not progress.enabled() and progress.slices(100, 10) == [(0, 100)]
    monkeypatch.setenv("BIGCLUST_PROGRESS", "1")
    assert progress.slices(100, 10) == [(a, a + 10) for a in range(0, 100, 10)]
    assert progress.slices(100, 10, at_least=40) == [(0, 40), (40, 80), (80, 100)]


def test_sk_run_shows_a_bar_with_eta(sk_config, bars_on):
    err = _run(sk_config)
    lines = err.replace("\r", "\n").splitlines()
    sk = [ln for ln in lines if "Sinkhorn scaling" in ln and ETA.search(ln)]
    assert sk, err
    assert any("k-means restarts" in ln for ln in lines)
    assert any(ln.startswith("  embed      sk") and ln.endswith(": running") for ln in lines)


@pytest.mark.parametrize("extra", [(), ("--quiet",)])
def test_quiet_and_non_tty_print_only_stage_lines(sk_config, monkeypatch, extra):
    if extra:  # --quiet silences bars even when they are forced on
        monkeypatch.setenv("BIGCLUST_PROGRESS", "1")
    else:      # no variable: stderr is not a terminal here
        monkeypatch.delenv("BIGCLUST_PROGRESS", raising=False)
    err = _run(sk_config, *extra)
    assert "\r" not in err and "it/s" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and all(STAGE_LINE.match(ln) for ln in lines), [ln for ln in lines if not STAGE_LINE.match(ln)]
    assert any("embed      sk" in ln for ln in lines)


def _results(on: bool, monkeypatch):
    monkeypatch.setenv("BIGCLUST_PROGRESS", "1" if on else "0")
    K = _kernel()
    X, _ = blobs(n=200, seed=2)
    out = {
        "sk": normalize.sinkhorn(K, n_iter=40),
        "sk_alt": normalize.sinkhorn(K, n_iter=15, variant="alternating"),
        "bbs": normalize.bbs(K, n_iter=25),
        "bbs_dykstra": normalize.bbs(K, n_iter=25, solver="dykstra"),
        "bbs_dual": normalize.bbs(K, solver="dual"),
    }
    km = kmeans.kmeans(X, 4, n_init=24, random_state=0)  # sliced into pieces of restarts when bars are on
    out["km_labels"], out["km_inertia"] = km.labels, km.inertia
    out["nmf_V"] = nmf.linear_nmf(X, 3, n_init=2, max_iter=30, random_state=0)[2]
    out["binmf_V"] = nmf.bilinear_nmf(X, 3, n_init=2, max_iter=30, random_state=0)[2]
    return out


@pytest.mark.filterwarnings("ignore:.*NMF.*max_iter:RuntimeWarning")
def test_bars_and_slicing_do_not_change_a_bit(monkeypatch, capsys):
    import numba
    monkeypatch.setenv("BIGCLUST_PROGRESS", "1")
    assert len(progress.slices(24, 20, 2 * numba.get_num_threads())) > 1  # k-means really runs in slices
    on = _results(True, monkeypatch)
    assert "k-means restarts" in capsys.readouterr().err
    off = _results(False, monkeypatch)
    for name in on:
        assert np.array_equal(on[name], off[name]), name
        assert on[name].dtype == off[name].dtype


@pytest.mark.filterwarnings("ignore:ADMM.*max_iter:RuntimeWarning")
def test_admm_columns_in_chunks_same_bits(monkeypatch):
    from bigclust.subspace import build_dictionary, knn_dictionary, self_expression

    X, _ = blobs(n=600, d=8, seed=4)
    D = build_dictionary(X)
    nb = knn_dictionary(D, 6)
    monkeypatch.setenv("BIGCLUST_PROGRESS", "1")
    assert len(progress.slices(600, 50, 256)) == 3
    C_on = self_expression(None, D, nb, "l1", max_iter=200)
    monkeypatch.setenv("BIGCLUST_PROGRESS", "0")
    C_off = self_expression(None, D, nb, "l1", max_iter=200)
    assert (C_on != C_off).nnz == 0 and np.array_equal(C_on.indices, C_off.indices)


def test_dask_tasks_bar_local_and_distributed(bars_on, capsys):
    import dask.array as da
    from distributed import Client

    x = da.ones((40, 4), chunks=(5, 4))
    assert float(progress.compute(x.sum(), "sum")) == 160.0
    err = capsys.readouterr().err
    assert "sum" in err and "task" in err
    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=":0") as client:
        futs = [client.submit(lambda i: i * i, i, pure=False) for i in range(6)]
        assert progress.gather(client, futs, "squares") == [i * i for i in range(6)]
        import dask
        with dask.config.set(scheduler="dask.distributed"):
            assert float(progress.compute(x.sum(), "on the cluster")) == 160.0
    err = capsys.readouterr().err.replace("\r", "\n")
    assert any("squares" in ln and "6/6" in ln for ln in err.splitlines()), err
    assert "on the cluster" in err
