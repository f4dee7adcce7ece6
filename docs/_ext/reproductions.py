"""The reproduction pages' tables, made at build time from the committed results and the typed paper tables.

One directive, ``reproduction-table``, whose arguments are paths relative to the repository root (globs
allowed; a folder stands for its ``results.json``).  What it writes depends on the files:

- with ``:paper: CSV`` the runs beside the paper's numbers, read the way ``bigclust report compare`` reads
  them (:mod:`bigclust.report.compare`): paper 000's best over γ (``:table: acc_avg`` … ``nmi_max``; a row
  of ours, then the paper's row),
  paper 001's NMI averaged over k (``:dataset:``, ``:kernel: none | cosine2``; ``:by-k:`` shows ours − paper
  for each k instead), paper 002's error and NMI, mean ± std over the trials (``:table: 1`` … ``7``;
  ``:setting:`` keeps the settings that start with the given text, ``:methods:`` a comma-separated list);
- without ``:paper:``, the records of the runs (``:columns:`` a comma-separated list of record keys), or,
  for a ``scale*.json`` written by ``bigclust bench scale``, seconds per stage and n with the fitted slopes.

A missing file or a cell that names no result is a build error (``sphinx-build -W``), so a page cannot show
a table that the committed results no longer back.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]

# How the record keys read as column headers (``:columns:``).
HEADERS = {
    "method": "method", "dataset": "data set", "n": "n", "k": "k",
    "acc_best_inertia": "ACC (picked)", "nmi_best_inertia": "NMI (picked)",
    "acc_avg": "ACC (mean)", "nmi_avg": "NMI (mean)", "acc_max": "ACC (max)", "nmi_max": "NMI (max)",
    "seconds": "seconds", "n_iter": "iterations", "gamma_used": "γ used", "n_trials": "subsets per k",
}
STAGES = {"ingest": "ingest", "pca": "PCA-50", "knn": "kNN (IVF)", "normalize_sk": "normalise SK",
          "eigen_sk": "eigenvectors SK", "kmeans_sk": "k-means SK", "normalize_bbs_dual": "normalise BBS",
          "eigen_bbs_dual": "eigenvectors BBS", "kmeans_bbs_dual": "k-means BBS"}


def _table(header, rows, widths=None) -> nodes.table:
    """A docutils table with one header row."""
    table = nodes.table(classes=["reproduction-table"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for w in widths or [1] * len(header):
        group += nodes.colspec(colwidth=w)
    for part, lines in ((nodes.thead(), [header]), (nodes.tbody(), rows)):
        for line in lines:
            row = nodes.row()
            for cell in line:
                entry = nodes.entry()
                entry += nodes.paragraph(text=str(cell))
                row += entry
            part += row
        group += part
    return table


def _diff(v, digits) -> str:
    """``+0.12`` / ``-0.12``; a difference that rounds to zero is ``0.00``, not ``-0.00``."""
    out = f"{v:+.{digits}f}"
    return out[1:] if float(out) == 0 else out


def _fmt(v, digits=3) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


class ReproductionTable(SphinxDirective):
    """``reproduction-table PATH [PATH ...]``: see the module docstring."""

    required_arguments = 1
    final_argument_whitespace = True
    option_spec = {"paper": directives.unchanged, "table": directives.unchanged,
                   "dataset": directives.unchanged, "kernel": directives.unchanged, "by-k": directives.flag,
                   "setting": directives.unchanged, "methods": directives.unchanged,
                   "columns": directives.unchanged}

    def run(self):
        files = self._files()
        for f in files:
            self.env.note_dependency(str(f))
        paper = self.options.get("paper")
        if paper:
            path = ROOT / paper
            self.env.note_dependency(str(path))
            with open(path) as f:
                header = next(csv.reader(ln for ln in f if not ln.startswith("#")))
            if "k" in header:
                return [self._paper_001(files, path)]
            if "metric" in header:
                return [self._paper_002(files, path)]
            return [self._paper_000(files, path)]
        if len(files) == 1 and files[0].name.startswith("scale") and files[0].suffix == ".json":
            return [self._scale(json.loads(files[0].read_text()))]
        return [self._records(files)]

    def _error(self, msg):
        return ExtensionError(f"{self.get_location()}: reproduction-table: {msg}")

    def _files(self) -> list[Path]:
        out = []
        for arg in self.arguments[0].split():
            hits = sorted(ROOT.glob(arg)) if any(c in arg for c in "*?[") else [ROOT / arg]
            hits = [h / "results.json" if h.is_dir() else h for h in hits]
            missing = [h for h in hits if not h.is_file()]
            if not hits or missing:
                raise self._error(f"no such results: {arg}")
            out += hits
        return out

    def _methods(self):
        m = self.options.get("methods")
        return [s.strip() for s in m.split(",")] if m else None

    # -- paper 000: best over γ, one metric, data sets × methods -------------------------------------------

    def _paper_000(self, files, paper_csv):
        from bigclust.pipeline.methods import in_paper, label
        from bigclust.report.compare import best_over_params, read_paper_tables
        metric = self.options.get("table", "acc_avg")
        records = [r for f in files for r in json.loads(f.read_text())]
        ours, paper = best_over_params(records), read_paper_tables(paper_csv)
        names = self._methods() or in_paper("000")
        rows = []   # two rows per data set, ours then the paper's, so that every cell stays one short number
        for d in sorted({d for d, _ in ours}):
            rows.append([d] + [_fmt(ours.get((d, m), {}).get(metric)) for m in names])
            if any((metric, d, m) in paper for m in names):
                rows.append(["  paper"] + [_fmt(paper.get((metric, d, m))) for m in names])
        return _table(["data set"] + [label(m) for m in names], rows, [14] + [8] * len(names))

    # -- paper 001: NMI (max) per method, averaged over k, ours / paper ----------------------------------

    def _paper_001(self, files, paper_csv):
        from bigclust.pipeline.methods import paper_name
        dataset, kernel = self.options.get("dataset"), self.options.get("kernel", "none")
        with open(paper_csv) as f:
            paper = {(r["dataset"], r["kernel"], r["method"], r["k"]): float(r["value"])
                     for r in csv.DictReader(ln for ln in f if not ln.startswith("#"))}
        ours = {}
        for f in files:
            for r in json.loads(f.read_text()):
                k_of = "cosine2" if r["params"].get("kind") == "cosine2" else "none"
                name = paper_name("001", r)
                if "nmi_by_k" in r and name and k_of == kernel and (dataset is None or r["dataset"] == dataset):
                    ours[name] = r
        if not ours:
            raise self._error(f"no subset-protocol results for {dataset} ({kernel})")
        order = [n for n in dict.fromkeys(m for (_, kn, m, _) in paper if kn == kernel) if n in ours]
        ks = [k for k in map(str, range(2, 11)) if k in {str(j) for j in ours[order[0]]["nmi_by_k"]}]
        by_k = "by-k" in self.options
        if by_k:   # ours − paper per k: the pattern over k in one row per method
            header = ["method"] + [f"k = {k}" for k in ks] + ["average"]
        else:
            header = ["method", "NMI ours", "NMI paper", "ours − paper", "ACC ours"]
        rows = []
        for n in order:
            r = ours[n]
            nmi = {str(k): v for k, v in r["nmi_by_k"].items()}
            got = [paper.get((r["dataset"], kernel, n, k)) for k in ks]
            # the paper's average is over k = 2..10; over fewer k it is recomputed from its own cells
            p = paper.get((r["dataset"], kernel, n, "avg")) if len(ks) == 9 else (
                None if None in got else sum(got) / len(got))
            if by_k:
                rows.append([n] + ["–" if q is None else _diff(nmi[k] - q, 2) for k, q in zip(ks, got)]
                            + ["–" if p is None else _diff(r["nmi_avg"] - p, 3)])
            else:
                rows.append([n, _fmt(r["nmi_avg"]), _fmt(p), "–" if p is None else _diff(r["nmi_avg"] - p, 3),
                             _fmt(r["acc_avg"])])
        return _table(header, rows)

    # -- paper 002: error and NMI in %, mean ± std over the trials ----------------------------------------

    def _paper_002(self, files, paper_csv):
        import warnings

        from bigclust.report.compare import ours_by_cell, read_paper_002
        table = self.options.get("table")
        prefix, methods = self.options.get("setting", ""), self._methods()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # mixed-k cells are left out, as compare says
            ours = ours_by_cell([str(f) for f in files])
        paper = read_paper_002(paper_csv)
        cells = dict.fromkeys((d, s, m) for (t, d, s, m, _) in paper if str(t) == table)
        rows = []
        for d, s, m in cells:
            if not s.startswith(prefix) or (methods and m not in methods) or (d, s, m) not in ours:
                continue
            o = ours[(d, s, m)]
            row = [s or "–", m]
            for metric in ("err", "nmi"):
                mean, std, n = o[metric]
                p = paper.get((table, d, s, m, metric))
                row.append(f"{mean:.2f} ± {std:.2f}" if n > 1 else f"{mean:.2f} (1 trial)")
                row.append("–" if p is None else f"{p[0]:.2f}" + ("" if p[1] is None else f" ± {p[1]:.2f}")
                           + ("*" if p[2] else ""))
            rows.append(row)
        if not rows:
            raise self._error(f"no result matches table {table} (setting {prefix!r}, methods {methods})")
        trials = sorted({ours[c]["err"][2] for c in cells if c in ours})
        head = ["setting", "method", "err ours", "err paper", "NMI ours", "NMI paper"]
        widths = [16, 9, 12, 12, 12, 12]
        if all(r[0] == "–" for r in rows):   # one setting (Table 1): no column for it
            head, rows, widths = head[1:], [r[1:] for r in rows], widths[1:]
        node = _table(head, rows, widths)
        caption = nodes.paragraph(text=f"Error and NMI in %, mean ± std over {' or '.join(map(str, trials))} "
                                       "trials; * a cell garbled in the paper's extracted text.",
                                  classes=["reproduction-caption"])
        container = nodes.container()
        container += [node, caption]
        return container

    # -- no paper: the runs' own records, or bench scale's curve --------------------------------------------

    def _records(self, files):
        from bigclust.pipeline.methods import label, paper_name
        cols = [c.strip() for c in self.options.get("columns", "method,n,acc_best_inertia,nmi_best_inertia"
                                                     ).split(",")]
        rows = []
        for f in files:
            for r in json.loads(f.read_text()):
                if self._methods() and r["method"] not in self._methods():
                    continue
                name = paper_name("001", r) if "nmi_by_k" in r else paper_name("002", r)
                name = name[1] if isinstance(name, tuple) else name   # paper 002: (setting, name, k cell)
                rows.append([name or label(r["method"]) if c == "method" else _fmt(r.get(c)) for c in cols])
        return _table([HEADERS.get(c, c) for c in cols], rows)

    def _scale(self, d):
        n = d["n"]
        # 8 100 000 rows is "8.1M", not "8M"
        head = ["stage"] + [f"{x // 1000}k" if x < 10**6 else f"{x / 10**6:g}M" for x in n] + ["slope"]
        rows = [[STAGES[s]] + [f"{v:.1f}" for v in d["seconds"][s]] + [f"{d['slopes'][s]:.2f}"]
                for s in STAGES if s in d["seconds"]]
        rows.append(["total"] + [f"{v:.1f}" for v in d["total_seconds"]] + [""])
        peak = {i: max(v[i] for v in d["peak_rss_bytes"].values()) for i in range(len(n))}
        rows.append(["peak RSS, GB"] + [f"{peak[i] / 1e9:.2f}" for i in range(len(n))] + [""])
        recall = d.get("knn_recall_at_10") or []   # absent from a scale.json written before it was measured
        if any(v is not None for v in recall):
            sample = next((v for v in d.get("knn_recall_sample", []) if v is not None), "?")
            rows.append([f"kNN recall@10 ({sample} rows)"] + ["" if v is None else f"{v:.4f}" for v in recall] + [""])
        for m, name in (("sk", "SK"), ("bbs_dual", "BBS")):
            rows.append([f"{name} ACC / NMI"] + [f"{d['scores'][str(x)][m]['acc']:.2f} / "
                                                 f"{d['scores'][str(x)][m]['nmi']:.2f}" for x in n] + [""])
        return _table(head, rows)


def setup(app):
    app.add_directive("reproduction-table", ReproductionTable)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
