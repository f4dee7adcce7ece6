"""The ``bigclust`` command: thin click commands over library calls.

User errors (:class:`bigclust.errors.UserError`) become one line on stderr
and exit status 2; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import json
import sys

import click

from .errors import UserError


class _Group(click.Group):
    def invoke(self, ctx):
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


@main.group()
def bench():
    """Speed and memory measurements, printed as ratios against references."""


if __name__ == "__main__":  # pragma: no cover
    main()
