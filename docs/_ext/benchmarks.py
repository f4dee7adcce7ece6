"""The benchmark pages' tables and plots, made at build time from the committed measurements.

``.. bigclust-bench:: PATH`` (PATH relative to the repository root) reads one JSON file and writes what the
command measured, the machine and its load, a table and a bar or log-log plot.  Two kinds of file:

- the JSON a ``bigclust bench ... --json`` command printed (it has a ``"bench"`` key: ``bbs``, ``ooc`` and
  ``scale`` are read as they are);
- a summary of a bench run whose figures are kept in a README (``"columns"``, ``"rows"``, ``"plot"``, and
  ``"machine"``, ``"load"``, ``"source"`` naming where they were published).

The plots go to ``docs/benchmarks/_generated/`` (not committed).
"""
from __future__ import annotations

import json
from pathlib import Path

from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from docutils import nodes
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "_generated"


def _cell(v) -> str:
    s = str(v)
    return s.replace("*", r"\*").replace("|", r"\|").replace("@", r"\@") if s else " "


def _table(columns, rows) -> list[str]:
    out = [".. list-table::", "   :header-rows: 1", "   :class: bench-table", ""]
    for r in [columns] + rows:
        out.append(f"   * - {_cell(r[0])}")
        out += [f"     - {_cell(c)}" for c in r[1:]]
    return out + [""]


def _bar(path: Path, plot: dict):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.0, 2.6), constrained_layout=True)
    labels, values = plot["labels"], plot["values"]
    ax.barh(range(len(values)), values, color=["#1f77b4"] + ["#9aa5b1"] * (len(values) - 1))
    ax.set_yticks(range(len(values)), labels)
    ax.invert_yaxis()
    if plot.get("log"):
        ax.set_xscale("log")
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:g}", va="center", fontsize=8)
    ax.set_xlabel(plot.get("ylabel", ""))
    ax.set_title(plot.get("title", ""), fontsize=10)
    ax.margins(x=0.18)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _scale_plot(path: Path, d: dict):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = d["n"]
    fig, ax = plt.subplots(figsize=(6.4, 3.6), constrained_layout=True)
    for stage, secs in d["seconds"].items():
        if stage == "report":
            continue
        ax.loglog(n, secs, marker="o", ms=3, label=f"{stage} (slope {d['slopes'][stage]:.2f})")
    ax.loglog(n, d["total_seconds"], "k-", lw=2, label="total")
    ax.set_xlabel("n (points)")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=7, ncols=2)
    ax.set_title("seconds per stage against n (log-log)", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _machine(d: dict) -> tuple[str, str]:
    m = f"{d.get('cpu', '?')}, {d.get('logical_cores', '?')} cores, {d.get('ram_gb', '?')} GB RAM"
    load = f"load average {d.get('load_avg_1min', '?')} at the start"
    if "load_avg_1min_now" in d:
        load += f", {d['load_avg_1min_now']} at the end"
    return m, load


def _from_bench(d: dict, name: str) -> tuple[dict, dict | None]:
    """A raw ``--json`` output as the summary form (columns, rows, plot)."""
    machine, load = _machine(d)
    s = {"machine": machine, "load": load, "command": f"bigclust bench {d['bench']} --json"}
    if d["bench"] == "bbs":
        s.update(what=f"Alg. 1 (BBS, alternating) and SK iterations on a dense {d['n']} × {d['n']} {d['dtype']} "
                      f"kernel ({d['data']}; {d['kernel']}), against plain NumPy and the machine's memory "
                      f"bandwidth; the exact dual solver against Dykstra to row error {d['tol']:g}.",
                 repeats=f"{d['repeats']} repeats of {d['iters']} iterations, medians; {d['timing']}",
                 columns=["measure", "bigclust", "reference", "ratio"],
                 rows=[["BBS Alg. 1, seconds per iteration", f"{d['seconds_per_iter']:.4f}",
                        f"{d['numpy_seconds_per_iter']:.4f} (NumPy)", f"{d['speedup_vs_numpy']:.1f}× faster"],
                       ["BBS Alg. 1, memory bandwidth", f"{d['bandwidth_gbs']:.2f} GB/s",
                        f"{d['copy_bandwidth_gbs']:.2f} GB/s ({d['copy_reference']})",
                        f"{d['bandwidth_fraction']:.0%} of a copy"],
                       ["SK, seconds per iteration", f"{d['sk_seconds_per_iter']:.4f}",
                        f"{d['numpy_sk_seconds_per_iter']:.4f} (NumPy)", f"{d['sk_speedup_vs_numpy']:.2f}×"],
                       ["SK, memory bandwidth", f"{d['sk_bandwidth_gbs']:.2f} GB/s",
                        f"{d['read_bandwidth_gbs']:.2f} GB/s ({d['read_reference']})",
                        f"{d['sk_bandwidth_fraction']:.0%} of a read"],
                       [f"exact BBS to row error {d['tol']:g}",
                        f"dual: {d['dual_seconds']:.2f} s ({d['dual_newton_steps']} Newton steps)",
                        f"Dykstra: {d['dykstra_seconds']:.1f} s ({d['dykstra_iters']} iterations"
                        + (", stopped at its time cap)" if d.get("dykstra_lower_bound") else ")"),
                        ("≥ " if d.get("speedup_dual_vs_dykstra_is_lower_bound") else "")
                        + f"{d['speedup_dual_vs_dykstra']:.1f}× faster"]],
                 plot={"title": "speed-up of bigclust", "ylabel": "× faster", "labels":
                       ["BBS Alg. 1 vs NumPy", "SK vs NumPy", "BBS dual vs Dykstra"],
                       "values": [round(d["speedup_vs_numpy"], 2), round(d["sk_speedup_vs_numpy"], 2),
                                  round(d["speedup_dual_vs_dykstra"], 2)]})
        return s, None
    if d["bench"] == "ooc":
        gb = 1e9
        s.update(what=f"Out-of-core BBS (Alg. 1) on a dense {d['n']} × {d['n']} {d['dtype']} kernel kept in a zarr "
                      f"store ({d['data']}; {d['kernel']}): seconds per iteration and the process's peak RSS "
                      f"under --max-memory. {d.get('page_cache_note', '')}.",
                 repeats=f"{d['iters']} iterations",
                 columns=["measure", "value"],
                 rows=[["K and G in the store", f"{d['store_bytes_K_plus_G'] / gb:.2f} GB"],
                       ["max_memory", f"{d['max_memory_bytes'] / gb:.3f} GB"],
                       ["row blocks per pass", f"{d['n_blocks']} of {d['rows_per_block']} rows"],
                       ["seconds per iteration (median)", f"{d['seconds_per_iter']:.2f}"],
                       ["first iteration (K read, G written)", f"{d['seconds_first_iter_K_to_G']:.2f} s"],
                       ["I/O rate", f"{d['io_gbs']:.2f} GB/s"],
                       ["peak RSS", f"{d['peak_rss_bytes'] / gb:.2f} GB"],
                       ["peak RSS above the process before the run",
                        f"{d['peak_rss_increase_bytes'] / gb:.3f} GB "
                        f"({d['peak_rss_increase_over_budget']:.0%} of max_memory)"]],
                 plot={"title": "memory against the kernel's size", "ylabel": "GB",
                       "labels": ["K and G on disk", "max_memory", "peak RSS increase"],
                       "values": [round(d["store_bytes_K_plus_G"] / gb, 3), round(d["max_memory_bytes"] / gb, 3),
                                  round(d["peak_rss_increase_bytes"] / gb, 3)]})
        return s, None
    if d["bench"] == "scale":
        n = d["n"]
        rows = [[stage] + [f"{v:.1f}" for v in secs] + [f"{d['slopes'][stage]:.2f}"]
                for stage, secs in d["seconds"].items()]
        rows.append(["total"] + [f"{v:.1f}" for v in d["total_seconds"]] + [""])
        rows.append(["peak RSS, largest process (GB)"]
                    + [f"{max(v[i] for v in d['peak_rss_bytes'].values()) / 1e9:.2f}" for i in range(len(n))]
                    + [""])
        for method, label in (("sk", "SK"), ("bbs_dual", "BBS-dual")):
            rows.append([f"{label} ACC / NMI"] + [f"{d['scores'][str(x)][method]['acc']:.3f} / "
                                                   f"{d['scores'][str(x)][method]['nmi']:.3f}"
                                                   if str(x) in d["scores"] else "" for x in n] + [""])
        s.update(what=f"The kNN pipeline (ingest, PCA-50, kNN by {d['knn']['knn']}, SK and BBS-dual, k-means, "
                      f"report) on prefixes of mnist-1m, scheduler {d['scheduler']} with {d['n_workers']} workers; "
                      "seconds per stage and the log-log slope against n.",
                 repeats=f"{d['repeats']} repeat", columns=["stage"] + [f"{x:,}" for x in n] + ["slope"],
                 rows=rows)
        return s, d
    raise ValueError(f"no reader for bench {d['bench']!r}")


class Bench(SphinxDirective):
    """One benchmark: what, command, machine and load, a table and a plot."""

    required_arguments = 1
    option_spec = {"source": directives.unchanged, "command": directives.unchanged, "note": directives.unchanged}

    def run(self):
        path = ROOT / self.arguments[0]
        self.env.note_dependency(str(path))
        d = json.loads(path.read_text())
        name = path.stem if path.stem not in ("scale", "results") else d.get("bench", path.stem)
        s, raw = _from_bench(d, name) if "bench" in d else (d, None)
        OUT.mkdir(parents=True, exist_ok=True)
        png = OUT / f"{name}.png"
        if raw is not None:
            _scale_plot(png, raw)
        elif s.get("plot"):
            _bar(png, s["plot"])
        else:
            png = None
        source = self.options.get("source") or s.get("source") or self.arguments[0]
        command = self.options.get("command") or s["command"]
        load = s["load"] + (f"; {self.options['note']}" if "note" in self.options else "")
        lines = [s["what"], "", f"``{command}``", "",
                 f"| **machine** {s['machine']}", f"| **load** {load}"]
        if s.get("repeats"):
            lines.append(f"| **repeats** {s['repeats']}")
        lines += [f"| **figures from** ``{source}``", ""]
        lines += _table(s["columns"], s["rows"])
        if png is not None:
            lines += [f".. image:: /benchmarks/_generated/{png.name}", f"   :alt: {name}", "   :class: bench-plot", ""]
        node = nodes.container(classes=["bench"])
        self.state.nested_parse(StringList(lines, source=str(path)), self.content_offset, node)
        return [node]


def setup(app):
    app.add_directive("bigclust-bench", Bench)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
