"""Checks made before any work: sizes against the data's shape and the memory budget, paths, labels, rows.

:func:`check_sizes` needs only the data's shape (a registered data set's is
known without reading it), so ``pipeline validate`` runs it too;
:func:`n_distinct_rows` reads the preprocessed rows once.  The output folder
helpers refuse another run's results and clean what a killed writer left.
"""
from __future__ import annotations

import contextlib
import functools
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
from bigclust.pipeline.locks import OUT_LOCK, pid_alive as _pid_alive


def log(msg: str):
    import sys
    print(msg, file=sys.stderr, flush=True)


#: what a run writes into its output folder (report.tables.write and the label files and figures it writes):
#: ``--replace`` moves only these, and only when a ``run.json`` says a bigclust run wrote them
RESULTS = ("run.json", "results.json", "results.csv", "results.md", "trials.csv", "clusters.csv", "quality.png",
           "labels", "figures")


def check_out_dir(out_dir: Path, cfg: Config, replace: bool, inputs=()):
    """Refuse an output folder that holds another run's results (unless ``replace``) or files bigclust did not write.

    ``inputs``: the run's own config, data file and store; they may sit in the output folder
    (``[output] dir = "."``) and are neither foreign nor ever moved.
    """
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise StoreError(f"--out {out_dir} exists and is not a folder")
    for p in inputs:   # the store (a folder) as output folder: its results would go among the stages
        if Path(p).resolve() == out_dir.resolve():
            raise StoreError(f"the output folder {out_dir} is {p}; give the results a folder of their own")
    _clean_partial_writes(out_dir)
    mine = {Path(p).absolute() for p in inputs}
    entries = [p for p in out_dir.iterdir() if not p.name.startswith("replaced-") and p.name != OUT_LOCK
               and p.absolute() not in mine]
    if not entries:
        return
    results = [p.name for p in entries if p.name in RESULTS]
    run_json = out_dir / "run.json"
    prev, prev_sections = None, None
    if run_json.exists():
        try:
            rec = json.loads(run_json.read_text())
            prev, prev_sections = rec.get("config_hash"), rec.get("config")
        except (OSError, ValueError, AttributeError):
            prev = None
    if results and prev is None:
        # named like results but with no readable run.json: not a bigclust run's, so --replace does not move them
        raise StoreError(f"output folder {out_dir} holds {', '.join(sorted(results))} but no readable run.json "
                         "of a bigclust run: bigclust did not write them; move them away or choose another --out")
    if prev is not None and (prev == cfg.hash or same_settings(prev_sections, cfg)):
        return
    if not replace:
        if prev:
            # the edit-and-rerun loop: say what changed and the one command that goes on, losing nothing
            raise StoreError(f"output folder {out_dir} holds results of another config (hash {prev}), whose "
                             f"settings differ: {settings_diff(prev_sections, cfg)}; to replace them run "
                             f"`bigclust pipeline run {cfg.path} --replace` (moves them to a replaced-* subfolder, "
                             "nothing is lost; finished stages are reused), or choose another --out")
        names = ", ".join(sorted(p.name for p in entries)[:5]) + (", ..." if len(entries) > 5 else "")
        raise StoreError(f"output folder {out_dir} holds files not written by this config ({names}); choose "
                         "another --out, or pass --replace to write the results beside them (bigclust never "
                         "moves or deletes files it did not write)")


def settings_diff(prev_sections, cfg: Config, most: int = 4) -> str:
    """``[affinity] gamma: 1.0 -> "median"; ...``: the settings of a recorded run that ``cfg`` changes.

    The sections compared are :func:`same_settings`'s (the shared ones and those of the methods ``cfg``
    runs); a key either side lacks is shown as ``(unset)``; at most ``most`` of them, then how many more.
    """
    from bigclust.pipeline.config import schema
    from bigclust.pipeline.methods import names as method_names

    if not isinstance(prev_sections, dict):
        return "the earlier run recorded none"
    full = schema()
    show = lambda v: json.dumps(v, default=str)   # noqa: E731  (TOML-like: strings quoted, lists bracketed)
    used = set(cfg.methods)
    lines = []
    for sec in sorted(set(prev_sections) | set(cfg.sections)):
        if sec in method_names() and sec not in used:
            continue
        old, new = prev_sections.get(sec, {}), cfg.sections.get(sec, {})
        old, new = (old if isinstance(old, dict) else {}), (new if isinstance(new, dict) else {})
        for key in sorted(set(old) | set(new)):
            a, b = (show(old[key]) if key in old else "(unset)"), (show(new[key]) if key in new else "(unset)")
            spec = full.get(sec, {}).get(key)
            if spec is not None and (spec.scoreless or (key not in old and show(spec.default) == b)):
                continue    # what same_settings does not count either
            if a != b:
                lines.append(f"[{sec}] {key}: {a} -> {b}")
    if not lines:
        return "none that this version records (a key added or moved since)"
    return "; ".join(lines[:most]) + (f"; and {len(lines) - most} more" if len(lines) > most else "")


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
    """``--replace``: move a previous run's results (:data:`RESULTS`, with its run.json) to ``replaced-<time>``.

    Only what a bigclust run wrote moves: never the config, the data, the store or any other file.
    """
    if not (out_dir / "run.json").is_file():
        return
    entries = [p for p in out_dir.iterdir() if p.name in RESULTS]
    if not entries:
        return
    stamp = time.strftime("replaced-%Y%m%d-%H%M%S")
    dest, i = out_dir / stamp, 1
    while True:   # two replacements within one second get folders of their own
        try:
            dest.mkdir()
            break
        except FileExistsError:
            i += 1
            dest = out_dir / f"{stamp}-{i}"
    for p in entries:
        shutil.move(str(p), dest / p.name)
    log(f"moved the previous results in {out_dir} to {dest}")


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
        if p.is_dir():
            raise DataError(f"{cfg.path}: [data] path: {p} is a folder, not a data file (name the file in it)")
        if not p.is_file():
            raise DataError(f"{cfg.path}: [data] path: file {p} does not exist")
        _check_readable(p, f"{cfg.path}: [data] path")
        # the shape is known once the file is opened (run checks it then): what no data could hold, now
        check_allocations(cfg, point, 2, 1, point["cluster"]["n_clusters"] or 2, least=True)
        check_label_column(cfg, point)
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


def check_label_column(cfg: Config, point):
    """Refuse a data file whose label column, taken by default (the last column), does not look like labels.

    The README's rule (:func:`bigclust.datasets.tabular.label_doubt`: more than 1000 classes, more than
    n/2, or non-integer numbers) means the "labels" are a feature of an unlabelled table, which would be
    clustered into as many clusters and scored against it.  A config that sets ``[data] label_column``
    itself gets a warning instead (``open_file``'s).  Only csv and npy files have a label *column*; the
    file is read once per file and setting (cached), here before any work, in ``validate`` and ``run``.
    """
    d = point["data"]
    p = cfg.resolve(d["path"])
    if d["label_column"] is None or p.suffix.lower() in (".npz", ".mat", ".svm", ".libsvm", ".svmlight") \
            or _label_column_given(cfg.path):
        return
    st = p.stat()
    doubt = _label_doubt(str(p.resolve()), st.st_size, st.st_mtime_ns, d["label_column"], d.get("header", "auto"))
    if doubt:
        raise DataError(f"{cfg.path}: the label column (by default the last column of {p.name}) {doubt}: if the "
                        "file has no labels, set [data] label_column = false and [cluster] n_clusters; else set "
                        "label_column to the column that holds them")


def _label_column_given(config_path: Path) -> bool:
    import tomllib
    try:
        return "label_column" in tomllib.loads(Path(config_path).read_text(encoding="utf-8")).get("data", {})
    except (OSError, ValueError):
        return True          # not a config file (an estimator's): nothing to second-guess


@functools.lru_cache(maxsize=8)
def _label_doubt(path: str, size: int, mtime: int, label_column, header) -> str | None:
    import warnings

    from bigclust.datasets import open_file
    from bigclust.datasets.tabular import label_doubt
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # said as an error by the caller, or by the run itself
        src = open_file(path, label_column=label_column, header=header)
    return label_doubt(src.class_names, src.info.n_samples)


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
    from bigclust._util.rowhash import csr_row_hashes, dense_row_hashes

    rng = np.random.default_rng(12345)
    hashes = []
    if node.attrs.get("format") == "csr":
        indptr, indices, data = node["indptr"][...], node["indices"][...], node["data"][...]
        n = indptr.size - 1
        w_col = rng.integers(1, 2**63, size=int(indices.max(initial=0)) + 1, dtype=np.uint64) | np.uint64(1)
        h = np.empty(n, np.uint64)
        csr_row_hashes(indptr, indices, np.ascontiguousarray(data, dtype=np.float32), w_col, h)
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
            h = np.empty(X.shape[0], np.uint64)
            dev = max(dev, dense_row_hashes(X, w, ref, h))
            hashes.append(h)
        # rows equal to float32 rounding (e.g. equal up to scale, then L2-normalised) are one row
        if n and dev <= 1e-6 * max(float(np.abs(ref).max(initial=0.0)), np.finfo(np.float32).tiny):
            return 1, int(n)
    # counted over a sort: np.unique of 8.1M distinct uint64 takes 9 s (numpy 2.4's hash table), a sort 0.5 s
    h = np.sort(np.concatenate(hashes))
    return (1 + int(np.count_nonzero(h[1:] != h[:-1])) if h.size else 0), int(n)


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
        taken = "" if point["cluster"]["n_clusters"] else " (taken from the number of classes)"
        if n < 2:
            raise UserError(f"{cfg.path}: the data have {n} row(s); clustering needs at least 2")
        if k < 2 or k > n:
            fix = "set [cluster] n_clusters" if taken else "lower it"
            raise UserError(f"{cfg.path}: [cluster] n_clusters={k}{taken} must be between 2 and n={n}: {fix}")
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
                if ncomp >= n and not point["embed"]["n_components"]:   # the key the user set is n_clusters
                    raise UserError(f"{cfg.path}: [cluster] n_clusters={k}{taken} must be below n={n} for {m}: "
                                    f"its spectral embedding takes {k} eigenvectors of the n x n affinity, "
                                    f"at most n - 1 = {n - 1}; lower n_clusters")
                if ncomp >= n:
                    raise UserError(f"{cfg.path}: [embed] n_components={ncomp} must be below n={n}")
            if method.check is not None:   # the family's own checks against the shape
                try:
                    method.check(method.make(point[m]), point, n, d)
                except UserError as e:
                    raise type(e)(f"{cfg.path}: {e}") from None
            if _uses_dense_kernel(method, point):
                n_k = len(cfg.sweeps.get(method.combine, [0])) if method.combine else 1
                need = min_budget(n, np.dtype(a["dtype"]).itemsize, n_kernels=n_k)
                if need > budget:
                    raise ConfigError(f"{cfg.path}: {mem} is too small for {m} on n={n} samples: streaming "
                                      f"the n x n kernel needs at least {format_bytes(need)} (a few rows of it)")
        check_allocations(cfg, point, n, d, k)


#: bytes a result record of one subset trial holds until the report is written (its dict and scores)
TRIAL_RECORD_BYTES = 2048


def check_allocations(cfg: Config, point, n: int, d: int, k: int, least: bool = False):
    """Every integer key that sizes an array, bounded by what that array takes against ``[store] max_memory``.

    A value far beyond the data (``n_init = 1e9``, ``knn_chunk_rows = 1e12``, ``subset_trials = 1e11``)
    would otherwise reach NumPy or zarr as one allocation of terabytes, or fill memory slowly.  ``n``, ``d``:
    the data's shape (``least``: not known yet, a data file before it is read: the smallest possible, 2 rows
    and 1 feature, so what is refused there is refused for any data); ``d`` < 0: not known (a vocabulary).
    Raises ConfigError naming the key, what it allocates and the largest value that fits.
    """
    from bigclust.pipeline.config import ConfigError
    from bigclust._util.plan import format_bytes

    budget = cfg.max_memory
    d = max(d, 1)
    pca = point["preprocess"]["pca"]
    dx = min(pca, d) if pca else d            # the width of the rows k-means clusters when it clusters X
    cl, a, ev = point["cluster"], point["affinity"], point["evaluate"]
    params = {m: get_method(m).make(point[m]) for m in cfg.methods}
    chains = {m: get_method(m).stages(params[m], point) for m in cfg.methods}
    # [cluster] sizes the cluster stage, and an assign stage whose method has no restarts of its own
    clusters = any("cluster" in c or ("assign" in c and not getattr(params[m], "n_init", 0))
                   for m, c in chains.items())
    embeds = any("embed" in c for c in chains.values())
    ncomp = point["embed"]["n_components"] or k
    knn = a["kind"] == "knn" and any("affinity" in c for c in chains.values())
    dc = max(dx, ncomp if embeds else 0)      # the widest rows clustered
    b = min(cl["batch_size"], n)
    # (section, key, value, bytes per unit of the value, what one unit holds); the widths first, then the
    # counts they multiply (a huge n_components is named as itself, not as n_init's centres)
    bounds = [("preprocess", "pca", pca, 8 * (n + d), f"one component over n={n} rows and d={d} features")]
    if embeds:
        bounds.append(("embed", "n_components", ncomp, 3 * 8 * n, f"an eigenvector of n={n} rows and the "
                       "eigensolver's work space for it"))
    if knn:
        bounds.append(("affinity", "n_neighbors", a["n_neighbors"], 40 * n, f"the neighbour of n={n} rows "
                       "(index, distance and kernel entry, both directions)"))
        bounds.append(("affinity", "knn_chunk_rows", a["knn_chunk_rows"], 16 * a["n_neighbors"],
                       f"a row of the chunk's {a['n_neighbors']} neighbour indices and distances (a zarr chunk "
                       "is allocated whole, however few rows the data have)"))
        bounds.append(("affinity", "ivf_cells", a["ivf_cells"] if a.get("knn") in ("ivf", "ivf-rows") else 0, 8 * d + 64,
                       f"a cell's centre of {d} features"))
    if clusters:
        bounds += [
            ("cluster", "n_init", cl["n_init"], 4 * n + 8 * k * dc + 8 * b + 64,
             f"one restart's labels of n={n} rows, {k} centres of {dc} features and its distances to a batch"),
            ("cluster", "batch_size", b, 8 * dc + 8 * cl["n_init"], f"a batch row of {dc} features and its "
             f"distances to the centres of {cl['n_init']} restarts")]
    bounds += [
        ("evaluate", "subset_trials", ev["subset_trials"] if ev["protocol"] == "subsets" else 0,
         TRIAL_RECORD_BYTES * len(ev["subset_sizes"]) * len(cfg.methods),
         f"the result records of {len(ev['subset_sizes'])} subset size(s) x {len(cfg.methods)} method(s)"),
    ]
    for m in cfg.methods:   # restarts of a method of its own (NMF's factors): labels and factors each
        v = getattr(params[m], "n_init", 0)
        bounds.append((m, "n_init", v or 0, 4 * n + 8 * k * (n + d), f"one restart's labels of n={n} rows and "
                       f"factors of rank {k}"))
    mem = f"[store] max_memory={cfg.sections['store']['max_memory']!r} ({format_bytes(budget)})"
    for sec, key, value, unit, what in bounds:
        if value and value * unit > budget:
            fit = budget // unit
            what = f"even for the smallest data ({what})" if least else what
            where = "" if str(cfg.path).startswith("<") else f"{cfg.path}: "   # "<estimator>": its own words
            raise ConfigError(f"{where}[{sec}] {key}={value}: {what} take {format_bytes(unit)}, "
                              f"{format_bytes(value * unit)} in all, more than {mem}; "
                              + (f"lower {key} to at most {fit} or raise max_memory" if fit else "raise max_memory"))


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
    if path.is_symlink() and not path.exists():   # mkdir would fail on the link itself
        raise StoreError(f"{what} {path} is a symbolic link to {os.readlink(path)}, which does not exist: "
                         "create its target folder, or choose another path")
    base = _nearest_existing(path.absolute())
    if not base.is_dir():
        where = "is a file" if base == path.absolute() else f"is under {base}, which is a file"
        raise StoreError(f"{what} {path} {where}, not a folder")
    try:
        probe = tempfile.mkdtemp(prefix=".bigclust-probe-", dir=base)
        os.rmdir(probe)
    except OSError as e:
        raise StoreError(f"{what} {path} cannot be written: {base} is not writable ({e.strerror})") from None
