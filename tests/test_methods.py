"""The registry: a method family in its own folder plugs in end to end, keys follow behaviour."""
import importlib
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bigclust.cli import main
from bigclust.pipeline import methods
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store

from conftest import blobs

PKG = Path(__file__).parents[1] / "bigclust"


# -- a toy family in its own folder (tests/toy_family): a method, a stage, a report column, an estimator ------


@pytest.fixture
def toy():
    """Import the toy family's plug-in -- the one line bigclust/families.py would get -- and undo it after."""
    plugin = importlib.import_module("toy_family.plugin")
    yield plugin
    plugin.unregister_all()
    sys.modules.pop("toy_family.plugin", None)
    sys.modules.pop("toy_family.estimator", None)


def test_toy_family_runs_through_the_cli_and_resumes(tmp_path, blob_file, make_config, toy):
    cfg = make_config(blob_file, "[toy]\nshift = 0.5\n")
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["toy", "ra"]'))
    r = CliRunner().invoke(main, ["pipeline", "run", str(cfg)])
    assert r.exit_code == 0, r.output
    assert "toyargmax  toy shift=0.5: running" in r.output
    # its report column, after the scores (and the registry's other columns, absent here)
    assert re.search(r"\| method \| params \| acc_picked .*\| MB \| MC \| toy_margin \| objective \| seconds \|",
                     r.output)
    assert re.search(r"\| toy \| shift=0.5 \| 1\.0000 \|", r.output)
    md = (tmp_path / "out" / "results.md").read_text()
    assert "toy_margin" in md
    (rec,) = [r_ for r_ in __import__("json").loads((tmp_path / "out" / "results.json").read_text())
              if r_["method"] == "toy"]
    assert rec["toy_margin"] > 0
    r = CliRunner().invoke(main, ["pipeline", "run", str(cfg)])
    assert r.exit_code == 0 and "toyargmax  toy shift=0.5: finished earlier, skipped" in r.output
    assert "running" not in r.output
    r = CliRunner().invoke(main, ["data", "info", str(tmp_path / "store.zarr")])   # its stage is counted
    assert r.exit_code == 0 and "'toyargmax': 1" in r.output
    cfg.write_text(cfg.read_text().replace("shift = 0.5", "shift = [0.5, 2.0]"))
    r = CliRunner().invoke(main, ["pipeline", "run", str(cfg), "--out", str(tmp_path / "o2")])
    assert r.exit_code == 0, r.output
    assert r.output.count("toyargmax  toy shift=2.0: running") == 1 and "shift=0.5: running" not in r.output
    r = CliRunner().invoke(main, ["pipeline", "validate", str(cfg)])
    assert r.exit_code == 0 and "toy" in r.output
    bad = tmp_path / "bad.toml"
    bad.write_text(cfg.read_text().replace("shift = [0.5, 2.0]", "shift = \"big\""))
    r = CliRunner().invoke(main, ["pipeline", "validate", str(bad)])
    assert r.exit_code == 2 and "[toy] shift: expected a number" in r.output


def test_toy_family_estimator_fit_predict(toy):
    import bigclust
    from toy_family import argmax_labels

    X, _ = blobs()
    est = bigclust.estimators.ToyClustering(n_clusters=3, shift=0.25)
    labels = est.fit_predict(X)
    want, margin = argmax_labels(X.astype(np.float32), 3, 0.25)   # the pipeline stores X as float32
    np.testing.assert_array_equal(labels, want)
    assert est.margin_ == pytest.approx(margin)
    with pytest.raises(ValueError, match="ToyClustering: shift"):   # checked as [toy] shift is
        bigclust.estimators.ToyClustering(shift="big").fit(X)


def test_pipeline_report_and_cli_name_no_method_and_no_family():
    names = set(methods.names())
    families = ("normalize", "nmf", "subspace")
    for f in [*(PKG / "pipeline").rglob("*.py"), *(PKG / "report").rglob("*.py"), PKG / "cli.py"]:
        for ln in f.read_text().splitlines():
            if "@bench.command" in ln:
                continue   # the bench commands are named after what they measure
            hits = [n for n in names if re.search(rf"[\"']{n}[\"']", ln)]
            hits += [fam for fam in families if re.search(rf"\bimport\b.*bigclust\.{fam}\b|bigclust\.{fam} import", ln)]
            assert not hits, (f, ln)


def test_cluster_stage_reruns_when_batch_size_changes(tmp_path, blob_file, make_config):
    cfg = make_config(blob_file)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["kmeans"]')
                   .replace("n_init = 5", 'n_init = 3\nalgorithm = "minibatch"\nbatch_size = 64'))
    run(cfg)
    cfg.write_text(cfg.read_text().replace("batch_size = 64", "batch_size = 32"))
    run(cfg, out=str(tmp_path / "o2"))
    s = Store(tmp_path / "store.zarr")
    got = sorted(s.open("cluster", k).attrs["params"]["batch_size"] for k in s.stage_keys("cluster"))
    assert got == [32, 64]


def test_mbbs_iteration_budget_and_tolerance_reach_the_solver(tmp_path, blob_file, make_config):
    cfg = make_config(blob_file, "[mbbs]\nn_outer = 1\nn_iter = 2\ntol = 0.5\n")
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["mbbs"]')
                   .replace("gamma = 1.0", "gamma = [2.0, 0.5]"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (rec,) = run(cfg)
    s = Store(tmp_path / "store.zarr")
    (key,) = s.stage_keys("embed")
    assert s.open("embed", key).attrs["params"]["method_params"] == {"lam": 1.0, "n_outer": 1, "n_iter": 2,
                                                                     "tol": 0.5}
    assert rec["norm_n_iter"] <= 2  # two Newton steps of the dual G-step at most (was hard-coded to 100)


def test_disconnected_dense_kernel_warns_before_the_eigensolver(tmp_path, make_config):
    X, y = blobs(n=90, k=3, d=5, seed=0, sep=40.0)
    p = tmp_path / "far.npz"
    np.savez(p, X=X, y=y)
    cfg = make_config(p)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["ra"]')
                   .replace("gamma = 1.0", "gamma = 0.001").replace("l2_normalize = true", "l2_normalize = false"))
    with pytest.warns(RuntimeWarning, match="affinity graph has 3 connected components"):
        run(cfg)


def test_numba_kernels_sit_beside_their_driver():
    for f in PKG.rglob("*_numba.py"):
        if f.parent == PKG:   # module x.py -> x_numba.py
            assert (f.parent / f.name.replace("_numba.py", ".py")).exists(), f
        else:                 # package x/ -> x/_numba.py or x/_<part>_numba.py (private)
            assert f.name.startswith("_") and (f.parent / "__init__.py").exists(), f
