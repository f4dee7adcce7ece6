"""End to end: config → store → report, resume, sweeps, and bad input that loses nothing."""
import json
import subprocess
import sys

import numpy as np
import pytest

from bigclust._util.errors import DataError, StoreError, UserError
from bigclust.pipeline.runner import run
from bigclust.pipeline.stages.data import store_info
from bigclust.pipeline.store import Store

from conftest import blobs


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "bigclust.cli", *args], capture_output=True, text=True, cwd=cwd)


def _one_error_line(r):
    """Exit 2, no traceback, exactly one ``error:`` line (progress lines may precede it)."""
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    return r.returncode == 2 and "Traceback" not in r.stderr and len(errs) == 1


def _stage_count(store, stage):
    return len(Store(store).stage_keys(stage))


def test_end_to_end_records_and_reports(tmp_path, blob_file, make_config):
    cfg = make_config(blob_file, '[evaluate]\nnmi_norm = "max"\n')
    recs = run(cfg)
    assert [r["method"] for r in recs] == ["kmeans", "ra", "ncut"]
    for r in recs:
        assert r["acc_avg"] == pytest.approx(1.0) and r["nmi_max"] == pytest.approx(1.0)
        assert r["seconds"] > 0 and r["n"] == 150 and r["k"] == 3
    out = tmp_path / "out"
    js = json.loads((out / "results.json").read_text())
    assert {"method", "params", "acc_avg", "acc_max", "nmi_avg", "nmi_max", "seconds"} <= set(js[0])
    assert (out / "results.csv").read_text().startswith("method,params")
    assert "| method |" in (out / "results.md").read_text()


def test_resume_and_sweep_recompute_only_downstream(tmp_path, blob_file, make_config, capsys):
    cfg = make_config(blob_file)
    run(cfg)
    capsys.readouterr()
    run(cfg)
    err = capsys.readouterr().err
    assert "running" not in err and err.count("finished earlier, skipped") >= 5
    store = tmp_path / "store.zarr"
    before = {s: _stage_count(store, s) for s in ("ingest", "preprocess", "affinity", "embed", "cluster")}
    cfg2 = make_config(blob_file, name="run.toml")
    cfg2.write_text(cfg2.read_text().replace("gamma = 1.0", "gamma = [1.0, 2.0]"))
    run(cfg2, out=str(tmp_path / "out2"))
    err = capsys.readouterr().err
    after = {s: _stage_count(store, s) for s in before}
    # only the new γ's affinity, its two embeddings and their clusterings are new
    assert after == {"ingest": 1, "preprocess": 1, "affinity": before["affinity"] + 1,
                     "embed": before["embed"] + 2, "cluster": before["cluster"] + 2}
    assert "ingest" in err and err.count("running") == 5


def test_out_dir_of_another_run_is_refused_and_kept(tmp_path, blob_file, make_config):
    cfg = make_config(blob_file)
    run(cfg)
    before = (tmp_path / "out" / "results.json").read_text()
    cfg.write_text(cfg.read_text().replace("n_init = 5", "n_init = 6"))
    with pytest.raises(StoreError, match="holds results of another config"):
        run(cfg)
    assert (tmp_path / "out" / "results.json").read_text() == before
    other = tmp_path / "foreign"
    other.mkdir()
    (other / "notes.txt").write_text("precious")
    r = _cli("pipeline", "run", str(cfg), "--out", str(other))
    assert _one_error_line(r), r.stderr
    assert (other / "notes.txt").read_text() == "precious"
    run(cfg, force=True)  # --force keeps the old files in a replaced-* folder
    kept = list((tmp_path / "out").glob("replaced-*/results.json"))
    assert len(kept) == 1 and kept[0].read_text() == before


def test_replace_moves_old_results_and_reuses_stages(tmp_path, blob_file, make_config):
    cfg = make_config(blob_file)
    run(cfg)
    before = (tmp_path / "out" / "results.json").read_text()
    cfg.write_text(cfg.read_text().replace("n_init = 5", "n_init = 6"))   # a changed config, same upstream stages
    r = _cli("pipeline", "run", str(cfg), "--replace", "-q")
    assert r.returncode == 0, r.stderr
    kept = list((tmp_path / "out").glob("replaced-*/results.json"))
    assert len(kept) == 1 and kept[0].read_text() == before
    assert "ingest" in r.stderr and "finished earlier, skipped" in r.stderr   # not recomputed, unlike --force
    assert json.loads((tmp_path / "out" / "run.json").read_text())["config_hash"] != json.loads(
        (kept[0].parent / "run.json").read_text())["config_hash"]


def test_store_of_other_data_is_refused(tmp_path, blob_file, make_config):
    run(make_config(blob_file))
    X, y = blobs(seed=5)
    other = tmp_path / "other.npz"
    np.savez(other, X=X, y=y)
    cfg = make_config(other, name="other.toml")
    with pytest.raises(StoreError, match="written for other data"):
        run(cfg, out=str(tmp_path / "o2"))


@pytest.mark.parametrize("mutate, exc, needle", [
    (lambda X: X.__setitem__((7, 2), np.nan), DataError, "NaN or inf"),
    (lambda X: X.__setitem__((3, 1), np.inf), DataError, "NaN or inf"),
    (lambda X: X.__setitem__(11, 0.0), DataError, "all-zero row"),
])
def test_bad_values_in_data(tmp_path, make_config, mutate, exc, needle):
    X, y = blobs()
    mutate(X)
    p = tmp_path / "bad.npz"
    np.savez(p, X=X, y=y)
    with pytest.raises(exc, match=needle):
        run(make_config(p))
    assert not (tmp_path / "out").exists()


def test_k_larger_than_n_and_missing_file(tmp_path, blob_file, make_config):
    cfg = _with(make_config(blob_file), "n_init = 5", "n_init = 5\nn_clusters = 500")
    with pytest.raises(UserError, match="n_clusters=500 must be between 2 and n=150"):
        run(cfg)
    with pytest.raises(DataError, match="does not exist|not found|No such"):
        run(make_config(tmp_path / "missing.npz", name="m.toml"), out=str(tmp_path / "o3"))


def _with(path, old, new):
    path.write_text(path.read_text().replace(old, new))
    return path


def test_truncated_and_wrong_format_files(tmp_path, make_config):
    p = tmp_path / "t.npy"
    np.save(p, np.ones((50, 4), dtype=np.float32))
    p.write_bytes(p.read_bytes()[:-100])
    r = _cli("pipeline", "run", str(make_config(p)))
    assert _one_error_line(r), r.stderr
    q = tmp_path / "fake.csv.gz"
    q.write_bytes(b"this is not gzip")
    r = _cli("pipeline", "run", str(make_config(q, name="q.toml")), "--out", str(tmp_path / "oq"))
    assert _one_error_line(r), r.stderr


def test_cli_data_commands(tmp_path):
    r = _cli("data", "list")
    assert r.returncode == 0 and "mnist-6000" in r.stdout and "letter-a-e" in r.stdout
    r = _cli("data", "ingest", "optdigits", "--root", "data", "--store", str(tmp_path / "s.zarr"),
             cwd=str(__import__("pathlib").Path(__file__).parents[1]))
    assert r.returncode == 0, r.stderr
    r = _cli("data", "info", str(tmp_path / "s.zarr"), "--json")
    info = json.loads(r.stdout)
    assert info["n_samples"] == 5620 and info["n_features"] == 64 and info["n_classes"] == 10
    assert info["dtype"] == "float32" and info["sparse"] is False
    info = store_info(tmp_path / "s.zarr")
    assert info["stages"]["ingest"] == 1
    # every stage the registry knows is counted, the families' too (it once listed five)
    assert {"assign", "subspace", "semisup", "subset", "embed"} <= set(info["stages"])
    r = _cli("data", "ingest", "optdigits", "--root", str(tmp_path / "nowhere"), "--store", str(tmp_path / "t.zarr"))
    assert r.returncode == 2 and "nowhere" in r.stderr and "Traceback" not in r.stderr


def test_kill_minus_9_mid_stage_then_resume(tmp_path, make_config):
    import os
    import signal
    import time
    X, y = blobs(n=1500, d=8)
    p = tmp_path / "big.npz"
    np.savez(p, X=X, y=y)
    cfg = make_config(p)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]',
                                           'names = ["bbs"]\n[bbs]\nn_iter = 3000\nsolver = "alternating"'))
    proc = subprocess.Popen([sys.executable, "-m", "bigclust.cli", "pipeline", "run", str(cfg)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    tmpdir = tmp_path / "store.zarr" / "tmp"
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until the embed stage (the slow one) is being worked on
        line = proc.stderr.readline()
        if "embed" in line and "running" in line:
            time.sleep(1.0)
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _stage_count(tmp_path / "store.zarr", "embed") == 0
    recs = run(cfg)
    assert recs[0]["acc_avg"] > 0.9
    assert not any(tmpdir.iterdir())


def test_mbbs_over_gamma_sweep(tmp_path, blob_file, make_config):
    cfg = _with(make_config(blob_file), 'names = ["kmeans", "ra", "ncut"]', 'names = ["ra", "mbbs"]\n[mbbs]\nlam = 5.0')
    cfg = _with(cfg, "gamma = 1.0", "gamma = [2.0, 0.5]")
    recs = run(cfg)
    m = [r for r in recs if r["method"] == "mbbs"]
    assert len(m) == 1 and m[0]["params"]["gammas"] == [2.0, 0.5]
    assert len(m[0]["alpha"]) == 2 and abs(sum(m[0]["alpha"]) - 1) < 1e-9 and min(m[0]["alpha"]) >= 0
    assert m[0]["row_err"] < 1e-8 and m[0]["acc_avg"] == pytest.approx(1.0)
    one = _with(make_config(blob_file, name="one.toml"), 'names = ["kmeans", "ra", "ncut"]', 'names = ["mbbs"]')
    with pytest.raises(UserError, match="at least two values"):
        run(one, out=str(tmp_path / "o_one"))


def test_minibatch_kmeans_selected_by_config_and_threshold(tmp_path, blob_file, make_config):
    cfg = _with(make_config(blob_file), "n_init = 5", 'n_init = 3\nalgorithm = "minibatch"\nbatch_size = 64')
    recs = run(cfg)
    assert all(r["acc_avg"] > 0.99 for r in recs)
    s = Store(tmp_path / "store.zarr")
    assert {s.open("cluster", k).attrs["algorithm"] for k in s.stage_keys("cluster")} == {"minibatch"}
    auto = _with(make_config(blob_file, name="auto.toml"), "n_init = 5", "n_init = 3\nminibatch_threshold = 100")
    run(auto, out=str(tmp_path / "o_auto"))
    assert len(s.stage_keys("cluster")) == 6  # n = 150 > 100: mini-batch again, other params


def test_minibatch_reads_a_small_embedding_once_with_the_same_labels(tmp_path, blob_file, make_config):
    """An embedding within a quarter of max_memory is read into memory (random batches would decompress every
    zarr chunk per step); the labels and inertia equal those of the lazy zarr read."""
    from bigclust.pipeline.stages import ClusterParams, cluster

    cfg = _with(make_config(blob_file), "n_init = 5", 'n_init = 3\nalgorithm = "minibatch"\nbatch_size = 64')
    run(cfg)
    s = Store(tmp_path / "store.zarr")
    key = sorted(s.stage_keys("embed"))[0]
    out = {}
    for budget in (0, 1 << 30):
        p = ClusterParams(input=key, src="embed", array="E", k=3, n_init=3, max_iter=100, algorithm="minibatch",
                          minibatch_threshold=100, batch_size=64, seed=0, max_memory=budget)
        cluster(tmp_path / "store.zarr", f"mb{budget}", {}, p)
        g = s.open("cluster", f"mb{budget}")
        out[budget] = (g["labels"][...], g["inertia"][...])
    assert np.array_equal(out[0][0], out[1 << 30][0]) and np.array_equal(out[0][1], out[1 << 30][1])


def test_knn_affinity_sparse_path(tmp_path, blob_file, make_config):
    cfg = _with(make_config(blob_file), 'names = ["kmeans", "ra", "ncut"]',
                'names = ["ra", "ncut", "sk", "bbs"]\n[bbs]\nsolver = "dual"')
    cfg = _with(cfg, "gamma = 1.0", 'gamma = 1.0\nkind = "knn"\nn_neighbors = 10')
    recs = run(cfg)
    assert [r["method"] for r in recs] == ["ra", "ncut", "sk", "bbs"]
    for r in recs:
        assert r["acc_avg"] == pytest.approx(1.0) and r["params"]["n_neighbors"] == 10
    assert recs[2]["row_err"] < 1e-8 and recs[3]["row_err"] < 1e-8   # SK and exact BBS on the graph
    s = Store(tmp_path / "store.zarr")
    (key,) = s.stage_keys("affinity")
    assert s.open("affinity", key)["K"].attrs["format"] == "csr"


def test_out_of_core_path_equals_in_memory(tmp_path, make_config):
    X, y = blobs(n=400, k=3, d=5, seed=4, sep=3.0)
    p = tmp_path / "d.npz"
    np.savez(p, X=X, y=y)
    body = lambda cfg: _with(cfg, 'names = ["kmeans", "ra", "ncut"]', 'names = ["ra", "ncut", "sk", "bbs"]\n[sk]\nn_iter = 30\n[bbs]\nn_iter = 30\nsolver = "alternating"')
    mem = run(body(make_config(p)), out=str(tmp_path / "o_mem"))
    # 400 x 400 float64 = 1.28 MB: a 1 MB budget forces streaming in row blocks
    ooc_cfg = body(make_config(p, name="ooc.toml"))
    ooc_cfg = _with(ooc_cfg, 'path = "store.zarr"', 'path = "store_ooc.zarr"\nmax_memory = "1MB"')
    ooc = run(ooc_cfg, out=str(tmp_path / "o_ooc"))
    s = Store(tmp_path / "store_ooc.zarr")
    assert all(s.open("embed", k).attrs["out_of_core"] for k in s.stage_keys("embed"))
    assert not any((tmp_path / "store_ooc.zarr" / "stages" / "embed").glob("*/P_scratch"))
    for a, b in zip(mem, ooc):
        assert a["method"] == b["method"]
        assert a["MB"] == pytest.approx(b["MB"], rel=1e-6, abs=1e-12)
        assert a["MC"] == pytest.approx(b["MC"], rel=1e-6, abs=1e-12)
        assert a["acc_avg"] == pytest.approx(b["acc_avg"], abs=1e-9)
    bad = _with(ooc_cfg, 'solver = "alternating"', 'solver = "dual"')
    with pytest.raises(UserError, match="only the alternating solver streams"):
        run(bad, out=str(tmp_path / "o_bad"))


def test_out_of_core_iterated_ncut_and_mbbs(tmp_path, make_config):
    from bigclust.normalize import mbbs

    X, y = blobs(n=400, k=3, d=5, seed=4, sep=3.0)
    p = tmp_path / "d.npz"
    np.savez(p, X=X, y=y)
    body = lambda cfg: _with(_with(cfg, 'names = ["kmeans", "ra", "ncut"]',
                                   'names = ["ncut", "mbbs"]\n[ncut]\nn_iter = 3\n[mbbs]\nn_iter = 20\nlam = 30000.0\nn_outer = 4'),
                             "gamma = 1.0", "gamma = [1.0, 4.0]")
    mem = run(body(make_config(p)), out=str(tmp_path / "o_mem"))
    ooc_cfg = _with(body(make_config(p, name="ooc.toml")), 'path = "store.zarr"',
                    'path = "store_ooc.zarr"\nmax_memory = "1MB"')
    ooc = run(ooc_cfg, out=str(tmp_path / "o_ooc"))
    s = Store(tmp_path / "store_ooc.zarr")
    assert all(s.open("embed", k).attrs["out_of_core"] for k in s.stage_keys("embed"))
    assert not list((tmp_path / "store_ooc.zarr" / "stages" / "embed").glob("*/*_scratch"))
    ncut_mem = [r for r in mem if r["method"] == "ncut"]
    ncut_ooc = [r for r in ooc if r["method"] == "ncut"]
    assert len(ncut_ooc) == 2
    for a, b in zip(ncut_mem, ncut_ooc):  # iterated Ncut streamed = in memory
        assert a["MB"] == pytest.approx(b["MB"], rel=1e-9) and a["MC"] == pytest.approx(b["MC"], rel=1e-9)
        assert a["acc_avg"] == pytest.approx(b["acc_avg"], abs=1e-9)
    # out of core MBBS is the alternating-G-step MBBS of the two stored kernels, weights bit for bit
    (rec,) = [r for r in ooc if r["method"] == "mbbs"]
    Ks = [np.asarray(s.open("affinity", k)["K"][...], dtype=np.float64) for k in s.stage_keys("affinity")]
    Ks.sort(key=lambda K: K.sum())  # γ = 1 has the smaller entries
    _, info = mbbs(Ks, lam=30000.0, n_outer=4, solver="alternating", n_iter=20, return_info=True)
    assert rec["alpha"] == [float(a) for a in info.alpha] and 0 < min(rec["alpha"])
    assert rec["acc_avg"] > 0.9


def test_cli_solver_warning_is_one_line(tmp_path, blob_file, make_config):
    # 3 iterations of Alg. 1 cannot reach 1e-12: the run finishes and says so in one line
    cfg = _with(make_config(blob_file), 'names = ["kmeans", "ra", "ncut"]', 'names = ["bbs"]\n[bbs]\nn_iter = 3\ntol = 1e-12\nsolver = "alternating"')
    r = _cli("pipeline", "run", str(cfg))
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if "did not converge" in ln]
    assert len(warn) == 1 and warn[0].startswith("warning: BBS (alternating) did not converge in 3 iterations")
    assert "return fn(" not in r.stderr and "Warning:" not in r.stderr


def test_minibatch_runs_on_sparse_data(tmp_path, make_config):
    # an svmlight file is ingested as CSR; forced mini-batch k-means runs on it end to end
    # (that only batches are densified is checked in test_kmeans::test_minibatch_sparse_equals_dense)
    from sklearn.datasets import dump_svmlight_file

    X, y = blobs(n=300)
    X[X < 2.0] = 0.0
    path = tmp_path / "blobs.svm"
    dump_svmlight_file(X, y, str(path))
    cfg = _with(make_config(path), 'names = ["kmeans", "ra", "ncut"]', 'names = ["kmeans"]')
    cfg = _with(cfg, "n_init = 5", 'n_init = 3\nalgorithm = "minibatch"\nbatch_size = 64')
    recs = run(cfg)
    assert recs[0]["acc_avg"] > 0.95
    s = Store(tmp_path / "store.zarr")
    assert {s.open("cluster", k).attrs["algorithm"] for k in s.stage_keys("cluster")} == {"minibatch"}


def test_verify_names_the_numerics_when_bits_differ(tmp_path, blob_file, make_config):
    from bigclust.pipeline.verify import verify
    from bigclust.report.tables import numerics
    cfg = make_config(blob_file)
    run(cfg)
    out = tmp_path / "out"
    made = json.loads((out / "run.json").read_text())
    assert {k: made[k] for k in ("blas", "blas_threads", "numba_threads", "numba_cpu")} == numerics()
    ok, text = verify(out, cfg)
    assert ok and "Numerics" not in text                      # same machine, same bits: nothing to explain
    rec = json.loads((out / "results.json").read_text())
    rec[0]["acc_avg"] += 1e-12                                # as if another machine had made them
    (out / "results.json").write_text(json.dumps(rec))
    ok, text = verify(out, cfg)
    assert not ok and "Numerics" not in text                  # same numerics: a real difference, no excuse offered
    (out / "run.json").write_text(json.dumps({**made, "blas": ["openblas SkylakeX"], "blas_threads": 7}))
    ok, text = verify(out, cfg)
    last = text.splitlines()[-1]
    assert not ok and last.startswith("Numerics here: ") and "when the results were made: openblas SkylakeX with 7 " \
        "threads" in last and "OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=7 NUMBA_NUM_THREADS=" in last
    (out / "run.json").write_text(json.dumps({**made, "numba_cpu": "znver5"}))   # Numba's CPU alone differs
    last = verify(out, cfg)[1].splitlines()[-1]
    assert "Numba threads compiled for znver5. Bits" in last and "NUMBA_CPU_NAME=znver5 " in last
    older = {k: v for k, v in made.items() if k != "numba_cpu"}                    # a run.json from before the CPU
    (out / "run.json").write_text(json.dumps({**older, "blas_threads": 7}))
    last = verify(out, cfg)[1].splitlines()[-1]
    assert "NUMBA_CPU_NAME" not in last and last.count("compiled for") == 1        # only here's CPU is named


def test_out_dir_of_the_same_settings_under_an_older_schema_is_accepted(tmp_path, blob_file, make_config):
    # Config.hash covers every section with its defaults, so a key added to the schema later (here: faked by
    # removing one from the record) changes it; the committed reproductions must still re-run into their folders
    cfg = make_config(blob_file)
    run(cfg)
    rj = tmp_path / "out" / "run.json"
    rec = json.loads(rj.read_text())
    rec["config_hash"] = "0123456789abcdef"
    del rec["config"]["cluster"]["batch_size"]                   # "added since", and left at its default
    rec["config"]["nmf"]["max_iter"] = 7                          # a method this config does not use
    rj.write_text(json.dumps(rec))
    run(cfg)                                                      # accepted: same settings
    assert not list((tmp_path / "out").glob("replaced-*"))
    rec = json.loads(rj.read_text())
    rec["config_hash"] = "0123456789abcdef"
    rec["config"]["cluster"]["n_init"] = 6                        # a setting that differs
    rj.write_text(json.dumps(rec))
    with pytest.raises(StoreError, match="holds results of another config"):
        run(cfg)
    rec["config"]["cluster"]["n_init"] = 5                        # back as it was
    rec["config"]["cluster"]["kmeans_n_init"] = 3                 # a key since moved or renamed: cannot vouch
    rj.write_text(json.dumps(rec))
    with pytest.raises(StoreError, match="holds results of another config"):
        run(cfg)


def test_labels_reach_the_stages_as_four_byte_integers_when_they_fit():
    """Every stage task holds y while it runs: int32 where the stored int64 labels fit, the same values; labels
    beyond int32 (or not integers) stay as stored."""
    import zarr

    from bigclust.pipeline.runner import _labels

    g = zarr.open_group(store={}, mode="w")
    for name, y in (("small", np.array([0, 3, -1, 9], np.int64)), ("big", np.array([0, 2**40], np.int64)),
                    ("text", np.array([1.5, 2.0]))):
        sub = g.create_group(name + "_g")
        sub.create_array("y", shape=y.shape, dtype=y.dtype)[...] = y
        out = _labels(sub)
        np.testing.assert_array_equal(out, y)
        assert out.dtype == (np.int32 if name == "small" else y.dtype)


@pytest.mark.filterwarnings("ignore:kNN graph")   # the three blobs' neighbour lists do not meet: not the point here
def test_the_embed_stage_records_its_arpack_solves(tmp_path, blob_file, make_config, monkeypatch):
    """Each ARPACK solve's iterations and products reach the run's record (on the sparse kNN graph, filtered)."""
    from bigclust.algo import _filtered
    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    cfg = _with(make_config(blob_file, '[embed]\neigensolver = "eigsh"\n'), "gamma = 1.0",
                'gamma = 1.0\nkind = "knn"\nn_neighbors = 10')
    recs = run(cfg)
    assert [r["method"] for r in recs] == ["kmeans", "ra", "ncut"] and "eigen_solves" not in recs[0]
    for r in recs[1:]:
        (solve,) = r["eigen_solves"]
        assert solve["rows"] == 150 and solve["k"] == 3 and solve["converged"] and solve["iterations"] >= 1
        assert solve["filter_degree"] == _filtered.DEGREE and solve["products"] > solve["ncv"] * _filtered.DEGREE
    js = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [r.get("eigen_solves") for r in js] == [r.get("eigen_solves") for r in recs]
    import csv
    rows = list(csv.DictReader((tmp_path / "out" / "results.csv").open()))
    assert [json.loads(r["eigen_solves"]) for r in rows[1:]] == [r["eigen_solves"] for r in recs[1:]]   # JSON
