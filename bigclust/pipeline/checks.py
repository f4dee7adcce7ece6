"""Checks made before any work: sizes against the data's shape and the memory budget, paths, labels, rows.

:func:`check_sizes` needs only the data's shape (a registered data set's is
known without reading it), so ``pipeline validate`` runs it too;
:func:`n_distinct_rows` reads the preprocessed rows once.  The output folder
helpers refuse another run's results and clean what a killed writer left.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from bigclust.pipeline.config import Config
from bigclust.pipeline.methods import get as get_method
from bigclust.pipeline.subsets import check_subset_sizes
from bigclust._util.errors import DataError, StoreError, UserError
from bigclust.pipeline.store import _pid_alive


def log(msg: str):
    import sys
    print(msg, file=sys.stderr, flush=True)


def check_out_dir(out_dir: Path, cfg: Config, replace: bool):
    """Refuse an output folder that holds another run's results (unless ``replace``)."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise StoreError(f"--out {out_dir} exists and is not a folder")
    _clean_partial_writes(out_dir)
    entries = [p for p in out_dir.iterdir() if not p.name.startswith("replaced-")]
    if not entries:
        return
    run_json = out_dir / "run.json"
    prev, prev_sections = None, None
    if run_json.exists():
        try:
            rec = json.loads(run_json.read_text())
            prev, prev_sections = rec.get("config_hash"), rec.get("config")
        except (OSError, ValueError):
            prev = None
    if prev == cfg.hash or same_settings(prev_sections, cfg):
        return
    if not replace:
        what = f"results of another config (hash {prev})" if prev else "files not written by this config"
        raise StoreError(f"output folder {out_dir} holds {what}; choose another --out, or pass --replace "
                         "(moves them to a replaced-* subfolder; finished stages are reused)")


def same_settings(prev_sections, cfg: Config) -> bool:
    """Whether a run's recorded config (``run.json``'s ``config``) sets what ``cfg`` sets.

    ``Config.hash`` covers every section of the schema with its defaults, so it
    changes whenever a key is added anywhere (a new option of a method this
    config does not use, say); the committed reproductions must stay
    re-runnable into their own folders.  Compared here: the shared sections and
    the sections of the methods in ``[method] names``; a key the recorded run
    did not have yet counts as equal when ``cfg`` leaves it at its default, and a
    recorded key or section the current schema does not know makes them differ.
    """
    from bigclust.pipeline.config import schema
    from bigclust.pipeline.methods import names as method_names

    if not isinstance(prev_sections, dict):
        return False
    full = schema()
    used = set(cfg.methods)
    norm = lambda v: json.loads(json.dumps(v, default=str))   # noqa: E731  (tuples = lists, as recorded)
    for sec, old in prev_sections.items():
        # a recorded section or key the current schema does not know (renamed, moved into a method's
        # section) is a setting this config cannot vouch for: not the same
        if sec not in cfg.sections:
            return False
        if not (sec in method_names() and sec not in used) and isinstance(old, dict) \
                and any(key not in cfg.sections[sec] for key in old):
            return False
    for sec, keys in cfg.sections.items():
        if sec in method_names() and sec not in used:
            continue
        old = prev_sections.get(sec, {})
        if not isinstance(old, dict):
            return False
        for key, value in keys.items():
            if sec in full and key in full[sec] and full[sec][key].scoreless:
                continue
            if key in old:
                if norm(old[key]) != norm(value):
                    return False
            elif sec in full and key in full[sec] and norm(value) != norm(full[sec][key].default):
                return False
    return True


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



def _precheck(cfg: Config, point):
    """What can be checked of one config point before reading any value of the data.

    The data file (or every raw file of a registered data set, under
    ``[data] root`` / ``$BIGCLUST_DATA``) exists and is readable; for a
    registered data set (whose shape the registry knows) every size and the
    memory budget (:func:`check_sizes`).
    """
    from bigclust.datasets import default_root, get_info
    name = point["data"]["name"]
    if not name:
        p = cfg.resolve(point["data"]["path"])
        if not p.is_file():
            raise DataError(f"{cfg.path}: [data] path: file {p} does not exist")
        _check_readable(p, f"{cfg.path}: [data] path")
        return
    info = get_info(name)
    check_sizes(cfg, [point], info.n_samples, info.n_features, info.n_classes, info.sparse)
    root = point["data"]["root"]
    root = cfg.resolve(root) if root else default_root()
    for f in info.files:
        p = Path(root).expanduser() / f
        if not p.is_file():
            raise DataError(f"{cfg.path}: data set {name!r} needs {p}, which does not exist (set [data] root "
                            "to the folder that holds it, or BIGCLUST_DATA)")
        _check_readable(p, f"{cfg.path}: data set {name!r}")


def _check_readable(p: Path, what: str):
    try:
        with open(p, "rb") as fh:
            fh.read(1)
    except OSError as e:
        raise DataError(f"{what}: cannot read {p} ({e.strerror})") from None


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
    chain = method.stages(method.make(point[method.name]), point)
    return "affinity" in chain and point["affinity"]["kind"] != "knn"


def check_sizes(cfg: Config, points, n: int, d: int, n_classes: int, sparse: bool):
    """Sizes and memory of every config point against the data's shape, before any work.

    ``d`` < 0: not known yet (a text corpus's vocabulary).  Raises UserError
    (ConfigError for the memory budget) naming the key and what it needs.
    """
    from bigclust.pipeline.config import ConfigError
    from bigclust._util.plan import chunk_bytes, format_bytes, min_budget

    budget = cfg.max_memory
    mem = f"[store] max_memory={cfg.sections['store']['max_memory']!r} ({format_bytes(budget)})"
    for point in points:
        k = point["cluster"]["n_clusters"] or n_classes
        if not k:
            raise UserError(_no_labels(cfg))
        if k > n:
            raise UserError(f"{cfg.path}: [cluster] n_clusters={k} must be between 2 and n={n}"
                            + ("" if point["cluster"]["n_clusters"] else " (taken from the number of classes)"))
        if point["evaluate"]["protocol"] == "subsets" and n_classes:   # subset_draws checks it again on the labels
            check_subset_sizes(cfg.path, point["evaluate"]["subset_sizes"], n_classes,
                               point["data"]["name"] or "the data")
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
            if "embed" in method.stages(method.make(point[m]), point) and k:
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
