"""Issue 12, failure modes: a failed first run does not block the next, every hint names a real option,
validate checks the data files, store size (end of run, ``store du``), ``store clean``, ``[store] keep``.
"""
import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bigclust.cli import main
from bigclust._util.errors import DataError, StoreError
from bigclust.pipeline.runner import run, validate
from bigclust.pipeline.store import Store, read_matrix

from conftest import blobs, write_config

PKG = Path(__file__).parents[1] / "bigclust"


def _cli(*args):
    r = CliRunner().invoke(main, list(map(str, args)))
    return r.exit_code, r.stdout, r.stderr


def _csv(path, X, y, header=None):
    lines = ([",".join(header)] if header else []) + [",".join(f"{v:.6f}" for v in x) + f",{c}" for x, c in zip(X, y)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _labels(tmp_path, store="store.zarr"):
    s = Store(tmp_path / store)
    return {k: read_matrix(s.open("cluster", k), "labels") for k in s.stage_keys("cluster")}


# -- a first run that failed does not block the next ------------------------------------------------


def test_failed_first_run_leaves_a_reusable_store(tmp_path):
    X, y = blobs(n=60)
    bad = _csv(tmp_path / "bad.csv", X, y)
    lines = bad.read_text().splitlines()
    lines[30] = lines[30].replace(lines[30].split(",")[2], "n/a", 1)  # a value that is not a number, mid-file
    bad.write_text("\n".join(lines) + "\n")
    _csv(tmp_path / "good.csv", X, y)
    cfg = write_config(tmp_path, "bad.csv")
    with pytest.raises(DataError, match="not a number|a missing value"):  # "n/a": read as a missing value
        run(cfg)
    assert (tmp_path / "store.zarr").exists() and not Store(tmp_path / "store.zarr").stage_keys("ingest")
    write_config(tmp_path, "good.csv")           # the user fixes the file name: no --force needed
    recs = run(cfg)
    assert {r["method"] for r in recs} == {"kmeans", "ra", "ncut"}
    # once data are ingested the store is bound to them: other data are still refused
    _csv(tmp_path / "other.csv", X[::-1], y[::-1])
    write_config(tmp_path, "other.csv")
    with pytest.raises(StoreError, match="written for other data"):
        run(cfg, out=str(tmp_path / "out2"))


# -- every hint names a real option --------------------------------------------------------------------

#: every option an error / warning message of the package names, with the commands it is an option of
#: (a message reached from several commands names options each of them has, or says which command)
HINTS = {
    "--force": ["pipeline run", "data ingest"],
    "--out": ["pipeline run"],
    "--replace": ["pipeline run"],
    "--scheduler": ["pipeline run", "report verify"],
    "--root": ["data ingest"],
    "--workdir": ["bench ooc"],
    "--sklearn-eigen-solver": ["bench sparse"],
    "--gamma": ["bench sparse"],
    "--export": ["labels"],
    "--format": ["labels"],
    "--sizes": ["bench scale", "bench knn"],
    "--points": ["bench knn"],
    "--methods": ["bench scale"],
    "--data": ["bench nmf"],
    "--stage": ["store clean"],
    "--config": ["store clean"],
    "--all": ["store clean"],
}


def _render(node) -> str:
    """The text of a message expression, ``{}`` for each interpolated value."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_render(v) if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _render(node.left) + _render(node.right)
    if isinstance(node, ast.IfExp):
        return _render(node.body) + " " + _render(node.orelse)
    return "{}"


def _messages():
    """String parts of every ``raise X(...)`` and ``warnings.warn(...)`` in the package."""
    out = []
    for f in PKG.rglob("*.py"):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            call = None
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                call = node.exc
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "warn":
                call = node
            if call is None:
                continue
            text = " ".join(_render(a) for a in call.args)
            if text:
                out.append((f.relative_to(PKG.parent), text))
    return out


def test_every_hinted_option_and_command_exists():
    msgs = _messages()
    assert len(msgs) > 100  # the parse found the package's messages
    options = {o for _, t in msgs for o in re.findall(r"(?<![\w-])--[a-z][a-z-]*", t)}
    assert options, "no hint found: the parser is broken"
    unknown = options - set(HINTS)
    assert not unknown, f"messages name options missing from HINTS (add them with their commands): {unknown}"
    groups = "|".join(main.commands)  # "bigclust store at ..." is prose, "bigclust store du" a command
    commands = {" ".join(c) for _, t in msgs for c in re.findall(rf"bigclust ({groups}) ([a-z]+)", t)}
    checked = set()
    for opt, cmds in HINTS.items():
        for cmd in cmds:
            code, out, err = _cli(*cmd.split(), "--help")
            assert code == 0, (cmd, err)
            assert re.search(rf"(?<![\w-]){opt}\b", out), f"{opt} is not an option of bigclust {cmd}"
            checked.add(cmd)
    for cmd in commands:
        code, out, err = _cli(*cmd.split(), "--help")
        assert code == 0, f"a message names bigclust {cmd}, which is not a command: {err}"
    assert {"pipeline run", "data ingest"} <= checked


def test_pipeline_run_missing_dataset_hint_names_config_key(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[data]\nname = "optdigits"\nroot = "nowhere"\n[store]\npath = "s.zarr"\n[output]\ndir = "o"\n')
    with pytest.raises(DataError, match=r"needs .*nowhere.*\[data\] root"):
        validate(cfg)
    code, _, err = _cli("pipeline", "run", cfg)
    assert code == 2 and "[data] root" in err and "--root" not in err


def test_validate_checks_data_files_exist_and_are_readable(tmp_path):
    cfg = tmp_path / "c.toml"
    (tmp_path / "optdigits").mkdir()
    cfg.write_text('[data]\nname = "optdigits"\nroot = "."\n[store]\npath = "s.zarr"\n[output]\ndir = "o"\n')
    with pytest.raises(DataError, match=r"optdigits\.tra\.gz, which does not exist"):  # the first raw file
        validate(cfg)
    src = Path(__file__).parents[1] / "data" / "optdigits"
    (tmp_path / "optdigits" / "optdigits.tra.gz").write_bytes((src / "optdigits.tra.gz").read_bytes())
    with pytest.raises(DataError, match=r"optdigits\.tes\.gz, which does not exist"):  # every file is checked
        validate(cfg)
    (tmp_path / "optdigits" / "optdigits.tes.gz").write_bytes((src / "optdigits.tes.gz").read_bytes())
    validate(cfg)
    write_config(tmp_path, "gone.npz", name="f.toml")
    code, _, err = _cli("pipeline", "validate", tmp_path / "f.toml")
    assert code == 2 and "gone.npz" in err and "does not exist" in err
    assert not (tmp_path / "s.zarr").exists() and not (tmp_path / "store.zarr").exists()


# -- store size, du, clean, keep -----------------------------------------------------------------------


@pytest.fixture
def swept(tmp_path):
    X, y = blobs(n=90)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    cfg = write_config(tmp_path, "d.npz")
    text = cfg.read_text().replace("gamma = 1.0", "gamma = [1.0, 4.0]").replace('"kmeans", "ra", "ncut"', '"ra", "sk"')
    cfg.write_text(text + "\n[sk]\nn_iter = 20\n")
    return cfg


def test_run_reports_store_size_and_du(tmp_path, swept, capsys):
    run(swept)
    err = capsys.readouterr().err
    line = [ln for ln in err.splitlines() if ln.startswith("store ")]
    assert len(line) == 1 and "on disk (affinity" in line[0]  # the kernels are the largest stage
    code, out, _ = _cli("store", "du", tmp_path / "store.zarr", "--json")
    u = json.loads(out)
    assert code == 0 and set(u["stages"]) == {"ingest", "preprocess", "affinity", "embed", "cluster"}
    assert u["stages"]["affinity"]["instances"] == 2 and u["stages"]["embed"]["instances"] == 4
    # two float64 90 x 90 kernels, stored raw: at least their bytes
    assert u["stages"]["affinity"]["bytes"] >= 2 * 90 * 90 * 8
    assert u["bytes"] == sum(s["bytes"] for s in u["stages"].values()) + u["other_bytes"]
    k_arrays = [n for n in u["stages"]["affinity"]["arrays"] if n.endswith("/K")]
    assert len(k_arrays) == 2
    code, out, _ = _cli("store", "du", tmp_path / "store.zarr")
    assert code == 0 and out.splitlines()[1].split()[0] == "affinity" and "largest arrays" in out


def test_store_clean_keeps_what_the_config_uses(tmp_path, swept):
    run(swept)
    before = _labels(tmp_path)
    s = Store(tmp_path / "store.zarr")
    n_aff = len(s.stage_keys("affinity"))
    code, out, _ = _cli("store", "clean", tmp_path / "store.zarr", "--config", swept)
    assert code == 0 and "removed 0 stage instance(s)" in out
    # the config narrowed to one gamma: the other kernel and what was computed from it go
    full = tmp_path / "full.toml"
    full.write_text(swept.read_text())
    swept.write_text(swept.read_text().replace("gamma = [1.0, 4.0]", "gamma = 4.0"))
    code, out, _ = _cli("store", "clean", tmp_path / "store.zarr", "--config", swept, "--dry-run")
    assert code == 0 and "would remove 5 stage instance(s)" in out  # 1 kernel, 2 embeddings, 2 clusterings
    # ... unless another config that shares the store uses them: what any given config uses stays
    code, out, _ = _cli("store", "clean", tmp_path / "store.zarr", "--config", swept, "--config", full, "--dry-run")
    assert code == 0 and "would remove 0 stage instance(s)" in out, out
    assert len(Store(tmp_path / "store.zarr").stage_keys("affinity")) == n_aff  # dry run: nothing gone
    code, out, _ = _cli("store", "clean", tmp_path / "store.zarr", "--config", swept)
    assert code == 0 and "removed 5" in out
    s = Store(tmp_path / "store.zarr")
    assert len(s.stage_keys("affinity")) == 1 and len(s.stage_keys("cluster")) == 2
    after = _labels(tmp_path)
    assert all(np.array_equal(after[k], before[k]) for k in after)
    # no config: every derived stage goes, the ingested data stay; --all: those too
    code, out, _ = _cli("store", "clean", tmp_path / "store.zarr")
    s = Store(tmp_path / "store.zarr")
    assert code == 0 and [st for st in s.stages() if s.stage_keys(st)] == ["ingest"]
    assert len(s.stage_keys("ingest")) == 1
    code, out, _ = _cli("store", "clean", tmp_path / "store.zarr", "--all")
    assert code == 0 and not Store(tmp_path / "store.zarr").stage_keys("ingest")
    # a re-run recomputes everything, to the same labels
    run(swept, force=True)
    again = _labels(tmp_path)
    assert set(again) == set(after) and all(np.array_equal(again[k], after[k]) for k in again)


def test_store_clean_refuses_a_config_of_other_data(tmp_path, swept):
    run(swept)
    X, y = blobs(n=60, seed=3)
    np.savez(tmp_path / "e.npz", X=X, y=y)
    other = write_config(tmp_path, "e.npz", name="other.toml")
    code, _, err = _cli("store", "clean", tmp_path / "store.zarr", "--config", other)
    assert code == 2 and "other data" in err
    assert len(Store(tmp_path / "store.zarr").stage_keys("affinity")) == 2


def test_keep_results_drops_kernels_and_rerun_skips_them(tmp_path, swept, capsys):
    run(swept, store=str(tmp_path / "all.zarr"), out=str(tmp_path / "o_all"))
    ref = _labels(tmp_path, "all.zarr")
    swept.write_text(swept.read_text().replace('path = "store.zarr"', 'path = "store.zarr"\nkeep = "results"'))
    recs = run(swept)
    err = capsys.readouterr().err
    assert 'keep = "results": dropped the arrays of 2 dense kernel(s)' in err
    assert set(_labels(tmp_path)) == set(ref)
    assert all(np.array_equal(_labels(tmp_path)[k], ref[k]) for k in ref)
    s = Store(tmp_path / "store.zarr")
    keys = s.stage_keys("affinity")
    assert len(keys) == 2 and all(s.dropped("affinity", k) and not s.has("affinity", k) for k in keys)
    kdir = tmp_path / "store.zarr" / "stages" / "affinity" / keys[0] / "K"
    assert [p.name for p in kdir.iterdir()] == ["zarr.json"]  # its chunks are gone, its shape stays
    # the same config again: every result is there, so no kernel is recomputed
    recs2 = run(swept)
    err = capsys.readouterr().err
    assert ": running" not in err and "(arrays dropped), skipped" in err
    assert [r["acc_avg"] for r in recs2] == [r["acc_avg"] for r in recs]
    # a new method needs the kernels: they are recomputed (the same ones), then dropped again
    swept.write_text(swept.read_text().replace('"ra", "sk"', '"ra", "sk", "ncut"'))
    run(swept, out=str(tmp_path / "o3"))
    err = capsys.readouterr().err
    assert err.count("affinity   kind=gaussian") >= 2 and "affinity   kind=gaussian dtype=float64 gamma=1.0: running" in err
    s = Store(tmp_path / "store.zarr")
    assert all(s.dropped("affinity", k) for k in s.stage_keys("affinity"))
    assert all(np.array_equal(_labels(tmp_path)[k], ref[k]) for k in ref)


def test_data_ingest_force_rebinds(tmp_path):
    root = Path(__file__).parents[1] / "data"
    s = Store(tmp_path / "s.zarr", owner={"name": "other", "path": None})
    with s.write("ingest", "k", {}) as g:
        g.attrs["n_samples"] = 1
    code, _, err = _cli("data", "ingest", "optdigits", "--root", root, "--store", tmp_path / "s.zarr")
    assert code == 2 and "--force" in err
    code, out, err = _cli("data", "ingest", "optdigits", "--root", root, "--store", tmp_path / "s.zarr", "--force")
    assert code == 0, err
    assert "5620 x 64" in out
