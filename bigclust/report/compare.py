"""``bigclust report compare``: a run's results beside the numbers of the paper it reproduces.

The paper CSV says which paper: ``table,dataset,method,value`` is paper 000 (Wang, Li, König 2010:
Tables II-V, best over γ); a ``k`` column is paper 001's subset tables (NMI per number of classes k);
``metric`` and ``std`` columns are paper 002's (augmented subspace clustering: error rate and NMI, mean ±
std).  Which results a paper shows, and under which names, comes from the registry
(:func:`bigclust.pipeline.methods.paper_name`: each family names its own results).

Paper 002's CSV (``pipelines/subspace/paper_table*.csv``) has the columns
``table,dataset,setting,method,metric,value,std[,note]``: ``metric`` is ``err`` or ``nmi`` (percent),
``setting`` names the protocol cell (``""`` for Table 1; ``labelled=4 aug=coil20`` for Tables 3-5, with our
augmentation preset names; ``digits=0:9`` for Table 2; ``k=10 aug=coil20`` and ``digits=0:9 k=10 aug=mnist``
for the supplement's Tables 6-7, which vary k), ``std`` may be empty and ``note`` marks cells that are
garbled in the extracted text.  The trials of one name and setting (one per ``[cluster] seed``) are
averaged: error = 100 (1 - accuracy) and NMI in percent of the restart each run picks.
"""
from __future__ import annotations

import csv
import io
import json
import warnings
from pathlib import Path

import numpy as np

from bigclust._util.errors import UserError
from bigclust.pipeline.methods import in_paper, label, paper_name
from bigclust.report.tables import _atomic_write


# -- paper 000: Tables II-V, best over the sweep ------------------------------------------------------


TABLES = (("acc_avg", "Table II: average accuracy"), ("nmi_avg", "Table III: average NMI"),
          ("acc_max", "Table IV: maximum accuracy"), ("nmi_max", "Table V: maximum NMI"))


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


def compare(result_files, paper_csv, out_md=None, out_csv=None) -> str:
    """Our best-over-γ results beside the paper's Tables II-V, with the difference.

    A paper CSV with a ``k`` column (paper 001's subset tables) goes to :func:`compare_001`, one with
    ``metric`` and ``std`` columns (paper 002) to :func:`compare_002`.

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
        return compare_001(result_files, paper_csv, out_md, out_csv)
    if "metric" in header and "std" in header:  # paper 002: err / NMI mean ± std per method and setting
        return compare_002(result_files, paper_csv, out_md, out_csv)
    records = []
    for p in result_files:
        records += json.loads(Path(p).read_text())
    ours = best_over_params(records)
    paper = read_paper_tables(paper_csv)
    datasets = sorted({d for d, _ in ours})
    names = in_paper("000")
    md = ["# Paper 000 (Wang, Li, König 2010), Tables II-V: ours vs paper",
          "", "Each cell: ours / paper (ours − paper). Best over γ for RA, Ncut, SK, BBS; "
          "average or maximum over the k-means restarts.", ""]
    rows = []
    for metric, title in TABLES:
        md += [f"## {title}", "", "| data set | " + " | ".join(label(m) for m in names) + " |",
               "|---|" + "---|" * len(names)]
        for d in datasets:
            cells = []
            for m in names:
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


# -- paper 001: NMI per number of classes (the subset protocol) -----------------------------------------


def _nmi_norm_of(results_json):
    """``[evaluate] nmi_norm`` of the run that wrote ``results_json`` (its ``run.json``), None if unknown."""
    run = Path(results_json).parent / "run.json"
    try:
        return json.loads(run.read_text())["config"]["evaluate"]["nmi_norm"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def compare_001(result_files, paper_csv, out_md=None, out_csv=None) -> str:
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
            name = paper_name("001", r)
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


# -- paper 002: error rate and NMI, mean ± std over the trials -------------------------------------------


def _digits(r) -> str:
    """``digits=0:K`` for the MNIST [0:K] subsets (data sets ``mnist-test-500-0-K``)."""
    ds = r.get("dataset", "")
    if ds.startswith("mnist-test-500-0-"):
        return f"digits=0:{ds.rsplit('-', 1)[1]}"
    return ""


def _k_setting(r, k_cell) -> tuple[str, ...]:
    """The sensitivity tables' cell of an unsupervised kNN record: ``k=10 aug=coil20`` (supplement Table 6),
    ``digits=0:9 k=10 aug=mnist`` (Table 7); a second key, so the same trials also count in Tables 1-2."""
    return (" ".join(filter(None, (_digits(r), k_cell))),) if k_cell else ()


def ours_by_cell(result_files, return_mixed=False):
    """``{(dataset, setting, method): {"err": (mean, std, n), "nmi": (mean, std, n)}}`` over the trials.

    With ``return_mixed`` also ``{cell: [k, ...]}``, the Table 1-2 cells left out because their trials
    have different k.
    """
    trials, features, ks = {}, {}, {}
    for path in result_files:
        for r in json.loads(Path(path).read_text()):
            named = paper_name("002", r)
            if named is None or "acc_best_inertia" not in r:
                continue
            setting, method, k_cell = named
            setting = setting or _digits(r)
            ds = "mnist-test" if _digits(r) else r["dataset"]
            # the trials of one cell are averaged: never pixels with scattering features ([aksc] features)
            f = features.setdefault((ds, setting, method), r["params"].get("features", "pixels"))
            if f != r["params"].get("features", "pixels"):
                raise UserError(f"{path}: {method} {setting or ds} has trials with features {f!r} and "
                                f"{r['params'].get('features', 'pixels')!r}; compare them in separate reports")
            ks.setdefault((ds, setting, method), set()).add(r["params"].get("n_neighbors"))
            for cell in (setting, *_k_setting(r, k_cell)):
                t = trials.setdefault((ds, cell, method), {"err": [], "nmi": []})
                t["err"].append(100.0 * (1.0 - r["acc_best_inertia"]))
                t["nmi"].append(100.0 * r["nmi_best_inertia"])
    # a Table 1-2 cell names no k: trials with several k (e.g. a Table 7 run beside Table 2's) are not one
    # cell; they stay in their "k=..." cells only
    mixed = {key: sorted(v) for key, v in ks.items() if len(v) > 1}
    out = {key: {m: (float(np.mean(v)), float(np.std(v)), len(v)) for m, v in t.items()}
           for key, t in trials.items() if key not in mixed}
    return (out, mixed) if return_mixed else out


def read_paper_002(paper_csv):
    with open(paper_csv) as f:
        rows = list(csv.DictReader(ln for ln in f if not ln.startswith("#")))
    out = {}
    for row in rows:
        std = row.get("std") or ""
        out[(row["table"], row["dataset"], row.get("setting") or "", row["method"], row["metric"])] = (
            float(row["value"]), float(std) if std else None, (row.get("note") or "").strip())
    return out


def compare_002(result_files, paper_csv, out_md=None, out_csv=None) -> str:
    """Ours (mean ± std over the trials) beside the paper's cells, with the difference of the means."""
    ours, mixed = ours_by_cell(result_files, return_mixed=True)
    paper = read_paper_002(paper_csv)
    for ds, setting, method in sorted(mixed):
        if any(key[1:4] == (ds, setting, method) for key in paper):
            warnings.warn(f"{method} {setting or ds}: trials with k = {mixed[(ds, setting, method)]} nearest "
                          f"atoms; left out of that cell (compare each k in its own report)", RuntimeWarning,
                          stacklevel=2)
    md = ["# Paper 002 (Abdolali & Gillis): ours vs paper", "",
          "Each cell: ours mean ± std over the trials (n) / paper mean ± std (ours − paper), in %. "
          "`*`: the paper's cell is garbled in the extracted text (see the CSV's note).", ""]
    rows = []
    tables = dict.fromkeys(t for t, *_ in paper)
    for table in tables:
        keys = [k for k in paper if k[0] == table]
        groups = dict.fromkeys((d, s) for _, d, s, _, _ in keys)
        md += [f"## Table {table}", "", "| data set | setting | method | err ours / paper | NMI ours / paper |",
               "|---|---|---|---|---|"]
        for ds, setting in groups:
            for method in dict.fromkeys(m for _, d, s, m, _ in keys if (d, s) == (ds, setting)):
                cells = []
                for metric in ("err", "nmi"):
                    pv = paper.get((table, ds, setting, method, metric))
                    o = ours.get((ds, setting, method), {}).get(metric)
                    rows.append({"table": table, "dataset": ds, "setting": setting, "method": method,
                                 "metric": metric, "ours": None if o is None else round(o[0], 4),
                                 "ours_std": None if o is None else round(o[1], 4),
                                 "n_trials": None if o is None else o[2],
                                 "paper": None if pv is None else pv[0], "paper_std": None if pv is None else pv[1],
                                 "diff": None if o is None or pv is None else round(o[0] - pv[0], 4),
                                 "note": "" if pv is None else pv[2]})
                    cells.append(_cell(o, pv))
                if all(c.startswith("— / —") for c in cells):
                    continue
                md.append(f"| {ds} | {setting or '–'} | {method} | {cells[0]} | {cells[1]} |")
        md.append("")
    return write_tables(md, rows, list(rows[0]) if rows else ["table"], out_md, out_csv)


def _cell(o, pv) -> str:
    ours = "—" if o is None else f"{o[0]:.2f} ± {o[1]:.2f} ({o[2]})"
    if pv is None:
        return f"{ours} / —"
    p = f"{pv[0]:.2f}" + ("" if pv[1] is None else f" ± {pv[1]:.2f}") + ("*" if pv[2] else "")
    return f"{ours} / {p}" + ("" if o is None else f" ({o[0] - pv[0]:+.2f})")
