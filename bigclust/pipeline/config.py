"""TOML pipeline configs: parse, validate, expand sweeps.

A config describes one pipeline in ten sections (``[data]`` ... ``[output]``).
Every scalar parameter may be given as a list, which sweeps it; the grid is
the Cartesian product of all swept parameters.  Everything is checked before
any work starts and every error names the file, the key and what was expected
(:class:`bigclust._util.errors.ConfigError`).

Conventions: ``[affinity] gamma`` is the width of the Gaussian kernel
``exp(-||x_i - x_j||^2 / gamma)``, a squared distance (the inverse of
scikit-learn's rbf ``gamma``), or ``"median"``: the median squared distance
over the kernel's pairs, resolved by the affinity stage (recorded as
``gamma_used``).  ``[store] path`` and ``[output] dir`` default to
``<config stem>.zarr`` and ``<config stem>-results`` beside the config file;
``[method] names`` to ``kmeans, ra, ncut, sk, bbs``.  ``[data] label_column =
false`` (or ``"none"``) declares unlabelled data and then needs
``[cluster] n_clusters``.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bigclust._util.errors import ConfigError
from bigclust._util.plan import parse_bytes

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
    # decides only what stays on disk, never a score: left out of Config.hash and of checks.same_settings,
    # so setting it does not make a finished run's folder another config's
    scoreless: bool = False


def _choice(*values):
    return Key(str, values[0], lambda v: v in values, "one of " + ", ".join(map(repr, values)))


def _pos(t=float, default=None, **kw):
    return Key(t, default, lambda v: v > 0, "> 0", **kw)


def _nonneg(t=int, default=0, **kw):
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
        "chunk_rows": _pos(int, 4096, sweep=False),
    },
    "preprocess": {
        # zero mean, unit variance per feature (sparse: unit variance only)
        "standardize": Key(bool, False, added=True),
        "l2_normalize": Key(bool, True),
        "pca": _nonneg(int, 0),
        "tfidf": Key(bool, True),           # weight sparse (count) data by tf-idf; false: take them as they are
        "tfidf_local": _choice("tf", "binary", "augmented", "log"),
        "tfidf_global": _choice("idf", "none"),
        "tfidf_normalize": Key(bool, True),
    },
    "affinity": {
        "kind": Key(str, "gaussian", lambda v: v in AFFINITIES, "one of " + ", ".join(AFFINITIES)),
        # exp(-d^2 / gamma): a squared distance; "median": the median squared distance of the kernel's pairs
        "gamma": Key((float, str), 1.0, lambda v: v == "median" or (not isinstance(v, str) and v > 0),
                     '> 0 or "median"'),
        "n_neighbors": Key(int, 15, lambda v: v >= 2, ">= 2"),
        "dtype": _choice("float64", "float32"),
        # how kind = "knn" finds neighbours (bigclust.algo.knn): exact blocked GEMM, approximate, or by n^2 d
        # ("ivf": inverted file, k-means cells searched exactly against their nearest cells; bigclust.algo.knn.ivf)
        "knn": _choice("auto", "exact", "approx", "pynndescent", "hnswlib", "faiss", "ivf"),
        # kind = "knn": > 0 searches (exactly, or by "ivf" in groups of cells) in resumable chunks of this many
        # rows (tasks on a cluster), 0 in one task
        "knn_chunk_rows": _nonneg(int, 0, sweep=False),
        # knn = "ivf": cells (0: round(sqrt(n))) and cells searched per cell (0: 32); see bigclust.algo.knn.ivf
        "ivf_cells": _nonneg(int, 0),
        "ivf_probe": _nonneg(int, 0),
    },
    "method": {
        # checked against the registry in from_dict; each method's own parameters are in its section
        "names": Key(list, ["kmeans", "ra", "ncut", "sk", "bbs"], sweep=False),
    },
    # the aksc method's subspace stage at scale (bigclust.subspace._chunked); keys added later
    "subspace": {
        # > 0: augmentation and features streamed into zarr, the coefficient columns in resumable chunks of this
        # many columns (Dask tasks; on the cluster with --scheduler); 0: one in-memory call
        "chunk_cols": _nonneg(int, 0, sweep=False, added=True),
        "augment_chunk_rows": _pos(int, 1000, sweep=False, added=True),   # source images per augmentation chunk
        # the dictionary kNN: "auto" = exact up to 20000 originals, NN-descent above
        "knn": Key(str, "auto", lambda v: v in ("auto", "exact", "pynndescent"),
                   "one of 'auto', 'exact', 'pynndescent'", sweep=False, added=True),
    },
    "embed": {
        "n_components": Key(int, 0, lambda v: v == 0 or v >= 1, "0 (= number of clusters) or >= 1"),
        "eigensolver": _choice("auto", "eigh", "eigsh", "lobpcg", "amg"),
    },
    "cluster": {
        "n_clusters": Key(int, 0, lambda v: v == 0 or v >= 2, "0 (= number of classes) or >= 2"),
        "n_init": _pos(int, 100),
        "max_iter": _pos(int, 1000),
        "algorithm": _choice("auto", "lloyd", "minibatch"),
        "minibatch_threshold": _pos(int, 200_000),
        "batch_size": _pos(int, 4096),
        # numpy's seeds are 32-bit: a larger one would pass here and fail stages later
        "seed": Key(int, 0, lambda v: 0 <= v < 2**32, "0 <= seed < 2**32 (4294967296)"),
    },
    "evaluate": {
        "nmi_norm": _choice("sqrt", "max", "arithmetic"),
        # "subsets": every method on random subsets of the classes (paper 001), averaged per size
        "protocol": Key(str, "all", lambda v: v in ("all", "subsets"), "one of 'all', 'subsets'", sweep=False),
        "subset_sizes": Key(list, [2, 3, 4, 5, 6, 7, 8, 9, 10],
                            lambda v: len(v) > 0 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 2
                                                         for x in v) and len(set(v)) == len(v),
                            "a list of distinct integers >= 2", sweep=False),
        "subset_trials": _pos(int, 50, sweep=False),
        "subset_seed": _nonneg(int, 0, sweep=False),
    },
    "dask": {
        "scheduler": Key(str, "", sweep=False),
        "n_workers": _pos(int, 1, sweep=False),
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

#: keys of the old flat [method] section (and [cluster] kmeans_n_init) and where they live now
MOVED = {("method", "n_iter"): "[sk] n_iter, [bbs] n_iter, [mbbs] n_iter",
         ("method", "tol"): "[sk] tol, [bbs] tol",
         ("method", "solver"): "[bbs] solver",
         ("method", "ncut_iter"): "[ncut] n_iter",
         ("method", "record_every"): "[sk] record_every, [bbs] record_every",
         ("method", "lam"): "[mbbs] lam",
         ("method", "mbbs_outer"): "[mbbs] n_outer",
         ("cluster", "kmeans_n_init"): "[kmeans] n_init"}


@dataclass(frozen=True)
class Config:
    """A validated config: defaults filled in, sweeps kept as lists.

    Attributes
    ----------
    path : Path
        The TOML file (relative paths inside it are resolved against its folder).
    sections : dict
        ``{section: {key: value or list of values}}`` with every key present.
    sweeps : dict
        ``{(section, key): [values...]}`` for the swept keys.
    """

    path: Path
    sections: dict
    sweeps: dict = field(default_factory=dict)

    def points(self):
        """Yield one ``{section: {key: scalar}}`` dict per point of the sweep grid."""
        keys = list(self.sweeps)
        for combo in itertools.product(*(self.sweeps[k] for k in keys)):
            point = {s: dict(v) for s, v in self.sections.items()}
            for (sec, key), val in zip(keys, combo):
                point[sec][key] = val
            yield point

    def resolve(self, p: str | None) -> Path | None:
        """A path from the config, relative to the config file's folder."""
        if p is None:
            return None
        p = Path(p).expanduser()
        return p if p.is_absolute() else (self.path.parent / p)

    @property
    def hash(self) -> str:
        """Hash of the validated content (not of the file's spelling).

        Keys added to the schema later (``Key.added``) count only when they
        differ from their default, so the output folder of a run made before
        they existed is still recognised as this config's.
        """
        full = schema()
        kept = {sec: {k: v for k, v in keys.items()
                      if not (sec in full and k in full[sec] and (full[sec][k].scoreless or
                                                                  (full[sec][k].added and v == full[sec][k].default)))}
                for sec, keys in self.sections.items()}
        # a section whose keys were all added later (e.g. [subspace]) is left out while at its defaults
        return stable_hash({sec: keys for sec, keys in kept.items()
                            if keys or not (sec in full and all(k.added for k in full[sec].values()))})

    @property
    def max_memory(self) -> int:
        return parse_bytes(self.sections["store"]["max_memory"])

    @property
    def methods(self) -> list[str]:
        return list(self.sections["method"]["names"])


def stable_hash(obj) -> str:
    """Short, stable hash of a JSON-able object (sorted keys)."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _type_name(t):
    if isinstance(t, tuple):
        return " or ".join(_type_name(x) for x in t)
    return {str: "a string", int: "an integer", float: "a number", bool: "true/false",
            list: "a list"}.get(t, t.__name__)


def _check_value(where, spec: Key, value):
    """Coerce int→float where a number is wanted and check type and range."""
    t = spec.type
    wants_float = t is float or (isinstance(t, tuple) and float in t)
    if wants_float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    ok = isinstance(value, t) and not (isinstance(value, bool) and t in (int, float, (str, int)))
    if not ok:
        raise ConfigError(f"{where}: expected {_type_name(t)}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if spec.check is not None and not spec.check(value):
        raise ConfigError(f"{where}: expected {spec.expect}, got {value!r}")
    return value


def load(path) -> Config:
    """Read and validate a pipeline config.

    Parameters
    ----------
    path : str or Path
        The TOML file.

    Returns
    -------
    Config

    Raises
    ------
    ConfigError
        One line naming the file, the key and what was expected.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    return from_dict(raw, path)


def schema() -> dict[str, dict[str, Key]]:
    """The shared sections plus one section per registered method (:mod:`bigclust.pipeline.methods`)."""
    from bigclust.pipeline import methods
    return {**SCHEMA, **{name: methods.get(name).schema() for name in methods.names()}}


def _section_of(full, key) -> str:
    """Where ``key`` lives (``[cluster]``), for an error about a key given outside any section."""
    homes = [f"[{sec}]" for sec, keys in full.items() if key in keys]
    return " or ".join(homes) if homes else "the section it configures"


def from_dict(raw: dict, path: Path | str = "<config>") -> Config:
    """Validate an already parsed config dict (see :func:`load`)."""
    from bigclust.pipeline import methods

    path = Path(path)
    full = schema()
    for sec in raw:
        if not isinstance(raw[sec], dict):
            # a key above the first [section] (or a section name used as a key)
            raise ConfigError(f"{path}: key {sec!r} is outside any section; every key belongs in one, e.g. "
                              + ("[" + sec + "]" if sec in full else _section_of(full, sec)))
        if sec not in full:
            raise ConfigError(f"{path}: unknown section [{sec}]; expected one of "
                              + ", ".join(f"[{s}]" for s in full))
        for key in raw[sec]:
            if (sec, key) in MOVED:
                raise ConfigError(f"{path}: [{sec}] {key} has moved to the method sections: {MOVED[(sec, key)]} "
                                  "(README, 'Configs')")
    names = raw.get("method", {}).get("names", SCHEMA["method"]["names"].default)
    if not methods.check_names(names):
        bad = [v for v in names if not (isinstance(v, str) and v in methods.names())] if isinstance(names, list) else []
        what = f"unknown method {bad[0]!r}" if bad else f"expected a non-empty list of method names, got {names!r}"
        raise ConfigError(f"{path}: [method] names: {what}; the methods are {', '.join(methods.names())}")
    for sec in raw:
        if sec in methods.names() and sec not in names:     # a typo in names, or a method left out on purpose
            warnings.warn(f"{path}: section [{sec}] is not used: {sec!r} is not in [method] names "
                          f"({', '.join(names)})", UserWarning, stacklevel=2)
    sections, sweeps = {}, {}
    for sec, keys in full.items():
        given = raw.get(sec, {})
        for key in given:
            if key not in keys:
                raise ConfigError(f"{path}: unknown key [{sec}] {key!r}; expected one of " + ", ".join(keys))
        out = {}
        for key, spec in keys.items():
            where = f"{path}: [{sec}] {key}"
            if key not in given:
                if spec.required:
                    raise ConfigError(f"{where}: missing required key")
                out[key] = spec.default
                continue
            value = given[key]
            if isinstance(value, list) and spec.type is not list:
                if not spec.sweep:
                    raise ConfigError(f"{where}: cannot be swept; expected {_type_name(spec.type)}")
                if not value:
                    raise ConfigError(f"{where}: an empty list sweeps nothing")
                value = [_check_value(f"{where}[{i}]", spec, v) for i, v in enumerate(value)]
                if len(set(value)) != len(value):
                    raise ConfigError(f"{where}: repeated values in sweep {value!r}")
                sweeps[(sec, key)] = value
            else:
                value = _check_value(where, spec, value)
            out[key] = value
        sections[sec] = out
    data = sections["data"]
    if data["label_column"] is False or data["label_column"] == "none":
        data["label_column"] = None                  # no labels
    if data["label_column"] is None and not sections["cluster"]["n_clusters"]:
        raise ConfigError(f"{path}: [data] label_column = false (no labels): set [cluster] n_clusters, "
                          "the number of clusters cannot be taken from the labels")
    if sections["store"]["path"] is None:
        sections["store"]["path"] = f"{path.stem}.zarr"
    if sections["output"]["dir"] is None:
        sections["output"]["dir"] = f"{path.stem}-results"
    if (data["name"] is None) == (data["path"] is None):
        raise ConfigError(f"{path}: [data] needs exactly one of 'name' (a registered data set) or 'path' (a file)")
    if data["name"] is not None:
        from bigclust.datasets import get_info
        try:
            get_info(data["name"])
        except Exception as e:  # DataError: unknown name
            raise ConfigError(f"{path}: [data] name: {e}") from None
    ev = sections["evaluate"]
    if ev["protocol"] == "subsets" and sections["cluster"]["n_clusters"]:
        raise ConfigError(f"{path}: [cluster] n_clusters: the subset protocol clusters each subset into as many "
                          "clusters as it has classes; leave n_clusters unset")
    idle = [k for k in ("subset_sizes", "subset_trials", "subset_seed") if k in raw.get("evaluate", {})]
    if ev["protocol"] != "subsets" and idle:
        warnings.warn(f"{path}: [evaluate] {', '.join(idle)} not used: they belong to protocol = \"subsets\" "
                      f"(protocol is {ev['protocol']!r})", UserWarning, stacklevel=2)
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: [method] names: {names!r} lists a method twice")
    try:
        parse_bytes(sections["store"]["max_memory"])
    except ValueError:
        raise ConfigError(f"{path}: [store] max_memory: expected a size like \"4GB\" or \"512MiB\", "
                          f"got {sections['store']['max_memory']!r}") from None
    return Config(path=path, sections=sections, sweeps=sweeps)
