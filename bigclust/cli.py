"""The ``bigclust`` command: thin click commands over library calls.

User errors (:class:`bigclust._util.errors.UserError`) become one line on stderr
and exit status 2; anything else is a bug and keeps its traceback.  Warnings
raised by bigclust itself (e.g. a solver that stopped short of its tolerance)
are one ``warning: ...`` line each, without the source line Python shows.
"""
from __future__ import annotations

import json
import os
import sys
import warnings

import click

from bigclust._util.errors import UserError


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_show_default = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None):
    if os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
        click.echo(f"warning: {message}", err=True)
    else:
        _show_default(message, category, filename, lineno, file, line)


class _Group(click.Group):
    def invoke(self, ctx):
        warnings.showwarning = _show_warning
        try:
            return super().invoke(ctx)
        except UserError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="bigclust")
def main():
    """Cluster data sets too big for the textbook code."""


@main.group()
def pipeline():
    """Run or check a pipeline config."""


@pipeline.command("run")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--scheduler", default=None, help="Dask scheduler address (tcp://HOST:PORT), "
              "'local-cluster' or 'synchronous'; overrides [dask] scheduler.")
@click.option("--out", default=None, help="Output folder; overrides [output] dir.")
@click.option("--replace", is_flag=True, help="Write into an output folder holding another run's results "
              "(they are moved to a replaced-* subfolder); finished stages are reused.")
@click.option("--force", is_flag=True, help="Recompute finished stages (implies --replace).")
@click.option("--quiet", "-q", is_flag=True, help="Only the stage lines on stderr: no progress bars "
              "(bars show only when stderr is a terminal anyway; BIGCLUST_PROGRESS=1 forces them).")
def pipeline_run(config, scheduler, out, replace, force, quiet):
    """Run the pipeline described by CONFIG (a TOML file)."""
    from bigclust.pipeline.runner import run
    from bigclust._util.progress import set_quiet
    set_quiet(quiet)
    try:
        run(config, scheduler=scheduler, out=out, force=force, replace=replace)
    finally:
        set_quiet(False)


@pipeline.command("validate")
@click.argument("config", type=click.Path(dir_okay=False))
def pipeline_validate(config):
    """Check CONFIG without running anything."""
    from bigclust.pipeline.runner import validate
    cfg = validate(config)
    n = 1
    for v in cfg.sweeps.values():
        n *= len(v)
    click.echo(f"{config}: valid ({n} sweep point(s), methods: {', '.join(cfg.sections['method']['names'])})")


@main.group()
def data():
    """List, ingest and inspect data sets."""


@data.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON list on stdout.")
def data_list(as_json):
    """The named data sets with their shapes."""
    from dataclasses import asdict

    from bigclust.datasets import list_datasets
    infos = list_datasets()
    if as_json:
        click.echo(json.dumps([asdict(i) for i in infos]))
        return
    click.echo(f"{'name':<14} {'samples':>8} {'features':>8} {'classes':>7}  description")
    for i in infos:
        d = "vocab" if i.n_features < 0 else str(i.n_features)
        click.echo(f"{i.name:<14} {i.n_samples:>8} {d:>8} {i.n_classes:>7}  {i.description}")


@data.command("ingest")
@click.argument("name")
@click.option("--root", default=None, help="Folder with the raw files (default: $BIGCLUST_DATA or ./data).")
@click.option("--store", "store_path", required=True, help="zarr store to write.")
@click.option("--chunk-rows", default=4096, show_default=True, type=click.IntRange(min=1))
@click.option("--force", is_flag=True, help="Ingest again, also into a store made for other data "
              "(its finished stages stay).")
def data_ingest(name, root, store_path, chunk_rows, force):
    """Stream the raw files of data set NAME into a zarr store."""
    from bigclust.pipeline.runner import ingest_to_store
    n, d = ingest_to_store(name, root, store_path, chunk_rows=chunk_rows, force=force)
    click.echo(f"{name}: {n} x {d} written to {store_path}")


@data.command("info")
@click.argument("store_path", metavar="STORE")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def data_info(store_path, as_json):
    """Shape, classes and stages of a store."""
    from bigclust.pipeline.runner import store_info
    info = store_info(store_path)
    if as_json:
        click.echo(json.dumps(info))
    else:
        for k, v in info.items():
            click.echo(f"{k:<12} {v}")


@main.group()
def store():
    """Size on disk of a store, and cleaning it."""


@store.command("du")
@click.argument("store_path", metavar="STORE", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout (bytes per stage and array).")
def store_du(store_path, as_json):
    """Bytes on disk per stage and the largest arrays of STORE."""
    from bigclust.pipeline.clean import format_usage, usage
    u = usage(store_path)
    click.echo(json.dumps(u) if as_json else format_usage(u))


@store.command("clean")
@click.argument("store_path", metavar="STORE", type=click.Path(exists=True, file_okay=False))
@click.option("--config", "configs", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Keep every stage this config uses; repeat it for every config that shares the store "
                   "(default: keep none of the derived stages).")
@click.option("--all", "all_", is_flag=True, help="Also remove ingested data no given config uses.")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
def store_clean(store_path, configs, all_, dry_run):
    """Remove the derived stages of STORE that no CONFIG uses (never the ingested data without --all)."""
    from bigclust.pipeline.clean import clean, format_clean
    click.echo(format_clean(clean(store_path, list(configs) or None, all_=all_, dry_run=dry_run)))


@main.group()
def report():
    """Tables from finished runs."""


@report.command("compare")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--paper", "paper_csv", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The paper's numbers (table,dataset,method,value).")
@click.option("--out", "out_md", default=None, help="Write the Markdown tables here.")
@click.option("--csv", "out_csv", default=None, help="Write a long-form CSV here.")
def report_compare(results, paper_csv, out_md, out_csv):
    """Best-over-γ results of RESULTS (results.json files) beside paper 000's Tables II-V."""
    from bigclust.report.tables import compare
    click.echo(compare(results, paper_csv, out_md, out_csv))


@report.command("verify")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--config", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The config that made RESULTS_DIR (default: the one its run.json names, two folders up).")
@click.option("--scheduler", default=None, help="Dask scheduler for the re-run.")
def report_verify(results_dir, config, scheduler):
    """Re-run a committed reproduction and check every score is the same to the last bit (exit 1 if not)."""
    from bigclust.report.tables import verify
    ok, text = verify(results_dir, config, scheduler=scheduler)
    click.echo(text)
    if not ok:
        sys.exit(1)


@main.command("labels")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--export", "name", default=None, metavar="NAME",
              help="A label file's name (as listed) or a method run once; printed as CSV or written to --out.")
@click.option("--out", default=None, type=click.Path(dir_okay=False), help="Write the exported labels here.")
@click.option("--format", "fmt", default="csv", show_default=True, type=click.Choice(["csv", "npy"]),
              help="csv: index,label[,class]; npy: the labels as an int32 array.")
def labels_cmd(run_dir, name, out, fmt):
    """List the per-point label files of a finished run (RUN_DIR: its output folder), or export one."""
    from bigclust.report.labels import export, list_text
    if name is None:
        if out is not None:
            raise UserError("--out needs --export NAME")
        click.echo(list_text(run_dir))
        return
    text = export(run_dir, name, out, fmt)
    if text is not None:
        click.echo(text, nl=False)
    else:
        click.echo(f"{name}: written to {out}", err=True)


@main.group()
def bench():
    """Speed and memory measurements, printed as ratios against references."""


def _bench_print(res, as_json):
    from bigclust.bench.bbs import format_report
    click.echo(json.dumps(res) if as_json else format_report(res))


@bench.command("nmf")
@click.option("--k", default=20, show_default=True, type=click.IntRange(min=2), help="Components (clusters).")
@click.option("--iters", default=30, show_default=True, type=click.IntRange(min=1), help="Iterations timed.")
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(min=1))
@click.option("--max-memory", default="256MB", show_default=True, help="Budget of the streamed (out-of-core) run.")
@click.option("--data", default="news20-all", show_default=True,
              help="Named corpus (needs $BIGCLUST_DATA; else a synthetic tf-idf matrix), or synthetic:NxMxNNZ.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def bench_nmf(k, iters, repeats, max_memory, data, as_json):
    """Linear NMF (MU, HALS) vs scikit-learn, bilinear vs linear per iteration, streamed peak RSS."""
    from bigclust.bench.nmf import bench_nmf as run
    _bench_print(run(k=k, iters=iters, repeats=repeats, max_memory=max_memory, data=data), as_json)


@bench.command("bbs")
@click.option("--n", default=6000, show_default=True, type=click.IntRange(min=16), help="Kernel size n x n.")
@click.option("--dtype", default="float64", show_default=True, type=click.Choice(["float32", "float64"]))
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(min=1))
@click.option("--iters", default=20, show_default=True, type=click.IntRange(min=1), help="Iterations per repeat.")
@click.option("--max-dykstra-seconds", default=300.0, show_default=True, type=click.FloatRange(min=0.001),
              help="Cap of the Dykstra run; past it a lower bound is reported.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def bench_bbs(n, dtype, repeats, iters, max_dykstra_seconds, as_json):
    """In-memory BBS and Sinkhorn iterations vs NumPy and memory bandwidth; dual vs Dykstra."""
    from bigclust.bench.bbs import bench_bbs as run
    _bench_print(run(n=n, dtype=dtype, repeats=repeats, iters=iters, max_dykstra_seconds=max_dykstra_seconds),
                 as_json)


@bench.command("ooc")
@click.option("--n", default=30000, show_default=True, type=click.IntRange(min=16))
@click.option("--max-memory", default="1GB", show_default=True, help="Budget for the blocks in flight.")
@click.option("--iters", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--dtype", default="float64", show_default=True, type=click.Choice(["float32", "float64"]))
@click.option("--workdir", default=None, type=click.Path(file_okay=False),
              help="Folder for the temporary store (default: the system temp folder).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def bench_ooc(n, max_memory, iters, dtype, workdir, as_json):
    """Out-of-core BBS on a zarr K of n x n: seconds per iteration and peak RSS."""
    from bigclust.bench.bbs import bench_ooc as run
    _bench_print(run(n=n, max_memory=max_memory, iters=iters, dtype=dtype, workdir=workdir), as_json)


@bench.command("sparse")
@click.option("--n", default=70000, show_default=True, type=click.IntRange(min=100), help="First n MNIST images.")
@click.option("--k", default=10, show_default=True, type=click.IntRange(min=2), help="Neighbours.")
@click.option("--gamma", default="median", show_default=True,
              help="Gaussian width: a number, or 'median' (median squared kNN distance).")
@click.option("--n-init", default=10, show_default=True, type=click.IntRange(min=1), help="k-means restarts.")
@click.option("--sklearn-timeout", default=900.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds before scikit-learn's run is abandoned for a subset.")
@click.option("--sklearn-subset", default=20000, show_default=True, type=click.IntRange(min=100))
@click.option("--sklearn-eigen-solver", default="amg", show_default=True,
              type=click.Choice(["arpack", "lobpcg", "amg"]),
              help="scikit-learn's eigen_solver; its default 'arpack' factorises the Laplacian and does not "
                   "finish full MNIST in 15 min; 'amg' (pip install pyamg) is its large-sparse choice.")
@click.option("--bbs-self-loops", default="zero", show_default=True, type=click.Choice(["keep", "zero", "drop", "cap"]),
              help="BBS-dual's support ([bbs] self_loops); 'keep' is the behaviour before issue 13.")
@click.option("--pca", default=50, show_default=True, type=click.IntRange(min=0),
              help="Ours: PCA components before the kNN search ([preprocess] pca); 0 = raw pixels.")
@click.option("--knn", default="auto", show_default=True,
              help="Ours: the kNN search ([affinity] knn: auto, exact, approx, ivf, pynndescent, hnswlib, faiss).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def bench_sparse(n, k, gamma, n_init, sklearn_timeout, sklearn_subset, sklearn_eigen_solver, bbs_self_loops,
                 pca, knn, as_json):
    """MNIST end to end on a sparse kNN affinity (SK, BBS-dual) beside scikit-learn."""
    from bigclust.bench.bbs import bench_sparse as run
    from bigclust.algo.knn import check_method
    check_method(knn)
    if gamma != "median":
        try:
            gamma = float(gamma)
        except ValueError:
            raise UserError(f"--gamma must be a number or 'median', got {gamma!r}") from None
    _bench_print(run(n=n, k=k, gamma=gamma, n_init=n_init, sklearn_timeout=sklearn_timeout,
                     sklearn_subset=sklearn_subset, sklearn_eigen_solver=sklearn_eigen_solver,
                     self_loops=bbs_self_loops, pca=pca, knn=knn), as_json)


@bench.command("knn")
@click.option("--n", default=70000, show_default=True, type=click.IntRange(min=100), help="First n MNIST images.")
@click.option("--k", "ks", default=(10,), show_default=True, multiple=True, type=click.IntRange(min=1),
              help="Neighbours per point, the point itself excluded (repeat for several).")
@click.option("--pca", default=50, show_default=True, type=click.IntRange(min=0),
              help="Components of the streamed PCA before the search (0: raw pixels only).")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--raw", is_flag=True, help="Also search the raw 784-d pixels (slow: the exact search there is "
                                          "about 16x the PCA-50 work).")
@click.option("--exact-repeats", default=None, type=click.IntRange(min=1),
              help="Runs of the exact search (default: --repeats).")
@click.option("--approx", multiple=True, type=click.Choice(["pynndescent-tuned", "hnswlib", "faiss-hnsw", "ivf"]),
              help="Approximate searches besides pynndescent (repeat; default: all).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def bench_knn(n, ks, pca, repeats, raw, exact_repeats, approx, as_json):
    """MNIST kNN graph: streamed PCA, exact blocked search vs pynndescent / hnswlib / faiss (time, recall)."""
    from bigclust.bench.knn import bench_knn as run, format_report
    res = run(n=n, ks=tuple(ks), pca=pca, repeats=repeats, raw=raw, exact_repeats=exact_repeats,
              approx=tuple(approx) or None)
    click.echo(json.dumps(res) if as_json else format_report(res))


@bench.command("scale")
@click.option("--sizes", default=",".join(map(str, (10_000, 20_000, 35_000, 70_000, 140_000, 280_000, 560_000,
                                                    1_000_000))), show_default=True,
              help="Comma-separated n (rows of mnist-1m, a prefix each).")
@click.option("--methods", default="sk,bbs_dual", show_default=True, help="Normalisations to run: sk, bbs_dual.")
@click.option("--repeats", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--scheduler", default=None, help="'local-cluster', tcp://HOST:PORT or 'synchronous'; default: "
              "the config's [dask] scheduler, else threads in this process.")
@click.option("--config", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Pipeline settings (e.g. pipelines/scale/mnist-1m.toml); default: the same, built in.")
@click.option("--out", default="bench-scale", show_default=True, help="Folder for scale.json and scale.png.")
@click.option("--workdir", default=None, type=click.Path(file_okay=False),
              help="Folder for the temporary stores (on a shared file system for a multi-machine scheduler).")
@click.option("--keep", is_flag=True, help="Keep the stores of every size; with --workdir the stores sit at fixed "
              "places there and a re-run resumes (finished stages and kNN chunks are not recomputed).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def bench_scale(sizes, methods, repeats, scheduler, config, out, workdir, keep, as_json):
    """Time and peak RSS per stage of the kNN pipeline at growing n, log-log slopes (JSON + PNG)."""
    from bigclust.bench.scale import bench_scale as run
    try:
        ns = [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--sizes must be comma-separated integers, got {sizes!r}") from None
    res = run(ns, methods=[m.strip() for m in methods.split(",") if m.strip()], repeats=repeats,
              scheduler=scheduler, config=config, out=out, workdir=workdir, keep=keep,
              log=lambda m: click.echo(m, err=True))
    from bigclust.bench.scale import format_scale
    click.echo(json.dumps(res, default=float) if as_json else format_scale(res))


@bench.command("subspace")
@click.option("--n", default=5000, show_default=True, type=click.IntRange(min=100), help="ADMM columns (samples).")
@click.option("--k", default=50, show_default=True, type=click.IntRange(min=2), help="Atoms per column.")
@click.option("--d", default=100, show_default=True, type=click.IntRange(min=2), help="Features.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--n-ref", default=300, show_default=True, type=click.IntRange(min=1),
              help="Columns the NumPy loop and scikit-learn's Lasso solve.")
@click.option("--coil20-repeats", default=1, show_default=True, type=click.IntRange(min=0),
              help="Seeds of Ak-SSC on COIL-20 end to end (0: skip; needs $BIGCLUST_DATA).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def bench_subspace(n, k, d, repeats, n_ref, coil20_repeats, as_json):
    """Per-column SSC ADMM vs a NumPy loop and scikit-learn's Lasso; Ak-SSC on COIL-20 end to end."""
    from bigclust.bench.subspace import bench_subspace as run
    _bench_print(run(n=n, k=k, d=d, repeats=repeats, n_ref=n_ref, coil20_repeats=coil20_repeats), as_json)


if __name__ == "__main__":  # pragma: no cover
    main()
