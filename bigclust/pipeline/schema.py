"""The config schema: :class:`Key` (one config key), the shared sections, and :func:`param` (a key that is
also a field of a method's parameter dataclass).

:data:`SCHEMA` holds the sections every pipeline has (``[data]`` ... ``[output]``); a family adds its own
method sections through its parameter dataclasses (:mod:`bigclust.pipeline.methods`) and, when it needs
one, a shared section of its own (:func:`bigclust.pipeline.methods.register_section`).  Parsing and
validation are :mod:`bigclust.pipeline.config`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

AFFINITIES = ("gaussian", "knn", "linear", "cosine", "cosine2")


@dataclass(frozen=True)
class Key:
    """Schema of one config key."""

    type: type | tuple[type, ...]
    default: Any = None
    check: Callable[[Any], bool] | None = None
    expect: str = ""          # what the check wants, for the error message
    sweep: bool = True        # may be given as a list of values
    required: bool = False
    added: bool = False       # a later key: left out of Config.hash at its default, so earlier runs keep theirs
    # the default before it changed (issue 26): a method section a config does not use is hashed with this
    # value in place of the default, so configs that never ran the method keep their hash (Config.hash)
    was: Any = None
    # decides only what stays on disk, never a score: left out of Config.hash and of checks.same_settings,
    # so setting it does not make a finished run's folder another config's
    scoreless: bool = False


def choice_key(*values):
    """A string key: one of ``values``, the first by default."""
    return Key(str, values[0], lambda v: v in values, "one of " + ", ".join(map(repr, values)))


def positive_key(t=float, default=None, **kw):
    """A number key checked ``> 0``."""
    return Key(t, default, lambda v: v > 0, "> 0", **kw)


def nonnegative_key(t=int, default=0, **kw):
    """A number key checked ``>= 0``."""
    return Key(t, default, lambda v: v >= 0, ">= 0", **kw)


SCHEMA: dict[str, dict[str, Key]] = {
    "data": {
        "name": Key(str, None, sweep=False),
        "path": Key(str, None, sweep=False),
        "root": Key(str, None, sweep=False),
        # an index (negative: from the end), a header column name, or false / "none": no labels
        "label_column": Key((int, str, bool), -1, lambda v: v is False or (v is not True and v != ""),
                            'a column index, a column name from the header, or false / "none" (no labels)',
                            sweep=False),
        "header": Key((bool, str), "auto", lambda v: v in (True, False) or v == "auto",
                      'true, false or "auto" (a first line that is not all numbers is a header)', sweep=False,
                      added=True),
        "chunk_rows": positive_key(int, 4096, sweep=False),
    },
    "preprocess": {
        # zero mean, unit variance per feature (sparse: unit variance only)
        "standardize": Key(bool, False, added=True),
        # "auto": unit rows for sparse data (counts: tf-idf's rows are unit already, and without tf-idf the
        # counts are scaled to unit rows) and none for dense features, as scikit-learn users expect; true is
        # paper 000's protocol (its configs say so).  Measured: three Gaussian blobs on one ray (centres 0,
        # 3*1, 6*1 in 4-D, sigma 0.3) give Ncut accuracy 1.00 as they are, 0.51 with unit rows
        "l2_normalize": Key((bool, str), "auto", lambda v: v in (True, False) or v == "auto",
                            'true, false or "auto" (true for sparse data, false for dense)'),
        "pca": nonnegative_key(int, 0),
        # "covariance": exact PCA from the d x d covariance summed in one pass (dense, d <= 4096: 2-3x faster than
        # the randomised solver's 8 passes, issue 28); the default is what the committed results were made with
        "pca_solver": Key(str, "randomized", lambda v: v in ("randomized", "covariance"),
                          "one of 'randomized', 'covariance'", added=True),
        "tfidf": Key(bool, True),           # weight sparse (count) data by tf-idf; false: take them as they are
        "tfidf_local": choice_key("tf", "binary", "augmented", "log"),
        "tfidf_global": choice_key("idf", "none"),
        "tfidf_normalize": Key(bool, True),
    },
    "affinity": {
        "kind": Key(str, "gaussian", lambda v: v in AFFINITIES, "one of " + ", ".join(AFFINITIES)),
        # exp(-d^2 / gamma): a squared distance; "median" (the default): the median squared distance of the
        # kernel's pairs, which suits data of any scale (1.0 suits only unit-length rows)
        "gamma": Key((float, str), "median", lambda v: v == "median" or (not isinstance(v, str) and v > 0),
                     '> 0 or "median"'),
        "n_neighbors": Key(int, 15, lambda v: v >= 2, ">= 2"),
        "dtype": choice_key("float64", "float32"),
        # how kind = "knn" finds neighbours (bigclust.algo.knn): exact blocked GEMM, approximate, or by n^2 d
        # ("ivf": inverted file, k-means cells searched exactly against their nearest cells; bigclust.algo.knn.ivf;
        # "ivf-rows": every row probes its own nearest cells, linear in n; bigclust.algo.knn.ivf_rows)
        "knn": choice_key("auto", "exact", "approx", "pynndescent", "hnswlib", "faiss", "ivf", "ivf-rows"),
        # kind = "knn": > 0 searches (exactly, or by "ivf" in groups of cells) in resumable chunks of this many
        # rows (tasks on a cluster), 0 in one task
        "knn_chunk_rows": nonnegative_key(int, 0, sweep=False),
        # knn = "ivf" / "ivf-rows": cells (0: n / 256) and cells searched per cell / per row (0: by rule)
        "ivf_cells": nonnegative_key(int, 0),
        "ivf_probe": nonnegative_key(int, 0),
    },
    "method": {
        # checked against the registry in from_dict; each method's own parameters are in its section.  The
        # default is the registered methods marked ``default`` (schema(), config.py): filled in there
        "names": Key(list, None, sweep=False),
    },
    "embed": {
        "n_components": Key(int, 0, lambda v: v == 0 or v >= 1, "0 (= number of clusters) or >= 1"),
        "eigensolver": choice_key("auto", "arpack", "eigh", "eigsh", "lobpcg", "amg"),
        # components of the normalised graph below this fraction of n / n_components rows get no
        # eigenvector: their rows take their kernel neighbours' embedding (bigclust.algo.small_components).
        # 0: every component competes for the eigenvectors
        "min_component": Key(float, 0.01, lambda v: 0 <= v < 1, ">= 0 and < 1", added=True),
    },
    "cluster": {
        "n_clusters": Key(int, 0, lambda v: v == 0 or v >= 2, "0 (= number of classes) or >= 2"),
        # scikit-learn's KMeans defaults (and the estimators'); paper protocols state 100 / 1000
        "n_init": positive_key(int, 10),
        "max_iter": positive_key(int, 300),
        "algorithm": choice_key("auto", "lloyd", "minibatch"),
        "minibatch_threshold": positive_key(int, 200_000),
        "batch_size": positive_key(int, 4096),
        # numpy's seeds are 32-bit: a larger one would pass here and fail stages later
        "seed": Key(int, 0, lambda v: 0 <= v < 2**32, "0 <= seed < 2**32 (4294967296)"),
    },
    "evaluate": {
        "nmi_norm": choice_key("sqrt", "max", "arithmetic"),
        # "subsets": every method on random subsets of the classes (paper 001), averaged per size
        "protocol": Key(str, "all", lambda v: v in ("all", "subsets"), "one of 'all', 'subsets'", sweep=False),
        "subset_sizes": Key(list, [2, 3, 4, 5, 6, 7, 8, 9, 10],
                            lambda v: len(v) > 0 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 2
                                                         for x in v) and len(set(v)) == len(v),
                            "a list of distinct integers >= 2", sweep=False),
        "subset_trials": positive_key(int, 50, sweep=False),
        "subset_seed": nonnegative_key(int, 0, sweep=False),
    },
    "dask": {
        "scheduler": Key(str, "", sweep=False),
        "n_workers": positive_key(int, 1, sweep=False),
    },
    "store": {
        "path": Key(str, None, sweep=False),          # default: <config stem>.zarr beside the config
        "max_memory": Key((str, int), "4GB", sweep=False),
        # "results": delete dense kernels (and subsets' copies of the rows) at the end of a run
        "keep": Key(str, "all", lambda v: v in ("all", "results"), "one of 'all', 'results'", sweep=False,
                    added=True, scoreless=True),
    },
    "output": {
        "dir": Key(str, None, sweep=False),           # default: <config stem>-results beside the config
        "plots": Key(bool, True, sweep=False),
    },
}


def param(default, type_=None, *, check: Callable[[Any], bool] | None = None, expect: str = "",
          choices: tuple | None = None, sweep: bool = True, added: bool = False, was: Any = None):
    """A dataclass field that is also a config key (see :class:`Key`).

    ``added=True`` marks a key added after stores and output folders were made with the method: at its
    default it is left out of the config hash and of the stage keys (:func:`params_dict`), so those stay valid.
    ``was``: the default before it changed (see :class:`Key`).
    """
    if choices is not None:
        check, expect = (lambda v: v in choices), "one of " + ", ".join(map(repr, choices))
    t = type_ or type(default)
    return field(default=default, metadata={"key": Key(t, default, check, expect, sweep, added=added, was=was)})


def params_dict(params) -> dict:
    """A method's parameters as the stages hash and receive them: ``added`` keys only off their default."""
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)
            if not (f.metadata["key"].added and getattr(params, f.name) == f.default)}


def positive(default, type_=None):
    return param(default, type_, check=lambda v: v > 0, expect="> 0")


def nonnegative(default, type_=None):
    return param(default, type_, check=lambda v: v >= 0, expect=">= 0")
