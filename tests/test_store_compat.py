"""Store keys and config hashes survive changes of the code (issue 25, point 5).

A results folder is its config's while the config hash the code computes is the one its ``run.json``
records (or the recorded settings are the config's: ``same_settings``), and a store resumes only while
every stage key the code computes is a key in the store.  Checked here against what the code computed
before the house rebuild: the hashes of every committed config (``fixtures/config_hashes.json``) and a
store that code wrote (``fixtures/pre_rebuild_store``), which must resume with nothing recomputed.
Only public entry points are used, so the tests hold however the package's modules move.
"""
import hashlib
import json
import math
import shutil
import tarfile
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from bigclust.datasets import get_info
from bigclust.pipeline import run
from bigclust.pipeline.checks import same_settings
from bigclust.pipeline.config import load

ROOT = Path(__file__).parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
PRE = FIXTURES / "pre_rebuild_store"


def _committed_runs():
    """``(run.json path, its record, the config it names)`` of every committed results folder."""
    out = []
    for rj in sorted(ROOT.glob("pipelines/*/results/*/run.json")):
        rec = json.loads(rj.read_text())
        out.append((rj, rec, "pipelines/" + rec["config_file"].split("/pipelines/", 1)[1]))
    return out


def _load(path):
    with warnings.catch_warnings():   # a few committed configs are run on purpose against a warning
        warnings.simplefilter("ignore")
        return load(path)


# -- (a) every committed results folder is still its config's ------------------------------------


def test_every_committed_results_folder_accepts_its_own_config():
    """`bigclust pipeline run CONFIG` of a README writes into the committed folder, not a refusal."""
    runs = _committed_runs()
    assert len(runs) > 50
    refused = []
    for rj, rec, rel in runs:
        cfg = _load(ROOT / rel)
        assert cfg.resolve(cfg.sections["output"]["dir"]).resolve() == rj.parent.resolve(), rj
        if not (cfg.hash == rec["config_hash"] or same_settings(rec["config"], cfg)):
            refused.append(str(rj.relative_to(ROOT)))
    assert not refused


def test_config_hashes_are_those_of_the_code_before_the_rebuild():
    # Config.hash keys every output folder and store owner; a key added to the schema must be declared
    # added (left out of the hash at its default) so that these stay what they were
    pinned = json.loads((FIXTURES / "config_hashes.json").read_text())["hashes"]
    named = {rel for _, _, rel in _committed_runs()}
    assert named <= set(pinned), f"no pinned hash for {sorted(named - set(pinned))}"
    moved = {rel: (h, _load(ROOT / rel).hash) for rel, h in pinned.items() if _load(ROOT / rel).hash != h}
    assert not moved, f"config hashes changed (pinned, now): {moved}"
    # the folders whose run.json has that very hash (made since the last schema change) still match exactly
    exact = [rj for rj, rec, rel in _committed_runs() if rec["config_hash"] == pinned[rel]]
    assert len(exact) >= 68


# -- (b) an existing store resumes without recomputation -----------------------------------------


def _snapshot(store_root: Path) -> dict:
    """Every file of the stores: size, mtime and content (a stage rewritten or added shows here)."""
    return {str(p.relative_to(store_root)): (p.stat().st_size, p.stat().st_mtime_ns,
                                             hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(store_root.rglob("*")) if p.is_file()}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _resumed_only(err: str):
    """The stage lines of a run: every stage skipped as finished, none run."""
    lines = [ln.strip() for ln in err.splitlines()]
    assert not [ln for ln in lines if ln.endswith(": running") or ": done in " in ln], err
    return [ln for ln in lines if "finished earlier" in ln]


def test_a_store_resumes_without_recomputation(tmp_path, capfd):
    X = np.abs(np.random.default_rng(0).normal(size=(60, 4))).astype(np.float32)
    X[20:40] += 3.0
    X[40:] += [0, 0, 3.0, 3.0]
    np.savez(tmp_path / "blobs.npz", X=X, y=np.repeat(np.arange(3), 20))
    cfg = tmp_path / "run.toml"
    cfg.write_text(textwrap.dedent("""
        [data]
        path = "blobs.npz"
        chunk_rows = 32

        [affinity]
        gamma = [1.0, 0.5]

        [method]
        names = ["kmeans", "ra", "bbs", "nmf", "aksc"]

        [bbs]
        n_iter = 20

        [nmf]
        n_init = 2
        max_iter = 30

        [aksc]
        regularizer = "l2"
        n_neighbors = 5

        [cluster]
        n_init = 3

        [store]
        path = "store.zarr"

        [output]
        dir = "out"
        plots = false
        """))
    first = run(cfg)
    assert ": running" in capfd.readouterr().err
    before = _snapshot(tmp_path / "store.zarr")
    again = run(cfg)
    assert _resumed_only(capfd.readouterr().err)
    assert _snapshot(tmp_path / "store.zarr") == before
    assert _same(first, again)


def _pre_rebuild_copy(tmp_path, monkeypatch):
    """The old code's stores, configs and output folders in ``tmp_path``; the data sets' files as placeholders.

    The stores hold the ingested data, so the raw files are never read; the run only checks, before any
    work, that they exist and can be read.
    """
    with tarfile.open(PRE / "store.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(tmp_path)
    shutil.copytree(PRE / "out", tmp_path / "out")
    for toml in PRE.glob("*.toml"):
        shutil.copy(toml, tmp_path)
        for f in get_info(_load(toml).sections["data"]["name"]).files:
            (tmp_path / "data" / f).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "data" / f).write_text("placeholder: the store holds this data set's ingest\n")
    monkeypatch.setenv("BIGCLUST_DATA", str(tmp_path / "data"))


def test_a_store_written_before_the_rebuild_resumes_without_recomputation(tmp_path, capfd, monkeypatch):
    _pre_rebuild_copy(tmp_path, monkeypatch)
    before = _snapshot(tmp_path / "store")
    for name in ("spectral", "knn", "subsets"):
        made = json.loads((PRE / "out" / name / "run.json").read_text())
        assert _load(tmp_path / f"{name}.toml").hash == made["config_hash"], name
        run(tmp_path / f"{name}.toml")
        assert _resumed_only(capfd.readouterr().err), name
        # the old output folder is this config's: written into, nothing moved aside
        assert not list((tmp_path / "out" / name).glob("replaced-*")), name
        old = json.loads((PRE / "out" / name / "results.json").read_text())
        records = json.loads((tmp_path / "out" / name / "results.json").read_text())   # as written (JSON keys)
        assert len(records) == len(old), name
        for r_old, r in zip(old, records):
            # what the old code reported is reported the same (a key added since may show beside it)
            assert all(_same(v, r.get(k)) or (k == "params" and v.items() <= r[k].items())
                       for k, v in r_old.items()), (name, r_old, r)
        if name == "subsets":
            assert (tmp_path / "out" / name / "trials.csv").read_text() == \
                (PRE / "out" / name / "trials.csv").read_text()
    assert _snapshot(tmp_path / "store") == before
