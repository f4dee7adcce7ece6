"""Issue 26, items 5, 6 and 8: the environment fails (a full or read-only disk, a scheduler that dies) or a
sizing key is far beyond the data; either way one line, nothing half-written, and the same command resumes.

Items → tests:

5. disk full / read-only, one line naming the path, temp files removed, resume works:
   test_5_store_disk_full_in_a_stage_is_one_line_and_resumes (ENOSPC from zarr's writer, no file name),
   test_5_read_only_store_inside_a_dask_task_names_the_file (EROFS raised in a Dask task),
   test_5_output_folder_disk_full_leaves_no_temp_file_and_resumes (ENOSPC writing results.csv),
   test_5_cli_says_it_in_one_line_exit_2, test_5_disk_error_found_behind_wrappers,
   test_5_atomic_write_removes_its_temp_file_on_any_failure (also KeyboardInterrupt),
   test_5_estimator_temporary_store_full_or_read_only (the estimator's TMPDIR: one line naming the
   estimator, "set TMPDIR"), test_5_figure_writes_leave_no_temp_file (figures go through atomic_write)
6. a scheduler lost mid-run: the client's own ERROR records of it are dropped during the run only:
   test_6_lost_scheduler_records_are_dropped_only_during_a_run
8. sizes bounded by what they allocate against max_memory, in validate and run and the estimators:
   test_8_huge_sizing_keys_refused_by_validate (n_init, knn_chunk_rows, subset_trials and the other sizing
   keys), test_8_registered_data_set_bounds_use_its_shape, test_8_estimator_n_init_refused_before_allocating,
   test_8_subset_draws_are_lazy, test_8_sizes_that_fit_still_run,
   test_8_bbs_solver_that_cannot_stream_refused_before_any_work (a dense kernel beyond max_memory with
   [bbs] solver = "dual": validate on a registered data set, run before ingest, the estimator before its
   fit), test_8_subspace_sizing_keys_bounded ([subspace] chunk_cols, augment_chunk_rows, [aksc] n_interpolate
   through the subspace plug-in's check hook)

The suite cannot mount a small file system: a writer is monkeypatched to raise the OSError at a chosen
point (the same errors were also met on a real 2 MB tmpfs and a remount read-only mid-run).
"""
import errno
import logging
import os
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bigclust._util.errors import ConfigError, StoreError, UserError, disk_error
from bigclust.pipeline.runner import run, validate

from _failures import _with
from conftest import blobs


def _fail_zarr_puts(monkeypatch, code, where, filename=False):
    """zarr's local writer raises OSError(code) for keys whose path contains ``where`` (as the OS does when
    the disk fills: ``write()`` names no file)."""
    import zarr.storage._local as local

    real = local._put

    def put(path, value, exclusive=False):
        if where in str(path):
            raise OSError(code, os.strerror(code), *((str(path),) if filename else ()))
        return real(path, value, exclusive=exclusive)
    monkeypatch.setattr(local, "_put", put)


def _stages(store):
    return sorted(str(p.relative_to(store / "stages")) for p in (store / "stages").glob("*/*")
                  if (p / "zarr.json").exists())


# -- 5. disk full, read-only ---------------------------------------------------------------------------------

def test_5_store_disk_full_in_a_stage_is_one_line_and_resumes(tmp_path, small, make_config, monkeypatch, capsys):
    cfg = make_config(small)
    _fail_zarr_puts(monkeypatch, errno.ENOSPC, "tmp/affinity-")
    with pytest.raises(StoreError, match=r"no space left on device writing the store .*store\.zarr: free space "
                                         r"there .* the same command resumes"):
        run(cfg)
    store = tmp_path / "store.zarr"
    done = _stages(store)
    assert any(s.startswith("ingest/") for s in done) and not any(s.startswith("affinity/") for s in done)
    assert not list((store / "tmp").iterdir())          # the half-written stage is gone
    assert not (tmp_path / "out").exists()
    monkeypatch.undo()
    capsys.readouterr()
    recs = run(cfg)                                     # resumes: what was finished is not recomputed
    assert "ingest" in capsys.readouterr().err.split("finished earlier")[0]
    assert [r["method"] for r in recs] == ["kmeans", "ra", "ncut"]


def test_5_read_only_store_inside_a_dask_task_names_the_file(tmp_path, small, make_config, monkeypatch):
    # the dense kernel is written by dask.array.to_zarr: the error is raised in a task of the threaded scheduler
    cfg = make_config(small)
    _fail_zarr_puts(monkeypatch, errno.EROFS, "/K/", filename=True)
    with pytest.raises(StoreError, match=r"read-only file system writing .*/K/.* \(in the store .*store\.zarr\): "
                                         r"make it writable again"):
        run(cfg)
    assert not list((tmp_path / "store.zarr" / "tmp").iterdir())
    monkeypatch.undo()
    assert len(run(cfg)) == 3


def test_5_output_folder_disk_full_leaves_no_temp_file_and_resumes(tmp_path, small, make_config, monkeypatch):
    import bigclust.report.labels as labels

    cfg = make_config(small)

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def full_open(path, mode="r", *a, **kw):
        f = open(path, mode, *a, **kw)
        return Full(f) if "results.csv" in str(path) else f
    monkeypatch.setattr(labels, "open", full_open, raising=False)
    with pytest.raises(StoreError, match=r"no space left on device writing the output folder .*out"):
        run(cfg)
    out = tmp_path / "out"
    assert not [p.name for p in out.iterdir() if ".tmp-" in p.name]
    monkeypatch.undo()
    run(cfg)
    assert {"results.csv", "results.md", "run.json"} <= {p.name for p in out.iterdir()}
    assert '"complete": true' in (out / "run.json").read_text()


def test_5_cli_says_it_in_one_line_exit_2(tmp_path, small, make_config, monkeypatch):
    from bigclust.cli import main

    cfg = make_config(small)
    _fail_zarr_puts(monkeypatch, errno.ENOSPC, "tmp/preprocess-")
    r = CliRunner().invoke(main, ["pipeline", "run", str(cfg)])
    errs = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errs) == 1 and "Traceback" not in r.output, r.output
    assert "no space left on device writing the store" in errs[0]


def test_5_disk_error_found_behind_wrappers():
    inner = OSError(errno.EDQUOT, "Disk quota exceeded", "/data/store.zarr/stages/x")
    try:
        try:
            raise inner
        except OSError as e:
            raise RuntimeError("a library's own error") from e
    except RuntimeError as e:
        wrapped = e
    err = disk_error(wrapped, {"store": Path("/data/store.zarr")})
    assert "disk quota exceeded writing /data/store.zarr/stages/x (in the store /data/store.zarr)" in str(err)
    assert disk_error(ExceptionGroup("tasks", [ValueError("x"), OSError(errno.ENOSPC, "full")])) is not None
    assert disk_error(OSError(errno.ENOENT, "missing")) is None
    assert disk_error(ValueError("no")) is None


@pytest.mark.parametrize("exc", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_5_atomic_write_removes_its_temp_file_on_any_failure(tmp_path, monkeypatch, exc):
    import bigclust.report.labels as labels

    dest = tmp_path / "results.json"
    dest.write_text("previous")

    def failing_replace(src, dst):
        raise exc
    monkeypatch.setattr(labels.os, "replace", failing_replace)
    with pytest.raises(type(exc)):
        labels.atomic_write(dest, "new")
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"] and dest.read_text() == "previous"


@pytest.mark.parametrize("code, where, est", [
    (errno.ENOSPC, "stages/ingest/", "SpectralClustering"),   # a store write of this process
    (errno.EROFS, "/K/", "SpectralClustering"),                # the dense kernel, written in a Dask task
    (errno.ENOSPC, "bigclust-fit-", "NMFClustering"),          # the very first write of the store
])
def test_5_estimator_temporary_store_full_or_read_only(tmp_path, monkeypatch, code, where, est):
    import tempfile

    import bigclust
    import bigclust.estimators._base as estimator_base

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # TMPDIR
    monkeypatch.setattr(estimator_base, "IN_MEMORY", False)   # data that fit in memory need no store
    _fail_zarr_puts(monkeypatch, code, where)
    X, _ = blobs(n=60)
    todo = "make it writable or set TMPDIR" if code == errno.EROFS else "free space there or set TMPDIR"
    with pytest.raises(StoreError, match=rf"^{est}: {os.strerror(code).lower()} writing the fit's temporary "
                                         rf"store in {tmp_path}.*: {todo}") as e:
        getattr(bigclust, est)(n_clusters=3, random_state=0).fit(X)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)
    assert not list(tmp_path.iterdir())                       # the temporary store is removed


def test_5_figure_writes_leave_no_temp_file(tmp_path, small, make_config, monkeypatch):
    import bigclust.report.figures as figures
    import bigclust.report.labels as labels

    class Full:   # the temporary file is created, then the disk fills while it is written
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def full_png(path, mode="r", *a, **kw):
        f = open(path, mode, *a, **kw)
        return Full(f) if ".png" in str(path) else f
    # one figure directly: the previous file is kept, nothing else is left in the folder
    (tmp_path / "figs" / "figures").mkdir(parents=True)
    old = tmp_path / "figs" / "figures" / "confusion-m.png"
    old.write_bytes(b"previous")
    monkeypatch.setattr(labels, "open", full_png, raising=False)
    y = np.arange(30) % 3
    with pytest.raises(OSError):
        figures.write_confusion(tmp_path / "figs", "m", y, y)
    assert sorted(p.name for p in (tmp_path / "figs").rglob("*")) == ["confusion-m.csv", "confusion-m.png",
                                                                       "figures"]
    assert old.read_bytes() == b"previous"
    # a run whose figures meet a full disk: one line naming the output folder, no temporary file left
    cfg = _with(make_config(small), "plots = false", "plots = true")
    with pytest.raises(StoreError, match=r"no space left on device writing the output folder .*out"):
        run(cfg)
    assert not [p.name for p in (tmp_path / "out").rglob("*") if ".tmp-" in p.name]
    monkeypatch.undo()
    run(cfg)
    assert all(p.stat().st_size > 1000 for p in (tmp_path / "out" / "figures").glob("*.png"))
    assert len(list((tmp_path / "out" / "figures").glob("confusion-*.png"))) == 3


# -- 6. a scheduler lost mid-run ---------------------------------------------------------------------------

def test_6_lost_scheduler_records_are_dropped_only_during_a_run():
    import asyncio

    from bigclust.pipeline.scheduler import _quiet_lost_scheduler

    logger = logging.getLogger("distributed.client")
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
    h = Keep()
    logger.addHandler(h)
    try:
        def lost():
            try:
                raise asyncio.CancelledError()
            except asyncio.CancelledError:
                logger.exception("lost")
        with _quiet_lost_scheduler():
            lost()
            logger.error("Failed to reconnect to scheduler after 10.00 seconds, closing client")
            logger.error("something else")
        lost()
    finally:
        logger.removeHandler(h)
    assert seen == ["something else", "lost"]


# -- 8. sizes bounded by what they allocate -------------------------------------------------------------------

def _huge_cases():
    return [
        ("n_init = 5", "n_init = 1000000000", "[cluster] n_init=1000000000"),
        ("[affinity]", "[affinity]\nkind = \"knn\"\nn_neighbors = 5\nknn_chunk_rows = 1000000000000",
         "[affinity] knn_chunk_rows=1000000000000"),
        ("n_init = 5", "n_init = 5\n[evaluate]\nprotocol = \"subsets\"\nsubset_sizes = [2, 3]\n"
         "subset_trials = 100000000000", "[evaluate] subset_trials=100000000000"),
        (None, "[preprocess]\npca = 1000000000\n", "[preprocess] pca=1000000000"),
        ("n_init = 5", "n_init = 5\n[embed]\nn_components = 1000000000", "[embed] n_components=1000000000"),
        ('names = ["kmeans", "ra", "ncut"]', 'names = ["nmf"]\n[nmf]\nn_init = 1000000000', "[nmf] n_init"),
    ]


@pytest.mark.parametrize("case", _huge_cases(), ids=lambda c: c[2].split()[1].split("=")[0])
def test_8_huge_sizing_keys_refused_by_validate(tmp_path, small, make_config, case):
    from bigclust.cli import main

    old, new, needle = case
    cfg = make_config(small, new) if old is None else _with(make_config(small), old, new)   # None: new is extra
    with pytest.raises(ConfigError, match=r"even for the smallest data .* more than \[store\] max_memory"):
        validate(cfg)
    r = CliRunner().invoke(main, ["pipeline", "validate", str(cfg)])
    assert r.exit_code == 2 and needle in r.output and "lower" in r.output, r.output
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        run(cfg)
    assert not (tmp_path / "out").exists() and not (tmp_path / "store.zarr").exists()


def test_8_registered_data_set_bounds_use_its_shape(tmp_path, make_config):
    cfg = _with(make_config("unused.npz"), 'path = "unused.npz"', 'name = "optdigits"\nroot = "nowhere"')
    _with(cfg, "n_init = 5", "n_init = 1000000")   # 1e6 restarts' labels of 5620 rows: 22.5 GB
    with pytest.raises(ConfigError, match=r"n_init=1000000: one restart's labels of n=5620 rows.*lower n_init to "
                                          r"at most \d+"):
        validate(cfg)


def test_8_estimator_n_init_refused_before_allocating():
    from bigclust import SpectralClustering

    X, _ = blobs(n=60)
    with pytest.raises(ValueError, match=r"^SpectralClustering: .*n_init=1000000000: .*lower n_init"):
        SpectralClustering(n_clusters=3, n_init=10**9).fit(X)


def test_8_subset_draws_are_lazy():
    from bigclust.pipeline.subsets import Draws

    d = Draws((2, 3), 10**11, 0, 10)           # nothing is listed: constant time and memory
    assert len(d) == 2 * 10**11 and d[10**11][0] == 3 and len(d[-1][2]) == 3
    small = Draws((2, 4), 3, 5, 10)             # the same subsets as the list drawn up front before
    ref = [(k, t, tuple(int(c) for c in np.sort(np.random.default_rng([5, k, t]).choice(10, size=k,
                                                                                         replace=False))))
           for k in (2, 4) for t in range(3)]
    assert list(small) == ref and small[0:2] == ref[:2]


def test_8_sizes_that_fit_still_run(tmp_path, small, make_config):
    # batch_size far beyond n is fine: a batch never holds more rows than the data (minibatch k-means clamps it)
    cfg = _with(make_config(small), "[affinity]",
                "[affinity]\nkind = \"knn\"\nn_neighbors = 5\nknn_chunk_rows = 1000")
    _with(cfg, "n_init = 5", "n_init = 5\nalgorithm = \"minibatch\"\nbatch_size = 1000000000000\n"
          "[evaluate]\nprotocol = \"subsets\"\nsubset_sizes = [2, 3]\nsubset_trials = 2")
    validate(cfg)
    recs = run(cfg)
    assert {r["method"] for r in recs} == {"kmeans", "ra", "ncut"} and all(r["n_trials"] == 2 for r in recs)


def _registered(make_config, extra=""):
    """A config over the registered optdigits (n = 5620, d = 64), its files absent: only the checks run."""
    cfg = _with(make_config("unused.npz"), 'path = "unused.npz"', 'name = "optdigits"\nroot = "nowhere"')
    return _with(cfg, 'path = "store.zarr"', f'path = "store.zarr"\n{extra}')


def test_8_bbs_solver_that_cannot_stream_refused_before_any_work(tmp_path, small, make_config, monkeypatch):
    from bigclust import SpectralClustering
    from bigclust.pipeline import runner as runner_mod

    way_out = (r'\[bbs\] solver = "dual" needs the n=\d+ dense kernel .*more than \[store\] max_memory=.*: set '
               r'\[bbs\] solver = "alternating", or raise \[store\] max_memory or use \[affinity\] kind = "knn"')
    cfg = _with(_registered(make_config, 'max_memory = "100MB"'), '"kmeans", "ra", "ncut"', '"bbs"')
    with pytest.raises(UserError, match=way_out.replace("n=\\d+", "n=5620")):
        validate(cfg)
    _with(cfg, "[cluster]", '[bbs]\nsolver = "alternating"\n[cluster]')
    with pytest.raises(UserError, match=r"needs .*nowhere.*which does not exist"):   # the sizes pass
        validate(cfg)
    # a data file: run refuses it once the shape is known, before ingest (n = 60: 57.6 kB in memory)
    cfg = _with(_with(make_config(small), '"kmeans", "ra", "ncut"', '"bbs"'), 'path = "store.zarr"',
                'path = "store.zarr"\nmax_memory = "40kB"')
    with pytest.raises(UserError, match=way_out):
        run(cfg)
    assert not list((tmp_path / "store.zarr").glob("stages/*/*"))
    _with(cfg, "[cluster]", '[bbs]\nsolver = "alternating"\nn_iter = 20\n[cluster]')
    assert [r["method"] for r in run(cfg)] == ["bbs"]
    # the estimator, in its own words, before anything is written
    def no_run(*a, **kw):
        raise AssertionError("the fit ran")
    monkeypatch.setattr(runner_mod.Runner, "run_instance", no_run)
    X, _ = blobs(n=60)
    with pytest.raises(ValueError, match=r'^SpectralClustering: solver = "dual" needs the n=60 dense kernel .*'
                                         r'more than max_memory=.*: set solver = "alternating", or raise '
                                         r'max_memory or use affinity="knn"$'):
        SpectralClustering(n_clusters=3, max_memory="40kB").fit(X)


@pytest.mark.parametrize("aksc, subspace, needle", [
    ("", "chunk_cols = 100000000", r"\[subspace\] chunk_cols=100000000: .*lower chunk_cols to at most \d+"),
    ('augment = "coil20"', "chunk_cols = 100\naugment_chunk_rows = 100000000",
     r"\[subspace\] augment_chunk_rows=100000000: a source image's 11 augmented copies of 1024 pixels .*"
     r"lower augment_chunk_rows to at most \d+"),
    ('semi_supervised = true\naugment = "interpolate"\nn_interpolate = 100000000', "",
     r"\[aksc\] n_interpolate=100000000: an interpolated sample per class .*lower n_interpolate to at most \d+"),
])
def test_8_subspace_sizing_keys_bounded(tmp_path, small, make_config, aksc, subspace, needle):
    from bigclust.pipeline.checks import check_sizes
    from bigclust.pipeline.config import load

    cfg = _with(make_config(small, f"[aksc]\n{aksc}\n[subspace]\n{subspace}\n"), '"kmeans", "ra", "ncut"',
                '"aksc"')
    c = load(cfg)
    with pytest.raises(ConfigError, match=needle):
        check_sizes(c, list(c.points()), 100, 1024, 2, False)
    fit = int(re.search(r"at most (\d+)", _refusal(c)).group(1))
    fitting = load(_with(cfg, "100000000", str(fit)))
    check_sizes(fitting, list(fitting.points()), 100, 1024, 2, False)   # the largest value said to fit fits
    if not aksc:   # on a registered data set, in validate (generic check_allocations names no family)
        reg = _with(_registered(make_config, ""), '"kmeans", "ra", "ncut"', '"aksc"')
        reg.write_text(reg.read_text() + f"[subspace]\n{subspace}\n")
        with pytest.raises(ConfigError, match=r"run\.toml: \[subspace\] chunk_cols=100000000: .*n=5620 "):
            validate(reg)


def _refusal(c):
    from bigclust.pipeline.checks import check_sizes
    try:
        check_sizes(c, list(c.points()), 100, 1024, 2, False)
    except ConfigError as e:
        return str(e)
    raise AssertionError("not refused")
