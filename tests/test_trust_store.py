"""Issue 26, "nothing lost, nothing surprising" for the store and the output folder.

The issue's items, each with its test:

1. a foreign zarr store is refused and left byte for byte; a zarr array at the store path is one line
   (``pipeline run``, ``store du``, ``store clean --all``): test_1_foreign_zarr_store_is_refused_untouched,
   test_1_zarr_array_at_the_store_path_is_one_line
2. locks: runs of different configs on one output folder are refused while one runs (two processes; a lock
   of a killed process is stale), runs of one config started together both finish and compute each stage
   once: test_2_another_config_is_refused_while_one_runs, test_2_two_configs_started_together,
   test_2_one_config_started_twice_together
3. ``[output] dir = "."`` with ``--replace`` moves only the previous results, never the config, the data or
   the store, and the same command runs again: test_3_replace_in_the_config_folder_moves_only_results
4. ``store clean`` on a read-only file system reports what was actually removed, and fails in one line:
   test_4_store_clean_on_a_read_only_file_system
7. a damaged ``zarr.json`` of a stage instance is one line naming it, with the ``store clean --stage``
   command that drops it: test_7_damaged_stage_metadata_names_the_stage_and_the_command

Then the cases probed after the fixes (``test_probe_*``): see each test's first comment.
"""
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bigclust._util.errors import StoreError
from bigclust.cli import main
from bigclust.pipeline import locks
from bigclust.pipeline.config import load
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store

from conftest import write_config

FAST = '[method]\nnames = ["kmeans"]\n'


def _cfg(folder, data="blobs.npz", extra="", name="run.toml"):
    """A config over ``data`` with only k-means (fast); ``extra`` replaces sections of the base config."""
    p = write_config(folder, data, extra, name)
    p.write_text(p.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["kmeans"]'))
    return p


def _cli(*args):
    r = CliRunner().invoke(main, list(map(str, args)))
    return r.exit_code, r.stdout, r.stderr


def _proc(*args, cwd=None):
    return subprocess.Popen([sys.executable, "-m", "bigclust.cli", *map(str, args)], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _one_line(code, err):
    """Exit 2, no traceback, exactly one ``error:`` line; returns it."""
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


@pytest.fixture
def data(tmp_path):
    from conftest import blobs
    X, y = blobs(n=90)
    np.savez(tmp_path / "blobs.npz", X=X, y=y)
    return tmp_path / "blobs.npz"


# -- 1. foreign stores ---------------------------------------------------------------------------------------

def test_1_foreign_zarr_store_is_refused_untouched(tmp_path, data):
    import zarr
    g = zarr.open_group(str(tmp_path / "store.zarr"), mode="w")
    g.create_array("X", data=np.ones((4, 3)))
    g.create_array("tmp", data=np.arange(10.0), chunks=(5,))     # named like bigclust's tmp/: must survive
    before = _snapshot(tmp_path / "store.zarr")
    cfg = _cfg(tmp_path)
    with pytest.raises(StoreError, match="zarr group that bigclust did not create .*X, tmp"):
        run(cfg)
    with pytest.raises(StoreError, match="did not create"):
        run(cfg, force=True)                                       # --force takes over no foreign store
    root = os.environ.get("BIGCLUST_DATA")
    if root and (Path(root) / "optdigits").is_dir():        # data ingest --force takes over no foreign store
        code, _, err = _cli("data", "ingest", "optdigits", "--root", root, "--store", tmp_path / "store.zarr",
                            "--force")
        assert "did not create" in _one_line(code, err)
    assert _snapshot(tmp_path / "store.zarr") == before
    assert not (tmp_path / "out").exists()                        # refused before the output folder was made
    # an empty zarr group is no one's data: it becomes the store
    zarr.open_group(str(tmp_path / "empty.zarr"), mode="w")
    assert run(cfg, store=str(tmp_path / "empty.zarr"))[0]["acc_avg"] > 0.9


def test_1_zarr_array_at_the_store_path_is_one_line(tmp_path, data):
    import zarr
    zarr.create_array(str(tmp_path / "store.zarr"), data=np.ones((3, 3)))
    before = _snapshot(tmp_path / "store.zarr")
    cfg = _cfg(tmp_path)
    p = _proc("pipeline", "run", cfg, "-q")
    _, err = p.communicate()
    assert "is a zarr array, not a bigclust store" in _one_line(p.returncode, err)
    for cmd in (("store", "du"), ("store", "clean", "--all"), ("data", "info")):
        code, _, err = _cli(*cmd, tmp_path / "store.zarr")
        assert "is a zarr array" in _one_line(code, err), cmd
    assert _snapshot(tmp_path / "store.zarr") == before


# -- 2. locks ------------------------------------------------------------------------------------------------

_HOLD = """
import sys, time
from bigclust.pipeline.locks import hold_output
with hold_output(sys.argv[1], sys.argv[2], "run of A.toml"):
    print("holding", flush=True)
    time.sleep(600)
"""


def test_2_another_config_is_refused_while_one_runs(tmp_path, data):
    a = _cfg(tmp_path, name="A.toml")
    b = _cfg(tmp_path, name="B.toml")
    b.write_text(b.read_text().replace("n_init = 5", "n_init = 6"))
    # process 1 holds the output folder as a run of A does (for as long as the test needs)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path / "out"), load(a).hash],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        lock = next((tmp_path / "out" / locks.OUT_LOCK).glob("output@*.lock"))
        assert json.loads(lock.read_text())["pid"] == holder.pid and json.loads(lock.read_text())["host"]
        p = _proc("pipeline", "run", b, "-q")                    # process 2: another config, same folder
        _, err = p.communicate()
        line = _one_line(p.returncode, err)
        assert "being written by a run of another config" in line and f"pid {holder.pid}" in line
        assert not (tmp_path / "out" / "results.json").exists()
        p = _proc("pipeline", "run", a, "-q")                    # the same config shares the folder
        assert p.wait() == 0, p.stderr.read()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # the holder was killed: its lock (a dead pid on this host) is stale, and B's refusal is now the
    # ordinary one of a folder holding A's results
    p = _proc("pipeline", "run", b, "-q")
    _, err = p.communicate()
    assert "holds results of another config" in _one_line(p.returncode, err)
    assert _proc("pipeline", "run", b, "-q", "--replace").wait() == 0
    assert not (tmp_path / "out" / locks.OUT_LOCK).exists() and not (tmp_path / "store.zarr" / "locks").exists()


def test_2_two_configs_started_together(tmp_path, data):
    a = _cfg(tmp_path, name="A.toml")
    b = _cfg(tmp_path, name="B.toml")
    b.write_text(b.read_text().replace("n_init = 5", "n_init = 6"))
    procs = {c: _proc("pipeline", "run", c, "-q") for c in (a, b)}
    outs = {c: p.communicate() for c, p in procs.items()}
    codes = {c: p.returncode for c, p in procs.items()}
    assert sorted(codes.values()) == [0, 2], {c: e for c, (_, e) in outs.items()}
    won = next(c for c in codes if codes[c] == 0)
    lost = next(c for c in codes if codes[c] == 2)
    line = _one_line(2, outs[lost][1])
    assert "another config" in line                       # by the lock, or by the finished run's results
    rec = json.loads((tmp_path / "out" / "run.json").read_text())
    assert rec["config_hash"] == load(won).hash and rec["complete"]


def test_2_one_config_started_twice_together(tmp_path, data):
    cfg = _cfg(tmp_path)
    procs = [_proc("pipeline", "run", cfg, "-q") for _ in range(2)]
    errs = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    s = Store(tmp_path / "store.zarr")
    assert {st: len(s.stage_keys(st)) for st in s.stages()} == {"ingest": 1, "preprocess": 1, "cluster": 1}
    assert sum(e.count(": running") for e in errs) == 3   # each instance computed once, by one of them
    assert json.loads((tmp_path / "out" / "run.json").read_text())["complete"]
    assert not (tmp_path / "out" / locks.OUT_LOCK).exists() and not (tmp_path / "store.zarr" / "locks").exists()


# -- 3. --replace in the config's own folder ---------------------------------------------------------------

def test_3_replace_in_the_config_folder_moves_only_results(tmp_path, data):
    cfg = _cfg(tmp_path)
    cfg.write_text(cfg.read_text().replace('dir = "out"', 'dir = "."'))
    (tmp_path / "notes.txt").write_text("mine")
    inputs = {p.name for p in tmp_path.iterdir()}           # run.toml, blobs.npz, notes.txt
    p = _proc("pipeline", "run", cfg, "-q", "--replace", cwd=tmp_path)
    assert p.wait() == 0, p.stderr.read()
    first = json.loads((tmp_path / "results.json").read_text())
    cfg.write_text(cfg.read_text().replace("n_init = 5", "n_init = 6"))     # another config, same folder
    for _ in range(2):                                      # the same command runs again, and again
        p = _proc("pipeline", "run", cfg, "-q", "--replace", cwd=tmp_path)
        assert p.wait() == 0, p.stderr.read()
    assert inputs | {"store.zarr"} <= {p.name for p in tmp_path.iterdir()}
    assert (tmp_path / "notes.txt").read_text() == "mine" and Store(tmp_path / "store.zarr").stage_keys("ingest")
    moved = sorted(tmp_path.glob("replaced-*"))
    assert len(moved) == 2
    for d in moved:   # only what a run wrote
        assert {p.name for p in d.iterdir()} <= {"run.json", "results.json", "results.csv", "results.md", "labels"}
    assert json.loads((moved[0] / "results.json").read_text()) == first


# -- 4. store clean on a read-only file system ------------------------------------------------------------

def test_4_store_clean_on_a_read_only_file_system(tmp_path, data, monkeypatch):
    cfg = _cfg(tmp_path)
    cfg.write_text(cfg.read_text().replace("n_init = 5", "n_init = [3, 4, 5]"))
    run(cfg)
    s = Store(tmp_path / "store.zarr")
    keys = s.stage_keys("cluster")
    assert len(keys) == 3
    real, calls = os.replace, []

    def read_only_after(n):
        def replace(src, dst):
            if "stages" in str(src):                       # the store's instances: the file system refuses
                calls.append(src)
                if len(calls) > n:
                    raise OSError(errno.EROFS, "Read-only file system", str(src))
            return real(src, dst)
        return replace

    monkeypatch.setattr(os, "replace", read_only_after(0))
    code, out, err = _cli("store", "clean", tmp_path / "store.zarr")
    line = _one_line(code, err)
    assert "removed 0 of 4 stage instance(s)" in line and "Read-only file system" in line, line
    assert "removed 4" not in out + err
    assert all(s.has("cluster", k) for k in keys) and s.stage_keys("preprocess")   # nothing is half-removed
    calls.clear()
    monkeypatch.setattr(os, "replace", read_only_after(1))   # one goes, then the disk turns read-only
    code, out, err = _cli("store", "clean", tmp_path / "store.zarr")
    assert "removed 1 of 4 stage instance(s)" in _one_line(code, err)
    assert sum(s.has("cluster", k) for k in keys) + len(s.stage_keys("preprocess")) == 3
    monkeypatch.setattr(os, "replace", real)
    code, out, err = _cli("store", "clean", tmp_path / "store.zarr")
    assert code == 0 and "removed 3 stage instance(s)" in out, err
    assert not any(s.stage_keys(st) for st in ("cluster", "preprocess"))


# -- 7. damaged metadata of a stage instance ------------------------------------------------------------

@pytest.mark.parametrize("where,text", [("cluster", ""), ("preprocess/X", "{not json"), ("cluster", "[1, 2]")])
def test_7_damaged_stage_metadata_names_the_stage_and_the_command(tmp_path, data, where, text):
    cfg = _cfg(tmp_path)
    assert _proc("pipeline", "run", cfg, "-q").wait() == 0
    before = json.loads((tmp_path / "out" / "results.json").read_text())
    stage, _, array = where.partition("/")
    s = Store(tmp_path / "store.zarr")
    key = s.stage_keys(stage)[0]
    meta = tmp_path / "store.zarr" / "stages" / stage / key / array / "zarr.json"
    meta.write_text(text)
    p = _proc("pipeline", "run", cfg, "-q")
    _, err = p.communicate()
    line = _one_line(p.returncode, err)
    command = f"bigclust store clean {tmp_path / 'store.zarr'} --stage {stage}/{key}"
    assert f"stage {stage}/{key} of store" in line and "damaged" in line and f"`{command}`" in line, line
    assert "JSONDecodeError" not in err
    code, out, err = _cli(*command.split()[1:])
    assert code == 0 and f"removed 1 stage instance(s)" in out and f"{stage}/{key}" in out, err
    assert _proc("pipeline", "run", cfg, "-q").wait() == 0     # recomputed, to the same result
    assert json.loads((tmp_path / "out" / "results.json").read_text())[0]["acc_avg"] == before[0]["acc_avg"]
    assert Store(tmp_path / "store.zarr").has(stage, key)


# -- probes --------------------------------------------------------------------------------------------------

def test_probe_store_path_a_file_a_dangling_link_or_the_output_folder(tmp_path, data):
    # a file where the store goes (Store itself, as `data ingest` and the estimators open it), a symbolic link
    # to nowhere as store or output folder, and the store as output folder: one line each, nothing written
    (tmp_path / "f").write_text("mine")
    with pytest.raises(StoreError, match="is a file, not a folder"):
        Store(tmp_path / "f", owner={"name": "a"})
    cfg = _cfg(tmp_path)
    (tmp_path / "store.zarr").symlink_to(tmp_path / "nowhere" / "s.zarr")
    with pytest.raises(StoreError, match="symbolic link to .*nowhere/s.zarr, which does not exist"):
        run(cfg)
    (tmp_path / "store.zarr").unlink()
    (tmp_path / "out").symlink_to(tmp_path / "gone")
    with pytest.raises(StoreError, match="output folder .*symbolic link"):
        run(cfg)
    (tmp_path / "out").unlink()
    with pytest.raises(StoreError, match="the output folder .*store.zarr is .*store.zarr; give the results"):
        run(cfg, out=str(tmp_path / "store.zarr"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blobs.npz", "f", "run.toml"]


def test_probe_damaged_or_foreign_store_root(tmp_path, data):
    import zarr
    cfg = _cfg(tmp_path)
    # a zarr group holding only the user's attributes: they would be merged with bigclust's
    zarr.open_group(str(tmp_path / "store.zarr"), mode="w").attrs["mine"] = "precious"
    before = _snapshot(tmp_path / "store.zarr")
    with pytest.raises(StoreError, match="did not create .*attributes"):
        run(cfg)
    assert _snapshot(tmp_path / "store.zarr") == before
    # a bigclust store whose root zarr.json is damaged: one line, for run and store du
    (tmp_path / "store.zarr" / "zarr.json").write_text("{garbage")
    with pytest.raises(StoreError, match="root metadata .* is unreadable"):
        run(cfg)
    code, _, err = _cli("store", "du", tmp_path / "store.zarr")
    assert "is unreadable" in _one_line(code, err)


def test_probe_files_where_the_store_keeps_folders(tmp_path, data):
    # a file named tmp in the store; a user's file inside tmp/; a folder bigclust did not write under stages/
    cfg = _cfg(tmp_path)
    run(cfg)
    store = tmp_path / "store.zarr"
    (store / "tmp").mkdir(exist_ok=True)
    (store / "tmp" / "notes.txt").write_text("mine")
    (store / "stages" / "cluster" / "mine").mkdir()
    (store / "stages" / "cluster" / "mine" / "a.txt").write_text("mine")
    (store / "stages" / "mystage" / "x").mkdir(parents=True)
    code, out, err = _cli("store", "clean", store, "--all")
    assert code == 0 and "removed 3 stage instance(s)" in out, err      # ingest, preprocess, cluster
    assert (store / "tmp" / "notes.txt").exists() and (store / "stages" / "cluster" / "mine" / "a.txt").exists()
    assert (store / "stages" / "mystage" / "x").is_dir()
    import shutil
    shutil.rmtree(store / "tmp")
    (store / "tmp").write_text("mine")
    with pytest.raises(StoreError, match="holds a file 'tmp' where bigclust keeps a folder"):
        run(cfg)
    assert (store / "tmp").read_text() == "mine"


def test_probe_partly_deleted_instances(tmp_path, data):
    # an array folder of a finished instance deleted: one line naming it (not KeyError); an instance folder
    # without its zarr.json: recomputed in place
    import shutil
    cfg = _cfg(tmp_path)
    run(cfg)
    s = Store(tmp_path / "store.zarr")
    pre = s.stage_keys("preprocess")[0]
    shutil.rmtree(tmp_path / "store.zarr" / "stages" / "preprocess" / pre / "X")
    with pytest.raises(StoreError, match=f"preprocess/{pre} of store .* damaged \\(its array 'X' is missing\\); "
                                         f"drop it with `bigclust store clean .* --stage preprocess/{pre}`"):
        run(cfg)
    assert _cli("store", "clean", tmp_path / "store.zarr", "--stage", f"preprocess/{pre}")[0] == 0
    cl = s.stage_keys("cluster")[0]
    (tmp_path / "store.zarr" / "stages" / "cluster" / cl / "zarr.json").unlink()
    recs = run(cfg)
    assert recs[0]["acc_avg"] > 0.9 and s.has("cluster", cl) and s.has("preprocess", pre)


def test_probe_store_clean_stage_names(tmp_path, data):
    # --stage with a missing instance, a path that climbs out of the store, a bare stage, or with --config
    run(_cfg(tmp_path))
    store = tmp_path / "store.zarr"
    before = _snapshot(tmp_path)
    for name in ("cluster/nope", "../../run.toml", "cluster/../../../run.toml", "cluster", "ingest/.", "/"):
        code, _, err = _cli("store", "clean", store, "--stage", name)
        assert "has no stage instance" in _one_line(code, err), name
    code, _, err = _cli("store", "clean", store, "--stage", "cluster/x", "--config", tmp_path / "run.toml")
    assert "either --stage or --config" in _one_line(code, err)
    assert _snapshot(tmp_path) == before


_USE = """
import sys, time
from bigclust.pipeline.locks import try_lock
held, _ = try_lock(sys.argv[1], sys.argv[2], sys.argv[3], shared=sys.argv[3] == "run", what=sys.argv[4])
print("holding", flush=True)
time.sleep(600)
"""


def _holding(*args):
    p = subprocess.Popen([sys.executable, "-c", _USE, *map(str, args)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "holding"
    return p


def test_probe_store_clean_and_runs_exclude_each_other(tmp_path, data):
    # store clean while a run uses the store is refused (it would delete what the run reads); a run while
    # store clean holds the store is refused; --dry-run only looks
    cfg = _cfg(tmp_path)
    run(cfg)
    store = tmp_path / "store.zarr"
    p = _holding(store / "locks", "use", "run", "run of other.toml")
    try:
        code, _, err = _cli("store", "clean", store)
        assert "is in use by a run" in _one_line(code, err) and f"pid {p.pid}" in err
        assert _cli("store", "clean", store, "--dry-run")[0] == 0
        assert run(cfg)                                   # runs share the store
    finally:
        p.kill()
        p.wait()
    p = _holding(store / "locks", "use", "clean", "store clean")
    try:
        with pytest.raises(StoreError, match="is being cleaned"):
            run(cfg)
    finally:
        p.kill()
        p.wait()
    assert _cli("store", "clean", store)[0] == 0          # the killed holders' locks are stale


def test_probe_stale_and_foreign_locks(tmp_path, data):
    # an output lock of another host: live while fresh, stale once not refreshed for STALE_SECONDS; an
    # unreadable lock file is no holder's
    cfg = _cfg(tmp_path)
    folder = tmp_path / "out" / locks.OUT_LOCK
    folder.mkdir(parents=True)
    other = folder / "output@elsewhere-1-abcdef01.lock"
    other.write_text(json.dumps({"pid": 1, "host": "elsewhere", "started": 0, "ident": "x", "what": "run of B"}))
    with pytest.raises(StoreError, match="being written by a run of another config .*pid 1 on host elsewhere"):
        run(cfg)
    old = time.time() - locks.STALE_SECONDS - 60
    os.utime(other, (old, old))
    (folder / "output@x-2-2.lock").write_text("garbage")
    assert run(cfg)[0]["acc_avg"] > 0.9
    assert not folder.exists()


def test_probe_waiting_for_a_stage_another_process_computes(tmp_path):
    # a stage instance held by a live process is waited for and then reused; one held by a killed process
    # is taken over at once
    s = Store(tmp_path / "s.zarr", owner={"name": "a"})
    p = _holding(tmp_path / "s.zarr" / "locks", "x-k", "", "x k")
    said = []

    def finish():
        time.sleep(1.5)
        with s.write("x", "k", {}) as g:
            g.attrs["by"] = "the other run"
        p.kill()
        p.wait()
    import threading
    t = threading.Thread(target=finish)
    t.start()
    with locks.computing(s, "x", "k", said.append, "x k", poll=0.2) as skip:
        assert skip
    t.join()
    assert len(said) == 2 and "being computed by pid" in said[0] and "finished by the other run" in said[1]
    p = _holding(tmp_path / "s.zarr" / "locks", "x-j", "", "x j")
    p.kill()
    p.wait()
    said.clear()
    with locks.computing(s, "x", "j", said.append, "x j", poll=0.2) as skip:
        assert not skip and not said


def test_probe_writers_of_other_hosts_keep_their_tmp(tmp_path):
    # a distributed run's worker on another host writes under tmp/: opening the store here must not delete
    # it because its pid is not alive here; a dead writer of this host, and one of another host idle for
    # more than a day, are removed
    Store(tmp_path / "s.zarr", owner={"name": "a"})
    tmp = tmp_path / "s.zarr" / "tmp"
    live = tmp / "x-k-4242-abcdef01@otherhost"
    idle = tmp / "x-k-4243-abcdef02@otherhost"
    dead = tmp / "x-k-999999-abcdef03"
    for d in (live, idle, dead):
        d.mkdir(parents=True)
    os.utime(idle, (time.time() - 2 * 86400,) * 2)
    Store(tmp_path / "s.zarr")
    assert live.exists() and not idle.exists() and not dead.exists()


def test_probe_output_folder_results_not_written_by_bigclust(tmp_path, data):
    # a results.csv of the user's (no run.json), or results beside a damaged run.json: refused even with
    # --replace, nothing moved
    cfg = _cfg(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.csv").write_text("mine")
    for replace in (False, True):
        with pytest.raises(StoreError, match="holds results.csv but no readable run.json"):
            run(cfg, replace=replace)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["results.csv"]
    (tmp_path / "out" / "results.csv").unlink()
    run(cfg)
    (tmp_path / "out" / "run.json").write_text("garbage")
    with pytest.raises(StoreError, match="no readable run.json"):
        run(cfg, replace=True)
    assert not list((tmp_path / "out").glob("replaced-*"))
