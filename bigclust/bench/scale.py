"""``bigclust bench scale``: time and peak RSS per stage of the kNN pipeline as n grows, and log-log slopes.

For each size n (prefixes of ``mnist-1m``, or of ``mnist-8m`` up to 8.1 million rows: the
first 70000 rows are MNIST, the rest its augmented copies, the same rows in both) the pipeline runs in a fresh store: ingest (the n
rows generated and written) → preprocess (L2, PCA) → kNN affinity → for SK and
BBS-dual: normalise + eigenvectors (one embed stage; the normalisation's own
seconds are its ``normalize_seconds``) → mini-batch k-means → report.  Each
stage is timed by the runner as it runs, and a sampling thread records the
RSS of this process and of its child processes (the workers of a
``local-cluster``) while it runs: ``peak_rss_bytes`` is the largest RSS of any
single process during the stage, ``peak_rss_sum_bytes`` the largest sum.
Workers of a remote scheduler (``tcp://``) are not children and not sampled.

:func:`fit_slopes` fits ``log seconds = a + slope log n`` per stage by least
squares; :func:`scale_result` assembles the JSON and :func:`plot` the log-log
figure.  Timings are medians over ``repeats``; the load average before and
after every size is recorded beside them (``load_before`` / ``load_after``).

Each size also records the recall of its stored kNN graph (:func:`graph_recall`):
``knn_recall_at_10`` on ``knn_recall_sample`` rows drawn by a seeded RNG, against
their exact lists (:func:`bigclust.algo.knn.knn_recall`, one streamed pass over
the PCA rows), and the CPU seconds of that pass, outside the stages' timings.
"""
from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from pathlib import Path

import numpy as np

from bigclust._util.errors import UserError
from bigclust.bench._measure import PeakRSS, load_avg, machine, timed

SIZES = (10_000, 20_000, 35_000, 70_000, 140_000, 280_000, 560_000, 1_000_000)
#: the default sizes per data set (``--data``): mnist-8m extends the curve from 1M to MNIST8M's 8.1M
DATASET_SIZES = {"mnist-1m": SIZES, "mnist-8m": (1_000_000, 2_000_000, 4_000_000, 8_100_000)}
#: method tag -> (method name, its section): the two normalisations the issue compares
METHODS = {"sk": ("sk", {"n_iter": 1000, "tol": 1e-6}), "bbs_dual": ("bbs", {"solver": "dual", "n_iter": 100,
                                                                              "tol": 1e-6})}


def stage_names(tags=tuple(METHODS)) -> tuple:
    """The stages timed for the method tags: ingest, pca, knn, normalize/eigen/kmeans per method, report."""
    return ("ingest", "pca", "knn") + tuple(f"{s}_{m}" for m in tags for s in ("normalize", "eigen", "kmeans")) \
        + ("report",)


STAGES = stage_names()

#: the pipeline of pipelines/scale/mnist-1m.toml (a test checks the two agree)
DEFAULT_CONFIG = {
    "data": {"name": "mnist-1m", "chunk_rows": 8192},
    "preprocess": {"l2_normalize": True, "pca": 50, "pca_solver": "covariance"},
    "affinity": {"kind": "knn", "n_neighbors": 10, "gamma": 0.1, "dtype": "float32", "knn_chunk_rows": 8192,
                 "knn": "ivf-rows"},
    "method": {"names": ["sk", "bbs"]},
    "sk": METHODS["sk"][1],
    "bbs": METHODS["bbs_dual"][1],
    "embed": {"eigensolver": "auto"},
    "cluster": {"algorithm": "minibatch", "n_init": 3, "batch_size": 4096, "seed": 0},
    "dask": {"n_workers": 2},
    "store": {"max_memory": "4GB"},
}
#: how bench scale's JSON names the kNN search of each ``[affinity] knn``
SEARCHES = {"ivf": "ivf, chunked (bigclust.algo.knn.ivf)",
            "ivf-rows": "ivf-rows: each row probes its own nearest cells, chunked (bigclust.algo.knn.ivf_rows)",
            "exact": "exact, chunked (bigclust.pipeline.stages.knn.neighbors_of_rows)"}
#: the pipeline of pipelines/scale/mnist-8m.toml: the same on mnist-8m's rows
DEFAULT_CONFIG_8M = {**DEFAULT_CONFIG, "data": {"name": "mnist-8m", "chunk_rows": 8192}}


# -- measuring -----------------------------------------------------------------------------


def _timed_runner(peaks):
    """A pipeline Runner that records each stage's wall seconds and RSS label (by method tag)."""
    from bigclust.pipeline.runner import Runner

    class TimedRunner(Runner):
        tag = ""
        seconds: dict

        def _stage(self, sd, params, describe="", **runtime):
            from bigclust.pipeline.stages import stage_key
            label = {"ingest": "ingest", "preprocess": "pca", "affinity": "knn", "embed": f"embed_{self.tag}",
                     "cluster": f"kmeans_{self.tag}"}.get(sd.name, sd.name)
            fresh = not self.store.has(sd.name, stage_key(params))
            peaks.stage(label if fresh else None)
            stage = super()._stage
            try:
                run = timed(lambda: stage(sd, params, describe, **runtime))
            finally:
                peaks.stage(None)
            if fresh:
                self.seconds[label] = self.seconds.get(label, 0.0) + run.median
            return run.result

    return TimedRunner


def _config(base: dict, folder: Path, tags):
    from bigclust.pipeline.config import from_dict

    raw = {s: dict(v) for s, v in base.items()}
    raw["store"] = {**raw.get("store", {}), "path": str(folder / "store.zarr")}
    raw["output"] = {"dir": str(folder / "out"), "plots": False}
    raw.setdefault("method", {})["names"] = sorted({METHODS[t][0] for t in tags})
    return from_dict(raw, folder / "bench-scale.toml")


def run_size(n, base_config, client, folder: Path, *, tags=tuple(METHODS), root=None, log=None,
             dataset="mnist-1m"):
    """One pipeline run on the first n rows of ``dataset``; returns (seconds per stage, peak RSS per stage, its
    sum over processes, scores, peak RSS per process, the recall of its kNN graph: :func:`graph_recall`, each
    method's ARPACK solves: the embed stage's ``eigen_solves``)."""
    from bigclust.report import tables as report
    from bigclust.datasets.registry import open_mnist1m
    from bigclust.pipeline.methods import get as get_method
    from bigclust.pipeline.runner import instances
    from bigclust.pipeline.store import Store

    cfg = _config(base_config, folder, tags)
    store = Store(cfg.resolve(cfg.sections["store"]["path"]), owner={"bench": "scale", "n": n})
    with PeakRSS(0.1, children=True) as peaks:
        runner = _timed_runner(peaks)(cfg, store, client, force=False, log=log or (lambda m: None))
        runner.seconds = {}
        runner.source = open_mnist1m(n, root, name=dataset)
        runner.trials = []
        (point,) = list(cfg.points())
        records, scores, solves = [], {}, {}
        for tag in tags:
            name = METHODS[tag][0]
            runner.tag = tag
            method = get_method(name)
            rec, _ = runner.run_instance(method, instances(cfg, [point], method)[0])
            records.append(rec)
            scores[tag] = {"acc": rec.get("acc_best_inertia"), "nmi": rec.get("nmi_best_inertia")}
            solves[tag] = rec.get("eigen_solves", [])
        peaks.stage("report")
        runner.seconds["report"] = timed(lambda: report.write(cfg.resolve(cfg.sections["output"]["dir"]), records,
                                                              cfg, plots=False)).median
        peaks.stage(None)
    sec = dict(runner.seconds)
    peak, peak_sum = dict(peaks.stage_peak), dict(peaks.stage_peak_sum)
    for tag in tags:  # the embed stage = normalisation then eigenvectors, one task: split by its own clock
        key = next(k for (st, k) in runner.done if st == "embed" and runner.done[(st, k)]["params"]["method"]
                   == METHODS[tag][0])
        norm = float(runner.done[("embed", key)]["normalize_seconds"])
        total = sec.pop(f"embed_{tag}", float("nan"))
        sec[f"normalize_{tag}"], sec[f"eigen_{tag}"] = norm, total - norm
        pk = peak.pop(f"embed_{tag}", 0)
        peak[f"normalize_{tag}"] = peak[f"eigen_{tag}"] = pk
        peak_sum[f"normalize_{tag}"] = peak_sum[f"eigen_{tag}"] = peak_sum.pop(f"embed_{tag}", 0)
    # after the timed stages and outside their RSS peaks: a measurement of the graph, not a stage of the run
    return sec, peak, peak_sum, scores, peaks.per_process, graph_recall(store, runner.done), solves


def graph_recall(store, done, m=None, seed=0) -> dict:
    """recall@k of the kNN graph that a run stored (``affinity/<key>/neighbors``), on m sampled rows.

    The graph's lists hold each row first, then its k - 1 nearest others (k = ``n_neighbors``): recall@k
    counts the row itself, as the graph does (:func:`bigclust.algo.knn.knn_recall`; the recall of the
    k - 1 others is ``(k r - 1) / (k - 1)``).  The exact lists come from one streamed pass over the stage's
    input rows (the PCA rows), read by zarr chunk.  Returns ``{"recall", "k", "sample", "cpu_seconds",
    "seconds"}``; empty when the run kept no neighbour lists (an in-memory kNN affinity stores only K).
    """
    import time

    from bigclust.algo.knn import knn_recall, sample_rows
    from bigclust.algo.knn.sample_recall import SAMPLE
    from bigclust.pipeline.store import is_sparse

    keys = [key for (stage, key) in done if stage == "affinity"]
    g = store.open("affinity", keys[0]) if keys else None
    if g is None or "neighbors" not in g:
        return {}
    params = g.attrs["params"]
    src = store.open(params["src"], params["input"])
    if is_sparse(src, "X"):
        return {}
    X, nbr = src["X"], g["neighbors"]
    sample = sample_rows(X.shape[0], min(SAMPLE if m is None else m, X.shape[0]), seed)
    lists = np.asarray(nbr.oindex[sample] if hasattr(nbr, "oindex") else nbr[...][sample])
    c0, w0 = time.process_time(), time.perf_counter()
    r = knn_recall(X, lists, sample)
    return {"recall": r, "k": int(lists.shape[1]), "sample": int(sample.size),
            "cpu_seconds": time.process_time() - c0, "seconds": time.perf_counter() - w0}


# -- fitting and the result ----------------------------------------------------------------------


def fit_slopes(n, seconds: dict) -> dict:
    """Least-squares slope of log(seconds) against log(n) per stage (None with fewer than 2 usable sizes).

    ``seconds[stage]`` is a list aligned with ``n``; entries that are missing,
    not finite or not positive are left out of that stage's fit.
    """
    out = {}
    for stage, ts in seconds.items():
        pts = [(float(a), float(t)) for a, t in zip(n, ts) if t is not None and np.isfinite(t) and t > 0]
        if len({a for a, _ in pts}) < 2:
            out[stage] = None
            continue
        x, y = np.log([a for a, _ in pts]), np.log([t for _, t in pts])
        out[stage] = float(np.polyfit(x, y, 1)[0])
    return out


def scale_result(n, seconds, peak_rss, *, peak_rss_sum=None, extra=None) -> dict:
    """The JSON of ``bench scale``: ``n``, ``seconds`` / ``peak_rss_bytes`` per stage per size, ``slopes``."""
    n = [int(a) for a in n]
    for name, table in (("seconds", seconds), ("peak_rss_bytes", peak_rss)):
        for stage, vals in table.items():
            if len(vals) != len(n):
                raise ValueError(f"{name}[{stage!r}] has {len(vals)} values for {len(n)} sizes")
    res = {**(extra or {}), "n": n, "seconds": seconds, "peak_rss_bytes": peak_rss,
           "slopes": fit_slopes(n, seconds)}
    if peak_rss_sum is not None:
        res["peak_rss_sum_bytes"] = peak_rss_sum
    # stages skipped in a resumed run have no time (None / NaN): the total is of the stages that ran
    res["total_seconds"] = [float(sum(seconds[s][i] for s in seconds
                                      if seconds[s][i] is not None and np.isfinite(seconds[s][i])))
                            for i in range(len(n))]
    return res


def plot(res: dict, path):
    """Log-log figure of seconds per stage against n (and the slope-1 and slope-2 guides)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = np.asarray(res["n"], dtype=float)
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    for stage, ts in res["seconds"].items():
        t = np.array([np.nan if v is None else v for v in ts], dtype=float)
        if np.any(t > 0):
            s = res["slopes"].get(stage)
            ax.plot(n, t, marker="o", label=f"{stage} (slope {s:.2f})" if s is not None else stage)
    if len(n) > 1:
        t0 = np.nanmax([v for ts in res["seconds"].values() for v in ts if v]) / 4
        for k, style in ((1, ":"), (2, "--")):
            ax.plot(n, t0 * (n / n[-1]) ** k, style, color="grey", label=f"slope {k}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"n (rows of {res.get('dataset', 'mnist-1m')})")
    ax.set_ylabel("seconds")
    ax.set_title(f"bigclust bench scale ({res.get('scheduler') or 'local threads'}, load {res.get('load_avg_1min')})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _recall_lines(res: dict) -> list:
    """recall@k of each size's kNN graph and its CPU seconds (absent from results written before they were)."""
    r = res.get("knn_recall_at_10") or []
    if not any(v is not None for v in r):
        return []
    k = next(v for v in res.get("knn_recall_k", []) + [10] if v is not None)
    m = next(v for v in res.get("knn_recall_sample", []) + ["?"] if v is not None)
    cell = lambda v, f: f"{'-':>10}" if v is None else f"{v:>10{f}}"  # noqa: E731
    return [f"{f'recall@{k} ({m} rows)':<20}" + "".join(cell(v, ".4f") for v in r),
            f"{'  its CPU seconds':<20}" + "".join(cell(v, ".1f") for v in res.get("knn_recall_cpu_seconds", []))]


def format_report(res: dict) -> str:
    """The machine, then seconds and peak RSS (GB) per stage per n, and the slopes, as text."""
    GB = 1e9
    head = [f"{k:<24} {v}" for k, v in res.items() if not isinstance(v, (dict, list))]
    n = res["n"]
    lines = head + ["", f"{'seconds':<20}" + "".join(f"{a:>10}" for a in n) + f"{'slope':>8}"]
    for st, ts in res["seconds"].items():
        s = res["slopes"].get(st)
        lines.append(f"{st:<20}" + "".join(f"{t:>10.2f}" for t in ts) + (f"{s:>8.2f}" if s is not None else ""))
    lines.append(f"{'total':<20}" + "".join(f"{t:>10.2f}" for t in res["total_seconds"]))
    lines += _recall_lines(res)
    lines += ["", f"{'peak RSS GB (1 proc)':<20}" + "".join(f"{a:>10}" for a in n)]
    for st, ps in res["peak_rss_bytes"].items():
        lines.append(f"{st:<20}" + "".join(f"{p / GB:>10.2f}" for p in ps))
    for a, sc in res.get("scores", {}).items():
        lines.append(f"scores n={a}: " + ", ".join(f"{m} ACC {v['acc']:.3f} NMI {v['nmi']:.3f}"
                                                   for m, v in sc.items() if v.get("acc") is not None))
    for a, by in res.get("eigen_solves", {}).items():   # the largest solve of each method
        big = {m: max(sv, key=lambda e: e["rows"]) for m, sv in by.items() if sv}
        if big:
            lines.append(f"ARPACK n={a}: " + ", ".join(f"{m} {e['iterations']} iterations, {e['products']} products"
                                                       for m, e in big.items()))
    return "\n".join(lines)


# -- the command -----------------------------------------------------------------------------------


def _settings(dataset, sizes, config):
    """``(data set, sorted sizes, pipeline sections)`` from the options: the data set is ``--data``, else the
    config's ``[data] name``, else mnist-1m; sizes default to :data:`DATASET_SIZES` and stop at its rows."""
    from bigclust.datasets import get_info
    from bigclust.pipeline.config import load

    if dataset is not None and dataset not in DATASET_SIZES:
        raise UserError(f"--data must be one of {', '.join(DATASET_SIZES)}, got {dataset!r}")
    if config is not None:
        import tomllib

        load(config)   # checked as a pipeline config; its sections as written (defaults filled in would hold
        # every method's section, and keys without a TOML value such as [aksc] image_shape = None)
        with open(config, "rb") as fh:
            base = {s: v for s, v in tomllib.load(fh).items() if s not in ("store", "output", "evaluate")}
        named = base["data"].get("name")
        dataset = dataset or (named if named in DATASET_SIZES else "mnist-1m")
    else:
        dataset = dataset or "mnist-1m"
        base = DEFAULT_CONFIG_8M if dataset == "mnist-8m" else DEFAULT_CONFIG
    base = {**base, "data": {"name": dataset, "chunk_rows": base["data"]["chunk_rows"]}}
    sizes = sorted({int(s) for s in (sizes or DATASET_SIZES[dataset])})
    top = get_info(dataset).n_samples
    if not sizes or sizes[0] < 100 or sizes[-1] > top:
        raise UserError(f"--sizes must lie between 100 and {top} (rows of {dataset}), got {sizes}")
    return dataset, sizes, base


def bench_scale(sizes=None, *, dataset=None, methods=tuple(METHODS), repeats=1, scheduler=None, config=None,
                out="bench-scale", workdir=None, keep=False, log=None):
    """Run the kNN pipeline at every size; write ``scale.json`` and ``scale.png`` to ``out``; return the JSON.

    ``dataset``: ``mnist-1m`` or ``mnist-8m`` (sizes up to 8.1M; default
    :data:`DATASET_SIZES`).  ``scale.json`` is rewritten after every size, so
    a run stopped by a time limit keeps the sizes it finished.
    """
    import os

    from bigclust.pipeline.scheduler import check_scheduler, dask_client

    if not os.environ.get("BIGCLUST_DATA"):
        raise UserError("bench scale needs MNIST: set BIGCLUST_DATA to the shared data folder")
    tags = tuple(dict.fromkeys(methods))
    if not tags or any(t not in METHODS for t in tags):
        raise UserError(f"--methods must be some of {', '.join(METHODS)}, got {', '.join(methods)}")
    dataset, sizes, base = _settings(dataset, sizes, config)
    scheduler = scheduler if scheduler is not None else base.get("dask", {}).get("scheduler") or None
    check_scheduler(scheduler)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    head = {**machine(), "bench": "scale", "dataset": dataset, "repeats": repeats, "scheduler": scheduler or "local threads",
            "n_workers": base.get("dask", {}).get("n_workers", 1), "config": str(config) if config else "built-in",
            "knn": {k: base["affinity"][k] for k in ("n_neighbors", "gamma", "knn_chunk_rows")}
            | {"search": SEARCHES.get(base["affinity"].get("knn"), SEARCHES["exact"])}
            | {key: base["affinity"][key] for key in ("knn", "ivf_cells", "ivf_probe") if key in base["affinity"]},
            "rss_note": "peak_rss_bytes: largest RSS of one process (this one or a local-cluster worker) while the "
                        "stage ran; normalize_* and eigen_* share the embed stage's peak",
            "eigen_solves_note": "eigen_solves: per size and method, each ARPACK solve of 2^17 rows or more "
                                 "(rows, ncv, Arnoldi iterations, products by P, filter degree; "
                                 "bigclust.algo.spectral.solve_log): what makes the eigenvectors' slope",
            "knn_recall_note": "knn_recall_at_10: recall@k (k = knn_recall_k, the graph's n_neighbors) of the stored "
                               "graph's lists (each row first, then its k - 1 nearest others) on knn_recall_sample "
                               "seeded rows against their exact lists (bigclust.algo.knn.knn_recall: a neighbour "
                               "within 1e-6 of the exact k-th distance counts); the k - 1 others' recall is "
                               "(k r - 1) / (k - 1)"}
    stages = list(stage_names(tags))
    seconds = {s: [] for s in stages}
    peak, peak_sum = {s: [] for s in stages}, {s: [] for s in stages}
    done_n, scores, solves, per_process, loads = [], {}, {}, {}, {"load_before": [], "load_after": []}
    recall = {key: [] for key in ("knn_recall_at_10", "knn_recall_sample", "knn_recall_k", "knn_recall_cpu_seconds")}
    # --workdir with --keep: stores at fixed places, so the same command resumes a killed run (finished
    # stages are skipped and the kNN stage recomputes only its unfinished chunks); else a fresh folder
    if workdir is not None and keep:
        work = Path(workdir)
        work.mkdir(parents=True, exist_ok=True)
    else:
        if workdir is not None:
            Path(workdir).mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="bigclust-scale-", dir=workdir))
    try:
        with dask_client(scheduler, base.get("dask", {}).get("n_workers", 1)) as client:
            for n in sizes:
                runs = []
                loads["load_before"].append(load_avg()[0])
                for r in range(repeats):
                    folder = work / f"n{n}-r{r}"
                    (log or (lambda m: None))(f"bench scale: n={n} repeat {r + 1}/{repeats}")
                    runs.append(run_size(n, base, client, folder, tags=tags, log=log, dataset=dataset))
                    if not keep:
                        shutil.rmtree(folder, ignore_errors=True)
                for s in stages:
                    seconds[s].append(statistics.median(run[0].get(s, float("nan")) for run in runs))
                    peak[s].append(max(run[1].get(s, 0) for run in runs))
                    peak_sum[s].append(max(run[2].get(s, 0) for run in runs))
                loads["load_after"].append(load_avg()[0])
                for key, name in (("recall", "knn_recall_at_10"), ("sample", "knn_recall_sample"),
                                  ("k", "knn_recall_k"), ("cpu_seconds", "knn_recall_cpu_seconds")):
                    recall[name].append(runs[0][5].get(key))   # the first repeat's graph (the others: the same)
                scores[n], solves[n] = runs[0][3], runs[0][6]
                per_process[n] = runs[-1][4]
                done_n.append(n)
                res = scale_result(done_n, seconds, peak, peak_rss_sum=peak_sum,
                                   extra={**head, "load_avg_1min_now": load_avg()[0], **loads, **recall,
                                          "scores": scores, "eigen_solves": solves,
                                          "per_process_peak_rss_bytes": per_process})
                (out / "scale.json").write_text(json.dumps(res, indent=1, default=float))
                plot(res, out / "scale.png")
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return res
