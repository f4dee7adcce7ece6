"""``bigclust bench bbs``: in-memory BBS and Sinkhorn iterations against NumPy and the memory system; dual vs Dykstra.

Every number is measured in the run, with its references alongside (this
VM's speed drifts): the per-iteration kernels against plain sweeps over the
same bytes (:mod:`bigclust.bench._numba`) and against the obvious NumPy code,
then the dual Newton solver against Dykstra to the same row error.  Nothing is
estimated: a Dykstra run stopped by its cap is reported with a flag that says so.
"""
from __future__ import annotations

import statistics
import warnings

import numpy as np

from bigclust._util.errors import UserError
from bigclust.bench._data import load_points
from bigclust.bench._measure import GB, machine, timed


# -- NumPy references, written the obvious way ----------------------------------------------------


def numpy_alt_iteration(G):
    """One iteration of Alg. 1 with NumPy broadcasting (paper 000); returns the new G."""
    n = G.shape[0]
    r = G.sum(axis=1)
    S = r.sum()
    return np.maximum(G + (1 + S / n) / n - (r[:, None] + r[None, :]) / n, 0)


def numpy_sk_iteration(K, d):
    """One symmetric Sinkhorn iteration ``d <- sqrt(d / (K d))`` with NumPy (BLAS gemv)."""
    return np.sqrt(d / (K @ d))


# -- measuring ------------------------------------------------------------------------------------


def compile_kernels(dtype):
    """Run every kernel once on a tiny array of ``dtype`` so that no timing includes compilation."""
    from bigclust.bench import _numba as bn
    from bigclust.normalize import bbs, kernels

    nb = kernels()
    A = np.full((8, 8), 0.1, dtype=dtype)
    r, out = A.sum(axis=1, dtype=np.float64), np.empty(8)
    nb.bbs_alt_pass(A.copy(), r, r.sum(), 0, out)
    nb.sk_matvec_block(A, r, out)
    bn.copy_rows(A, A.copy())
    bn.touch_rows(A.copy())
    bn.sum_rows(A, out)
    # a dense and a sparse dual solution, so that both Jacobian paths of the Newton solver compile
    Y = np.random.default_rng(0).uniform(size=(64, 2))
    sparse = np.exp(-((Y[:, None] - Y[None]) ** 2).sum(-1) / 0.01).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for M in (np.full((8, 8), 1.0, dtype=dtype), sparse):
            for solver in ("dual", "dykstra"):
                bbs(M, solver, n_iter=3)


def _references(K):
    """Bandwidths (GB/s) of one run of each reference sweep over an array like K: ``({write}, {read})``.

    Write references (2 x K.nbytes moved): a numba parallel copy, np.copyto and
    an in-place ``a += 0``; read references (K.nbytes): numba parallel row
    sums and BLAS gemv ``K @ v``.
    """
    from bigclust.bench import _numba as bn

    A, B, out, v = K.copy(), np.empty_like(K), np.empty(K.shape[0]), np.ones(K.shape[0], dtype=K.dtype)
    np.copyto(B, A)  # page B in: first touches are not bandwidth
    write = timed({"numba parallel copy": lambda: bn.copy_rows(A, B), "np.copyto": lambda: np.copyto(B, A),
                   "numba parallel in-place a += 0": lambda: bn.touch_rows(B)})
    read = timed({"numba parallel row sums": lambda: bn.sum_rows(A, out), "BLAS gemv K @ v": lambda: A @ v})
    return ({k: 2 * K.nbytes / t.median / GB for k, t in write.items()},
            {k: K.nbytes / t.median / GB for k, t in read.items()})


def _contenders(K, iters):
    """The four timed loops of ``iters`` iterations each: ours and NumPy's, Alg. 1 and Sinkhorn."""
    from bigclust.normalize import kernels

    nb, n, dt = kernels(), K.shape[0], K.dtype

    def alt(state):
        G, r = state
        r_new = np.empty(n)
        for _ in range(iters):
            nb.bbs_alt_pass(G, r, r.sum(), 0, r_new)
            r, r_new = r_new, r
            float(np.abs(r - 1.0).max())  # the solver's per-iteration check, included
        return r

    def numpy_alt(G):
        for _ in range(iters):
            G = numpy_alt_iteration(G)

    def sk():
        d, Kd = np.ones(n), np.empty(n)
        for _ in range(iters):
            nb.sk_matvec_block(K, d, Kd)
            d = np.sqrt(d / Kd)

    def numpy_sk():
        d = np.ones(n, dtype=dt)
        for _ in range(iters):
            d = numpy_sk_iteration(K, d)

    fns = {"alt": alt, "np": numpy_alt, "sk": sk, "np_sk": numpy_sk}
    setups = {"alt": lambda: (K.copy(), K.sum(axis=1, dtype=np.float64)), "np": K.copy}  # Alg. 1 works in place
    return fns, setups


def bench_bbs(n=6000, dtype="float64", repeats=5, iters=20, max_dykstra_seconds=300.0, tol=1e-8):
    """In-memory BBS and Sinkhorn iterations against NumPy and the memory system; dual vs Dykstra.

    Returns a dict with (among others) ``seconds_per_iter``, ``bandwidth_gbs``,
    ``copy_bandwidth_gbs``, ``bandwidth_fraction``, ``numpy_seconds_per_iter``,
    ``speedup_vs_numpy``, the ``sk_*`` equivalents, ``dual_seconds``,
    ``dykstra_seconds`` and ``speedup_dual_vs_dykstra``.
    """
    from bigclust.algo.affinity import dense_kernel

    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise UserError(f"dtype must be float32 or float64, got {dtype}")
    if repeats < 1 or iters < 1 or n < 16:
        raise UserError("need repeats >= 1, iters >= 1 and n >= 16")
    X, _, data = load_points(n)
    K = np.ascontiguousarray(dense_kernel(X, "gaussian", 1.0, dtype=dt).compute(scheduler="threads"))
    K = ((K + K.T) / 2).astype(dt)  # exactly symmetric, as every solver assumes
    compile_kernels(dt)
    out = {**machine(), "bench": "bbs", "n": n, "dtype": dt.name, "repeats": repeats, "iters": iters,
           "data": data, "kernel": "gaussian, gamma = 1",
           "timing": "median over repeats of iters iterations each, compilation excluded"}
    fns, setups = _contenders(K, iters)
    # interleaved: every repeat times all contenders and references back to back, so that the
    # per-repeat ratios compare runs made under the same conditions (this VM's speed drifts); the
    # references' arrays live only during their own sweeps, so the contenders' memory is as in use
    rows = []
    for _ in range(repeats):
        wr, rd = _references(K)
        rows.append({**{k: t.median / iters for k, t in timed(fns, 1, setup=setups).items()},
                     **{("w", k): v for k, v in wr.items()}, **{("r", k): v for k, v in rd.items()}})
    med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
    wbest = max((k for k in med if k[0] == "w"), key=med.get)
    rbest = max((k for k in med if k[0] == "r"), key=med.get)

    def ratio(f):  # median over repeats of a per-repeat ratio
        return statistics.median(f(row) for row in rows)

    out.update({
        "seconds_per_iter": med["alt"], "bytes_per_iter": 2 * K.nbytes, "bandwidth_gbs": 2 * K.nbytes / med["alt"] / GB,
        "copy_bandwidth_gbs": med[wbest], "copy_reference": wbest[1],
        "copy_references_gbs": {k[1]: v for k, v in med.items() if k[0] == "w"},
        "bandwidth_fraction": ratio(lambda w: 2 * K.nbytes / w["alt"] / GB / w[wbest]),
        "numpy_seconds_per_iter": med["np"], "speedup_vs_numpy": ratio(lambda w: w["np"] / w["alt"]),
        "sk_seconds_per_iter": med["sk"], "sk_bytes_per_iter": K.nbytes, "sk_bandwidth_gbs": K.nbytes / med["sk"] / GB,
        "read_bandwidth_gbs": med[rbest], "read_reference": rbest[1],
        "read_references_gbs": {k[1]: v for k, v in med.items() if k[0] == "r"},
        "sk_bandwidth_fraction": ratio(lambda w: K.nbytes / w["sk"] / GB / w[rbest]),
        "numpy_sk_seconds_per_iter": med["np_sk"], "sk_speedup_vs_numpy": ratio(lambda w: w["np_sk"] / w["sk"]),
        "ratios": "median over repeats of each repeat's ratio (all timings of a repeat back to back)"})
    out.update(_dual_vs_dykstra(K, repeats, max_dykstra_seconds, tol))
    return out


def _dual_vs_dykstra(K, repeats, cap, tol):
    """Seconds for ``bbs(K, "dual")`` and ``bbs(K, "dykstra")`` to reach max row-sum error ``tol``.

    Dykstra may need far more time than the cap ``cap``: runs of the library
    solver with growing iteration budgets find the budget that fits the cap;
    the last run is the one reported.  If it stops short of ``tol`` its time
    is a lower bound, flagged as such.
    """
    from bigclust.normalize import NormalizeConvergenceWarning, bbs

    dual = timed(lambda: bbs(K, "dual", tol=tol, n_iter=200, return_info=True)[1], repeats)
    di = dual.result

    def dykstra(n_iter):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NormalizeConvergenceWarning)
            run = timed(lambda: bbs(K, "dykstra", tol=tol, n_iter=n_iter, return_info=True)[1])
            return run.median, run.result, caught

    # each run starts from scratch and stops at tol, so a converged run's time is the time to tol;
    # the budget of the next run is scaled from the last one (fixed costs make short runs
    # underestimate the iterations that fit), at most four runs
    t_dyk, ki, caught = dykstra(50)
    runs, budget = 1, 50
    while not ki.converged and t_dyk < 0.8 * cap and runs < 4:
        budget = max(2 * ki.n_iter, int(ki.n_iter * cap / t_dyk))
        t_dyk, ki, caught = dykstra(budget)
        runs += 1
    capped = not ki.converged
    return {"tol": tol, "dual_seconds": dual.median, "dual_newton_steps": di.n_iter, "dual_cg_steps": di.n_inner,
            "dual_converged": di.converged, "dual_row_err": di.row_err,
            "dykstra_seconds": t_dyk, "dykstra_iters": ki.n_iter, "dykstra_converged": ki.converged,
            "dykstra_row_err": ki.row_err, "dykstra_runs": runs, "dykstra_iteration_budget": budget,
            "dykstra_lower_bound": capped, "max_dykstra_seconds": cap,
            "dykstra_warning": str(caught[0].message) if capped and caught else None,
            "speedup_dual_vs_dykstra": t_dyk / dual.median,
            "speedup_dual_vs_dykstra_is_lower_bound": capped}
