"""THE registry: methods, stages, shared config sections and report columns that the families plug in.

Nothing in :mod:`bigclust.pipeline` or :mod:`bigclust.report` names a method or a family: each family's
``plugin.py`` (``bigclust/<family>/plugin.py``, imported by :mod:`bigclust.families`) registers

- its methods (:class:`Method`): a frozen parameter dataclass read from the config section named after the
  method (``[bbs] n_iter = 500``; each field made with :func:`bigclust.pipeline.schema.param`), the chain of
  stages it needs after ingest and preprocess, and the hooks those stages call;
- the stages it brings (:class:`StageDef`, :func:`register_stage`) beside the generic ones of
  :mod:`bigclust.pipeline.stages`;
- a shared config section of its own (:func:`register_section`), the report columns its stages add
  (:func:`register_column`), its display labels and the names the papers give its results (``Method.papers``).

Adding a family = one folder with its algorithms and a ``plugin.py`` + one import line in
:mod:`bigclust.families` (``tests/toy_family`` is one, registered by its test).  This module stays cheap to
import: dataclasses and dicts only.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from bigclust._util.errors import UserError
from bigclust._util.hashing import stable_hash
from bigclust.pipeline.schema import SCHEMA, Key, nonnegative, param, params_dict, positive  # noqa: F401


@dataclass(frozen=True)
class Method:
    """A registered clustering method.

    Attributes
    ----------
    name : str
        Its name in ``[method] names`` and its config section ``[name]``.
    params : type
        Frozen dataclass of its parameters (fields made with :func:`bigclust.pipeline.schema.param`).
    chain : tuple of str, or callable
        Stages after preprocess, each a name in :data:`STAGES`; or ``chain(params, point) -> tuple`` when
        they depend on the parameters or the config point (bilinear NMF on the linear kernel skips the affinity).
    doc : str
        One line for error messages and listings.
    normalize : callable, optional
        Embed stage in memory: ``(K, params, y) -> (P, info)``; ``K`` is a list of kernels when ``combine`` is set.
    assign : callable, optional
        Assign stage: ``(X or K, params, k, seed, cluster_section, src) -> Assignment``, for methods that label
        the points themselves (NMF: argmax of a factor; kernel k-means).
    assign_streamed : callable, optional
        Assign stage when its input does not fit ``max_memory`` (documents X: :func:`bigclust._util.plan.nmf_plan`;
        a dense kernel K: two float64 copies): ``(read_block, bounds, params, k, seed, map_blocks,
        cluster=cluster_section, src=src) -> Assignment`` (``src``: ``"affinity"`` when the blocks are a
        kernel's rows, else the documents').
    normalize_ooc : callable, optional
        Embed stage out of core: ``(Ks, group, params, y, max_memory, client) -> (P, scale, info, extra_attrs)``
        with ``Ks`` zarr arrays, ``P`` a zarr array (a ``*_scratch`` array of ``group`` or K itself) whose
        eigenvectors, scaled by ``diag(scale)`` on both sides, are embedded.
    combine : (section, key), optional
        One instance over all values of this sweep (MBBS: ``("affinity", "gamma")``).
    overrides : callable, optional
        ``params -> {section: {key: value}}`` applied to the point for this chain.
    label : str
        How tables and figures name it (default: the name in capitals).
    default : bool
        Run when a config gives no ``[method] names``.
    papers : dict
        ``{paper id: name, or callable(record) -> the paper's name for that result (None: not in the paper)}``,
        read by :mod:`bigclust.report.compare`.
    moved : dict
        ``{(old section, old key): key of [name]}``: keys of the old flat sections that now live here
        (a config that still sets them gets a one-line pointer).
    hashed_unused : bool
        Whether the method's section counts in the hash of a config that does not run it. False for a family
        registered later (its unused section decides nothing, and registering it must not change the hash of
        any existing config); True for the methods whose unused sections the first hashes already held.
    check : callable, optional
        ``(params, point, n, d) -> None``: what only the family can check against the data's shape (``d`` < 0:
        not known yet), raising a one-line UserError; :func:`bigclust.pipeline.checks.check_sizes` calls it
        before any work (``pipeline validate`` too, for a registered data set).
    show : callable, optional
        ``(params, facts) -> params``: a record's parameters as tables show them (the record keeps the
        config's values); ``facts``: ``{"restarts": restarts run, or None when unknown}``, e.g. to show the
        restarts a ``0`` = "[cluster] n_init" stood for.
    term_factor : str
        Array of the final stage holding a weight per feature and cluster (features x k, e.g. NMF's term
        factor): the report's top terms of a cluster are its largest entries.  Empty: the largest entries of
        the cluster's centroid in the preprocessed (tf-idf) space.
    """

    name: str
    params: type
    chain: tuple[str, ...] | Callable
    doc: str = ""
    normalize: Callable | None = None
    assign: Callable | None = None
    assign_streamed: Callable | None = None
    normalize_ooc: Callable | None = None
    combine: tuple[str, str] | None = None
    overrides: Callable | None = None
    label: str = ""
    default: bool = False
    papers: dict = field(default_factory=dict)
    moved: dict = field(default_factory=dict)
    check: Callable | None = None
    hashed_unused: bool = False
    show: Callable | None = None
    term_factor: str = ""

    def schema(self) -> dict[str, Key]:
        """The config keys of ``[name]``: one per field of ``params``."""
        return {f.name: f.metadata["key"] for f in dataclasses.fields(self.params)}

    def make(self, values: dict | None = None):
        """The parameter dataclass from a (validated) section dict; defaults for missing keys."""
        return self.params(**(values or {}))

    def stages(self, params, point) -> tuple[str, ...]:
        """The chain for these parameters at this config point."""
        return self.chain(params, point) if callable(self.chain) else self.chain

    def with_overrides(self, point) -> dict:
        """The point with the values the method sets for its own chain (``overrides``)."""
        if self.overrides is None:
            return point
        over = self.overrides(self.make(point[self.name]))
        if not over:
            return point
        return {s: {**v, **over.get(s, {})} for s, v in point.items()}

    def shown(self, params, group) -> dict:
        """The parameters a record is labelled with: the affinity's width(s) and the method's own."""
        shown = {}
        a = group[0]["affinity"]
        if "affinity" in self.stages(params, group[0]):
            if a["kind"] != "gaussian":
                shown["kind"] = a["kind"]
            if self.combine:
                sec, key = self.combine
                shown[key + "s"] = [p[sec][key] for p in group]
            elif a["kind"] in ("gaussian", "knn"):
                shown["gamma"] = a["gamma"]
            if a["kind"] == "knn":
                shown["n_neighbors"] = a["n_neighbors"]
        shown.update(dataclasses.asdict(params))
        return shown


REGISTRY: dict[str, Method] = {}


def register(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` to the registry (``replace=True`` to redefine a name, e.g. in tests)."""
    if not replace and method.name in REGISTRY:
        raise ValueError(f"method {method.name!r} is already registered")
    if method.name in SCHEMA or method.name in SECTIONS:
        raise ValueError(f"method name {method.name!r} would shadow the config section [{method.name}]")
    for f in dataclasses.fields(method.params):
        if "key" not in f.metadata:
            raise ValueError(f"{method.params.__name__}.{f.name} must be declared with schema.param()")
    REGISTRY[method.name] = method
    return method


def unregister(name: str):
    """Remove a method (tests that register a toy method clean up with this)."""
    REGISTRY.pop(name, None)


def get(name: str) -> Method:
    """The registered method ``name``; a one-line UserError naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UserError(f"unknown method {name!r}; expected one of {', '.join(names())}") from None


def names() -> list[str]:
    return list(REGISTRY)


def default_names() -> list[str]:
    """``[method] names`` of a config that gives none: the methods registered with ``default=True``."""
    return [m.name for m in REGISTRY.values() if m.default]


def check_names(value) -> bool:
    return isinstance(value, list) and len(value) > 0 and all(isinstance(v, str) and v in names() for v in value)


def label(name: str) -> str:
    """How tables and figures name method ``name`` (``Method.label``; its name in capitals otherwise)."""
    m = REGISTRY.get(name)
    return m.label if m is not None and m.label else name.upper()


def paper_name(paper: str, record: dict):
    """What paper ``paper`` calls the result ``record`` (``Method.papers``); None when the paper has no such result."""
    m = REGISTRY.get(record.get("method"))
    entry = m.papers.get(paper) if m is not None else None
    return entry(record) if callable(entry) else entry


def in_paper(paper: str) -> list[str]:
    """The registered methods that paper ``paper`` compares, in registry order."""
    return [m.name for m in REGISTRY.values() if paper in m.papers]


def lazy(module: str, name: str) -> Callable:
    """A hook that imports ``module`` on its first call (plug-ins register it without importing heavy code)."""
    def call(*args, **kwargs):
        from importlib import import_module
        return getattr(import_module(module), name)(*args, **kwargs)
    call.__name__ = name
    return call


@dataclass
class Assignment:
    """What an assign hook returns: the labels of every restart it keeps, their objectives, the picked one."""

    labels: Any                              # (r, n) int
    objective: Any                           # (r,) float
    best: int = 0
    arrays: dict = field(default_factory=dict)   # arrays worth keeping in the stage (the factors)
    attrs: dict = field(default_factory=dict)


# -- stages ------------------------------------------------------------------------------------------

#: metadata of a stage-parameter field that is passed to the stage but not hashed into its key
RUNTIME = {"hash": False}
#: metadata of a field added later: hashed only when it differs from its default, so stores keep their keys
ADDED = {"hash": "unless-default"}


def _hashed_field(p, f) -> bool:
    h = f.metadata.get("hash", True)
    return h is True or (h == "unless-default" and getattr(p, f.name) != f.default)


def hashed(p) -> dict:
    """The hashed fields of a stage's parameter dataclass (what the store records as the instance's params)."""
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if _hashed_field(p, f)}


def stage_key(p) -> str:
    """The store key of a stage instance: a hash of its parameter dataclass (RUNTIME fields left out)."""
    return stable_hash(hashed(p))


def fmt_params(d: dict) -> str:
    """``key=value ...``: how a stage's progress line shows a method's parameters."""
    return " ".join(f"{k}={v}" for k, v in d.items())


@dataclass(frozen=True)
class StageDef:
    """A stage: ``build(ctx, src_stage, input_keys) -> [params, ...]``, its function, output and placement.

    One frozen parameter dataclass per stage instance is both what is hashed into its store key
    (:func:`stage_key`) and what ``run(store_path, key, attrs, params, **runtime)`` receives.
    ``where``: ``"here"`` (a Dask graph or block loop in this process; gets the client to spread blocks),
    ``"task"`` (needs every row at once: one task, on a worker when a cluster is attached).  ``fresh``: the
    task runs on a worker restarted for it, when one is idle (its memory then holds nothing of earlier tasks:
    :func:`bigclust.pipeline.scheduler._fresh_worker`).  ``report``: attributes copied into the run's record.
    """

    name: str
    build: Callable
    run: Callable
    output: str
    where: Callable = lambda p: "here"
    fresh: Callable = lambda p: False
    report: tuple = ()
    describe: Callable = lambda p: ""


STAGES: dict[str, StageDef] = {}


def register_stage(sd: StageDef, *, replace: bool = False) -> StageDef:
    """Add a stage a method can chain (a family may bring its own, e.g. subspace's self-expression)."""
    if not replace and sd.name in STAGES:
        raise ValueError(f"stage {sd.name!r} is already registered")
    STAGES[sd.name] = sd
    return sd


def unregister_stage(name: str):
    STAGES.pop(name, None)


#: every chain starts with these two; the runner builds their parameters from [data] / [preprocess]
FIRST_STAGES = ("ingest", "preprocess")


def stage_names() -> tuple[str, ...]:
    """Every stage a store may hold: ingest, preprocess, then the registered ones (generic and the families')."""
    return FIRST_STAGES + tuple(s for s in STAGES if s not in FIRST_STAGES)


# -- shared config sections and report columns brought by a family --------------------------------------

#: sections a family adds to the schema, ``{name: {key: Key}}`` (their keys all ``added``, or configs change hash)
SECTIONS: dict[str, dict[str, Key]] = {}


def register_section(name: str, keys: dict[str, Key], *, after: str | None = None):
    """Add the config section ``[name]`` (``after``: the shared section it is listed after)."""
    if name in SCHEMA or name in REGISTRY:
        raise ValueError(f"config section [{name}] exists already")
    SECTIONS[name] = {"keys": keys, "after": after}


#: report columns the families' stages add: ``{column: {"legend": text, "before": column or None}}``
COLUMNS: dict[str, dict] = {}


def register_column(name: str, *, legend: str = "", before: str | None = None):
    """A record key shown as a column of ``results.md`` (``legend``: a sentence added when a run has it)."""
    COLUMNS[name] = {"legend": legend, "before": before}


def columns() -> list[str]:
    """The registered columns in table order (each placed before its ``before`` column when that is registered)."""
    out = []
    for name, c in COLUMNS.items():
        b = c["before"]
        out.insert(out.index(b) if b in out else len(out), name)
    return out
