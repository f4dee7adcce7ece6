"""Reports: Markdown, CSV and JSON tables of a run's results, and figures.

Every file is written to a temporary name and renamed into place, so an
interrupted report never leaves a half-written table behind.
"""
from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

from bigclust._util.version import __version__
from bigclust._util.errors import UserError
from bigclust.report.figures import plot_quality  # noqa: F401  (its home before figures.py)

COLUMNS = ("method", "params", "seed", "acc_best_inertia", "acc_avg", "acc_max", "nmi_best_inertia", "nmi_avg",
           "nmi_max", "n_labelled", "err_unlabelled", "MB", "MC", "objective", "silhouette", "seconds")
#: Markdown headers of record keys whose names say less than they should
HEADERS = {"acc_best_inertia": "acc_picked", "nmi_best_inertia": "nmi_picked", "acc_max": "acc_max (oracle)",
           "nmi_max": "nmi_max (oracle)"}
LEGEND = ("acc/nmi_picked: the restart the method itself picks (lowest objective: k-means inertia, NMF "
          "objective); avg: mean over restarts; max: best over restarts (oracle: picked with the labels). "
          "objective: that of the picked restart.")
LEGEND_SEMI = (" AkS-SC (semi-supervised): acc/nmi over every sample, the n_labelled given ones included; "
               "err_unlabelled: error rate over the others.")
LEGEND_UNLABELLED = ("No labels: MB = bi-stochasticity of the normalised kernel; objective: that of the restart "
                     "the method picks (k-means inertia, NMF objective); silhouette: Euclidean, on the "
                     "preprocessed data, a seeded sample of at most 5000 points.")


def _fmt_cell(v):
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e-3 and v != 0 else f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
    if isinstance(v, dict):
        return " ".join(f"{k}={v2}" for k, v2 in v.items()) or "-"
    return "-" if v is None else str(v)


def markdown_table(records, columns=COLUMNS) -> str:
    """A GitHub-flavoured Markdown table, one row per record."""
    cols = [c for c in columns if any(c in r for r in records)]
    lines = ["| " + " | ".join(HEADERS.get(c, c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in records:
        lines.append("| " + " | ".join(_fmt_cell(r.get(c)) for c in cols) + " |")
    return "\n".join(lines)


def _atomic_write(path: Path, text: str | bytes):
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(tmp, mode) as f:
        f.write(text)
    os.replace(tmp, path)


NMI_NORMALISERS = {"sqrt": "sqrt(H(classes) H(clusters))", "max": "max(H(classes), H(clusters))",
                   "arithmetic": "(H(classes) + H(clusters)) / 2"}


def legend(records) -> str:
    """What the Markdown table's score columns mean (empty when it has none of them)."""
    if any("acc_avg" in r for r in records):
        return LEGEND + (LEGEND_SEMI if any("err_unlabelled" in r for r in records) else "")
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
    for r in slim:
        w.writerow({k: json.dumps(v, sort_keys=True) if isinstance(v, dict) else v for k, v in r.items()})
    _atomic_write(out_dir / "results.csv", buf.getvalue())
    title = f"# {cfg.path.name}: {records[0]['dataset'] if records else ''}\n\n"
    nmi_line = ""
    if any("nmi_avg" in r for r in records):   # which NMI: papers differ, and the tables cannot show it
        norm = cfg.sections["evaluate"]["nmi_norm"]
        nmi_line = f"\n\nNMI = I(classes; clusters) / {NMI_NORMALISERS[norm]} ([evaluate] nmi_norm = \"{norm}\")."
    if trials:  # the subset protocol: scores per subset size, and every subset drawn
        body = subset_tables(records)
        tb = io.StringIO()
        cols = ["method", "params", "subset_size", "trial", "classes", "n", "acc_best_inertia", "nmi_best_inertia",
                "seconds"]
        tw = csv.DictWriter(tb, fieldnames=cols, extrasaction="ignore")
        tw.writeheader()
        for r in trials:
            tw.writerow({**r, "params": json.dumps(r["params"], sort_keys=True), "classes": " ".join(map(str, r["classes"]))})
        _atomic_write(out_dir / "trials.csv", tb.getvalue())
    else:
        body = markdown_table(slim) + (f"\n\n{legend(slim)}" if legend(slim) else "")
    _atomic_write(out_dir / "results.md", title + body + nmi_line + "\n")
    labels.write_files(out_dir, list(picks), records)
    if plots:
        seed = cfg.sections["cluster"]["seed"]
        figures.write_all(out_dir, records, list(picks), store, seed=seed if isinstance(seed, int) else seed[0])
    _write_run_json(out_dir, cfg, complete=True)


def numerics() -> dict:
    """What the last bits of a run depend on besides the code and the data.

    ``blas``: each loaded BLAS library and the CPU kernel it dispatched to (OpenBLAS picks it by CPU at load
    time; ``OPENBLAS_CORETYPE`` overrides it), ``blas_threads`` and ``numba_threads``: how many threads split
    the products and the parallel loops.  A change of any of them can move a sum by an ulp and, through a
    nearly tied k-means restart, a score; :func:`verify` names them when bits differ.
    """
    import numba
    from threadpoolctl import threadpool_info
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return {"blas": sorted({f"{i['internal_api']} {i.get('architecture')}" for i in blas}),
            "blas_threads": max((int(i["num_threads"]) for i in blas), default=0),
            "numba_threads": int(numba.config.NUMBA_NUM_THREADS)}


def _numerics_text(d) -> str:
    return f"{', '.join(d['blas']) or 'no BLAS'} with {d['blas_threads']} threads, {d['numba_threads']} Numba threads"


def _write_run_json(out_dir, cfg, *, complete: bool):
    _atomic_write(out_dir / "run.json", json.dumps({
        "config_hash": cfg.hash, "config_file": str(cfg.path.resolve()), "bigclust_version": __version__,
        "complete": complete, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z") if complete else None,
        **numerics(), "config": cfg.sections}, indent=1, default=str))


TABLES = (("acc_avg", "Table II: average accuracy"), ("nmi_avg", "Table III: average NMI"),
          ("acc_max", "Table IV: maximum accuracy"), ("nmi_max", "Table V: maximum NMI"))
PAPER_METHODS = ("kmeans", "ra", "ncut", "sk", "bbs")


def best_over_params(records):
    """``{(dataset, method): {metric: best value over the sweep}}`` (paper 000's Tables II-V)."""
    best = {}
    for r in records:
        if "acc_avg" not in r:
            continue
        cell = best.setdefault((r["dataset"], r["method"]), {})
        for metric, _ in TABLES:
            cell[metric] = max(cell.get(metric, float("-inf")), r[metric])
    return best


def read_paper_tables(path):
    """The typed-in paper numbers: ``{(table, dataset, method): value}``."""
    out = {}
    with open(path) as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        for row in rows:
            out[(row["table"], row["dataset"], row["method"])] = float(row["value"])
    return out


#: paper 001's row names for our (method, ncw) pairs
PAPER001_NAMES = {("kmeans", False): "KM", ("kmeans", True): "KM-NCW", ("kkmeans", False): "KM",
                  ("kkmeans", True): "KM-NCW", ("ra", False): "AW", ("rc", False): "RC", ("ncut", False): "NC",
                  ("nmf", False): "NMF", ("nmf", True): "NMF-NCW", ("binmf", False): "BiNMF",
                  ("binmf", True): "BiNMF-NCW"}


def _nmi_norm_of(results_json):
    """``[evaluate] nmi_norm`` of the run that wrote ``results_json`` (its ``run.json``), None if unknown."""
    run = Path(results_json).parent / "run.json"
    try:
        return json.loads(run.read_text())["config"]["evaluate"]["nmi_norm"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def compare_subsets(result_files, paper_csv, out_md=None, out_csv=None) -> str:
    """Subset-protocol results (NMI per k) beside paper 001's Tables 3.3/3.4: ours / paper / difference per cell."""
    with open(paper_csv) as f:
        paper = {(r["dataset"], r["kernel"], r["method"], r["k"]): float(r["value"])
                 for r in csv.DictReader(ln for ln in f if not ln.startswith("#"))}
    ours = {}
    for path in result_files:
        norm = _nmi_norm_of(path)
        if norm not in ("max", None):
            raise UserError(f"{path}: its NMI uses the {norm!r} normalisation and paper 001's tables the 'max' one; "
                            "re-run with [evaluate] nmi_norm = \"max\" to compare them")
        for r in json.loads(Path(path).read_text()):
            if "nmi_by_k" not in r:
                continue
            kernel = "cosine2" if r["params"].get("kind") == "cosine2" else "none"
            name = PAPER001_NAMES.get((r["method"], bool(r["params"].get("ncw", False))))
            if name:
                cells = {str(k): v for k, v in r["nmi_by_k"].items()}
                cells["avg"] = r["nmi_avg"]
                ours[(r["dataset"], kernel, name)] = cells
    lines, rows = [], [("dataset", "kernel", "method", "k", "ours", "paper", "diff")]
    datasets = sorted({d for d, *_ in ours})
    for ds in datasets:
        for kernel in ("none", "cosine2"):
            names = [n for n in dict.fromkeys(m for (d, kn, m, _) in paper if kn == kernel)
                     if (ds, kernel, n) in ours]
            if not names:
                continue
            ks = [k for k in ("2", "3", "4", "5", "6", "7", "8", "9", "10", "avg") if k in ours[(ds, kernel, names[0])]]
            mine = [k for k in ks if k != "avg"]
            partial = len(mine) < 9   # the paper's avg is over k = 2..10: over ours only, from its cells
            lines.append(f"\n### {ds}, {'cosine-square kernel' if kernel == 'cosine2' else 'no kernel'}: "
                         "NMI (max) ours / paper / difference\n")
            lines.append("| method | " + " | ".join(f"avg over k = {', '.join(mine)}" if k == "avg" and partial
                                                      else k for k in ks) + " |")
            lines.append("|---|" + "---|" * len(ks))
            for n in names:
                cells = []
                for k in ks:
                    o, pp = ours[(ds, kernel, n)].get(k), paper.get((ds, kernel, n, k))
                    if k == "avg" and partial:
                        got = [paper.get((ds, kernel, n, j)) for j in mine]
                        pp = None if None in got else sum(got) / len(got)
                    if pp is None:
                        cells.append(f"{o:.3f} / – / –")
                    else:
                        cells.append(f"{o:.3f} / {pp:.3f} / {o - pp:+.3f}")
                    rows.append((ds, kernel, n, k, o, pp, None if pp is None else o - pp))
                lines.append(f"| {n} | " + " | ".join(cells) + " |")
    text = "\n".join(lines).lstrip("\n") + "\n"
    if out_md:
        _atomic_write(Path(out_md), text)
    if out_csv:
        buf = io.StringIO()
        csv.writer(buf).writerows(rows)
        _atomic_write(Path(out_csv), buf.getvalue())
    return text


def compare(result_files, paper_csv, out_md=None, out_csv=None) -> str:
    """Our best-over-γ results beside the paper's Tables II-V, with the difference.

    A paper CSV with a ``k`` column (paper 001's subset tables) goes to :func:`compare_subsets`, one with
    ``metric`` and ``std`` columns (paper 002) to :func:`bigclust.report.compare_subspace.compare_subspace`.

    Parameters
    ----------
    result_files : list of path
        ``results.json`` files of finished runs (one per data set).
    paper_csv : path
        ``table,dataset,method,value`` (``pipelines/bbs/paper_tables.csv``).
    out_md, out_csv : path, optional
        Where to write the Markdown tables and a long-form CSV.

    Returns
    -------
    str
        The Markdown text.
    """
    with open(paper_csv) as f:
        header = next(csv.reader(ln for ln in f if not ln.startswith("#")))
    if "k" in header:
        return compare_subsets(result_files, paper_csv, out_md, out_csv)
    from bigclust.report.compare_subspace import compare_subspace, is_subspace_csv
    if is_subspace_csv(header):  # paper 002: err / NMI mean ± std per method and setting
        return compare_subspace(result_files, paper_csv, out_md, out_csv)
    records = []
    for p in result_files:
        records += json.loads(Path(p).read_text())
    ours = best_over_params(records)
    paper = read_paper_tables(paper_csv)
    datasets = sorted({d for d, _ in ours})
    md = ["# Paper 000 (Wang, Li, König 2010), Tables II-V: ours vs paper",
          "", "Each cell: ours / paper (ours − paper). Best over γ for RA, Ncut, SK, BBS; "
          "average or maximum over the k-means restarts.", ""]
    rows = []
    for metric, title in TABLES:
        md += [f"## {title}", "", "| data set | " + " | ".join(m.upper() if m != "kmeans" else "K-means"
                                                           for m in PAPER_METHODS) + " |",
               "|---|" + "---|" * len(PAPER_METHODS)]
        for d in datasets:
            cells = []
            for m in PAPER_METHODS:
                o = ours.get((d, m), {}).get(metric)
                pv = paper.get((metric, d, m))
                rows.append({"table": metric, "dataset": d, "method": m, "ours": o, "paper": pv,
                             "diff": None if o is None or pv is None else o - pv})
                if o is None:
                    cells.append("—" if pv is None else f"— / {pv:.3f}")
                elif pv is None:
                    cells.append(f"{o:.3f} / —")
                else:
                    cells.append(f"{o:.3f} / {pv:.3f} ({o - pv:+.3f})")
            md.append(f"| {d} | " + " | ".join(cells) + " |")
        md.append("")
    return write_tables(md, rows, ["table", "dataset", "method", "ours", "paper", "diff"], out_md, out_csv)


def write_tables(md, rows, fieldnames, out_md=None, out_csv=None) -> str:
    """Join the Markdown lines ``md``; write them to ``out_md`` and ``rows`` as CSV to ``out_csv`` (atomically)."""
    text = "\n".join(md)
    if out_md:
        _atomic_write(Path(out_md), text)
    if out_csv:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=fieldnames)
        w.writeheader()
        w.writerows(rows)
        _atomic_write(Path(out_csv), buf.getvalue())
    return text


SCORES = ("acc_avg", "acc_max", "nmi_avg", "nmi_max")


def verify(results_dir, config=None, *, scheduler=None) -> tuple[bool, str]:
    """Re-run the config of a committed results folder from scratch and compare every score exactly.

    Parameters
    ----------
    results_dir : path
        A folder with ``results.json`` (e.g. ``pipelines/bbs/results/vehicle``).
    config : path, optional
        The config that made it; default: the one named in its ``run.json``
        (its file name, looked up in the folder two levels up).

    Returns
    -------
    (ok, text)
        ``ok`` when every record's acc/nmi avg and max are equal to the last
        bit; ``text`` a line per record (and, after a difference, the BLAS kernels
        here and when the results were made: bits depend on them, see :func:`numerics`).
    """
    import tempfile

    from bigclust.pipeline.runner import run

    results_dir = Path(results_dir)
    committed = json.loads((results_dir / "results.json").read_text())
    made = json.loads((results_dir / "run.json").read_text())
    if config is None:
        config = results_dir.parent.parent / Path(made["config_file"]).name
    with tempfile.TemporaryDirectory(prefix="bigclust-verify-") as tmp:  # a new store: every stage recomputed
        fresh = run(config, scheduler=scheduler, out=f"{tmp}/out", store=f"{tmp}/store.zarr")
    key = lambda r: (r["method"], r["params"].get("gamma"), r["params"].get("n_neighbors"))  # noqa: E731
    fresh_by = {key(r): r for r in fresh}
    lines, ok = [], len(fresh) == len(committed)
    for r in committed:
        f = fresh_by.get(key(r))
        same = f is not None and all(f.get(s) == r.get(s) for s in SCORES)
        ok &= same
        lines.append(f"{'same' if same else 'DIFFERENT'}  {r['method']:<7} gamma={r['params'].get('gamma')}  "
                     + "  ".join(f"{s}={r.get(s)}" + ("" if f is None or f.get(s) == r.get(s) else f" (now {f.get(s)})")
                                 for s in SCORES))
    lines.append(f"{sum(ln.startswith('same') for ln in lines)} of {len(committed)} records reproduced exactly"
                 + ("" if len(fresh) == len(committed) else f"; the re-run has {len(fresh)} records"))
    here = numerics()
    then = {k: made[k] for k in here if k in made}
    if not ok and then and any(then[k] != here[k] for k in then):
        then = {**here, **then}
        lines.append(f"Numerics here: {_numerics_text(here)}; when the results were made: {_numerics_text(then)}. "
                     "Bits are only comparable under the same: re-run with "
                     f"OPENBLAS_CORETYPE={then['blas'][0].split()[-1] if then['blas'] else '?'} "
                     f"OPENBLAS_NUM_THREADS={then['blas_threads']} NUMBA_NUM_THREADS={then['numba_threads']} "
                     "(on a CPU that has that kernel)")
    return ok, "\n".join(lines)


def _label(r) -> str:
    p = dict(r["params"])
    return r["method"] + ("" if not p else " " + " ".join(f"{k}={v}" for k, v in p.items()))


def subset_tables(records) -> str:
    """Markdown tables of the subset protocol: one row per method, one column per subset size, then the mean."""
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
            out.append(f"| {_label(r)} | " + " | ".join(f"{by[k]:.3f}" for k in ks) + f" | {r[score + '_avg']:.3f} |")
        out.append("")
    return "\n".join(out)
