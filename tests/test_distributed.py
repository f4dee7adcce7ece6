"""The same pipeline on a real dask.distributed cluster gives the local run's labels."""
import os

import numpy as np
import pytest

from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store, read_matrix

from conftest import blobs

distributed = pytest.importorskip("distributed")


def _labels(store_path):
    s = Store(store_path)
    return {k: read_matrix(s.open("cluster", k), "labels") for k in s.stage_keys("cluster")}


def test_local_cluster_labels_equal_local_run(tmp_path, make_config):
    X, y = blobs(n=600, k=4, d=6, seed=2, sep=3.0)
    p = tmp_path / "d.npz"
    np.savez(p, X=X, y=y)
    cfg = make_config(p)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]',
                                           'names = ["kmeans", "ra", "ncut", "sk", "bbs"]\n[sk]\nn_iter = 50\n[bbs]\nn_iter = 50')
                   .replace("gamma = 1.0", "gamma = [1.0, 0.25]").replace('kind = "gaussian"', ""))
    local = run(cfg, out=str(tmp_path / "o_local"))
    labels_local = _labels(tmp_path / "store.zarr")

    cfg2 = tmp_path / "dist.toml"
    cfg2.write_text(cfg.read_text().replace('path = "store.zarr"', 'path = "store_dist.zarr"'))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        dist = run(cfg2, scheduler=cluster.scheduler_address, out=str(tmp_path / "o_dist"))
    labels_dist = _labels(tmp_path / "store_dist.zarr")
    assert labels_local.keys() == labels_dist.keys() and len(labels_local) == 9
    for k in labels_local:
        np.testing.assert_array_equal(labels_local[k], labels_dist[k])
    for a, b in zip(local, dist):
        assert a["method"] == b["method"] and a["acc_avg"] == b["acc_avg"] and a["nmi_max"] == b["nmi_max"]


def test_local_cluster_scheduler_leaves_the_environment_as_it_was():
    # a Nanny sets OMP/MKL/OPENBLAS_NUM_THREADS=1 in the process that starts it (dask/distributed#6749)
    import os

    from bigclust.pipeline.scheduler import dask_client
    before = dict(os.environ)
    with dask_client("local-cluster", 1) as client:
        assert client.submit(lambda: os.environ.get("OMP_NUM_THREADS")).result() == "1"  # the workers keep theirs
    assert dict(os.environ) == before


def test_a_large_array_reaches_a_stage_task_without_dask_s_large_graph_warning():
    # a stage's runtime arrays (the labels of 8.1M rows are 62 MiB) are scattered, not put in the task graph,
    # where Dask warns above 10 MB on the user's terminal
    import warnings

    from bigclust.pipeline.scheduler import _submit
    y = np.arange(2_000_000, dtype=np.int64)   # 16 MB
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            total = _submit(client, np.sum, y)
            weighted = _submit(client, np.dot, y, b=y[::-1].copy())
    assert total == y.sum() and weighted == np.dot(y, y[::-1])
    assert not [w for w in caught if "large graph" in str(w.message)]


def _dying_stage():
    """A stage whose worker process dies (as under the kernel's out-of-memory killer) the first time it runs."""
    def die_once(marker, *arrays):
        import os
        import pathlib
        import signal
        if not pathlib.Path(marker).exists():
            pathlib.Path(marker).write_text("died")
            os.kill(os.getpid(), signal.SIGKILL)
        return 7
    return die_once


def test_local_cluster_keeps_distributed_s_warnings_off_the_terminal_and_says_a_dead_worker_once(tmp_path, capfd):
    # distributed's nanny / worker WARNING lines would land among the stage lines and progress bars
    import logging
    import sys
    import warnings

    from bigclust.pipeline.scheduler import _submit, dask_client
    handler = logging.StreamHandler(sys.stderr)   # distributed's own, which it adds unless the root has one (pytest)
    logging.getLogger("distributed").addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with dask_client("local-cluster", 1) as client:
                assert handler.level == logging.ERROR
                assert _submit(client, _dying_stage(), str(tmp_path / "marker")) == 7   # run again on a new worker
        assert handler.level == logging.NOTSET
    finally:
        logging.getLogger("distributed").removeHandler(handler)
    said = [str(w.message) for w in caught if "Dask worker" in str(w.message)]
    assert len(said) == 1, said
    assert said[0].startswith("a Dask worker of the local cluster died while running die_once (its process ended "
                              "unexpectedly") and "run fewer [dask] n_workers (1 now" in said[0]
    err = capfd.readouterr().err
    assert "distributed." not in err and "WARNING" not in err, err     # the worker processes' stderr too


def test_a_dead_worker_that_stops_the_run_is_one_error_line(tmp_path, capfd):
    # the stage's 2 MiB argument is scattered to the worker and lost with it: the task cannot run again
    from bigclust._util.errors import UserError
    from bigclust.pipeline.scheduler import _submit, dask_client
    with pytest.raises(UserError, match=r"died while running die_once \(.*\) and the run cannot go on "
                                        r"\(FutureCancelledError\): .*n_workers.* running the same command again "
                                        r"resumes$") as e:
        with dask_client("local-cluster", 1) as client:
            _submit(client, _dying_stage(), str(tmp_path / "marker"), np.zeros(2**18))
    assert "\n" not in str(e.value)
    err = capfd.readouterr().err
    assert "distributed." not in err, err    # nor the scheduler's ERROR lines about the same death


def test_a_local_cluster_left_without_a_worker_stops_the_run_with_one_line(capfd, monkeypatch):
    # a worker that does not come back after its restart (seen once under heavy load) must not leave the run
    # waiting for ever on a task no worker will take
    import time
    import warnings

    from bigclust._util.errors import UserError
    from bigclust.pipeline import scheduler
    monkeypatch.setattr(scheduler, "NO_WORKER_SECONDS", 1.0)
    t0 = time.perf_counter()
    with pytest.raises(UserError, match=r"^the local Dask cluster had no running worker for 1 s \(a worker did not "
                                        r"come back .* running the same command again resumes$") as e:
        with warnings.catch_warnings(), scheduler.dask_client("local-cluster", 1) as client:
            warnings.simplefilter("error")   # the run's one line is the error, not a warning beside it
            client.cluster.scale(0)
            while client.scheduler_info(n_workers=-1)["workers"]:
                time.sleep(0.05)
            scheduler._submit(client, os.getpid)
    assert "\n" not in str(e.value) and time.perf_counter() - t0 < 60
    err = capfd.readouterr().err
    assert "timed out waiting" not in err and "distributed." not in err, err


def test_an_instance_two_unit_threads_need_is_computed_once():
    # method units run in threads on a cluster (bigclust.pipeline.units); the affinity of a point is asked for
    # by each of its methods: the first computes it, the others wait and reuse it; a failed owner hands it on
    import threading
    import time

    from bigclust.pipeline.runner import Runner
    r = object.__new__(Runner)
    r.done, r._inflight, r._guard = {}, {}, threading.Lock()
    computed, start = [], threading.Barrier(4)

    def ask(i):
        start.wait()
        with r._claim(("affinity", "k")) as mine:
            if mine:
                time.sleep(0.2)
                if i == 0 and not computed:
                    computed.append("failed")
                    raise RuntimeError("first owner fails")
                computed.append(i)
                r.done[("affinity", "k")] = {}

    errors = []
    threads = [threading.Thread(target=lambda i=i: _catch(errors, ask, i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(computed) <= 2 and computed[-1] != "failed" and ("affinity", "k") in r.done and not r._inflight
    assert len(errors) == (1 if computed[0] == "failed" else 0)


def _catch(errors, fn, *args):
    try:
        fn(*args)
    except RuntimeError as e:
        errors.append(e)


def _blob_config(tmp_path, make_config, n, names):
    """A config on n blobs (3 clusters, 5 features) with ``[method]``'s names line replaced by ``names``."""
    X, y = blobs(n=n, k=3, d=5, seed=4, sep=3.0)
    p = tmp_path / "d.npz"
    np.savez(p, X=X, y=y)
    cfg = make_config(p)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', names))
    return cfg


def test_units_of_one_point_run_at_once_on_a_cluster_and_share_its_affinity(tmp_path, make_config, capfd):
    from bigclust.pipeline.runner import run as run_config
    cfg = _blob_config(tmp_path, make_config, 400, 'names = ["ra", "ncut", "sk"]\n[sk]\nn_iter = 50')
    local = run_config(cfg, out=str(tmp_path / "o_local"))
    cfg2 = tmp_path / "dist.toml"
    cfg2.write_text(cfg.read_text().replace('path = "store.zarr"', 'path = "store_dist.zarr"'))
    capfd.readouterr()
    dist = run_config(cfg2, scheduler="local-cluster", out=str(tmp_path / "o_dist"))
    err = capfd.readouterr().err
    assert err.count("affinity   ") == 2 and err.count(": running") == 3 + 3 * 2   # ingest, preprocess, affinity once
    assert [r["method"] for r in dist] == [r["method"] for r in local] == ["ra", "ncut", "sk"]
    assert [r["acc_avg"] for r in dist] == [r["acc_avg"] for r in local]


def _threads_beside():
    """A stage that says its Numba threads once the other stage has started, then once it is alone (made here:
    sent by value, the workers cannot import this module)."""
    def threads(marks, me, other):
        import os
        import pathlib
        import time

        import numba

        from bigclust._util.jit import follow_share
        marks = pathlib.Path(marks)
        (marks / me).write_text("started")
        deadline = time.monotonic() + 60
        while not (marks / other).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        follow_share()
        beside = numba.get_num_threads()
        (marks / f"{me}-said").write_text("")
        if me == "b":   # the other ends first: then the cores it gave back come to this one at its next step
            while not (marks / "a-said").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            want = min(len(os.sched_getaffinity(0)), numba.config.NUMBA_NUM_THREADS)
            while numba.get_num_threads() != want and time.monotonic() < deadline:
                time.sleep(0.05)
                follow_share()
        return beside, numba.get_num_threads()
    return threads


def test_stages_side_by_side_share_the_cores_and_the_last_takes_them_back(tmp_path):
    # two solves on two workers of a 2-core host ran 4 Numba threads: each gets cores // 2 while both run
    from concurrent.futures import ThreadPoolExecutor

    import numba

    from bigclust.pipeline.scheduler import _submit
    cores = min(len(os.sched_getaffinity(0)), numba.config.NUMBA_NUM_THREADS)
    stage = _threads_beside()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client, \
            ThreadPoolExecutor(2) as pool:
        a = pool.submit(_submit, client, stage, str(tmp_path), "a", "b")
        b = pool.submit(_submit, client, stage, str(tmp_path), "b", "a")
        (a_beside, _), (b_beside, b_alone) = a.result(), b.result()
        after = client.submit(numba.get_num_threads, pure=False).result()   # the worker thread's count put back
    assert a_beside == b_beside == max(1, cores // 2)
    assert b_alone == cores
    assert after == numba.config.NUMBA_NUM_THREADS


def _pid_and_mark():
    """The worker's process id and whether an earlier task left a mark in it."""
    import builtins
    import os
    seen = getattr(builtins, "_bigclust_test_mark", False)
    builtins._bigclust_test_mark = True
    return os.getpid(), seen


def _pid_mark_sum(y):
    return (*_pid_and_mark(), int(y.sum()))


def test_a_fresh_stage_runs_on_a_restarted_idle_worker_and_a_busy_one_is_left_alone(tmp_path):
    # a whole-data stage (StageDef.fresh) gets a worker restarted by its nanny: nothing its earlier tasks
    # loaded stays in its memory; a worker holding data or running a task is never restarted
    import warnings

    from bigclust.pipeline.scheduler import _submit, dask_client
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with dask_client("local-cluster", 2) as client:
            before = client.run(_pid_and_mark)               # every worker marked
            held = client.scatter(np.arange(10), hash=False)   # one worker holds data
            holder = next(iter(client.who_has([held]).values()))[0]
            pid, seen = _submit(client, _pid_and_mark, fresh=True)
            assert not seen and pid not in {p for p, _ in before.values()}
            assert client.run(_pid_and_mark)[holder] == (before[holder][0], True)   # still the same process
            assert held.result().sum() == 45
            y = np.arange(300_000)                              # scattered (above SCATTER_BYTES) to that worker
            pid2, seen, total = _submit(client, _pid_mark_sum, y, fresh=True)
            assert not seen and total == y.sum() and pid2 != pid
            assert client.run(_pid_and_mark)[holder] == (before[holder][0], True)
            pid, seen = _submit(client, _pid_and_mark, fresh=False)   # as before: wherever the scheduler says
    assert not [w for w in caught if "Dask worker" in str(w.message)], [str(w.message) for w in caught]


def test_embed_stages_on_restarted_workers_give_the_local_run_s_labels(tmp_path, make_config, monkeypatch):
    import warnings

    from bigclust.normalize import plugin
    cfg = _blob_config(tmp_path, make_config, 500, 'names = ["sk", "bbs"]')
    run(cfg, out=str(tmp_path / "o_local"))
    cfg2 = tmp_path / "dist.toml"
    cfg2.write_text(cfg.read_text().replace('path = "store.zarr"', 'path = "store_dist.zarr"'))
    from bigclust.pipeline import scheduler
    monkeypatch.setattr(plugin, "FRESH_WORKER_ROWS", 0)   # every embed stage asks for a restarted worker
    real, got = scheduler._fresh_worker, []
    monkeypatch.setattr(scheduler, "_fresh_worker", lambda client: got.append(real(client)) or got[-1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(cfg2, scheduler="local-cluster", out=str(tmp_path / "o_dist"))
    assert not [w for w in caught if "Dask worker" in str(w.message)]
    local, dist = _labels(tmp_path / "store.zarr"), _labels(tmp_path / "store_dist.zarr")
    assert local.keys() == dist.keys() and len(local) == 2
    assert len(got) == 2 and None not in got, got   # both embed stages ran on a restarted worker
    for k in local:
        np.testing.assert_array_equal(local[k], dist[k])


def _peaks():
    from bigclust._util.plan import peak_rss_mb
    import resource
    return peak_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def test_a_restarted_worker_s_peak_is_its_own_not_the_driver_s():
    # a LocalCluster's nannies live in the driver: a worker they restart is forked from it, and ru_maxrss
    # keeps the driver's resident set across the exec; the stages record VmHWM, the new process's own
    from bigclust.pipeline.scheduler import dask_client
    big = np.ones(400 << 17)   # 400 MiB resident in the driver
    with dask_client("local-cluster", 1) as client:
        name = next(iter(client.scheduler_info(n_workers=-1)["workers"].values()))["name"]
        client.restart_workers([name])
        own, inherited = next(iter(client.run(_peaks).values()))
    assert big.sum() > 0
    assert own < 300 < inherited, (own, inherited)


def test_a_failed_restart_that_leaves_no_worker_is_replaced_and_the_run_ends(tmp_path, make_config, monkeypatch):
    # distributed removes a worker whose nanny did not stop within the restart's timeout (seen under heavy
    # load): the nanny closes, and a cluster of one worker would have none left for the stage
    import distributed

    from bigclust.normalize import plugin
    from bigclust.pipeline import scheduler
    cfg = _blob_config(tmp_path, make_config, 300, 'names = ["sk"]')
    run(cfg, out=str(tmp_path / "o_local"))
    cfg2 = tmp_path / "dist.toml"
    cfg2.write_text(cfg.read_text().replace('path = "store.zarr"', 'path = "store_dist.zarr"'))
    failed = []

    def restart_that_times_out(client, workers, **kw):
        client.cluster.sync(client.cluster.workers[workers[0]].close)   # what remove_worker leads to
        failed.append(workers[0])
        return {workers[0]: "timed out"}
    monkeypatch.setattr(plugin, "FRESH_WORKER_ROWS", 0)
    monkeypatch.setattr(distributed.Client, "restart_workers", restart_that_times_out)
    monkeypatch.setattr(scheduler, "NO_WORKER_SECONDS", 20.0)   # without a replacement: a UserError after 20 s
    run(cfg2, scheduler="local-cluster", out=str(tmp_path / "o_dist"))
    assert len(failed) == 1
    local, dist = _labels(tmp_path / "store.zarr"), _labels(tmp_path / "store_dist.zarr")
    assert local.keys() == dist.keys() and len(local) == 1
    for k in local:
        np.testing.assert_array_equal(local[k], dist[k])
