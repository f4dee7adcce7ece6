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
import json
import shutil
import sys
import time
from pathlib import Path


from . import __version__, stages
from .config import Config, load, stable_hash
from .errors import DataError, StoreError, UserError
from .store import Store, read_matrix


def log(msg: str):
    """Progress on stderr (stdout is kept for the results table / JSON)."""
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def dask_client(scheduler: str | None, n_workers: int = 1):
    """The Dask context for a run.

    ``""``/``None``: Dask's local threaded scheduler in this process;
    ``"synchronous"``: everything in the calling thread (debugging);
    ``"local-cluster"``: a ``LocalCluster`` of ``n_workers`` processes for the
    run's lifetime; ``tcp://HOST:PORT``: an existing ``dask.distributed``
    scheduler.  Yields the distributed ``Client`` or ``None``.
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
    try:
        client = Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as e:
        raise UserError(f"cannot connect to Dask scheduler {scheduler}: {e}") from None
    with client:
        yield client


def _submit(client, fn, *args):
    """Run one in-memory stage: on a worker when a cluster is attached, else here."""
    if client is None:
        return fn(*args)
    return client.submit(fn, *args, pure=False).result()


def check_out_dir(out_dir: Path, cfg: Config, force: bool):
    """Refuse an output folder that holds another run's results (unless ``force``)."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise StoreError(f"--out {out_dir} exists and is not a folder")
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
    """Executes the stage chain for each (method, sweep point) against one store."""

    def __init__(self, cfg: Config, store: Store, client, force: bool):
        self.cfg, self.store, self.client, self.force = cfg, store, client, force
        self.done: dict[tuple[str, str], dict] = {}

    def _stage(self, stage, params, fn, *args, describe="", submit=False):
        """Run ``fn`` unless the instance ``(stage, key)`` is already in the store.

        Returns the instance's key.  ``submit``: the stage needs all rows in
        memory and runs as one task (on a worker when a cluster is attached).
        """
        key = stable_hash(params)
        if (stage, key) not in self.done:
            attrs = {"params": params, "config_hash": self.cfg.hash, "config_file": str(self.cfg.path)}
            if self.store.has(stage, key) and not self.force:
                log(f"  {stage:<10} {describe}: finished earlier, skipped")
            else:
                t0 = time.perf_counter()
                attrs["started"] = time.time()
                log(f"  {stage:<10} {describe}: running")
                if submit:
                    _submit(self.client, fn, str(self.store.path), key, attrs, *args)
                else:
                    fn(str(self.store.path), key, attrs, *args)
                log(f"  {stage:<10} {describe}: done in {time.perf_counter() - t0:.1f} s")
            self.done[(stage, key)] = dict(self.store.open(stage, key).attrs)
        return key

    def _n_clusters(self, cl, ia) -> int:
        """k from ``[cluster]`` (0: the number of classes), checked against n."""
        k, n = cl["n_clusters"] or ia["n_classes"], ia["n_samples"]
        if k < 2 or k > n:
            raise UserError(f"{self.cfg.path}: [cluster] n_clusters={k} must be between 2 and n={n}"
                            + ("" if cl["n_clusters"] else " (taken from the number of classes)"))
        return k

    def _out_of_core(self, aff_key) -> bool:
        """A dense K whose in-memory normalisation (K and G) would exceed ``max_memory``."""
        node = self.store.open("affinity", aff_key)["K"]
        if node.attrs.get("format") == "csr":
            return False
        n = node.shape[0]
        return 2 * n * n * node.dtype.itemsize > self.cfg.max_memory

    def data(self, point):
        """Ingest and preprocess; returns (preprocess key, ingest attrs, labels or None)."""
        d, pre = point["data"], point["preprocess"]
        ident = {k: d[k] for k in ("name", "path", "label_column")}
        if d["path"]:
            p = self.cfg.resolve(d["path"])
            st = p.stat() if p.exists() else None
            ident["file"] = [str(p.resolve()), st.st_size if st else None, st.st_mtime_ns if st else None]
        source = None
        ing_params = {"data": ident}
        if not self.store.has("ingest", stable_hash(ing_params)) or self.force:
            source = stages.open_source(d, self.cfg.path.parent)
        ing_key = self._stage("ingest", ing_params, _ingest_with_progress, source, d["chunk_rows"],
                              describe=d["name"] or d["path"])
        ia = self.done[("ingest", ing_key)]
        pre_params = dict(pre)
        if not ia["sparse"]:
            pre_params = {k: v for k, v in pre.items() if not k.startswith("tfidf")}
        pre_key = self._stage("preprocess", {"in": ing_key, **pre_params}, stages.preprocess,
                              ing_key, pre, d["chunk_rows"], describe=_fmt(pre_params))
        y = None
        if ia["has_labels"]:
            y = read_matrix(self.store.open("ingest", ing_key), "y")
        return pre_key, ia, y

    def run_point(self, point, method):
        """Run (or resume) the chain of one method at one sweep point; returns its record."""
        from .metrics import batch_scores

        pre_key, ia, y = self.data(point)
        n = ia["n_samples"]
        cl, emb, aff, mp = point["cluster"], point["embed"], point["affinity"], point["method"]
        k = self._n_clusters(cl, ia)
        if method == "kmeans" and cl["kmeans_n_init"]:
            # k-means on wide raw data (text) can afford fewer restarts than on a k-dim embedding
            cl = {**cl, "n_init": cl["kmeans_n_init"]}
        cl_params = {key: cl[key] for key in ("n_init", "max_iter", "algorithm", "seed")}
        if cl["algorithm"] != "lloyd":
            cl_params.update(minibatch_threshold=cl["minibatch_threshold"], batch_size=cl["batch_size"])
        shown = {}
        chain = [("preprocess", pre_key)]
        if method == "kmeans":
            src = ("preprocess", pre_key, "X")
        else:
            aff_params = _affinity_params(aff, aff["gamma"])
            shown.update({k2: v for k2, v in aff_params.items() if k2 in ("gamma", "n_neighbors")})
            aff_key = self._stage("affinity", {"in": pre_key, **aff_params}, _affinity_dispatch,
                                  pre_key, aff_params, cl["seed"], self.client, self.cfg.max_memory,
                                  describe=_fmt(aff_params))
            ncomp = emb["n_components"] or k
            if ncomp >= n:
                raise UserError(f"{self.cfg.path}: [embed] n_components={ncomp} must be below n={n}")
            m_params = {}
            if method in ("bbs", "sk"):
                m_params = {"n_iter": mp["n_iter"], "tol": mp["tol"]}
                if method == "bbs":
                    m_params["solver"] = mp["solver"]
            elif method == "ncut":
                m_params = {"ncut_iter": mp["ncut_iter"]}
            shown.update(m_params)
            e_params = {"in": aff_key, "method": method, **m_params, "k": ncomp,
                        "eigensolver": emb["eigensolver"], "record_every": mp["record_every"]}
            if self._out_of_core(aff_key):
                # streams row blocks of K from the store; block passes go to the cluster if there is one
                emb_key = self._stage("embed", e_params, stages.embed_ooc, aff_key, method, {**mp, **emb}, ncomp,
                                      y, self.cfg.max_memory, cl["seed"], self.client,
                                      describe=f"{method} {_fmt(shown)} (out of core)")
            else:
                emb_key = self._stage("embed", e_params, stages.embed, aff_key, method, {**mp, **emb}, ncomp, y,
                                      self.cfg.max_memory, cl["seed"], describe=f"{method} {_fmt(shown)}",
                                      submit=True)
            src = ("embed", emb_key, "E")
            chain += [("affinity", aff_key), ("embed", emb_key)]
        c_key = self._stage("cluster", {"in": src[1], "src": src[0], "k": k, **cl_params}, stages.cluster,
                            *src, cl, k, describe=f"{method} {_fmt(shown)} k={k}", submit=True)
        chain.append(("cluster", c_key))
        labels = read_matrix(self.store.open("cluster", c_key), "labels")
        rec = {"method": method, "params": shown, "dataset": ia["dataset"], "n": n, "k": k}
        if method != "kmeans":
            ea = self.done[("embed", emb_key)]
            rec.update(MB=ea["MB"], MC=ea["MC"], norm_n_iter=ea["norm_n_iter"], row_err=ea["row_err"],
                       history=ea["history"])
        rec["seconds"] = float(sum(self.done[sk]["seconds"] for sk in chain))
        if y is not None:
            acc, nmi = batch_scores(y, labels, norm=point["evaluate"]["nmi_norm"])
            best = self.done[("cluster", c_key)]["best"]
            rec.update(acc_avg=float(acc.mean()), acc_max=float(acc.max()), nmi_avg=float(nmi.mean()),
                       nmi_max=float(nmi.max()), acc_best_inertia=float(acc[best]),
                       nmi_best_inertia=float(nmi[best]))
        return rec

    def run_mbbs(self, points):
        """MBBS over the kernels of ``points`` (one per γ), then k-means; returns its record."""
        from .metrics import batch_scores

        point = points[0]
        pre_key, ia, y = self.data(point)
        n, cl, emb, aff, mp = ia["n_samples"], point["cluster"], point["embed"], point["affinity"], point["method"]
        k = self._n_clusters(cl, ia)
        gammas = [p["affinity"]["gamma"] for p in points]
        aff_keys = []
        for g in gammas:
            ap = _affinity_params(aff, g)
            aff_keys.append(self._stage("affinity", {"in": pre_key, **ap}, _affinity_dispatch, pre_key, ap,
                                        cl["seed"], self.client, self.cfg.max_memory, describe=_fmt(ap)))
        ncomp = emb["n_components"] or k
        shown = {"gammas": gammas, "lam": mp["lam"], "mbbs_outer": mp["mbbs_outer"]}
        e_params = {"in": aff_keys, "method": "mbbs", "lam": mp["lam"], "mbbs_outer": mp["mbbs_outer"],
                    "k": ncomp, "eigensolver": emb["eigensolver"]}
        node = self.store.open("affinity", aff_keys[0])["K"]
        if node.attrs.get("format") != "csr" and stages.mbbs_out_of_core(n, len(aff_keys), self.cfg.max_memory):
            # kernels stay in zarr; the G-step is Alg. 1 streamed (its passes go to the cluster if there is one)
            e_params["n_iter"] = mp["n_iter"]
            emb_key = self._stage("embed", e_params, stages.embed_multi, aff_keys, {**mp, **emb}, ncomp, y,
                                  self.cfg.max_memory, cl["seed"], self.client,
                                  describe=f"mbbs {_fmt(shown)} (out of core)")
        else:
            emb_key = self._stage("embed", e_params, stages.embed_multi, aff_keys, {**mp, **emb}, ncomp, y,
                                  self.cfg.max_memory, cl["seed"], describe=f"mbbs {_fmt(shown)}", submit=True)
        cl_params = {key: cl[key] for key in ("n_init", "max_iter", "algorithm", "seed")}
        c_key = self._stage("cluster", {"in": emb_key, "src": "embed", "k": k, **cl_params}, stages.cluster,
                            "embed", emb_key, "E", cl, k, describe=f"mbbs k={k}", submit=True)
        ea, ca = self.done[("embed", emb_key)], self.done[("cluster", c_key)]
        rec = {"method": "mbbs", "params": shown, "dataset": ia["dataset"], "n": n, "k": k,
               "alpha": ea["alpha"], "MB": ea["MB"], "MC": ea["MC"], "row_err": ea["row_err"],
               "seconds": float(ea["seconds"] + ca["seconds"] + sum(self.done[("affinity", a)]["seconds"]
                                                                     for a in aff_keys))}
        if y is not None:
            acc, nmi = batch_scores(y, read_matrix(self.store.open("cluster", c_key), "labels"),
                                    norm=point["evaluate"]["nmi_norm"])
            rec.update(acc_avg=float(acc.mean()), acc_max=float(acc.max()), nmi_avg=float(nmi.mean()),
                       nmi_max=float(nmi.max()))
        return rec


def _affinity_params(aff: dict, gamma) -> dict:
    """The parameters an affinity stage depends on (γ only for the kinds that use it)."""
    params = {"kind": aff["kind"], "dtype": aff["dtype"]}
    if aff["kind"] in ("gaussian", "knn"):
        params["gamma"] = gamma
    if aff["kind"] == "knn":
        params["n_neighbors"] = aff["n_neighbors"]
    return params


def _mbbs_groups(cfg: Config, points):
    """Sweep points that differ only in the affinity's γ form one MBBS problem each."""
    groups = {}
    for point in points:
        rest = {s: dict(v) for s, v in point.items()}
        rest["affinity"].pop("gamma")
        groups.setdefault(stable_hash(rest), []).append(point)
    if any(len(g) < 2 for g in groups.values()):
        raise UserError(f"{cfg.path}: MBBS combines the kernels of a γ sweep: give [affinity] gamma as a "
                        "list of at least two values")
    return list(groups.values())


def _ingest_with_progress(store_path, key, attrs, source, chunk_rows):
    from tqdm import tqdm
    with tqdm(total=source.info.n_samples, desc=f"ingest {source.info.name}", unit="rows",
              file=sys.stderr, disable=None, leave=False) as bar:
        stages.ingest(store_path, key, attrs, source, chunk_rows, progress=bar.update)


def _affinity_dispatch(store_path, key, attrs, pre_key, params, seed, client, max_memory):
    # dense kernels are Dask graphs of row blocks (the scheduler spreads them);
    # the kNN graph needs every row in one process
    if params["kind"] == "knn":
        _submit(client, stages.affinity, store_path, key, attrs, pre_key, params, seed)
    else:
        stages.affinity(store_path, key, attrs, pre_key, params, seed, max_memory)


def _fmt(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items() if k != "in")


def run(config_path, *, scheduler: str | None = None, out: str | None = None, force: bool = False):
    """Run the pipeline described by a config file.

    Parameters
    ----------
    config_path : str or Path
    scheduler : str, optional
        Overrides ``[dask] scheduler`` (e.g. ``tcp://HOST:PORT``).
    out : str, optional
        Overrides ``[output] dir``.
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
    check_out_dir(out_dir, cfg, force)
    points = list(cfg.points())
    for point in points:  # sizes known from the registry are checked before any work
        _precheck(cfg, point)
    store = Store(cfg.resolve(cfg.sections["store"]["path"]), owner=_owner(cfg), force=force)
    methods = cfg.sections["method"]["names"]
    log(f"bigclust {__version__}: {cfg.path}: {len(points)} sweep point(s) x {len(methods)} method(s), "
        f"store {store.path}")
    t0 = time.perf_counter()
    records, seen = [], set()
    dk = cfg.sections["dask"]
    with dask_client(scheduler if scheduler is not None else dk["scheduler"], dk["n_workers"]) as client:
        runner = Runner(cfg, store, client, force)
        for i, point in enumerate(points):
            log(f"[{i + 1}/{len(points)}] " + (_fmt({f"{s}.{k}": point[s][k] for s, k in cfg.sweeps})
                                                or "(no sweep)"))
            for method in methods:
                if method == "mbbs":
                    continue  # needs every kernel of the sweep: run below
                rec = runner.run_point(point, method)
                ident = json.dumps([rec["method"], rec["params"]], sort_keys=True)
                if ident not in seen:  # k-means on X does not depend on γ: report it once
                    seen.add(ident)
                    records.append(rec)
        if "mbbs" in methods:
            for group in _mbbs_groups(cfg, points):
                records.append(runner.run_mbbs(group))
    if force and out_dir.exists():
        _archive_out_dir(out_dir)
    report.write(out_dir, records, cfg, plots=cfg.sections["output"]["plots"])
    log(f"done in {time.perf_counter() - t0:.1f} s; results in {out_dir}")
    print(report.markdown_table(records))
    return records


def _owner(cfg: Config) -> dict:
    d = cfg.sections["data"]
    return {"name": d["name"], "path": str(cfg.resolve(d["path"]).resolve()) if d["path"] else None}


def _precheck(cfg: Config, point):
    from .datasets import get_info
    name = point["data"]["name"]
    if not name:
        p = cfg.resolve(point["data"]["path"])
        if not p.is_file():
            raise DataError(f"{cfg.path}: [data] path: file {p} does not exist")
        return
    n = get_info(name).n_samples
    k = point["cluster"]["n_clusters"]
    if k and k > n:
        raise UserError(f"{cfg.path}: [cluster] n_clusters={k} must be between 2 and n={n}")
    if point["affinity"]["kind"] == "knn" and point["affinity"]["n_neighbors"] > n:
        raise UserError(f"{cfg.path}: [affinity] n_neighbors={point['affinity']['n_neighbors']} exceeds n={n}")


def validate(config_path) -> Config:
    """Only check a config (``bigclust pipeline validate``); raises ConfigError/UserError."""
    cfg = load(config_path)
    for point in cfg.points():
        _precheck(cfg, point)
    return cfg


def ingest_to_store(name, root, store_path, *, chunk_rows=4096):
    """``bigclust data ingest``: the pipeline's ingest stage on its own.

    The stage key is the one a pipeline with ``[data] name = NAME`` computes,
    so a later ``pipeline run`` on this store skips the ingest.
    """
    from pathlib import Path

    data = {"name": name, "path": None, "root": str(root) if root else None, "label_column": -1}
    source = stages.open_source(data, Path.cwd())
    store = Store(store_path, owner={"name": name, "path": None})
    params = {"data": {"name": name, "path": None, "label_column": -1}}
    key = stable_hash(params)
    if store.has("ingest", key):
        log(f"{name}: already in {store_path}, skipped")
    else:
        _ingest_with_progress(str(store.path), key, {"params": params}, source, chunk_rows)
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
