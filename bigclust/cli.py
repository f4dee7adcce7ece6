"""The ``bigclust`` command: thin click commands over library calls.

User errors (:class:`bigclust.errors.UserError`) become one line on stderr
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

from .errors import UserError


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
@click.option("--force", is_flag=True, help="Recompute finished stages; replace another run's output "
              "folder (its files are moved to a replaced-* subfolder).")
def pipeline_run(config, scheduler, out, force):
    """Run the pipeline described by CONFIG (a TOML file)."""
    from .pipeline import run
    run(config, scheduler=scheduler, out=out, force=force)


@pipeline.command("validate")
@click.argument("config", type=click.Path(dir_okay=False))
def pipeline_validate(config):
    """Check CONFIG without running anything."""
    from .pipeline import validate
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

    from .datasets import list_datasets
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
def data_ingest(name, root, store_path, chunk_rows):
    """Stream the raw files of data set NAME into a zarr store."""
    from .pipeline import ingest_to_store
    n, d = ingest_to_store(name, root, store_path, chunk_rows=chunk_rows)
    click.echo(f"{name}: {n} x {d} written to {store_path}")


@data.command("info")
@click.argument("store_path", metavar="STORE")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def data_info(store_path, as_json):
    """Shape, classes and stages of a store."""
    from .pipeline import store_info
    info = store_info(store_path)
    if as_json:
        click.echo(json.dumps(info))
    else:
        for k, v in info.items():
            click.echo(f"{k:<12} {v}")


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
    from .report import compare
    click.echo(compare(results, paper_csv, out_md, out_csv))


@report.command("verify")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--config", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The config that made RESULTS_DIR (default: the one its run.json names, two folders up).")
@click.option("--scheduler", default=None, help="Dask scheduler for the re-run.")
def report_verify(results_dir, config, scheduler):
    """Re-run a committed reproduction and check every score is the same to the last bit (exit 1 if not)."""
    from .report import verify
    ok, text = verify(results_dir, config, scheduler=scheduler)
    click.echo(text)
    if not ok:
        sys.exit(1)


@main.group()
def bench():
    """Speed and memory measurements, printed as ratios against references."""


def _bench_print(res, as_json):
    from .bench import format_report
    click.echo(json.dumps(res) if as_json else format_report(res))


@bench.command("nmf")
@click.option("--k", default=20, show_default=True, type=click.IntRange(min=2), help="Components (clusters).")
@click.option("--iters", default=30, show_default=True, type=click.IntRange(min=1), help="Iterations timed.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--max-memory", default="256MB", show_default=True, help="Budget of the streamed (out-of-core) run.")
@click.option("--data", default="news20-all", show_default=True,
              help="Named corpus (needs $BIGCLUST_DATA; else a synthetic tf-idf matrix).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def bench_nmf(k, iters, repeats, max_memory, data, as_json):
    """Linear NMF (MU, HALS) vs scikit-learn, bilinear vs linear per iteration, streamed peak RSS."""
    from .bench_nmf import bench_nmf as run
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
    from .bench import bench_bbs as run
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
    from .bench import bench_ooc as run
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
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def bench_sparse(n, k, gamma, n_init, sklearn_timeout, sklearn_subset, sklearn_eigen_solver, bbs_self_loops,
                 as_json):
    """MNIST end to end on a sparse kNN affinity (SK, BBS-dual) beside scikit-learn."""
    from .bench import bench_sparse as run
    if gamma != "median":
        try:
            gamma = float(gamma)
        except ValueError:
            raise UserError(f"--gamma must be a number or 'median', got {gamma!r}") from None
    _bench_print(run(n=n, k=k, gamma=gamma, n_init=n_init, sklearn_timeout=sklearn_timeout,
                     sklearn_subset=sklearn_subset, sklearn_eigen_solver=sklearn_eigen_solver,
                     self_loops=bbs_self_loops), as_json)


if __name__ == "__main__":  # pragma: no cover
    main()
