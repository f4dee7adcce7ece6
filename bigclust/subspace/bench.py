"""Measurements of the subspace family (never asserted in tests: timings are noisy).

    python -m bigclust.subspace.bench admm   [--n 5000 --k 50 --d 100 --repeats 3]
    python -m bigclust.subspace.bench coil20 [--path .../COIL20.mat --k 10 --reg l1,l2 --repeats 3]

``admm``: per-column SSC ADMM throughput (columns/s) of the Numba kernel
against the same ADMM written as a plain NumPy loop (cached Cholesky,
``scipy.linalg.cho_solve``) and scikit-learn's ``Lasso`` (coordinate
descent, ``alpha = lam / d``), all three solving the same columns to
tolerances tight enough that their solutions agree to 1e-6 (checked and
printed).  The slow references run on a subset and are reported per column.

``coil20``: Ak-SC end to end on COIL-20 (1440 images 32x32, column-major,
flip + 5 rotations + 5 scalings = 11 augmentations): seconds, error rate and
NMI, with kNN-SC (no augmentation) for comparison.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _subspace_data(n, d, n_sub=10, dim=8, noise=0.05, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_sub
    bases = [np.linalg.qr(rng.standard_normal((d, dim)))[0] for _ in range(n_sub)]
    X = np.stack([bases[c] @ rng.standard_normal(dim) for c in y]) + noise * rng.standard_normal((n, d))
    return X, y


def _numpy_admm(A, x, lam, rho, eps_abs, eps_rel, max_iter):
    """The kernel's algorithm (residual balancing included) in plain NumPy, one column."""
    from scipy.linalg import cho_factor, cho_solve
    k = A.shape[1]
    G = A.T @ A
    b = A.T @ x
    fac = cho_factor(G + rho * np.eye(k))
    z = np.zeros(k)
    u = np.zeros(k)
    for it in range(1, max_iter + 1):
        c = cho_solve(fac, b + rho * z - u)
        zp = z
        v = c + u / rho
        z = np.sign(v) * np.maximum(np.abs(v) - lam / rho, 0.0)
        u = u + rho * (c - z)
        r = np.linalg.norm(c - z)
        s = rho * np.linalg.norm(z - zp)
        if r <= np.sqrt(k) * eps_abs + eps_rel * max(np.linalg.norm(c), np.linalg.norm(z)) and \
                s <= np.sqrt(k) * eps_abs + eps_rel * np.linalg.norm(u):
            break
        if it % 10 == 0 and (r > 10 * s or s > 10 * r):
            rho = rho * 2.0 if r > 10 * s else rho * 0.5
            fac = cho_factor(G + rho * np.eye(k))
    return z, it


def bench_admm(n=5000, k=50, d=100, repeats=3, n_ref=300, eps=1e-9):
    from sklearn.linear_model import Lasso

    from . import build_dictionary, knn_dictionary, ssc_lambda
    from .selfexpr import RHO_L1 as RHO
    from .selfexpr import admm_knn

    X, _ = _subspace_data(n, d)
    D = build_dictionary(X)
    nb = knn_dictionary(D, k)
    lam = ssc_lambda(None, D, nb)
    Xs = D.atoms[:n]
    thr = np.full(nb.shape, lam)
    admm_knn(Xs[:10], D.atoms, nb[:10], thr[:10], 0.0, RHO, eps, eps, 100000)      # compile / load cache
    rows = {}
    for tag, e in (("numba default tol (1e-6 abs, 1e-5 rel)", None), (f"numba tight tol ({eps:g})", eps)):
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            if e is None:
                coef, its, conv = admm_knn(Xs, D.atoms, nb, thr, 0.0, RHO, 1e-6, 1e-5, 5000)
            else:
                coef, its, conv = admm_knn(Xs, D.atoms, nb, thr, 0.0, RHO, e, e, 100000)
            ts.append(time.perf_counter() - t)
        rows[tag] = (n / np.median(ts), np.median(ts), float(np.median(its)), coef)
    tight = rows[f"numba tight tol ({eps:g})"][3]
    sub = np.arange(0, n, max(1, n // n_ref))[:n_ref]
    # NumPy loop
    ts, errs = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        out = [_numpy_admm(D.atoms[nb[i]].T, Xs[i], lam, RHO, eps, eps, 100000)[0] for i in sub]
        ts.append(time.perf_counter() - t)
    errs.append(max(np.abs(o - tight[i]).max() for o, i in zip(out, sub)))
    rows["numpy loop, same ADMM (tight tol)"] = (sub.size / np.median(ts), np.median(ts), None, errs[-1])
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = [Lasso(alpha=lam / d, fit_intercept=False, tol=1e-12, max_iter=100000).fit(D.atoms[nb[i]].T, Xs[i]).coef_
               for i in sub]
        ts.append(time.perf_counter() - t)
    lasso_err = max(np.abs(o - tight[i]).max() for o, i in zip(out, sub))
    rows["sklearn Lasso (tol 1e-12)"] = (sub.size / np.median(ts), np.median(ts), None, lasso_err)
    print(f"per-column SSC ADMM: n={n} columns, k={k} atoms, d={d}, lam={lam:.4g}, median of {repeats}; "
          f"uptime: {os.getloadavg()}")
    for tag, (cps, sec, it, extra) in rows.items():
        cols = n if tag.startswith("numba") else sub.size
        msg = f"  {tag:44s} {cps:12.0f} columns/s  ({sec:.3f} s for {cols} columns"
        msg += f", median {it:.0f} iterations)" if it is not None else f"; max |diff| to numba tight = {extra:.1e})"
        print(msg)


def bench_coil20(path, k=10, regs=("l1", "l2"), repeats=3, n_init=20, augs=(None, "coil20"), **solver_options):
    import scipy.io

    from ..metrics import error_rate, nmi
    from . import subspace_clustering

    m = scipy.io.loadmat(path)
    X = np.asarray(m["fea"], dtype=np.float64)
    y = np.asarray(m["gnd"]).ravel()
    subspace_clustering(X[:60], 2, n_neighbors=5, n_init=1, random_state=0)          # compile / load cache
    print(f"COIL-20 {X.shape}, k={k}, n_init={n_init}, median (min..max) of {repeats} seeds; "
          f"uptime: {os.getloadavg()}")
    import warnings
    for reg in regs:
        for aug in augs:
            res = []
            for seed in range(repeats):
                t = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    lab, W = subspace_clustering(X, 20, regularizer=reg, n_neighbors=k, augment=aug,
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
    p.add_argument("what", choices=["admm", "coil20"])
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--k", type=int, default=None)
    p.add_argument("--d", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--reg", default="l1,l2")
    p.add_argument("--aug", default="none,coil20")
    p.add_argument("--svt", default="exact", help="LRR's SVT: exact, gram or randomized")
    p.add_argument("--tol", type=float, default=1e-7, help="LRR's stopping tolerance")
    p.add_argument("--path", default=os.path.join(os.environ.get("BIGCLUST_DATA", "data"),
                                                  "coil20", "COIL20.mat"))
    a = p.parse_args(argv)
    if a.what == "admm":
        bench_admm(a.n, a.k or 50, a.d, a.repeats)
    else:
        augs = tuple(None if v == "none" else v for v in a.aug.split(","))
        bench_coil20(a.path, a.k or 10, tuple(a.reg.split(",")), a.repeats, augs=augs, svt_method=a.svt, tol=a.tol)


if __name__ == "__main__":
    main()
