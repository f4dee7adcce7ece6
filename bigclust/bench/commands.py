"""``bigclust bench``: the click commands, one per benchmark module, each a thin call into it.

The group is added to the ``bigclust`` command by :mod:`bigclust.cli`.  The
commands are named after what they measure (``bbs``, ``nmf``, ...), which is
why they live here with the benchmarks and not in the generic command line.
Each imports its module on use, so ``bigclust --help`` stays fast.
"""
from __future__ import annotations

import json
from importlib import import_module

import click

from bigclust._util.errors import UserError


@click.group()
def bench():
    """Speed and memory measurements, printed as ratios against references."""


def _command(name):
    """Make the decorated options ``bench <name>`` (with ``--json``), a call of ``bench_<name>`` of its module.

    The decorated function's docstring is the command's help.  Its body, where
    it has one, checks the options' values and returns the arguments of
    ``bench_<name>``; without a body the values are passed as they are.  The
    result is printed as one JSON object, or by the module's own
    ``format_report`` where it has one, else by
    :func:`bigclust.bench.format_report` (``key  value`` lines).
    """
    def register(fn):
        def callback(as_json, **params):
            from bigclust.bench import format_report

            mod = import_module(f"bigclust.bench.{name}")
            res = getattr(mod, f"bench_{name}")(**(fn(**params) or params))
            click.echo(json.dumps(res, default=float) if as_json else getattr(mod, "format_report", format_report)(res))

        callback.__doc__ = fn.__doc__
        callback = as_json_option(callback)  # --json last in the help, as the options read bottom-up
        callback.__click_params__ += getattr(fn, "__click_params__", [])
        return bench.command(name)(callback)

    return register


#: every command's --json, and the dense kernels' --dtype
as_json_option = click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
dtype_option = click.option("--dtype", default="float64", show_default=True, type=click.Choice(["float32", "float64"]))


@_command("nmf")
@click.option("--k", default=20, show_default=True, type=click.IntRange(min=2), help="Components (clusters).")
@click.option("--iters", default=30, show_default=True, type=click.IntRange(min=1), help="Iterations timed.")
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(min=1))
@click.option("--max-memory", default="256MB", show_default=True, help="Budget of the streamed (out-of-core) run.")
@click.option("--data", default="news20-all", show_default=True,
              help="Named corpus (needs $BIGCLUST_DATA; else a synthetic tf-idf matrix), or synthetic:NxMxNNZ.")
@click.option("--dense-data", default="mnist-test", show_default=True,
              help="Dense images for the dense case (pixels / 255), synthetic:NxMxNNZ made dense, or none.")
@click.option("--dense-k", default=10, show_default=True, type=click.IntRange(min=2))
@click.option("--dense-iters", default=200, show_default=True, type=click.IntRange(min=1), help="MU iterations timed.")
@click.option("--dense-repeats", default=3, show_default=True, type=click.IntRange(min=1))
def bench_nmf(**params):
    """Linear NMF (MU, HALS) vs scikit-learn on sparse and dense data, bilinear vs linear, streamed peak RSS."""


@_command("bbs")
@click.option("--n", default=6000, show_default=True, type=click.IntRange(min=16), help="Kernel size n x n.")
@dtype_option
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(min=1))
@click.option("--iters", default=20, show_default=True, type=click.IntRange(min=1), help="Iterations per repeat.")
@click.option("--max-dykstra-seconds", default=300.0, show_default=True, type=click.FloatRange(min=0.001),
              help="Cap of the Dykstra run; past it a lower bound is reported.")
def bench_bbs(**params):
    """In-memory BBS and Sinkhorn iterations vs NumPy and memory bandwidth; dual vs Dykstra."""


@_command("ooc")
@click.option("--n", default=30000, show_default=True, type=click.IntRange(min=16))
@click.option("--max-memory", default="1GB", show_default=True, help="Budget for the blocks in flight.")
@click.option("--iters", default=20, show_default=True, type=click.IntRange(min=1))
@dtype_option
@click.option("--workdir", default=None, type=click.Path(file_okay=False),
              help="Folder for the temporary store (default: the system temp folder).")
def bench_ooc(**params):
    """Out-of-core BBS on a zarr K of n x n: seconds per iteration and peak RSS."""


@_command("sparse")
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
@click.option("--pca-solver", default="covariance", show_default=True, type=click.Choice(["randomized", "covariance"]),
              help="Ours: [preprocess] pca_solver ('covariance': exact, one pass over the rows).")
@click.option("--knn", default="auto", show_default=True,
              help="Ours: the kNN search ([affinity] knn: auto, exact, approx, ivf, pynndescent, hnswlib, faiss).")
@click.option("--ivf-probe", default=8, show_default=True, type=click.IntRange(min=0),
              help="Ours: cells ivf-rows searches per row ([affinity] ivf_probe; 0 = its rule, 24); the recall of "
                   "the graph on 2000 sampled rows is reported.")
def bench_sparse(n, k, gamma, n_init, sklearn_timeout, sklearn_subset, sklearn_eigen_solver, bbs_self_loops,
                 pca, pca_solver, knn, ivf_probe):
    """MNIST end to end on a sparse kNN affinity (SK, BBS-dual) beside scikit-learn."""
    from bigclust.algo.knn import check_method
    check_method(knn)
    if gamma != "median":
        try:
            gamma = float(gamma)
        except ValueError:
            raise UserError(f"--gamma must be a number or 'median', got {gamma!r}") from None
    return dict(n=n, k=k, gamma=gamma, n_init=n_init, sklearn_timeout=sklearn_timeout, sklearn_subset=sklearn_subset,
                sklearn_eigen_solver=sklearn_eigen_solver, self_loops=bbs_self_loops, pca=pca, knn=knn,
                pca_solver=pca_solver, ivf_probe=ivf_probe)


@_command("knn")
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
@click.option("--approx", multiple=True, type=click.Choice(["pynndescent", "pynndescent-tuned", "hnswlib",
              "faiss-hnsw", "ivf", "ivf-rows", "faiss-ivf"]), help="Approximate searches (repeat; default: all).")
@click.option("--sizes", default=None, help="Comma-separated n: time, recall on 2000 sampled rows and slope of "
              "every search at growing n (prefixes of --points).")
@click.option("--points", default=None, type=click.Path(exists=True),
              help="With --sizes: a .npy file or zarr array of rows (e.g. a store's stages/preprocess/<key>/X).")
def bench_knn(n, ks, pca, repeats, raw, exact_repeats, approx, sizes, points):
    """MNIST kNN graph: streamed PCA, exact blocked search vs pynndescent / hnswlib / faiss (time, recall)."""
    try:
        sizes = [int(v) for v in sizes.split(",") if v.strip()] if sizes else None
    except ValueError:
        raise UserError(f"--sizes must be comma-separated integers, got {sizes!r}") from None
    return dict(n=n, ks=tuple(ks), pca=pca, repeats=repeats, raw=raw, exact_repeats=exact_repeats,
                approx=tuple(approx) or None, sizes=sizes, points=points)


@_command("scale")
@click.option("--sizes", default=None, help="Comma-separated n, a prefix of the data set each (default: 10000 ... "
              "1000000 for mnist-1m; 1000000,2000000,4000000,8100000 for mnist-8m).")
@click.option("--data", "dataset", default=None, type=click.Choice(["mnist-1m", "mnist-8m"]),
              help="The rows (the same generator; mnist-8m is stored as uint8): default the --config's [data] "
                   "name, else mnist-1m.")
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
def bench_scale(sizes, dataset, methods, repeats, scheduler, config, out, workdir, keep):
    """Time and peak RSS per stage of the kNN pipeline at growing n, log-log slopes (JSON + PNG)."""
    try:
        ns = [int(s) for s in sizes.split(",") if s.strip()] if sizes else None
    except ValueError:
        raise UserError(f"--sizes must be comma-separated integers, got {sizes!r}") from None
    return dict(sizes=ns, dataset=dataset, methods=[m.strip() for m in methods.split(",") if m.strip()], repeats=repeats,
                scheduler=scheduler, config=config, out=out, workdir=workdir, keep=keep,
                log=lambda m: click.echo(m, err=True))


@_command("subspace")
@click.option("--n", default=5000, show_default=True, type=click.IntRange(min=100), help="ADMM columns (samples).")
@click.option("--k", default=50, show_default=True, type=click.IntRange(min=2), help="Atoms per column.")
@click.option("--d", default=100, show_default=True, type=click.IntRange(min=2), help="Features.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--n-ref", default=300, show_default=True, type=click.IntRange(min=1),
              help="Columns the NumPy loop and scikit-learn's Lasso solve.")
@click.option("--coil20-repeats", default=1, show_default=True, type=click.IntRange(min=0),
              help="Seeds of Ak-SSC on COIL-20 end to end (0: skip; needs $BIGCLUST_DATA).")
def bench_subspace(**params):
    """Per-column SSC ADMM vs a NumPy loop and scikit-learn's Lasso; Ak-SSC on COIL-20 end to end."""
