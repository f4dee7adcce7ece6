"""``bigclust bench subspace``: the per-column SSC ADMM against references, Ak-SSC on COIL-20 end to end.

Everything is measured in this run (ratios from one run; the machine may be loaded):

* ADMM throughput (columns/s) of the Numba kernel
  (:func:`bigclust.subspace.selfexpr.admm_knn`, ``prange`` over columns) on
  ``n`` columns of a synthetic union of subspaces (k atoms of dimension d per
  column), against

  - :func:`numpy_admm`, the kernel's algorithm written as a plain NumPy loop
    (one column at a time, the same cached inverse of ``G + rho I`` applied as
    one mat-vec per iteration, the same over-relaxation, residual balancing and
    stopping tests -- what one would write without Numba, nothing deliberately
    slow), and
  - scikit-learn's ``Lasso`` (coordinate descent, ``alpha = lam / d`` because
    it scales the loss by 1 / (2 n_samples)),

  all three solving the same columns to tight tolerances, so their solutions
  agree to 1e-6 (the largest differences are reported).  The references run on
  ``n_ref`` of the columns and are compared per column.
* The FLOP floor: ``columns_per_second`` against ``flop_floor_columns_per_second``, the
  columns per second if every FLOP of the column (:data:`FLOP_MODEL`) ran at the dgemm rate of
  the kernel's own Gram product measured on the same threads in the same run
  (``floor_ratio``, interleaved with the kernel's runs so that both see the same load).
  ``columns_per_cpu_second``, ``flop_floor_columns_per_cpu_second``, ``floor_ratio_cpu`` and
  ``admm_speedup_vs_numpy_cpu`` give the same figures in CPU seconds, which a loaded machine moves
  far less; the ``*_one_thread`` keys the kernel and the dgemm on one thread (:func:`one_thread_floor`).
* ``coil20_seconds``: Ak-SSC on COIL-20 end to end (1440 images, flip + 5
  rotations + 5 scalings = 11 augmentations, kNN dictionary, ADMM, fold
  back, Ncut, embedding, 20 k-means restarts), after a warm-up that loads the
  compiled kernels; with its error rate and NMI.

Every regulariser x augmentation on COIL-20 as a table (median and range over
seeds; never asserted in tests, timings are noisy)::

    python -m bigclust.bench.subspace coil20 [--reg l1,l2,nuclear --aug none,coil20 --repeats 3 --svt gram]
"""
from __future__ import annotations

import argparse
import os
import warnings

import numpy as np

from bigclust.bench._measure import load_avg, machine, timed


def subspace_data(n, d, n_sub=10, dim=8, noise=0.05, seed=0):
    """``n`` samples near ``n_sub`` random ``dim``-dimensional subspaces of R^d, and their labels."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_sub
    bases = [np.linalg.qr(rng.standard_normal((d, dim)))[0] for _ in range(n_sub)]
    X = np.stack([bases[c] @ rng.standard_normal(dim) for c in y]) + noise * rng.standard_normal((n, d))
    return X, y


def numpy_admm(A, x, lam, rho, eps_abs, eps_rel, max_iter, relax, balance=30.0):
    """One column of the kernel's ADMM in plain NumPy (see the module docstring).

    ``balance`` is the kernel's residual-balancing factor (``_numba.BALANCE``; a test keeps them equal).
    Returns (z, iterations, factorisations), the last the number of distinct penalties factorised.
    """
    k = A.shape[1]
    G = A.T @ A
    b = A.T @ x
    inverses = {rho: np.linalg.inv(G + rho * np.eye(k))}     # the kernel's cache of one inverse per rho
    Minv = inverses[rho]
    z = np.zeros(k)
    u = np.zeros(k)
    sk = np.sqrt(k)
    for it in range(1, max_iter + 1):
        c = Minv @ (b + rho * z - u)
        zp = z
        ch = relax * c + (1.0 - relax) * zp
        v = ch + u / rho
        z = np.sign(v) * np.maximum(np.abs(v) - lam / rho, 0.0)
        u = u + rho * (ch - z)
        r = np.linalg.norm(c - z)
        s = rho * np.linalg.norm(z - zp)
        if r <= sk * eps_abs + eps_rel * max(np.linalg.norm(c), np.linalg.norm(z)) and \
                s <= sk * eps_abs + eps_rel * np.linalg.norm(u):
            break
        if it % 10 == 0 and (r > balance * s or s > balance * r):
            rho = rho * 2.0 if r > balance * s else rho * 0.5
            if rho not in inverses:
                inverses[rho] = np.linalg.inv(G + rho * np.eye(k))
            Minv = inverses[rho]
    return z, it, len(inverses)


def flops_per_column(k, d, iterations, factorisations):
    """The FLOP model of one column (returned with its terms; ``bench_admm`` states it in its JSON)."""
    terms = {"gram": 2 * k * k * d + 2 * k * d, "factorisations": factorisations * k ** 3 / 3,
             "iterations": iterations * (2 * k * k + 12 * k)}
    return sum(terms.values()), terms


FLOP_MODEL = ("per column: 2 k^2 d + 2 k d (the Gram matrix A A^T as one dgemm and A x) + F k^3/3 (one "
              "Cholesky-size factorisation per distinct rho; the kernel's inverse from the Cholesky factor does "
              "k^3, counted at k^3/3 so the floor is the cheapest factorisation's) + I (2 k^2 + 12 k) (per "
              "iteration one k x k mat-vec and the fused pass, counted at 12 flops per entry of its ~24, which "
              "keeps the floor on the high side); I is the kernel's mean over "
              "the columns, F the NumPy loop's (the same algorithm) over its n_ref columns; floor = (dgemm FLOP/s "
              "on (k, d) x (d, k) products, one per task of a prange loop over the same threads as the kernel; "
              "OpenBLAS runs a product of k^2 d < 262144 multiply-adds on its calling thread, as the kernel's "
              "Gram: larger --k / --d may let it start threads of its own) / FLOPs per column")


def _gemm_tasks_kernel():
    from numba import prange

    from bigclust._util.jit import njit

    @njit(parallel=True)
    def gemm_tasks(A, reps, out):
        """``reps`` products ``A[t] A[t]^T`` per task t in ``prange`` (the kernel's Gram shape and threads)."""
        for t in prange(A.shape[0]):
            for _ in range(reps):
                np.dot(A[t], A[t].T, out[t])
    return gemm_tasks


def dgemm_rate(k, d, tasks=None, reps=20):
    """A callable that runs the dgemm of the kernel's shape on every Numba thread, and its FLOP count."""
    import numba
    tasks = tasks or 64 * numba.get_num_threads()
    A = np.random.default_rng(0).standard_normal((tasks, k, d))
    out = np.empty((tasks, k, k))
    kern = _gemm_tasks_kernel()
    kern(A[:1], 1, out[:1])                    # compile outside any timing
    return (lambda: kern(A, reps, out)), 2.0 * k * k * d * tasks * reps


def bench_admm(n=5000, k=50, d=100, repeats=3, n_ref=300, eps=1e-9, relax=None):
    """Per-column SSC ADMM: Numba vs the NumPy loop vs scikit-learn's Lasso, and vs the dgemm floor (flat dict)."""
    from sklearn.linear_model import Lasso

    from bigclust.subspace import build_dictionary, knn_dictionary, ssc_lambda
    from bigclust.subspace.selfexpr import EPS_ABS, EPS_REL, MAX_ITER, RELAX, RHO_L1, admm_knn

    relax = RELAX if relax is None else float(relax)
    X, _ = subspace_data(n, d)
    D = build_dictionary(X)
    nb = knn_dictionary(D, k)
    lam = ssc_lambda(None, D, nb)
    Xs = D.atoms[:n]
    thr = np.full(nb.shape, lam)

    def admm(eps_abs, eps_rel, max_iter, cols=slice(None)):
        return admm_knn(Xs[cols], D.atoms, nb[cols], thr[cols], 0.0, RHO_L1, eps_abs, eps_rel, max_iter, True, relax)

    default = timed(lambda: admm(EPS_ABS, EPS_REL, MAX_ITER), repeats,
                    warmup=lambda: admm(eps, eps, 100000, slice(10)))  # compile / load the cache
    t_def, (_, it_def, _) = default.median, default.result
    gemm, gemm_flops = dgemm_rate(k, d)
    # the kernel and the dgemm of its shape interleaved: both see the same load
    runs = timed({"admm": lambda: admm(eps, eps, 100000), "gemm": gemm}, repeats)
    t_tight, (tight, it_tight, conv) = runs["admm"].median, runs["admm"].result
    sub = np.arange(0, n, max(1, n // n_ref))[:n_ref]
    np_run = timed(lambda: [numpy_admm(D.atoms[nb[i]].T, Xs[i], lam, RHO_L1, eps, eps, 100000, relax)
                            for i in sub], repeats)
    sk_run = timed(lambda: [Lasso(alpha=lam / d, fit_intercept=False, tol=1e-12, max_iter=100000)
                            .fit(D.atoms[nb[i]].T, Xs[i]).coef_ for i in sub], repeats)
    (t_np, out_np), (t_sk, out_sk) = (np_run.median, [o[0] for o in np_run.result]), (sk_run.median, sk_run.result)
    cps = n / t_tight
    np_cps, sk_cps = sub.size / t_np, sub.size / t_sk
    n_fact = float(np.mean([o[2] for o in np_run.result]))     # the same algorithm: the kernel's count, to rounding
    flops, terms = flops_per_column(k, d, float(it_tight.mean()), n_fact)
    rate = gemm_flops / runs["gemm"].median
    # the same ratios in CPU seconds (all threads of this process): on a loaded machine the wall time of a
    # 2-thread kernel depends on how many cores the scheduler gives it, its CPU time far less
    cpu_cps, np_cpu_cps = n / runs["admm"].cpu, sub.size / np_run.cpu
    cpu_floor = gemm_flops / runs["gemm"].cpu / flops
    one = one_thread_floor(lambda: admm(eps, eps, 100000), k, d, repeats)
    return {"n": n, "k": k, "d": d, "repeats": repeats, "n_ref": int(sub.size), "lam": lam, "relax": relax,
            "tight_tol": eps, "columns_per_second": cps, "numba_columns_per_s": cps,
            "flop_floor_columns_per_second": rate / flops, "floor_ratio": cps / (rate / flops),
            "flop_model": FLOP_MODEL, "flops_per_column": flops, "flops_per_column_terms": terms,
            "dgemm_gflops": rate / 1e9, "dgemm_shape": f"({k}, {d}) x ({d}, {k})",
            "numba_mean_iterations": float(it_tight.mean()), "mean_factorisations": n_fact,
            "numba_median_iterations": float(np.median(it_tight)), "numba_all_converged": bool(conv.all()),
            "numba_default_tol_columns_per_s": n / t_def, "numba_default_tol_median_iterations":
                float(np.median(it_def)),
            "numpy_columns_per_s": np_cps, "sklearn_lasso_columns_per_s": sk_cps,
            "numba_seconds_median": t_tight, "numpy_seconds_median": t_np, "sklearn_seconds_median": t_sk,
            "max_abs_diff_numpy": float(max(np.abs(o - tight[i]).max() for o, i in zip(out_np, sub))),
            "max_abs_diff_sklearn": float(max(np.abs(o - tight[i]).max() for o, i in zip(out_sk, sub))),
            "admm_speedup_vs_numpy": cps / np_cps, "admm_speedup_vs_sklearn_lasso": cps / sk_cps,
            "columns_per_cpu_second": cpu_cps, "flop_floor_columns_per_cpu_second": cpu_floor,
            "floor_ratio_cpu": cpu_cps / cpu_floor, "admm_speedup_vs_numpy_cpu": cpu_cps / np_cpu_cps,
            "columns_per_second_one_thread": n / one["admm"], "dgemm_gflops_one_thread": one["gflops"],
            "floor_ratio_one_thread": n / one["admm"] / (one["gflops"] * 1e9 / flops),
            # the NumPy loop runs on one thread anyway (its products are k x k): its own run's rate
            "admm_speedup_vs_numpy_one_thread": n / one["admm"] / np_cps}


def one_thread_floor(kernel, k, d, repeats):
    """The kernel and the dgemm of its shape on ONE Numba thread, interleaved: medians (s, GFLOP/s).

    Why beside the all-threads ratio: on a host whose logical CPUs share a core's load ports (SMT, or
    a VM's vCPUs placed on sibling threads) a second thread adds far less to the kernel's small,
    load-bound mat-vecs than to a register-blocked dgemm, so the all-threads ratio measures the host's
    core sharing as much as the kernel; the one-thread ratio is the kernel's efficiency on one core.
    """
    import numba
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        gemm, gemm_flops = dgemm_rate(k, d, tasks=64)
        runs = timed({"admm": kernel, "gemm": gemm}, repeats)
    finally:
        numba.set_num_threads(threads)
    return {"admm": runs["admm"].median, "gflops": gemm_flops / runs["gemm"].median / 1e9}


def load_coil20():
    """COIL-20 (fea 1440 x 1024, gnd) from ``$BIGCLUST_DATA/coil20/COIL20.mat``, or None when absent."""
    import scipy.io
    root = os.environ.get("BIGCLUST_DATA")
    path = os.path.join(root, "coil20", "COIL20.mat") if root else None
    if not path or not os.path.exists(path):
        return None
    m = scipy.io.loadmat(path)
    return np.asarray(m["fea"], dtype=np.float64), np.asarray(m["gnd"]).ravel()


def coil20_runs(X, y, repeats=1, regularizer="l1", augment="coil20", n_neighbors=10, n_init=20,
                **solver_options):
    """Ak-SC (kNN-SC without ``augment``) on COIL-20 with seeds 0..repeats-1; kept: (error %, NMI %) per seed."""
    from bigclust.algo.metrics import error_rate, nmi
    from bigclust.subspace import subspace_clustering

    def warmup():  # loads the compiled kernels
        subspace_clustering(X[:60], 2, n_neighbors=5, n_init=1, random_state=0, regularizer=regularizer)

    def run(seed):
        return subspace_clustering(X, 20, regularizer=regularizer, n_neighbors=n_neighbors, augment=augment,
                                   random_state=seed, n_init=n_init, **solver_options)[0]

    seeds = iter(range(repeats))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return timed(run, repeats, setup=lambda: next(seeds), warmup=warmup,
                     keep=lambda lab: (100 * error_rate(y, lab), 100 * nmi(y, lab, "sqrt")))


def bench_coil20(repeats=1, regularizer="l1", augment="coil20", n_neighbors=10, n_init=20):
    """Seconds (median over seeds 0..repeats-1), error rate and NMI of Ak-SC on COIL-20 end to end."""
    data = load_coil20()
    if data is None:
        return {"coil20_seconds": None, "coil20_skipped": "COIL-20 not found under $BIGCLUST_DATA/coil20"}
    X, y = data
    runs = coil20_runs(X, y, repeats, regularizer, augment, n_neighbors, n_init)
    r = np.array(runs.kept)
    return {"coil20_seconds": float(runs.median), "coil20_repeats": repeats,
            "coil20_err_percent": float(np.median(r[:, 0])), "coil20_nmi_percent": float(np.median(r[:, 1])),
            "coil20_n": int(X.shape[0]), "coil20_atoms": int(X.shape[0] * 12)}


def bench_subspace(n=5000, k=50, d=100, repeats=3, n_ref=300, coil20_repeats=1):
    """The ADMM comparison and Ak-SSC on COIL-20 (flat dict; the issue's keys are
    ``admm_speedup_vs_numpy``, ``admm_speedup_vs_sklearn_lasso`` and ``coil20_seconds``)."""
    out = {"machine": machine()}
    out.update(bench_admm(n=n, k=k, d=d, repeats=repeats, n_ref=n_ref))
    if coil20_repeats:
        out.update(bench_coil20(repeats=coil20_repeats))
    else:
        out.update(coil20_seconds=None, coil20_skipped="coil20_repeats = 0")
    out["load_avg_end"] = load_avg()[0]
    return out


def coil20_table(regs=("l1", "l2"), augs=(None, "coil20"), k=10, repeats=3, n_init=20, **solver_options):
    """Print time, error and NMI of every regulariser x augmentation on COIL-20 (median, range over seeds)."""
    data = load_coil20()
    if data is None:
        raise SystemExit("COIL-20 not found under $BIGCLUST_DATA/coil20")
    X, y = data
    print(f"COIL-20 {X.shape}, k={k}, n_init={n_init}, median (min..max) of {repeats} seeds; "
          f"uptime: {os.getloadavg()}")
    for reg in regs:
        for aug in augs:
            runs = coil20_runs(X, y, repeats, reg, aug, k, n_init, **(solver_options if reg == "nuclear" else {}))
            r = np.array(runs.kept)
            name = ("Ak-" if aug else "kNN-") + {"l1": "SSC", "l2": "LSR", "nuclear": "LRR"}[reg]
            print(f"  {name:8s} time {runs.median:7.2f} s   err {np.median(r[:, 0]):6.2f} % "
                  f"({r[:, 0].min():.2f}..{r[:, 0].max():.2f})   NMI {np.median(r[:, 1]):6.2f} "
                  f"({r[:, 1].min():.2f}..{r[:, 1].max():.2f})", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bigclust.bench.subspace")
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
