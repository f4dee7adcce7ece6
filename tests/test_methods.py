"""The method registry: a method registered from outside runs end to end, keys follow behaviour."""
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bigclust.pipeline import methods
from bigclust.pipeline import stages
from bigclust.cli import main
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store, read_matrix, write_dense

from conftest import blobs

PKG = Path(__file__).parents[1] / "bigclust"


# -- a toy method family, registered from this file ----------------------------------------------


@dataclass(frozen=True)
class ToyParams:
    """Label each row by its largest feature among the first k (after an additive shift)."""

    shift: float = methods.param(0.0, float)


@dataclass(frozen=True)
class ToyStageParams:
    input: str
    k: int
    shift: float


def _toy_build(ctx, src, inputs):
    return [ToyStageParams(input=inputs[0], k=ctx.k, shift=ctx.params.shift)]


def _toy_run(store_path, key, attrs, p, **_):
    store = Store(store_path)
    X = read_matrix(store.open("preprocess", p.input), "X")
    with store.write("toyargmax", key, attrs) as g:
        write_dense(g, "labels", np.argmax(X[:, :p.k] + p.shift, axis=1)[None, :].astype(np.int32))
        g.attrs["best"] = 0


@pytest.fixture
def toy():
    stages.register_stage(stages.StageDef("toyargmax", _toy_build, _toy_run, "labels",
                                          describe=lambda p: f"shift={p.shift}"), replace=True)
    methods.register(methods.Method("toy", ToyParams, ("toyargmax",), "argmax of the first k features"),
                     replace=True)
    yield
    methods.unregister("toy")
    stages.STAGES.pop("toyargmax", None)


def test_toy_method_runs_through_the_cli_and_resumes(tmp_path, blob_file, make_config, toy):
    cfg = make_config(blob_file, "[toy]\nshift = 0.5\n")
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["toy", "ra"]'))
    r = CliRunner().invoke(main, ["pipeline", "run", str(cfg)])
    assert r.exit_code == 0, r.output
    assert "toyargmax  toy shift=0.5: running" in r.output
    assert re.search(r"\| toy \| shift=0.5 \| 1\.0000 \|", r.output)
    r = CliRunner().invoke(main, ["pipeline", "run", str(cfg)])
    assert r.exit_code == 0 and "toyargmax  toy shift=0.5: finished earlier, skipped" in r.output
    assert "running" not in r.output
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


def test_runner_and_stages_name_no_method():
    for f in ("pipeline.py", "stages.py", "cli.py", "store.py", "plan.py", "blocks.py"):
        text = (PKG / f).read_text()
        for name in ("kmeans", "ra", "ncut", "sk", "bbs", "mbbs"):
            hits = [ln for ln in text.splitlines()
                    if re.search(rf"[\"']{name}[\"']", ln) and "@bench.command" not in ln]
            assert not hits, (f, name, hits)


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
                   .replace("gamma = 1.0", "gamma = 0.001").replace("[preprocess]", "")
                   .replace("[affinity]", "[preprocess]\nl2_normalize = false\n[affinity]"))
    with pytest.warns(RuntimeWarning, match="affinity graph has 3 connected components"):
        run(cfg)


def test_numba_kernels_sit_beside_their_driver():
    for f in PKG.rglob("*_numba.py"):
        if f.parent == PKG:   # module x.py -> x_numba.py
            assert (f.parent / f.name.replace("_numba.py", ".py")).exists(), f
        else:                 # package x/ -> x/_numba.py or x/_<part>_numba.py (private)
            assert f.name.startswith("_") and (f.parent / "__init__.py").exists(), f
