"""Plan and run a pipeline: one generic loop over each method's chain of stages, sweeps, resume.

The Dask client is :mod:`.scheduler`, the checks made before any work :mod:`.checks`, paper 001's subset
protocol :mod:`.subsets`; an estimator's in-memory data run on a :mod:`.memory` store (no lock files).

``run(config)`` validates everything first, then walks the sweep grid.  Each (method, parameter point) needs a
chain of stage instances (ingest → preprocess → affinity → embed → cluster); every instance is keyed by a hash of
its parameters and its inputs' keys, so one that is already in the store is skipped ("resume"), and changing a
sweep value recomputes only the stages downstream of it.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
import warnings
from pathlib import Path

from bigclust._util.errors import DataError, UserError, disk_errors
from bigclust._util.hashing import stable_hash
from bigclust._util.plan import format_bytes
from bigclust._util.version import __version__
from bigclust.pipeline import stages, usage
from bigclust.pipeline.usage import DROPPABLE
from bigclust.pipeline.checks import (_archive_out_dir, _no_labels, _precheck, check_out_dir, check_sizes,
                                      check_writable, n_distinct_rows)
from bigclust.pipeline.config import Config, load
from bigclust.pipeline.methods import STAGES, StageDef, get as get_method, hashed, stage_key
from bigclust.pipeline.scheduler import _parse_scheduler, _submit, check_scheduler, dask_client
from bigclust.pipeline.stages.data import INGEST
from bigclust.pipeline.locks import computing, hold_output, use_store
from bigclust.pipeline.store import Store, read_matrix
from bigclust.pipeline.units import execute


def log(msg: str):
    """Progress on stderr (stdout is kept for the results table / JSON)."""
    print(msg, file=sys.stderr, flush=True)


class Runner:
    """Runs the chain of stages of each method instance against one store.

    One generic loop (:meth:`run_instance`): ingest and preprocess the data of the instance's config point,
    then for each stage the method chains (:data:`bigclust.pipeline.methods.REGISTRY`), build the stage's
    parameter dataclasses (:data:`bigclust.pipeline.stages.STAGES`), and run each instance unless its key is
    already in the store.
    """

    def __init__(self, cfg: Config, store: Store, client, force: bool, log=log):
        self.cfg, self.store, self.client, self.force, self.log = cfg, store, client, force, log
        self.done: dict[tuple[str, str], dict] = {}
        self.chains: dict[tuple[str, str], list] = {}  # final stage instance -> every instance of its chain
        self.planned: dict[tuple[str, str], dict] = {}   # dropped instances met while planning (attrs only)
        self._distinct = {}
        self._distinct_lock = threading.Lock()   # method units side by side count a data set's rows once
        self.dropped = [0, 0]       # instances dropped during the run and bytes freed ([store] keep = "results")
        self.dry = False            # plan only: keys of instances in the store, nothing run (Missing otherwise)
        self.reuse_dropped = False  # a dropped instance counts as finished (everything after it is)
        self._any_dropped = any(store.dropped(s, k) for s in DROPPABLE for k in store.stage_keys(s))
        self._inflight: dict[tuple[str, str], threading.Event] = {}   # instances a thread is computing
        self._guard = threading.Lock()
        self._here = threading.Lock()    # stages that run in this process: one at a time (its memory budget)

    @contextlib.contextmanager
    def _claim(self, sk):
        """Whether this thread is to compute instance ``sk``: method units run in threads (:func:`execute`), and
        an instance two of them need (the affinity of one point) is computed by the first to ask; the other
        waits for it here and yields False, or, if that thread failed, claims it in turn."""
        while True:
            with self._guard:
                ev = self._inflight.get(sk)
                if ev is None and sk not in self.done:
                    ev = self._inflight[sk] = threading.Event()
                    break
            if ev is None:
                yield False
                return
            ev.wait()
        try:
            yield True
        finally:
            with self._guard:
                del self._inflight[sk]
            ev.set()

    def attrs(self, stage, key) -> dict:
        """Provenance attributes of an instance this runner ran, skipped or planned."""
        return self.done[(stage, key)] if (stage, key) in self.done else self.planned[(stage, key)]

    def _stage(self, sd: StageDef, params, describe="", **runtime):
        """Run stage ``sd`` with ``params`` unless that instance is already in the store; returns its key.

        Stages that need every row run as one task (on a worker when a cluster is attached).
        """
        key = stage_key(params)
        stage = sd.name
        sk = (stage, key)
        if self.dry:  # planning: what is in the store (dropped or not), recorded apart from what this run did
            if sk not in self.done and sk not in self.planned:
                if not (self.store.has(stage, key) or (not self.force and self.store.dropped(stage, key))):
                    raise Missing(stage, key)
                self.planned[sk] = dict(self.store.open(stage, key, dropped_ok=True).attrs)
            return key
        if sk not in self.done and self.reuse_dropped and not self.force and self.store.dropped(stage, key):
            # its arrays were dropped ([store] keep = "results") but everything it fed is finished:
            # the chain goes on from its attributes, and nothing reads its arrays
            if sk not in self.planned or not self.planned[sk].get("_said"):
                self.log(f"  {stage:<10} {describe}: finished earlier (arrays dropped), skipped")
            self.planned[sk] = {**dict(self.store.open(stage, key, dropped_ok=True).attrs), "_said": True}
            return key
        with self._claim(sk) as mine:
            if mine:
                self._compute(sd, params, stage, key, describe, **runtime)
        return key

    def _compute(self, sd: StageDef, params, stage, key, describe, **runtime):
        """Run the stage instance (unless the store has it) and record its attributes in ``self.done``."""
        attrs = {"params": hashed(params), "config_hash": self.cfg.hash, "config_file": str(self.cfg.path)}
        if self.store.has(stage, key) and not self.force:
            self.log(f"  {stage:<10} {describe}: finished earlier, skipped")
        else:
            with (contextlib.nullcontext(False) if getattr(self.store, "in_memory", False) else  # no lock files
                  computing(self.store, stage, key, self.log, f"{stage:<10} {describe}", force=self.force)) as skip:
                if not skip:   # not finished meanwhile by a run of this config started at the same time
                    t0 = time.perf_counter()
                    attrs["started"] = time.time()
                    self.log(f"  {stage:<10} {describe}: running")
                    if sd.where(params) == "task":
                        _submit(self.client, sd.run, str(self.store.path), key, attrs, params, fresh=sd.fresh(params),
                                **runtime)
                    else:
                        with self._here:
                            sd.run(str(self.store.path), key, attrs, params, client=self.client, **runtime)
                    self.log(f"  {stage:<10} {describe}: done in {time.perf_counter() - t0:.1f} s")
        self.done[(stage, key)] = dict(self.store.open(stage, key).attrs)

    def _n_clusters(self, cl, ia) -> int:
        """k from ``[cluster]`` (0: the number of classes), checked against n."""
        k, n = cl["n_clusters"] or ia["n_classes"], ia["n_samples"]
        if not k:
            raise UserError(_no_labels(self.cfg))
        if k < 2 or k > n:
            raise UserError(f"{self.cfg.path}: [cluster] n_clusters={k} must be between 2 and n={n}"
                            + ("" if cl["n_clusters"] else " (taken from the number of classes)"))
        return k

    def _check_distinct(self, pre_key, k):
        """Refuse data with fewer distinct (preprocessed) rows than clusters; warn when most rows are repeats."""
        with self._distinct_lock:
            if pre_key not in self._distinct:
                self._distinct[pre_key] = n_distinct_rows(self.store.open("preprocess", pre_key)["X"])
            m, n = self._distinct[pre_key]
        what = "all rows are the same" if m == 1 else f"only {m} of the {n} rows are distinct"
        if self.source is not None:          # an estimator's array: its words, not the config's
            where, why, scale = "X", f"n_clusters={k}", "rows equal up to scale count as equal under l2_normalize"
        else:
            where, why, scale = (f"{self.cfg.path}: after preprocessing", f"the {k} clusters asked for",
                                 "rows equal up to scale are equal after [preprocess] l2_normalize")
        if m < k:
            raise DataError(f"{where}: {what}, fewer than {why} (zero-variance data, or {scale}); nothing to cluster")
        if m <= n // 2 and not self._distinct.get((pre_key, "warned")):
            self._distinct[(pre_key, "warned")] = True
            warnings.warn(f"{where}: {what}: most rows repeat others ({scale}); clusters and scores are dominated "
                          "by the repeats", RuntimeWarning, stacklevel=2)

    def data(self, point):
        """Ingest and preprocess; returns (preprocess key, ingest attrs, labels or None)."""
        d, pre = point["data"], point["preprocess"]
        ident = {k: d[k] for k in ("name", "path", "label_column")}
        if d.get("header", "auto") != "auto":  # left out when auto: stores ingested before keep their keys
            ident["header"] = d["header"]
        if self.source is not None:
            ident = {"array": self.source.info.name}
        elif d["path"]:
            p = self.cfg.resolve(d["path"])
            st = p.stat() if p.exists() else None
            ident["file"] = [str(p.resolve()), st.st_size if st else None, st.st_mtime_ns if st else None]
        ing = stages.IngestParams(data=ident, chunk_rows=d["chunk_rows"])
        source = None
        if not self.dry and (not self.store.has("ingest", stage_key(ing)) or self.force):
            source = self.source or stages.open_source(d, self.cfg.path.parent)
            if self.source is None:  # the shape is known now: check every point before ingesting
                i = source.info
                self._check_once(i.n_samples, -1 if i.sparse else i.n_features, i.n_classes, i.sparse)
        ing_key = self._stage(INGEST, ing, d["name"] or d["path"], source=source)
        ia = self.attrs("ingest", ing_key)
        if self.source is None and not self.dry:
            self._check_once(ia["n_samples"], ia["n_features"], ia["n_classes"], ia["sparse"])
        text = ia["sparse"] and pre["tfidf"]
        pp = stages.PreprocessParams(
            # "auto" (the schema's default): unit rows for sparse data (counts), none for dense features
            input=ing_key, l2_normalize=ia["sparse"] if pre["l2_normalize"] == "auto" else pre["l2_normalize"],
            pca=pre["pca"],
            tfidf_local=pre["tfidf_local"] if text else None, tfidf_global=pre["tfidf_global"] if text else None,
            tfidf_normalize=pre["tfidf_normalize"] if text else None, chunk_rows=d["chunk_rows"],
            standardize=pre["standardize"], pca_solver=pre["pca_solver"])
        pre_key = self._stage(PREPROCESS, pp, _fmt({k: v for k, v in hashed(pp).items()
                                                    if v is not None and k != "input"}))
        y = None
        if ia["has_labels"]:
            y = _labels(self.store.open("ingest", ing_key))
        self.ingest_key = ing_key
        return pre_key, ia, y

    source = None  # a data source to ingest instead of the config's [data] (the estimators' arrays)
    _checked = False
    _distinct: dict

    def _check_once(self, n, d, n_classes, sparse):
        """:func:`check_sizes` of every config point, once the data's shape is known (before affinity)."""
        if not self._checked:
            check_sizes(self.cfg, list(self.cfg.points()), n, d, n_classes, sparse)
            self._checked = True

    def run_instance(self, method, group, classes=None):
        """Run (or resume) the chain of ``method`` for one instance; returns (record, (final stage, key)).

        ``group``: the config points the instance uses (one, or every value
        of the sweep the method combines).  ``classes``: cluster only the
        samples of these classes, into as many clusters (the subset protocol).
        When the store holds dropped instances (``[store] keep = "results"``)
        the chain is planned first: if its final stage is finished, a dropped
        kernel on the way is not recomputed.
        """
        if self._any_dropped and not self.dry and not self.force:
            self.dry = True
            try:
                final = self._run_instance(method, group, classes)[1]
                self.reuse_dropped = self.store.has(*final)
            except Missing:
                pass
            finally:
                self.dry = False
        try:
            return self._run_instance(method, group, classes)
        finally:
            self.reuse_dropped = False

    def _run_instance(self, method, group, classes=None):
        from bigclust.algo.metrics import batch_scores

        point = method.with_overrides(group[0])
        group = [method.with_overrides(p) for p in group]
        params = method.make(point[method.name])
        pre_key, ia, y = self.data(point)
        src, keys, chain = "preprocess", [pre_key], [("preprocess", pre_key)]
        if classes is not None:
            sp_ = stages.SubsetParams(input=pre_key, labels=self.ingest_key, classes=tuple(int(c) for c in classes))
            key = self._stage(STAGES["subset"], sp_, STAGES["subset"].describe(sp_))
            g = self.store.open("subset", key, dropped_ok=True)  # its y stays when its X is dropped
            y, ia = _labels(g), {**ia, "n_samples": g.attrs["n_samples"], "n_classes": len(classes)}
            src, keys = "subset", [key]
            chain.append(("subset", key))
        ctx = stages.Context(self.cfg, self.store, method, params, group, ia,
                             len(classes) if classes is not None else self._n_clusters(point["cluster"], ia))
        if classes is None and not self.dry:
            self._check_distinct(pre_key, ctx.k)
        for name in method.stages(params, point):
            sd = STAGES[name]
            plist = sd.build(ctx, src, keys)
            keys = [self._stage(sd, p, f"{method.name} {sd.describe(p)}".strip() if name != "affinity"
                                else sd.describe(p), y=y) for p in plist]
            src = name
            chain += [(name, k) for k in keys]
        if self.dry:
            return None, (src, keys[0])
        last = self.done[(src, keys[0])]
        self.chains[(src, keys[0])] = [("ingest", self.ingest_key)] + chain  # for the label files and figures
        labels = read_matrix(self.store.open(src, keys[0]), "labels")
        rec = {"method": method.name, "params": method.shown(params, group), "dataset": ia["dataset"],
               "n": ia["n_samples"], "k": ctx.k}
        if ("cluster", "seed") in self.cfg.sweeps:   # trials over seeds: tell their records apart
            rec["seed"] = point["cluster"]["seed"]
        for stage, key in chain:
            for attr in STAGES[stage].report if stage in STAGES else ():
                if attr in self.attrs(stage, key):
                    rec[attr] = self.attrs(stage, key)[attr]
        rec["seconds"] = float(sum(self.attrs(*sk)["seconds"] for sk in dict.fromkeys(chain)))
        used = [self.attrs(*sk)["gamma_used"] for sk in chain if sk[0] == "affinity"
                and self.attrs(*sk)["params"].get("gamma") == "median" and "gamma_used" in self.attrs(*sk)]
        if used:  # gamma = "median": the width it stood for (one per kernel when the method combines several)
            rec["gamma_used"] = used[0] if len(used) == 1 else used
        # y is None for unlabelled data ([data] label_column = false, an .npz without y): the record then has
        # no acc_*/nmi_* keys, and the report shows what needs no labels
        if y is not None:
            acc, nmi = batch_scores(y, labels, norm=point["evaluate"]["nmi_norm"])
            best = last.get("best", 0)
            rec.update(acc_avg=float(acc.mean()), acc_max=float(acc.max()), nmi_avg=float(nmi.mean()),
                       nmi_max=float(nmi.max()), acc_best_inertia=float(acc[best]),
                       nmi_best_inertia=float(nmi[best]))
        return rec, (src, keys[0])


class Missing(Exception):
    """Planning (``Runner.dry``) met an instance that is not in the store: nothing after it can be."""




def _labels(group):
    """The group's labels y, as 4-byte integers when they fit: every stage task gets them (a Dask worker holds
    its task's arguments until it ends), 31 MiB instead of 62 at 8.1M rows; labels are only compared."""
    import numpy as np

    y = read_matrix(group, "y")
    if y.dtype.kind in "iu" and y.itemsize > 4 and y.size and np.iinfo(np.int32).min <= y.min() <= y.max() \
            <= np.iinfo(np.int32).max:
        return y.astype(np.int32)
    return y


def instances(cfg: Config, points, method):
    """The config-point groups of ``method``: single points, or (``combine``) 2+ differing only in its sweep key."""
    if method.combine is None:
        return [[p] for p in points]
    sec, key = method.combine
    groups = {}
    for point in points:
        rest = {s: dict(v) for s, v in point.items()}
        rest[sec].pop(key)
        groups.setdefault(stable_hash(rest), []).append(point)
    if any(len(g) < 2 for g in groups.values()):
        raise UserError(f"{cfg.path}: {method.name} combines the values of a [{sec}] {key} sweep: give "
                        f"[{sec}] {key} as a list of at least two values")
    return list(groups.values())


# ingest and preprocess start every chain; the Runner builds their parameters from [data] / [preprocess]
# (INGEST: bigclust.pipeline.stages.data)
PREPROCESS = StageDef("preprocess", None, stages.preprocess, "X")


def _fmt(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items() if k != "in")


@contextlib.contextmanager
def _naming(path):
    """Re-raise a :class:`UserError` as the same class with ``"<config>: "`` in front, unless it names it."""
    try:
        yield
    except UserError as e:
        if str(e).startswith(str(path)):
            raise
        raise type(e)(f"{path}: {e}") from None


def run(config_path, *, scheduler: str | None = None, out: str | None = None, force: bool = False,
        replace: bool = False, store: str | None = None):
    """Run the pipeline described by a config file.

    Parameters
    ----------
    config_path : str or Path
        The TOML config file (relative paths in it are relative to its folder).
    scheduler : str, optional
        Overrides ``[dask] scheduler`` (e.g. ``tcp://HOST:PORT``).
    out : str, optional
        Overrides ``[output] dir``.
    force : bool
        Recompute finished stages; implies ``replace``.
    replace : bool
        Write into an output folder that holds another run's results (e.g.
        after a value was added to a sweep): its files are moved to a
        ``replaced-*`` subfolder, not deleted; finished stages are reused.
    store : str, optional
        Overrides ``[store] path``.

    Returns
    -------
    list of dict
        One record per (method, parameter setting); also written to the
        output folder as ``results.{json,csv,md}``.
    """
    with contextlib.ExitStack() as held:   # the locks _run takes are released however the run ends
        return _run(config_path, held, scheduler=scheduler, out=out, force=force, replace=replace, store=store)


def _run(config_path, held, *, scheduler, out, force, replace, store):
    """:func:`run`, holding its output folder and store in ``held`` (:mod:`bigclust.pipeline.locks`)."""
    from bigclust.report import labels as labels_out
    from bigclust.report import tables as report

    cfg = load(config_path)
    with _naming(cfg.path):     # every refusal before any work names the config it is about
        out_dir = Path(out) if out else cfg.resolve(cfg.sections["output"]["dir"])
        store_path = Path(store) if store else cfg.resolve(cfg.sections["store"]["path"])
        check_writable(out_dir, "output folder")
        check_writable(store_path, "store")
        replace = replace or force
        held.enter_context(hold_output(out_dir, cfg.hash, f"run of {cfg.path}"))   # another config: refused
        inputs = (cfg.path, cfg.resolve(cfg.sections["data"]["path"] or cfg.path.name), store_path)
        check_out_dir(out_dir, cfg, replace, inputs=inputs)   # never moved by --replace
        points = list(cfg.points())
        for point in points:  # sizes known from the registry are checked before any work
            _precheck(cfg, point)
        grouped = {m: instances(cfg, points, get_method(m)) for m in cfg.methods}  # refused before any work
        dk = cfg.sections["dask"]
        scheduler = scheduler if scheduler is not None else dk["scheduler"]
        check_scheduler(scheduler)
        store = Store(store_path, owner=owner(cfg), force=force)
        held.enter_context(use_store(store.path, f"run of {cfg.path}"))   # store clean waits for it
    log(f"bigclust {__version__}: {cfg.path}: {len(points)} sweep point(s) x {len(cfg.methods)} method(s), "
        f"store {usage.shown_path(store.path)}")
    t0 = time.perf_counter()
    places = {"store": store.path, "output folder": out_dir}   # a full or read-only disk: one line naming it
    with disk_errors(places), dask_client(scheduler, dk["n_workers"], probe=False) as client:
        runner = Runner(cfg, store, client, force)
        with _naming(cfg.path):   # an error met while running names the config too, as the checks before do
            records, finals = execute(runner, points, grouped)
    seed = points[0]["cluster"]["seed"]
    picks = labels_out.collect(store, records, finals, runner.chains, seed=seed)  # adds restart_picked, ...
    if replace and out_dir.exists():
        _archive_out_dir(out_dir)
    with disk_errors(places):
        report.write(out_dir, records, cfg, plots=cfg.sections["output"]["plots"], trials=runner.trials,
                     picks=picks, store=store)
    if runner.trials and cfg.sections["output"]["plots"]:
        log("[output] plots: the subset protocol writes no figures and no label files (a labelling per subset); "
            "trials.csv has every subset's scores")
    if cfg.sections["store"]["keep"] == "results":
        n_dropped, freed = usage.drop_intermediates(store, runner.done, DROPPABLE)
        n_dropped, freed = n_dropped + runner.dropped[0], freed + runner.dropped[1]
        if n_dropped:
            log(f"[store] keep = \"results\": dropped the arrays of {n_dropped} dense kernel(s) / row copies "
                f"({format_bytes(freed)}); a re-run recomputes them only where a result is missing")
    log(usage.summary_line(store))
    log(f"done in {time.perf_counter() - t0:.1f} s; results in {usage.shown_path(out_dir)}")
    print(report.subset_tables(records) if runner.trials else report.markdown_table(records))
    return records


def owner(cfg: Config) -> dict:
    """Whose data a store holds: the ``[data]`` name or the data file's absolute path."""
    d = cfg.sections["data"]
    return {"name": d["name"], "path": str(cfg.resolve(d["path"]).resolve()) if d["path"] else None}


def validate(config_path) -> Config:
    """Only check a config (``bigclust pipeline validate``); raises ConfigError/UserError.

    Everything that does not need the data's values (keys, ranges, seeds, the memory budget, sizes of registered
    data sets, a readable data file, writable store and output folders).  Creates nothing.

    Parameters
    ----------
    config_path : str or Path
        The TOML config file.

    Returns
    -------
    Config
        The parsed config, its sweeps expanded.
    """
    cfg = load(config_path)
    for point in cfg.points():
        _precheck(cfg, point)
    for m in cfg.methods:
        instances(cfg, list(cfg.points()), get_method(m))
    check_writable(cfg.resolve(cfg.sections["store"]["path"]), "store")
    check_writable(cfg.resolve(cfg.sections["output"]["dir"]), "output folder")
    sched = cfg.sections["dask"]["scheduler"]
    if sched and sched not in ("synchronous", "local-cluster"):
        _parse_scheduler(sched, "[dask] scheduler")  # its form only: validate connects to nothing
    return cfg
