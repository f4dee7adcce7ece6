"""Plan and run a pipeline: stages, sweeps, resume, the Dask client.

``run(config)`` validates everything first, then walks the sweep grid.  Each
(method, parameter point) needs a chain of stage instances
(ingest → preprocess → affinity → embed → cluster); every instance is keyed by
a hash of its parameters and its inputs' keys, so one that is already in the
store is skipped ("resume"), and changing a sweep value recomputes only the
stages downstream of it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from . import __version__, stages
from .config import Config, load, stable_hash
from .methods import get as get_method
from .stages import STAGES, StageDef, hashed, stage_key
from .errors import DataError, StoreError, UserError
from .store import Store, _pid_alive, read_matrix


def log(msg: str):
    """Progress on stderr (stdout is kept for the results table / JSON)."""
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def dask_client(scheduler: str | None, n_workers: int = 1, probe: bool = True):
    """The Dask context for a run.

    ``""``/``None``: Dask's local threaded scheduler in this process;
    ``"synchronous"``: everything in the calling thread (debugging);
    ``"local-cluster"``: a ``LocalCluster`` of ``n_workers`` processes for the
    run's lifetime; ``tcp://HOST:PORT``: an existing ``dask.distributed``
    scheduler (checked first, within :data:`SCHEDULER_TIMEOUT` seconds, unless
    ``probe`` is false: :func:`check_scheduler`).  Yields the distributed
    ``Client`` or ``None``.  A scheduler lost mid-run is one UserError line.
    """
    import dask

    if not scheduler:
        with dask.config.set(scheduler="threads"):
            yield None
        return
    if scheduler == "synchronous":
        with dask.config.set(scheduler="synchronous"):
            yield None
        return
    from distributed import Client, LocalCluster

    if scheduler == "local-cluster":
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            yield client
        return
    timeout = f"{SCHEDULER_TIMEOUT:g}s"
    if probe:
        _probe_scheduler(scheduler, SCHEDULER_TIMEOUT)
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": timeout}):
            client = Client(scheduler, timeout=timeout)
    except (OSError, TimeoutError) as e:
        raise UserError(f"cannot connect to Dask scheduler {scheduler}: {e}") from None
    with client:
        try:
            yield client
        except _lost_scheduler_errors() as e:
            raise UserError(f"lost the Dask scheduler {scheduler} mid-run ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else 'no message'}); finished stages are kept "
                            "in the store: running the same command again resumes") from None


#: seconds to wait for a Dask scheduler to connect and answer its handshake
SCHEDULER_TIMEOUT = 10.0


def _lost_scheduler_errors() -> tuple:
    """What a client raises when its scheduler goes away (cancelled futures, closed comms)."""
    import asyncio

    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    return (FutureCancelledError, CommClosedError, asyncio.CancelledError)


def check_scheduler(address: str | None):
    """Before any work: an address that is not one, or no Dask scheduler answering there, is one line."""
    if address and address not in ("synchronous", "local-cluster"):
        _probe_scheduler(address, SCHEDULER_TIMEOUT)


def _parse_scheduler(address: str):
    """``(scheme, host, port)`` of a scheduler address; one line when it is not one."""
    from distributed.comm.addressing import parse_address
    try:
        scheme, loc = parse_address(address, strict=True)
        host, _, port = loc.rpartition(":")
        if scheme in ("tcp", "tls", "ws", "wss") and (not host or not port.isdigit()):
            raise ValueError(f"missing port number in {address!r}")
    except ValueError as e:
        raise UserError(f"scheduler {address!r} (--scheduler or [dask] scheduler) is not an address: expected "
                        f"tcp://HOST:PORT, 'local-cluster' or 'synchronous' ({e})") from None
    return scheme, host, port


def _probe_scheduler(address: str, timeout: float):
    """One line, within ``timeout`` seconds, unless a Dask scheduler answers at ``address``.

    ``distributed.Client`` bounds the TCP connect by its timeout but not the
    handshake that follows, so a port where something else listens (a silent
    socket, a web server) would hang it forever.  Here the connect, the
    handshake and an ``identity`` request are bounded together.
    """
    import asyncio

    from distributed.comm import connect

    scheme, host, port = _parse_scheduler(address)

    if scheme in ("tcp", "tls", "ws", "wss"):  # is anything there at all? (refused at once, or unreachable)
        import socket
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except OSError as e:
            why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
            raise UserError(f"cannot connect to Dask scheduler {address}: {why} "
                            "(is it running? is the address right?)") from None

    async def identity():
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    def probe():  # in a thread of its own: asyncio.run cannot start inside a running loop (Jupyter)
        return asyncio.run(asyncio.wait_for(identity(), timeout))

    from concurrent.futures import ThreadPoolExecutor
    try:
        with ThreadPoolExecutor(1) as pool:
            ident = pool.submit(probe).result()
    except (asyncio.TimeoutError, TimeoutError):
        raise UserError(f"no Dask scheduler at {address}: something accepts connections there "
                        f"({_what_listens(host, port) if scheme == 'tcp' else 'unknown'}) but did not answer the "
                        f"Dask handshake within {timeout:g} s") from None
    except Exception as e:  # closed mid-handshake, or bytes that do not deserialise: not a Dask peer
        raise UserError(f"no Dask scheduler at {address}: something listens there "
                        f"({_what_listens(host, port) if scheme == 'tcp' else 'unknown'}) but it does not speak "
                        f"the Dask protocol ({type(e).__name__})") from None
    if not isinstance(ident, dict) or ident.get("type") != "Scheduler":
        kind = ident.get("type") if isinstance(ident, dict) else type(ident).__name__
        raise UserError(f"no Dask scheduler at {address}: a Dask {kind} answers there, not a scheduler")


def _what_listens(host, port) -> str:
    """A guess at the service on ``host:port``: does it answer an HTTP request? (2 s at most)"""
    import socket
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2) as s:
            s.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
            head = s.recv(64)
    except OSError:
        return "it does not answer an HTTP request either"
    if head.startswith(b"HTTP/"):
        return "an HTTP server: " + head.split(b"\r\n")[0].decode("latin-1")
    return "it answers neither Dask nor HTTP" if head else "it does not answer an HTTP request either"


def _run_recording_warnings(fn, *args, **kwargs):
    """Run ``fn`` (on a worker) and return ``(result, warnings raised)`` so the client can show them."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, [(w.message, w.category, w.filename, w.lineno) for w in caught]


def _reemit(caught):
    """Warnings recorded on a worker, warned again here once each (the CLI shows each as one line)."""
    import warnings
    seen = set()
    for message, category, filename, lineno in caught:
        text = str(message)
        if (text, category) in seen:
            continue
        seen.add((text, category))
        warnings.warn_explicit(message if isinstance(message, Warning) else text, category, filename, lineno)


def _submit(client, fn, *args, **kwargs):
    """Run one in-memory stage: on a worker when a cluster is attached, else here.

    Warnings the stage raises on the worker (a solver short of its tolerance,
    a disconnected graph) are sent back and warned again here.
    """
    if client is None:
        return fn(*args, **kwargs)
    out, caught = client.submit(_run_recording_warnings, fn, *args, **kwargs, pure=False).result()
    _reemit(caught)
    return out


def check_out_dir(out_dir: Path, cfg: Config, force: bool):
    """Refuse an output folder that holds another run's results (unless ``force``)."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise StoreError(f"--out {out_dir} exists and is not a folder")
    _clean_partial_writes(out_dir)
    entries = [p for p in out_dir.iterdir() if not p.name.startswith("replaced-")]
    if not entries:
        return
    run_json = out_dir / "run.json"
    prev = None
    if run_json.exists():
        try:
            prev = json.loads(run_json.read_text()).get("config_hash")
        except (OSError, ValueError):
            prev = None
    if prev == cfg.hash:
        return
    if not force:
        what = f"results of another config (hash {prev})" if prev else "files not written by this config"
        raise StoreError(f"output folder {out_dir} holds {what}; choose another --out or pass --force "
                         "(which moves them to a replaced-* subfolder)")


def _clean_partial_writes(out_dir: Path):
    """Remove the temporary files of a report writer that was killed (``.NAME.tmp-PID``)."""
    for p in out_dir.glob(".*.tmp-*"):
        pid = p.name.rsplit(".tmp-", 1)[1].split(".")[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                p.unlink()


def _archive_out_dir(out_dir: Path):
    entries = [p for p in out_dir.iterdir() if not p.name.startswith("replaced-")]
    if not entries:
        return
    dest = out_dir / time.strftime("replaced-%Y%m%d-%H%M%S")
    dest.mkdir()
    for p in entries:
        shutil.move(str(p), dest / p.name)
    log(f"moved the previous contents of {out_dir} to {dest}")


class Runner:
    """Runs the chain of stages of each method instance against one store.

    One generic loop (:meth:`run_instance`): ingest and preprocess the data
    of the instance's config point, then for each stage the method chains
    (:data:`bigclust.methods.REGISTRY`), build the stage's parameter
    dataclasses (:data:`bigclust.stages.STAGES`), and run each instance unless
    its key is already in the store.
    """

    def __init__(self, cfg: Config, store: Store, client, force: bool, log=log):
        self.cfg, self.store, self.client, self.force, self.log = cfg, store, client, force, log
        self.done: dict[tuple[str, str], dict] = {}
        self._distinct = {}

    def _stage(self, sd: StageDef, params, describe="", **runtime):
        """Run stage ``sd`` with ``params`` unless that instance is already in the store; returns its key.

        Stages that need every row run as one task (on a worker when a cluster is attached).
        """
        key = stage_key(params)
        stage = sd.name
        if (stage, key) not in self.done:
            attrs = {"params": hashed(params), "config_hash": self.cfg.hash, "config_file": str(self.cfg.path)}
            if self.store.has(stage, key) and not self.force:
                self.log(f"  {stage:<10} {describe}: finished earlier, skipped")
            else:
                t0 = time.perf_counter()
                attrs["started"] = time.time()
                self.log(f"  {stage:<10} {describe}: running")
                if sd.where(params) == "task":
                    _submit(self.client, sd.run, str(self.store.path), key, attrs, params, **runtime)
                else:
                    sd.run(str(self.store.path), key, attrs, params, client=self.client, **runtime)
                self.log(f"  {stage:<10} {describe}: done in {time.perf_counter() - t0:.1f} s")
            self.done[(stage, key)] = dict(self.store.open(stage, key).attrs)
        return key

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
        if pre_key not in self._distinct:
            self._distinct[pre_key] = n_distinct_rows(self.store.open("preprocess", pre_key)["X"])
        m, n = self._distinct[pre_key]
        what = "all rows are the same" if m == 1 else f"only {m} of the {n} rows are distinct"
        if m < k:
            raise DataError(f"{self.cfg.path}: after preprocessing {what}, fewer than the {k} clusters asked for "
                            "(zero-variance data, or rows equal up to scale under [preprocess] l2_normalize); "
                            "nothing to cluster")
        if m <= n // 2 and not self._distinct.get((pre_key, "warned")):
            self._distinct[(pre_key, "warned")] = True
            warnings.warn(f"after preprocessing {what}: most rows repeat others (rows equal up to scale are equal "
                          "after [preprocess] l2_normalize); clusters and scores are dominated by the repeats",
                          RuntimeWarning, stacklevel=2)

    def data(self, point):
        """Ingest and preprocess; returns (preprocess key, ingest attrs, labels or None)."""
        d, pre = point["data"], point["preprocess"]
        ident = {k: d[k] for k in ("name", "path", "label_column")}
        if self.source is not None:
            ident = {"array": self.source.info.name}
        elif d["path"]:
            p = self.cfg.resolve(d["path"])
            st = p.stat() if p.exists() else None
            ident["file"] = [str(p.resolve()), st.st_size if st else None, st.st_mtime_ns if st else None]
        ing = stages.IngestParams(data=ident, chunk_rows=d["chunk_rows"])
        source = None
        if not self.store.has("ingest", stage_key(ing)) or self.force:
            source = self.source or stages.open_source(d, self.cfg.path.parent)
            if self.source is None:  # the shape is known now: check every point before ingesting
                i = source.info
                self._check_once(i.n_samples, -1 if i.sparse else i.n_features, i.n_classes, i.sparse)
        ing_key = self._stage(INGEST, ing, d["name"] or d["path"], source=source)
        ia = self.done[("ingest", ing_key)]
        if self.source is None:
            self._check_once(ia["n_samples"], ia["n_features"], ia["n_classes"], ia["sparse"])
        text = ia["sparse"] and pre["tfidf"]
        pp = stages.PreprocessParams(
            input=ing_key, l2_normalize=pre["l2_normalize"], pca=pre["pca"],
            tfidf_local=pre["tfidf_local"] if text else None, tfidf_global=pre["tfidf_global"] if text else None,
            tfidf_normalize=pre["tfidf_normalize"] if text else None, chunk_rows=d["chunk_rows"])
        pre_key = self._stage(PREPROCESS, pp, _fmt({k: v for k, v in hashed(pp).items() if v is not None and k != "input"}))
        y = None
        if ia["has_labels"]:
            y = read_matrix(self.store.open("ingest", ing_key), "y")
        return pre_key, ia, y

    source = None  # a data source to ingest instead of the config's [data] (the estimators' arrays)
    _checked = False
    _distinct: dict

    def _check_once(self, n, d, n_classes, sparse):
        """:func:`check_sizes` of every config point, once the data's shape is known (before affinity)."""
        if not self._checked:
            check_sizes(self.cfg, list(self.cfg.points()), n, d, n_classes, sparse)
            self._checked = True

    def run_instance(self, method, group):
        """Run (or resume) the chain of ``method`` for one instance; returns (record, labels of every restart).

        ``group``: the config points the instance uses (one, or every value
        of the sweep the method combines).
        """
        from .metrics import batch_scores

        point = _with_overrides(group[0], method)
        group = [_with_overrides(p, method) for p in group]
        params = method.make(point[method.name])
        pre_key, ia, y = self.data(point)
        ctx = stages.Context(self.cfg, self.store, method, params, group, ia, self._n_clusters(point["cluster"], ia))
        if self.source is None:
            self._check_distinct(pre_key, ctx.k)
        src, keys, chain = "preprocess", [pre_key], [("preprocess", pre_key)]
        for name in method.chain:
            sd = STAGES[name]
            plist = sd.build(ctx, src, keys)
            keys = [self._stage(sd, p, f"{method.name} {sd.describe(p)}".strip() if name != "affinity"
                                else sd.describe(p), y=y) for p in plist]
            src = name
            chain += [(name, k) for k in keys]
        last = self.done[(src, keys[0])]
        labels = read_matrix(self.store.open(src, keys[0]), "labels")
        rec = {"method": method.name, "params": _shown(method, params, group), "dataset": ia["dataset"],
               "n": ia["n_samples"], "k": ctx.k}
        for stage, key in chain:
            for attr in STAGES[stage].report if stage in STAGES else ():
                if attr in self.done[(stage, key)]:
                    rec[attr] = self.done[(stage, key)][attr]
        rec["seconds"] = float(sum(self.done[sk]["seconds"] for sk in dict.fromkeys(chain)))
        if y is not None:
            acc, nmi = batch_scores(y, labels, norm=point["evaluate"]["nmi_norm"])
            best = last.get("best", 0)
            rec.update(acc_avg=float(acc.mean()), acc_max=float(acc.max()), nmi_avg=float(nmi.mean()),
                       nmi_max=float(nmi.max()), acc_best_inertia=float(acc[best]),
                       nmi_best_inertia=float(nmi[best]))
        return rec, (src, keys[0])


def _with_overrides(point, method):
    """The point with the values the method sets for its own chain (``Method.overrides``)."""
    if method.overrides is None:
        return point
    over = method.overrides(method.make(point[method.name]))
    if not over:
        return point
    return {s: {**v, **over.get(s, {})} for s, v in point.items()}


def _shown(method, params, group) -> dict:
    """The parameters a record is labelled with: the affinity's width(s) and the method's own."""
    shown = {}
    a = group[0]["affinity"]
    if "affinity" in method.chain:
        if method.combine:
            sec, key = method.combine
            shown[key + "s"] = [p[sec][key] for p in group]
        elif a["kind"] in ("gaussian", "knn"):
            shown["gamma"] = a["gamma"]
        if a["kind"] == "knn":
            shown["n_neighbors"] = a["n_neighbors"]
    shown.update(dataclasses.asdict(params))
    return shown


def instances(cfg: Config, points, method):
    """The config-point groups of ``method``: one point each, or (``combine``) the points that differ
    only in the combined sweep key, at least two of them."""
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


def _ingest_with_progress(store_path, key, attrs, p, *, source, **_):
    from tqdm import tqdm
    with tqdm(total=source.info.n_samples, desc=f"ingest {source.info.name}", unit="rows",
              file=sys.stderr, disable=None, leave=False) as bar:
        stages.ingest(store_path, key, attrs, p, source=source, progress=bar.update)


# ingest and preprocess start every chain; the Runner builds their parameters from [data] / [preprocess]
INGEST = StageDef("ingest", None, _ingest_with_progress, "X")
PREPROCESS = StageDef("preprocess", None, stages.preprocess, "X")


def _fmt(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items() if k != "in")


def run(config_path, *, scheduler: str | None = None, out: str | None = None, force: bool = False,
        store: str | None = None):
    """Run the pipeline described by a config file.

    Parameters
    ----------
    config_path : str or Path
    scheduler : str, optional
        Overrides ``[dask] scheduler`` (e.g. ``tcp://HOST:PORT``).
    out : str, optional
        Overrides ``[output] dir``.
    store : str, optional
        Overrides ``[store] path``.
    force : bool
        Recompute finished stages and replace another run's output folder
        (its files are moved to a ``replaced-*`` subfolder, not deleted).

    Returns
    -------
    list of dict
        One record per (method, parameter setting); also written to the
        output folder as ``results.{json,csv,md}``.
    """
    from . import report

    cfg = load(config_path)
    out_dir = Path(out) if out else cfg.resolve(cfg.sections["output"]["dir"])
    store_path = Path(store) if store else cfg.resolve(cfg.sections["store"]["path"])
    check_writable(out_dir, "output folder")
    check_writable(store_path, "store")
    check_out_dir(out_dir, cfg, force)
    points = list(cfg.points())
    for point in points:  # sizes known from the registry are checked before any work
        _precheck(cfg, point)
    grouped = {m: instances(cfg, points, get_method(m)) for m in cfg.methods}  # refused before any work
    dk = cfg.sections["dask"]
    scheduler = scheduler if scheduler is not None else dk["scheduler"]
    check_scheduler(scheduler)
    store = Store(store_path, owner=_owner(cfg), force=force)
    log(f"bigclust {__version__}: {cfg.path}: {len(points)} sweep point(s) x {len(cfg.methods)} method(s), "
        f"store {store.path}")
    t0 = time.perf_counter()
    with dask_client(scheduler, dk["n_workers"], probe=False) as client:
        records, _ = execute(Runner(cfg, store, client, force), points, grouped)
    if force and out_dir.exists():
        _archive_out_dir(out_dir)
    report.write(out_dir, records, cfg, plots=cfg.sections["output"]["plots"])
    log(f"done in {time.perf_counter() - t0:.1f} s; results in {out_dir}")
    print(report.markdown_table(records))
    return records


def execute(runner: Runner, points, grouped):
    """Every method instance of the sweep, in config order; returns (records, their final stages).

    Single-point methods run point by point; a method that combines a sweep
    runs once per group afterwards.  An instance whose final stage another
    already reported (K-means on X does not depend on γ) is reported once.
    """
    records, finals = [], []
    single = [m for m in grouped if get_method(m).combine is None]
    for i, point in enumerate(points):
        runner.log(f"[{i + 1}/{len(points)}] " + (_fmt({f"{s}.{k}": point[s][k] for s, k in runner.cfg.sweeps})
                                                   or "(no sweep)"))
        for m in single:
            _add(records, finals, *runner.run_instance(get_method(m), [point]))
    for m in grouped:
        if get_method(m).combine is not None:
            for group in grouped[m]:
                _add(records, finals, *runner.run_instance(get_method(m), group))
    return records, finals


def _add(records, finals, rec, final):
    if final not in finals:
        records.append(rec)
        finals.append(final)


def _owner(cfg: Config) -> dict:
    d = cfg.sections["data"]
    return {"name": d["name"], "path": str(cfg.resolve(d["path"]).resolve()) if d["path"] else None}


def _precheck(cfg: Config, point):
    """What can be checked of one config point before reading any value of the data.

    The data file exists and is readable; for a registered data set (whose
    shape the registry knows) every size and the memory budget (:func:`check_sizes`).
    """
    from .datasets import get_info
    name = point["data"]["name"]
    if not name:
        p = cfg.resolve(point["data"]["path"])
        if not p.is_file():
            raise DataError(f"{cfg.path}: [data] path: file {p} does not exist")
        try:
            with open(p, "rb"):
                pass
        except OSError as e:
            raise DataError(f"{cfg.path}: [data] path: cannot read {p} ({e.strerror})") from None
        return
    info = get_info(name)
    check_sizes(cfg, [point], info.n_samples, info.n_features, info.n_classes, info.sparse)


def n_distinct_rows(node) -> tuple[int, int]:
    """``(distinct rows, rows)`` of a stored matrix (dense zarr array or CSR group), one pass in chunks.

    Rows are compared through a 64-bit hash of their bytes (random odd weights
    per column, wrapping arithmetic): equal rows hash equal, and distinct rows
    collide with negligible probability.  Dense rows that all equal the first
    one to float32 rounding count as one.
    """
    rng = np.random.default_rng(12345)
    hashes = []
    if node.attrs.get("format") == "csr":
        indptr, indices, data = node["indptr"][...], node["indices"][...], node["data"][...]
        n = indptr.size - 1
        w_col = rng.integers(1, 2**63, size=int(indices.max(initial=0)) + 1, dtype=np.uint64) | np.uint64(1)
        v = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32).astype(np.uint64)
        mixed = (v * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1)) * w_col[indices]
        h = np.zeros(n, np.uint64)
        np.add.at(h, np.repeat(np.arange(n), np.diff(indptr)), mixed)
        hashes.append(h)
    else:
        n, d = node.shape
        w = rng.integers(1, 2**63, size=d, dtype=np.uint64) | np.uint64(1)
        step = max(1, min(n, (64 << 20) // max(1, 8 * d)))
        ref, dev = None, 0.0
        for r0 in range(0, n, step):
            X = np.ascontiguousarray(node[r0:r0 + step], dtype=np.float32)
            if ref is None:
                ref = X[0].astype(np.float64)
            dev = max(dev, float(np.abs(X - ref).max(initial=0.0)))
            blk = X.view(np.uint32).astype(np.uint64)
            blk = (blk * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1)) * w
            hashes.append(blk.sum(axis=1, dtype=np.uint64))
        # rows equal to float32 rounding (e.g. equal up to scale, then L2-normalised) are one row
        if n and dev <= 1e-6 * max(float(np.abs(ref).max(initial=0.0)), np.finfo(np.float32).tiny):
            return 1, int(n)
    return int(np.unique(np.concatenate(hashes)).size), int(n)


def _no_labels(cfg) -> str:
    return (f"{cfg.path}: the data have no labels (a .npz without 'y', or unlabelled rows), so the number of "
            "clusters cannot be taken from them: set [cluster] n_clusters")


def _uses_dense_kernel(method, point) -> bool:
    return "affinity" in method.chain and point["affinity"]["kind"] != "knn"


def check_sizes(cfg: Config, points, n: int, d: int, n_classes: int, sparse: bool):
    """Sizes and memory of every config point against the data's shape, before any work.

    ``d`` < 0: not known yet (a text corpus's vocabulary).  Raises UserError
    (ConfigError for the memory budget) naming the key and what it needs.
    """
    from .config import ConfigError
    from .plan import chunk_bytes, format_bytes, min_budget

    budget = cfg.max_memory
    mem = f"[store] max_memory={cfg.sections['store']['max_memory']!r} ({format_bytes(budget)})"
    for point in points:
        k = point["cluster"]["n_clusters"] or n_classes
        if not k:
            raise UserError(_no_labels(cfg))
        if k > n:
            raise UserError(f"{cfg.path}: [cluster] n_clusters={k} must be between 2 and n={n}"
                            + ("" if point["cluster"]["n_clusters"] else " (taken from the number of classes)"))
        a = point["affinity"]
        if a["kind"] == "knn" and a["n_neighbors"] > n:
            raise UserError(f"{cfg.path}: [affinity] n_neighbors={a['n_neighbors']} exceeds n={n}")
        rows = min(point["data"]["chunk_rows"], n)  # a chunk never holds more rows than the data
        if not sparse and d >= 0 and chunk_bytes(rows, d) > budget:
            fit = budget // chunk_bytes(1, d)
            raise ConfigError(f"{cfg.path}: [data] chunk_rows={point['data']['chunk_rows']}: a chunk of {rows} "
                              f"rows x {d} features x 4 "
                              f"bytes = {format_bytes(chunk_bytes(rows, d))} does not fit {mem}; "
                              + (f"lower chunk_rows to at most {fit} or raise max_memory" if fit
                                 else "raise max_memory"))
        for m in cfg.methods:
            method = get_method(m)
            if "embed" in method.chain and k:
                ncomp = point["embed"]["n_components"] or k
                if ncomp >= n:
                    raise UserError(f"{cfg.path}: [embed] n_components={ncomp} must be below n={n}"
                                    + ("" if point["embed"]["n_components"] else " (= the number of clusters)"))
            if _uses_dense_kernel(method, point):
                n_k = len(cfg.sweeps.get(method.combine, [0])) if method.combine else 1
                need = min_budget(n, np.dtype(a["dtype"]).itemsize, n_kernels=n_k)
                if need > budget:
                    raise ConfigError(f"{cfg.path}: {mem} is too small for {m} on n={n} samples: streaming "
                                      f"the n x n kernel needs at least {format_bytes(need)} (a few rows of it)")


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_writable(path: Path, what: str):
    """One line, before any work, when ``path`` (a folder to create or reuse) cannot be written.

    The folder or its nearest existing parent must be a folder (not a file)
    in which a sub-folder can be created and removed (a real probe, so
    read-only mounts and root's permissions are told right).
    """
    import tempfile

    path = Path(path)
    base = _nearest_existing(path.absolute())
    if not base.is_dir():
        where = "is a file" if base == path.absolute() else f"is under {base}, which is a file"
        raise StoreError(f"{what} {path} {where}, not a folder")
    try:
        probe = tempfile.mkdtemp(prefix=".bigclust-probe-", dir=base)
        os.rmdir(probe)
    except OSError as e:
        raise StoreError(f"{what} {path} cannot be written: {base} is not writable ({e.strerror})") from None


def validate(config_path) -> Config:
    """Only check a config (``bigclust pipeline validate``); raises ConfigError/UserError.

    Everything that does not need the data's values: keys, ranges, seeds, the
    memory budget, sizes of registered data sets, the data file is readable,
    the store and output folders can be written.  Creates nothing.
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
        _parse_scheduler(sched)  # its form only: validate connects to nothing
    return cfg


def ingest_to_store(name, root, store_path, *, chunk_rows=4096):
    """``bigclust data ingest``: the pipeline's ingest stage on its own.

    The stage key is the one a pipeline with ``[data] name = NAME`` computes,
    so a later ``pipeline run`` on this store skips the ingest.
    """
    from pathlib import Path

    data = {"name": name, "path": None, "root": str(root) if root else None, "label_column": -1}
    check_writable(Path(store_path), "store")
    source = stages.open_source(data, Path.cwd())
    store = Store(store_path, owner={"name": name, "path": None})
    params = stages.IngestParams(data={"name": name, "path": None, "label_column": -1}, chunk_rows=chunk_rows)
    key = stage_key(params)
    if store.has("ingest", key):
        log(f"{name}: already in {store_path}, skipped")
    else:
        _ingest_with_progress(str(store.path), key, {"params": hashed(params)}, params, source=source)
    a = store.open("ingest", key).attrs
    return a["n_samples"], a["n_features"]


def store_info(store_path) -> dict:
    """``bigclust data info``: what the data in a store look like, and which stages it holds."""
    store = Store(store_path)
    keys = store.stage_keys("ingest")
    if not keys:
        raise UserError(f"store {store_path} holds no ingested data")
    g = store.open("ingest", keys[0])
    a = g.attrs
    X = g["X"]
    dtype = str(X["data"].dtype if a["sparse"] else X.dtype)
    info = {"dataset": a["dataset"], "n_samples": a["n_samples"], "n_features": a["n_features"],
            "n_classes": a["n_classes"], "dtype": dtype, "sparse": a["sparse"]}
    if a["sparse"]:
        info["nnz"] = int(X["data"].shape[0])
    info["stages"] = {s: len(store.stage_keys(s)) for s in ("ingest", "preprocess", "affinity", "embed", "cluster")}
    return info
