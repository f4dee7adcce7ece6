"""``bigclust report compare`` for paper 002 (augmented subspace clustering): error rate and NMI, mean ± std.

The paper CSV (``pipelines/subspace/paper_table*.csv``) has the columns
``table,dataset,setting,method,metric,value,std[,note]``: ``metric`` is
``err`` or ``nmi`` (percent), ``setting`` names the protocol cell
(``""`` for Table 1; ``labelled=4 aug=coil20`` for Tables 3-5, with our
augmentation preset names; ``digits=0:9`` for Table 2; ``k=10 aug=coil20``
and ``digits=0:9 k=10 aug=mnist`` for the supplement's Tables 6-7, which
vary k), ``std`` may be empty
and ``note`` marks cells that are garbled in the extracted text.

Our side: every trial record of the runs (one per ``[cluster] seed``) is
named like the paper's columns from its ``[aksc]`` parameters -- SSC / LSR /
LRR (full dictionary, ``n_neighbors = 0``), kNN-* (no augmentation), Ak-*
(augmented); semi-supervised: *-LP (no augmentation) and AkS-* -- and the
trials of one name and setting are averaged: error = 100 (1 - accuracy) and
NMI in percent of the restart each run picks (lowest k-means inertia; AkS-SC
has one labelling).
"""
from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import numpy as np

from bigclust._util.errors import UserError

REG = {"l1": "SSC", "l2": "LSR", "nuclear": "LRR"}


def is_subspace_csv(header) -> bool:
    return "metric" in header and "std" in header


def record_name(r) -> tuple[str, str] | None:
    """``(setting, method)`` of an aksc record in the paper's naming, or None for other methods."""
    if r.get("method") != "aksc":
        return None
    p = r["params"]
    reg = REG[p["regularizer"]]
    setting = r.get("setting", "")
    if p.get("semi_supervised"):
        setting = f"labelled={p.get('labelled_per_class', 0)} aug={p['augment']}"
        return setting, (f"{reg}-LP" if p["augment"] == "none" else f"AkS-{reg}")
    if not p["n_neighbors"]:
        return setting, reg
    return setting, (f"kNN-{reg}" if p["augment"] == "none" else f"Ak-{reg}")


def _digits(r) -> str:
    """``digits=0:K`` for the MNIST [0:K] subsets (data sets ``mnist-test-500-0-K``)."""
    ds = r.get("dataset", "")
    if ds.startswith("mnist-test-500-0-"):
        return f"digits=0:{ds.rsplit('-', 1)[1]}"
    return ""


def _k_setting(r) -> tuple[str, ...]:
    """The sensitivity tables' cell of an unsupervised kNN record: ``k=10 aug=coil20`` (supplement Table 6),
    ``digits=0:9 k=10 aug=mnist`` (Table 7); a second key, so the same trials also count in Tables 1-2."""
    p = r["params"]
    if p.get("semi_supervised") or not p["n_neighbors"]:
        return ()
    return (" ".join(filter(None, (_digits(r), f"k={p['n_neighbors']} aug={p['augment']}"))),)


def ours_by_cell(result_files, return_mixed=False):
    """``{(dataset, setting, method): {"err": (mean, std, n), "nmi": (mean, std, n)}}`` over the trials.

    With ``return_mixed`` also ``{cell: [k, ...]}``, the Table 1-2 cells left out because their trials
    have different k.
    """
    trials, features, ks = {}, {}, {}
    for path in result_files:
        for r in json.loads(Path(path).read_text()):
            named = record_name(r)
            if named is None or "acc_best_inertia" not in r:
                continue
            setting, method = named
            setting = setting or _digits(r)
            ds = "mnist-test" if _digits(r) else r["dataset"]
            # the trials of one cell are averaged: never pixels with scattering features ([aksc] features)
            f = features.setdefault((ds, setting, method), r["params"].get("features", "pixels"))
            if f != r["params"].get("features", "pixels"):
                raise UserError(f"{path}: {method} {setting or ds} has trials with features {f!r} and "
                                f"{r['params'].get('features', 'pixels')!r}; compare them in separate reports")
            ks.setdefault((ds, setting, method), set()).add(r["params"].get("n_neighbors"))
            for cell in (setting, *_k_setting(r)):
                t = trials.setdefault((ds, cell, method), {"err": [], "nmi": []})
                t["err"].append(100.0 * (1.0 - r["acc_best_inertia"]))
                t["nmi"].append(100.0 * r["nmi_best_inertia"])
    # a Table 1-2 cell names no k: trials with several k (e.g. a Table 7 run beside Table 2's) are not one
    # cell; they stay in their "k=..." cells only
    mixed = {key: sorted(v) for key, v in ks.items() if len(v) > 1}
    out = {key: {m: (float(np.mean(v)), float(np.std(v)), len(v)) for m, v in t.items()}
           for key, t in trials.items() if key not in mixed}
    return (out, mixed) if return_mixed else out


def read_paper(paper_csv):
    with open(paper_csv) as f:
        rows = list(csv.DictReader(ln for ln in f if not ln.startswith("#")))
    out = {}
    for row in rows:
        std = row.get("std") or ""
        out[(row["table"], row["dataset"], row.get("setting") or "", row["method"], row["metric"])] = (
            float(row["value"]), float(std) if std else None, (row.get("note") or "").strip())
    return out


def compare_subspace(result_files, paper_csv, out_md=None, out_csv=None) -> str:
    """Ours (mean ± std over the trials) beside the paper's cells, with the difference of the means."""
    from bigclust.report.tables import write_tables

    ours, mixed = ours_by_cell(result_files, return_mixed=True)
    paper = read_paper(paper_csv)
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
