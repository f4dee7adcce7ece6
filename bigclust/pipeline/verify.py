"""``bigclust report verify``: re-run a committed reproduction from scratch and compare every score to the bit.

Lives beside the runner (it runs a config); the report it checks is :mod:`bigclust.report.tables`, whose
:func:`~bigclust.report.tables.numerics` says what the last bits depend on besides the code and the data.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bigclust.pipeline.runner import run
from bigclust.report.tables import numerics_text, numerics


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
        # keys an older run.json lacks are taken from here, except the CPU: a record that names none claims none
        then = {**{k: v for k, v in here.items() if k != "numba_cpu"}, **then}
        cpu = f"NUMBA_CPU_NAME={then['numba_cpu']} " if then.get("numba_cpu") else ""
        lines.append(f"Numerics here: {numerics_text(here)}; when the results were made: {numerics_text(then)}. "
                     "Bits are only comparable under the same: re-run with "
                     f"OPENBLAS_CORETYPE={then['blas'][0].split()[-1] if then['blas'] else '?'} "
                     f"OPENBLAS_NUM_THREADS={then['blas_threads']} NUMBA_NUM_THREADS={then['numba_threads']} {cpu}"
                     "(on a CPU that has that kernel)")
    return ok, "\n".join(lines)
