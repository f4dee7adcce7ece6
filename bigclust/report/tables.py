"""Reports: Markdown, CSV and JSON tables of a run's results, and figures.

The columns of ``results.md`` are the generic scores and those the families' stages add
(:func:`bigclust.pipeline.methods.register_column`).
Every file is written to a temporary name and renamed into place, so an
interrupted report never leaves a half-written table behind.
"""
from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

from bigclust._util.version import __version__
from bigclust.pipeline import methods
from bigclust.report.figures import plot_quality  # noqa: F401  (its home before figures.py)

#: the columns of every run, before and after the ones the families register
HEAD = ("method", "params", "seed", "acc_best_inertia", "acc_avg", "acc_max", "nmi_best_inertia", "nmi_avg",
        "nmi_max")
TAIL = ("objective", "silhouette", "seconds")
#: Markdown headers of record keys whose names say less than they should
HEADERS = {"acc_best_inertia": "acc_picked", "nmi_best_inertia": "nmi_picked", "acc_max": "acc_max (oracle)",
           "nmi_max": "nmi_max (oracle)"}
LEGEND = ("acc/nmi_picked: the restart the method itself picks (lowest objective: k-means inertia, NMF "
          "objective); avg: mean over restarts; max: best over restarts (oracle: picked with the labels). "
          "objective: that of the picked restart.")
LEGEND_UNLABELLED = ("No labels: MB = bi-stochasticity of the normalised kernel; objective: that of the restart "
                     "the method picks (k-means inertia, NMF objective); silhouette: Euclidean, on the "
                     "preprocessed data, a seeded sample of at most 5000 points.")


def _fmt_cell(v):
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e-3 and v != 0 else f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
    if isinstance(v, dict):
        return " ".join(f"{k}={v2}" for k, v2 in v.items()) or "-"
    return "-" if v is None else str(v)


def fmt_params(r, restarts=None) -> str:
    """A record's parameters as ``key=value ...`` as a reader should see them: through its method's ``show``
    (the restarts a ``0`` stood for: the record's ``n_restarts``, else ``restarts``), a ``"median"`` width
    with the value it stood for (``gamma=median(0.8123)``, from the record's ``gamma_used``)."""
    p = dict(r.get("params") or {})
    m = methods.REGISTRY.get(r.get("method"))
    if m is not None and m.show is not None:
        p = m.show(p, {"restarts": r.get("n_restarts", restarts)})
    lo_hi = r.get("gamma_used_range")   # the subset protocol: one median per subset
    if p.get("gamma") == "median" and lo_hi:
        p["gamma"] = f"median({lo_hi[0]:.4g})" if lo_hi[0] == lo_hi[1] else f"median({lo_hi[0]:.4g}..{lo_hi[1]:.4g})"
    used = r.get("gamma_used")
    used = list(used) if isinstance(used, (list, tuple)) else [used] if used is not None else []
    for key in ("gamma", "gammas"):   # gammas: one value per kernel a method combines, in kernel order
        vals = p.get(key)
        seq = list(vals) if isinstance(vals, (list, tuple)) else [vals]
        if "median" in seq and used:
            it = iter(used)
            seq = [f"median({next(it, float('nan')):.4g})" if v == "median" else v for v in seq]
            p[key] = ",".join(map(str, seq)) if isinstance(vals, (list, tuple)) else seq[0]
    return _fmt_cell(p)


#: score columns over restarts: not shown for a record that kept the labels of its picked restart only
OVER_RESTARTS = ("acc_avg", "acc_max", "nmi_avg", "nmi_max")


def _one_kept(r) -> bool:
    return r.get("restarts_kept") == 1


def all_columns() -> tuple:
    """Every column a results table may have, in order: the generic ones around the families'."""
    return HEAD + tuple(methods.columns()) + TAIL


def markdown_table(records, columns=None) -> str:
    """A GitHub-flavoured Markdown table, one row per record (``columns``: default :func:`all_columns`)."""
    cols = [c for c in (columns or all_columns()) if any(c in r for r in records)]
    # a column over restarts only where some record has more than one restart's labels
    cols = [c for c in cols if c not in OVER_RESTARTS or any(c in r and not _one_kept(r) for r in records)]
    lines = ["| " + " | ".join(HEADERS.get(c, c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in records:
        cells = [fmt_params(r) if c == "params" else "-" if c in OVER_RESTARTS and _one_kept(r)
                 else _fmt_cell(r.get(c)) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _atomic_write(path: Path, text: str | bytes):
    from bigclust.report.labels import atomic_write   # the one atomic writer (temp file removed on failure)
    atomic_write(path, text)


NMI_NORMALISERS = {"sqrt": "sqrt(H(classes) H(clusters))", "max": "max(H(classes), H(clusters))",
                   "arithmetic": "(H(classes) + H(clusters)) / 2"}


def legend(records) -> str:
    """What the Markdown table's score columns mean (empty when it has none of them)."""
    if any("acc_avg" in r for r in records):
        kept = list(dict.fromkeys(methods.label(r["method"]) for r in records if _one_kept(r)))
        one = (f" {', '.join(kept)}: only the picked restart's labels are kept (with its factors), so "
               + ("there is no avg or max over restarts." if all(_one_kept(r) for r in records if "acc_avg" in r)
                  else "avg and max are '-'.")) if kept else ""
        median = " gamma=median(v): the median rule's width and the value v it stood for." \
            if any("median(" in fmt_params(r) for r in records) else ""
        return LEGEND + one + median + "".join(methods.COLUMNS[c]["legend"] for c in methods.columns()
                                               if any(c in r for r in records))
    return LEGEND_UNLABELLED if any("silhouette" in r for r in records) else ""


def write(out_dir, records, cfg, *, plots=True, trials=(), picks=(), store=None):
    """Write ``results.{json,csv,md}``, ``run.json``, ``labels/`` and the figures.

    ``run.json`` is written first with ``"complete": false`` and rewritten
    last with ``"complete": true``; every file goes to a temporary name and is
    renamed into place.  A run killed at any point leaves a folder that the
    same command recognises as its own and finishes.

    Parameters
    ----------
    out_dir : Path
        Output folder (created).
    records : list of dict
        From :func:`bigclust.pipeline.runner.run`; ``history`` entries go to the
        figure and are left out of the CSV.
    cfg : bigclust.pipeline.config.Config
    plots : bool
        Write the figures (:mod:`bigclust.report.figures`).
    trials : list of dict
        Per-subset records of the subset protocol (``trials.csv``).
    picks : list of bigclust.report.labels.Pick
        The restart each record's method picks (:func:`bigclust.report.labels.collect`):
        written to ``labels/`` and drawn in ``figures/``.
    store : bigclust.pipeline.store.Store, optional
        Where the embeddings of the figures are read.
    """
    from bigclust.report import figures
    from bigclust.report import labels
    from bigclust.report import terms
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # run.json first, marked incomplete: a kill at any point below leaves a folder that says which config
    # it belongs to, so the same command resumes into it (pipeline.check_out_dir)
    _write_run_json(out_dir, cfg, complete=False)
    slim = [{k: v for k, v in r.items() if k != "history"} for r in records]
    _atomic_write(out_dir / "results.json", json.dumps(records, indent=1, default=float))
    buf = io.StringIO()
    keys = []
    for r in slim:
        keys += [k for k in r if k not in keys]
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    for r in slim:   # a dict, or a list of them (eigen_solves), as JSON; lists of numbers read the same either way
        w.writerow({k: json.dumps(v, sort_keys=True) if isinstance(v, dict) or (
            isinstance(v, list) and any(isinstance(e, dict) for e in v)) else v for k, v in r.items()})
    _atomic_write(out_dir / "results.csv", buf.getvalue())
    title = f"# {cfg.path.name}: {records[0]['dataset'] if records else ''}\n\n"
    nmi_line = ""
    if any("nmi_avg" in r for r in records):   # which NMI: papers differ, and the tables cannot show it
        norm = cfg.sections["evaluate"]["nmi_norm"]
        nmi_line = f"\n\nNMI = I(classes; clusters) / {NMI_NORMALISERS[norm]} ([evaluate] nmi_norm = \"{norm}\")."
    if trials:  # the subset protocol: scores per subset size, and every subset drawn
        n_init = cfg.sections["cluster"]["n_init"]
        body = subset_tables(records, n_init if isinstance(n_init, int) else None)
        tb = io.StringIO()
        names = _class_names(store, trials[0].get("dataset"))
        cols = ["method", "params", "subset_size", "trial", "classes"] + (["class_names"] if names else []) + [
            "n"] + (["gamma_used"] if any("gamma_used" in r for r in trials) else []) + [
            "acc_best_inertia", "nmi_best_inertia", "seconds"]
        tw = csv.DictWriter(tb, fieldnames=cols, extrasaction="ignore")
        tw.writeheader()
        sep = "; " if names and any(any(ch.isspace() for ch in str(c)) for c in names) else " "
        for r in trials:
            named = {"class_names": sep.join(str(names[c]) if 0 <= c < len(names) else str(c) for c in r["classes"])}
            tw.writerow({**r, "params": json.dumps(r["params"], sort_keys=True),
                         "classes": " ".join(map(str, r["classes"])), **(named if names else {})})
        _atomic_write(out_dir / "trials.csv", tb.getvalue())
    else:
        body = markdown_table(slim) + (f"\n\n{legend(slim)}" if legend(slim) else "")
    # documents: what each cluster is about (its top terms), in results.md and clusters.csv
    term_rows = terms.cluster_rows(store, list(picks), cfg) if store is not None and picks else []
    if term_rows:
        _atomic_write(out_dir / "clusters.csv", terms.clusters_csv(term_rows))
    terms_md = f"\n\n{terms.markdown(term_rows)}" if term_rows else ""
    _atomic_write(out_dir / "results.md", title + body + nmi_line + terms_md + "\n")
    labels.write_files(out_dir, list(picks), records)
    if plots:
        seed = cfg.sections["cluster"]["seed"]
        figures.write_all(out_dir, records, list(picks), store, seed=seed if isinstance(seed, int) else seed[0])
    _write_run_json(out_dir, cfg, complete=True)


def _class_names(store, dataset) -> list:
    """The class names of ``dataset``'s ingested data in ``store`` (``[]`` when unknown or ambiguous): the
    subset protocol's records name their classes by number."""
    if store is None:
        return []
    found = set()
    for key in store.stage_keys("ingest"):
        a = dict(store.open("ingest", key, dropped_ok=True).attrs)
        if a.get("dataset") == dataset and a.get("class_names"):
            found.add(tuple(a["class_names"]))
    names = list(next(iter(found))) if len(found) == 1 else []
    return [] if names == [str(i) for i in range(len(names))] else names   # "0", "1", ...: the numbers again


def numerics() -> dict:
    """What the last bits of a run depend on besides the code and the data.

    ``blas``: each loaded BLAS library and the CPU kernel it dispatched to (OpenBLAS picks it by CPU at load
    time; ``OPENBLAS_CORETYPE`` overrides it), ``blas_threads`` and ``numba_threads``: how many threads split
    the products and the parallel loops, ``numba_cpu``: the CPU Numba compiles for (the host's unless
    ``NUMBA_CPU_NAME`` says otherwise): kernels built with ``fastmath`` -- pynndescent's distances, the
    normalisation's sums -- vectorise to its vector width, so their sums, and NN-descent's graph, follow it.
    A change of any of them can move a sum by an ulp and, through a nearly tied k-means restart, a score;
    :func:`bigclust.pipeline.verify.verify` names them when bits differ.
    """
    import numba
    from llvmlite import binding
    from threadpoolctl import threadpool_info
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return {"blas": sorted({f"{i['internal_api']} {i.get('architecture')}" for i in blas}),
            "blas_threads": max((int(i["num_threads"]) for i in blas), default=0),
            "numba_threads": int(numba.config.NUMBA_NUM_THREADS),
            "numba_cpu": numba.config.CPU_NAME or binding.get_host_cpu_name()}


def numerics_text(d) -> str:
    """One line of :func:`numerics`: the BLAS kernels, the thread counts and Numba's CPU (when recorded)."""
    return (f"{', '.join(d['blas']) or 'no BLAS'} with {d['blas_threads']} threads, "
            f"{d['numba_threads']} Numba threads" + (f" compiled for {d['numba_cpu']}" if d.get("numba_cpu") else ""))


def _write_run_json(out_dir, cfg, *, complete: bool):
    _atomic_write(out_dir / "run.json", json.dumps({
        "config_hash": cfg.hash, "config_file": str(cfg.path.resolve()), "bigclust_version": __version__,
        "complete": complete, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z") if complete else None,
        **numerics(), "config": cfg.sections}, indent=1, default=str))


def _label(r, restarts=None) -> str:
    return r["method"] + ("" if not r["params"] else " " + fmt_params(r, restarts))


def subset_tables(records, restarts=None) -> str:
    """Markdown tables of the subset protocol: one row per method, one column per subset size, then the mean
    (``restarts``: the ``[cluster] n_init`` of every point, when the config does not sweep it)."""
    out = []
    for score in ("nmi", "acc"):
        rows = [r for r in records if f"{score}_by_k" in r]
        if not rows:
            continue
        ks = sorted({int(k) for r in rows for k in r[f"{score}_by_k"]})
        out.append(f"{score.upper()} of the restart each method picks, mean over {rows[0]['n_trials']} random "
                   "subsets of classes per size k\n")
        out.append("| method | " + " | ".join(map(str, ks)) + " | avg. |")
        out.append("|---|" + "---|" * (len(ks) + 1))
        for r in rows:
            by = {int(k): v for k, v in r[f"{score}_by_k"].items()}
            out.append(f"| {_label(r, restarts)} | " + " | ".join(f"{by[k]:.3f}" for k in ks) + f" | {r[score + '_avg']:.3f} |")
        out.append("")
    return "\n".join(out)
