"""Labels out: the restart each method picks, written per run as ``labels/<name>.{csv,npy}``.

Every method's final stage (``cluster`` or ``assign``) stores the labels of
its restarts (``labels``, shape (r, n)), their objectives (``inertia``) and
the restart the method itself picks (attribute ``best``: the lowest k-means
inertia, NMF objective or kernel k-means inertia).  :func:`collect` reads that
restart for every record of a run, names it (:func:`names`) and adds
``restart_picked``, ``objective`` and ``labels_file`` to the record (and, for
data without labels, ``silhouette``); :func:`write_files` writes the files,
each to a temporary name in the output folder then renamed into place, and
last the index ``labels/labels.json`` that ``bigclust labels`` reads.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bigclust._util.errors import UserError
from bigclust._util.text import short
from bigclust.pipeline import methods
from bigclust.report._csv_numba import rows_bytes

#: at most this many points (a seeded sample) enter the silhouette of a label-free run
SILHOUETTE_SAMPLE = 5000
#: stage parameters that are plumbing, never part of a label file's name
_PLUMBING = {"input", "inputs", "src", "array", "method", "labels", "chunk_rows", "max_memory", "in_memory",
             "stream", "data"}
INDEX = "labels.json"


@dataclass
class Pick:
    """The restart a method instance picks, and where it came from."""

    name: str                 # file stem, e.g. "bbs-gamma=0.5"
    method: str
    params: dict              # the record's params
    stage: str                # final stage ("cluster" or "assign") and its store key
    key: str
    labels: np.ndarray        # (n,) int32, the picked restart
    restart: int              # its index among the method's restarts
    n_restarts: int
    objective: float          # what the method minimised to pick it
    y: np.ndarray | None = None
    class_names: list = field(default_factory=list)
    chain: dict = field(default_factory=dict)  # stage name -> key, back to ingest


def _flat(store, chain) -> dict:
    """Every hashed parameter of a chain (ingest left out) as ``name -> value``; clashes get ``stage.name``."""
    flat = {}
    for stage, key in chain:
        if stage == "ingest":
            continue
        items = []
        for k, v in store.open(stage, key, dropped_ok=True).attrs.get("params", {}).items():
            if k in _PLUMBING:
                continue
            items += list(v.items()) if isinstance(v, dict) else [(k, v)]
        for k, v in items:
            flat[k if k not in flat or flat[k] == v else f"{stage}.{k}"] = v
    return flat


def _short(v) -> str:
    return short(v)


def names(methods: list[str], params: list[dict], flats: list[dict]) -> list[str]:
    """A short readable file stem per record, unique within the run.

    ``<method>`` followed by the affinity width (``gamma=`` / ``gammas=``) when
    the method has one, then every parameter of its chain whose value differs
    between that method's records (the swept ones): ``bbs-gamma=0.5``,
    ``kmeans``, ``sk-gamma=1-n_iter=100``.
    """
    out = []
    for i, m in enumerate(methods):
        same = [j for j, mj in enumerate(methods) if mj == m]
        keys = [k for k in ("gamma", "gammas") if k in params[i]]
        if len(same) > 1:
            # a key only some chains have (K-means on X vs its NCW variant's own stage) is no difference
            # of settings: the record's own parameters say it below
            allk = [k for k in dict.fromkeys(k for j in same for k in flats[j]) if all(k in flats[j] for j in same)]
            keys += [k for k in allk if k not in keys and k not in ("gamma", "gammas")
                     and len({json.dumps(flats[j].get(k), sort_keys=True, default=str) for j in same}) > 1]
            keys += [k for k in dict.fromkeys(k for j in same for k in params[j]) if k not in keys
                     and len({json.dumps(params[j].get(k), sort_keys=True, default=str) for j in same}) > 1]
        vals = {**flats[i], **{k: v for k, v in params[i].items() if k in ("gamma", "gammas") or k not in flats[i]}}
        stem = "-".join([m] + [f"{k}={_short(vals.get(k))}" for k in keys])
        out.append(re.sub(r"[^A-Za-z0-9._=,+-]", "_", stem))
    for i, s in enumerate(out):  # never two files of one name (same shown params from an unseen difference)
        dup = [j for j in range(len(out)) if out[j] == s]
        if len(dup) > 1:
            for n_, j in enumerate(dup):
                out[j] = f"{s}-{n_ + 1}"
    return out


def collect(store, records: list[dict], finals: list, chains: dict, *, seed: int = 0) -> list[Pick]:
    """The picked restart of every record; adds ``restart_picked``, ``objective``, ``labels_file``
    (and ``silhouette`` for data without labels) to each record.

    Parameters
    ----------
    store : bigclust.pipeline.store.Store
    records : list of dict
        From :func:`bigclust.pipeline.units.execute` (changed in place).
    finals : list of (stage, key)
        The final stage instance of each record.
    chains : dict
        ``final -> [(stage, key), ...]``: every stage instance of its chain,
        from ingest on (:attr:`bigclust.pipeline.runner.Runner.chains`).
    seed : int
        Seed of the silhouette's sample of points.

    Returns
    -------
    list of Pick
        Empty under the subset protocol (a record there averages many
        clusterings of different subsets).
    """
    if not finals or not all(isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], str) for f in finals):
        return []
    chains = [list(chains[f]) for f in finals]
    stems = names([r["method"] for r in records], [r["params"] for r in records], [_flat(store, c) for c in chains])
    picks, ys, xs = [], {}, {}
    for rec, (st, key), chain, stem in zip(records, finals, chains, stems):
        g = store.open(st, key)
        all_labels = g["labels"]
        best = int(g.attrs.get("best", 0))
        # a registered method's own stage may keep labels without objectives (the contract is labels + best)
        objective = (np.asarray(g["inertia"][...], dtype=np.float64) if "inertia" in set(g.array_keys())
                     else np.full(all_labels.shape[0], np.nan))
        restart, n_restarts = best, int(all_labels.shape[0])
        objs = g.attrs.get("objectives")  # NMF keeps only its best restart; the others' objectives are attrs
        if n_restarts == 1 and objs and len(objs) > 1:
            restart, n_restarts = int(np.argmin(objs)), len(objs)
        ing = dict(chain)["ingest"]
        if ing not in ys:
            ig = store.open("ingest", ing)
            ys[ing] = (np.asarray(ig["y"][...]) if ig.attrs.get("has_labels") else None,
                       list(ig.attrs.get("class_names") or []))
        y, class_names = ys[ing]
        pk = Pick(stem, rec["method"], rec["params"], st, key, np.asarray(all_labels[best], dtype=np.int32),
                  restart, n_restarts, float(objective[best]), y, class_names, dict(chain))
        rec.update(restart_picked=restart, objective=pk.objective, labels_file=f"labels/{stem}.csv")
        m = methods.REGISTRY.get(rec["method"])
        if m is not None and m.show is not None:   # what its table cell shows may depend on the restarts run
            rec["n_restarts"] = n_restarts
        if all_labels.shape[0] == 1 < n_restarts:   # only the picked restart's labels: no avg / max over restarts
            rec["restarts_kept"] = 1
        pre = pk.chain.get("preprocess")
        if y is None and pre is not None:
            if rec.get("MC") != rec.get("MC"):  # MC needs classes: NaN without them, left out
                rec.pop("MC")
            if pre not in xs:
                xs[pre] = _sample_rows(store.open("preprocess", pre)["X"], seed)
            rec["silhouette"] = silhouette(*xs[pre], pk.labels)
        picks.append(pk)
    return picks


def _sample_rows(node, seed, m=SILHOUETTE_SAMPLE):
    """``(rows, X[rows])``: at most ``m`` rows drawn without replacement (seeded), sorted, read from zarr."""
    import scipy.sparse as sp

    csr = node.attrs.get("format") == "csr"
    n = int(node.attrs["shape"][0]) if csr else int(node.shape[0])
    rows = np.arange(n) if n <= m else np.sort(np.random.default_rng(seed).choice(n, m, replace=False))
    if csr:  # documents: the CSR parts are compact, read them whole
        X = sp.csr_matrix((node["data"][...], node["indices"][...], node["indptr"][...]),
                          shape=tuple(node.attrs["shape"]))
        return rows, X[rows]
    return rows, np.asarray(node.oindex[rows, :] if n > m else node[...], dtype=np.float64)


def silhouette(rows, X, labels) -> float:
    """Mean silhouette (Euclidean) of ``labels[rows]`` on the sampled rows ``X``; NaN for one cluster."""
    from sklearn.metrics import silhouette_score
    lab = np.asarray(labels)[rows]
    if np.unique(lab).size < 2 or np.unique(lab).size >= lab.size:
        return float("nan")
    return float(silhouette_score(X, lab, metric="euclidean"))


def _atomic(out_dir: Path, dest: Path, data: bytes):
    """Write ``data`` to ``dest`` through a temporary ``.NAME.tmp-PID`` in ``out_dir``: :func:`atomic_write`."""
    atomic_write(dest, data, out_dir)


def atomic_write(dest: Path, data: str | bytes, tmp_dir: Path | None = None):
    """Write ``data`` to a temporary ``.NAME.tmp-PID`` in ``tmp_dir`` (default: beside ``dest``) and rename it
    to ``dest``, so a reader never meets half a file.  On any failure (a full disk, Ctrl-C) the temporary
    file is removed and ``dest`` is as it was; one left by ``kill -9`` is removed by the next run
    (:func:`bigclust.pipeline.checks._clean_partial_writes`)."""
    dest = Path(dest)
    tmp = Path(tmp_dir or dest.parent) / f".{dest.name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def labels_csv(pk: Pick) -> str:
    """``index,label[,class]``: one row per point, in the data's row order."""
    if pk.y is None:
        return "index,label\n" + rows_bytes(pk.labels).decode()
    names_ = pk.class_names
    values, cell_of = np.unique(np.asarray(pk.y), return_inverse=True)   # a cell per class, not per row
    texts = [_csv_cell(names_[c] if names_ and 0 <= c < len(names_) else c) for c in values.tolist()]
    return "index,label,class\n" + rows_bytes(pk.labels, cell_of.ravel(), texts).decode()


def _csv_cell(v) -> str:
    s = str(v)
    return '"' + s.replace('"', '""') + '"' if any(ch in s for ch in ',"\n') else s


def write_files(out_dir, picks: list[Pick], records: list[dict]):
    """``labels/<name>.csv`` and ``.npy`` per pick, then the index ``labels/labels.json``."""
    if not picks:
        return
    out_dir = Path(out_dir)
    folder = out_dir / "labels"
    folder.mkdir(parents=True, exist_ok=True)
    index = []
    for pk, rec in zip(picks, records):
        _atomic(out_dir, folder / f"{pk.name}.csv", labels_csv(pk).encode())
        buf = io.BytesIO()
        np.save(buf, pk.labels)
        _atomic(out_dir, folder / f"{pk.name}.npy", buf.getvalue())
        entry = {"name": pk.name, "method": pk.method, "params": pk.params, "n": int(pk.labels.size),
                 "n_clusters": int(np.unique(pk.labels).size), "k": rec.get("k"), "restart": pk.restart,
                 "n_restarts": pk.n_restarts, "objective": pk.objective}
        for s in ("acc_best_inertia", "nmi_best_inertia", "silhouette"):
            if s in rec:
                entry[s.replace("_best_inertia", "")] = rec[s]
        index.append(entry)
    _atomic(out_dir, folder / INDEX, json.dumps(index, indent=1, default=float).encode())


# -- `bigclust labels RUN_DIR` ----------------------------------------------------------------------


def read_index(run_dir) -> list[dict]:
    """The label files of a finished run (``labels/labels.json``); a UserError when there are none."""
    path = Path(run_dir) / "labels" / INDEX
    if not path.is_file():
        raise UserError(_why_no_labels(Path(run_dir)))
    return json.loads(path.read_text())


def _why_no_labels(run_dir: Path) -> str:
    """Why a folder has no label files, from its ``run.json``, and the command that writes them."""
    try:
        run = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        run = None
    if not isinstance(run, dict):
        return f"{run_dir}: no labels/{INDEX}: not the output folder of a finished run (it has no run.json)"
    if (run.get("config") or {}).get("evaluate", {}).get("protocol") == "subsets":
        return f"{run_dir}: a run under [evaluate] protocol = \"subsets\", which writes no label files"
    config = _config_file(run_dir, run.get("config_file"))
    cmd = f"bigclust pipeline run {config}" if config else "bigclust pipeline run CONFIG (the config of this run)"
    if not run.get("complete"):
        return f"{run_dir}: the run has not finished, so its label files are not written yet; finish it: {cmd}"
    return (f"{run_dir}: the run finished, but its label files (labels/{INDEX} and labels/*.csv) are not there "
            f"(not committed, or deleted); write them again (finished stages in the store are reused): {cmd}")


def _config_file(run_dir: Path, recorded) -> str | None:
    """The run's config file: as recorded, or (a folder moved or checked out elsewhere) the same tail of that
    path under one of ``run_dir``'s parents; shown relative to the working folder when below it."""
    if not recorded:
        return None
    parts = Path(recorded).parts
    found = Path(recorded) if Path(recorded).is_file() else None
    for i in range(1, len(parts)):
        if found is not None:
            break
        for base in Path(run_dir).resolve().parents:
            if (base / Path(*parts[i:])).is_file():
                found = base / Path(*parts[i:])
                break
    if found is None:
        return None
    with contextlib.suppress(ValueError):
        return str(found.resolve().relative_to(Path.cwd().resolve()))
    return str(found)


def list_text(run_dir) -> str:
    """One line per label file: name, method, n, clusters, picked restart, its objective and scores."""
    idx = read_index(run_dir)
    w = max(len("name"), *(len(e["name"]) for e in idx))
    extra = [s for s in ("acc", "nmi", "silhouette") if any(s in e for e in idx)]
    lines = [f"{'name':<{w}}  {'method':<8} {'n':>8} {'clusters':>8} {'restart':>9} {'objective':>12}"
             + "".join(f" {s:>10}" for s in extra)]
    for e in idx:
        lines.append(f"{e['name']:<{w}}  {e['method']:<8} {e['n']:>8} {e['n_clusters']:>8} "
                     f"{e['restart']:>4}/{e['n_restarts']:<4} {e['objective']:>12.6g}"
                     + "".join(f" {e[s]:>10.4f}" if e.get(s) is not None else f" {'-':>10}" for s in extra))
    return "\n".join(lines)


def find(run_dir, name: str) -> dict:
    """The index entry called ``name``, or the only one of method ``name``."""
    idx = read_index(run_dir)
    hit = [e for e in idx if e["name"] == name] or [e for e in idx if e["method"] == name]
    if len(hit) != 1:
        known = ", ".join(e["name"] for e in idx)
        what = "several label files" if hit else "no label file"
        raise UserError(f"{run_dir}: {what} called {name!r}; choose one of {known}")
    return hit[0]


def export(run_dir, name: str, out=None, fmt: str = "csv") -> str | None:
    """Copy a label file (CSV or .npy) to ``out``; without ``out`` return the CSV text (for stdout).

    The copy goes to a temporary name beside ``out`` and is renamed into place.
    """
    e = find(run_dir, name)
    src = Path(run_dir) / "labels" / f"{e['name']}.{fmt}"
    if fmt not in ("csv", "npy"):
        raise UserError(f"--format must be csv or npy, got {fmt!r}")
    if out is None:
        if fmt == "npy":
            raise UserError("--format npy writes binary data: give --out FILE")
        return src.read_text()
    out = Path(out)
    if out.is_dir():
        raise UserError(f"--out {out} is a folder; give a file name")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: folder {out.parent} does not exist")
    _atomic(out.parent, out, src.read_bytes())
    return None
