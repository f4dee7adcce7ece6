"""The ``bigclust`` command: thin click commands over library calls.

User errors (:class:`bigclust._util.errors.UserError`) become one line on stderr
and exit status 2, and so does a full, read-only or over-quota file system met by
any command (:func:`bigclust._util.errors.disk_error`); anything else is a bug
and keeps its traceback.  Warnings
raised by bigclust itself (e.g. a solver that stopped short of its tolerance)
are one ``warning: ...`` line each, without the source line Python shows.
"""
from __future__ import annotations

import json
import os
import sys
import warnings

import click

from bigclust._util.errors import UserError, disk_error
from bigclust.bench.commands import bench


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
        except Exception as e:  # a full or read-only file system met by any command: one line too
            err = disk_error(e)
            if err is None:
                raise
            click.echo(f"error: {err}", err=True)
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
    from bigclust.pipeline.stages.data import ingest_to_store
    n, d = ingest_to_store(name, root, store_path, chunk_rows=chunk_rows, force=force)
    click.echo(f"{name}: {n} x {d} written to {store_path}")


@data.command("info")
@click.argument("store_path", metavar="STORE")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def data_info(store_path, as_json):
    """Shape, classes and stages of a store."""
    from bigclust.pipeline.stages.data import store_info
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
    from bigclust.pipeline.usage import format_usage, usage
    u = usage(store_path)
    click.echo(json.dumps(u) if as_json else format_usage(u))


@store.command("clean")
@click.argument("store_path", metavar="STORE", type=click.Path(exists=True, file_okay=False))
@click.option("--config", "configs", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Keep every stage this config uses; repeat it for every config that shares the store "
                   "(default: keep none of the derived stages).")
@click.option("--all", "all_", is_flag=True, help="Also remove ingested data no given config uses.")
@click.option("--stage", "stages", multiple=True, metavar="STAGE/KEY",
              help="Remove only this stage instance (as `store du` lists it, e.g. a damaged one); repeatable.")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
def store_clean(store_path, configs, all_, stages, dry_run):
    """Remove the derived stages of STORE that no CONFIG uses (never the ingested data without --all)."""
    from bigclust.pipeline.clean import clean, format_clean
    click.echo(format_clean(clean(store_path, list(configs) or None, all_=all_, dry_run=dry_run, stages=stages)))


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
    from bigclust.report.compare import compare
    click.echo(compare(results, paper_csv, out_md, out_csv))


@report.command("verify")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--config", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The config that made RESULTS_DIR (default: the one its run.json names, two folders up).")
@click.option("--scheduler", default=None, help="Dask scheduler for the re-run.")
def report_verify(results_dir, config, scheduler):
    """Re-run a committed reproduction and check every score is the same to the last bit (exit 1 if not)."""
    from bigclust.pipeline.verify import verify
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


main.add_command(bench)  # the benchmark commands live with the benchmarks (bigclust.bench.commands)

if __name__ == "__main__":  # pragma: no cover
    main()
