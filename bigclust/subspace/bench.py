"""Measurements of the subspace family, script form (never asserted in tests: timings are noisy).

    python -m bigclust.subspace.bench coil20 [--reg l1,l2,nuclear --aug none,coil20 --repeats 3 --svt gram]

Prints time, error and NMI of every regulariser x augmentation on COIL-20
(median and range over seeds 0..repeats-1).  The ADMM throughput is
``bigclust bench subspace`` (:mod:`bigclust.bench.subspace`).
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np


def coil20_table(regs=("l1", "l2"), augs=(None, "coil20"), k=10, repeats=3, n_init=20, **solver_options):
    from bigclust.bench.subspace import load_coil20
    from bigclust.algo.metrics import error_rate, nmi
    from bigclust.subspace import subspace_clustering

    X, y = load_coil20()
    subspace_clustering(X[:60], 2, n_neighbors=5, n_init=1, random_state=0)          # compile / load cache
    print(f"COIL-20 {X.shape}, k={k}, n_init={n_init}, median (min..max) of {repeats} seeds; "
          f"uptime: {os.getloadavg()}")
    for reg in regs:
        for aug in augs:
            res = []
            for seed in range(repeats):
                t = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    lab, _ = subspace_clustering(X, 20, regularizer=reg, n_neighbors=k, augment=aug,
                                                 random_state=seed, n_init=n_init,
                                                 **(solver_options if reg == "nuclear" else {}))
                res.append((time.perf_counter() - t, 100 * error_rate(y, lab), 100 * nmi(y, lab, "sqrt")))
            r = np.array(res)
            name = ("Ak-" if aug else "kNN-") + {"l1": "SSC", "l2": "LSR", "nuclear": "LRR"}[reg]
            print(f"  {name:8s} time {np.median(r[:, 0]):7.2f} s   err {np.median(r[:, 1]):6.2f} % "
                  f"({r[:, 1].min():.2f}..{r[:, 1].max():.2f})   NMI {np.median(r[:, 2]):6.2f} "
                  f"({r[:, 2].min():.2f}..{r[:, 2].max():.2f})", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bigclust.subspace.bench")
    p.add_argument("what", choices=["coil20"])
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--reg", default="l1,l2")
    p.add_argument("--aug", default="none,coil20")
    p.add_argument("--svt", default="exact", help="LRR's SVT: exact, gram or randomized")
    p.add_argument("--tol", type=float, default=1e-7, help="LRR's stopping tolerance")
    a = p.parse_args(argv)
    augs = tuple(None if v == "none" else v for v in a.aug.split(","))
    coil20_table(tuple(a.reg.split(",")), augs, a.k, a.repeats, svt_method=a.svt, tol=a.tol)


if __name__ == "__main__":
    main()
