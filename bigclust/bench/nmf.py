"""``bigclust bench nmf``: NMF per iteration against scikit-learn, bilinear vs linear, streamed memory.

Everything is measured in this run on the same tf-idf matrix and from the same
initial factors: ours and scikit-learn's ``NMF`` (``init="custom"``, its W =
our V, its H = our U^T), so the objectives can be compared iterate for iterate.
The dense case (``dense_*`` keys) does the same on dense images: the MNIST test
digits, pixels / 255, given to both as a dense float64 array.
"""
from __future__ import annotations

import tempfile
import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import UserError
from bigclust.bench._measure import PeakRSS, load_avg, machine, timed


def load_tfidf(name="news20-all", synthetic=(18000, 30000, 1_400_000), seed=0):
    """The tf-idf documents of a named corpus (``$BIGCLUST_DATA``), else a Zipfian synthetic matrix.

    ``name = "synthetic:NxMxNNZ"`` (e.g. ``synthetic:300x500x5000``) asks for the
    synthetic matrix of that shape and number of nonzeros whatever the environment.
    """
    import os
    from pathlib import Path

    from bigclust.algo.preprocess import tfidf
    if name.startswith("synthetic"):
        try:
            synthetic = tuple(int(v) for v in name.split(":", 1)[1].split("x")) if ":" in name else synthetic
            if len(synthetic) != 3 or min(synthetic) < 1:
                raise ValueError
        except ValueError:
            raise UserError(f"--data {name!r}: expected synthetic:NxMxNNZ, e.g. synthetic:300x500x5000") from None
        name = None
    root = os.environ.get("BIGCLUST_DATA")
    if name and root and Path(root).is_dir():
        from bigclust.datasets import open_dataset
        src = open_dataset(name, root)
        X = sp.vstack([Xc for Xc, _ in src.iter_chunks(4096)], format="csr")
        y = np.concatenate([yc for _, yc in src.iter_chunks(4096)])
        X, _ = tfidf(X, local="tf", global_="idf", normalize=True)
        return sp.csr_matrix(X, dtype=np.float64), y, name
    n, m, nnz = synthetic
    rng = np.random.default_rng(seed)
    cols = np.minimum((rng.zipf(1.3, nnz) - 1), m - 1)
    rows = rng.integers(0, n, nnz)
    X = sp.csr_matrix((rng.random(nnz) + 0.1, (rows, cols)), shape=(n, m))
    X.sum_duplicates()
    X = sp.csr_matrix(X.multiply(1.0 / np.sqrt(X.multiply(X).sum(axis=1)).A.clip(1e-12)))
    return X, None, f"synthetic {n}x{m}"


def bench_nmf(k=20, iters=30, repeats=5, max_memory="256MB", data="news20-all", seed=0, dense_data="mnist-test",
              dense_k=10, dense_iters=200, dense_repeats=3):
    """MU and HALS vs scikit-learn (sparse and dense), bilinear vs linear per iteration, and streamed peak RSS.

    Returns a flat dict; the keys the issue names are ``mu_speedup_vs_sklearn``,
    ``hals_speedup_vs_sklearn_cd``, ``bilinear_over_linear_per_iter``,
    ``ooc_peak_rss_bytes``, ``dense_mu_speedup_vs_sklearn`` and
    ``dense_hals_speedup_vs_sklearn_cd`` (:func:`bench_dense`; ``dense_data=None`` skips it).
    """
    from sklearn.decomposition import NMF

    from bigclust import nmf
    from bigclust.nmf import random_factors

    X, _, name = load_tfidf(data)
    n, m = X.shape
    U0, V0 = random_factors(seed, [(m, k), (n, k)], float(np.sqrt(X.data.mean() / k)))
    out = {**machine(), "bench": "nmf", "data": name, "n": n, "m": m, "nnz": int(X.nnz), "k": k, "iters": iters,
           "repeats": repeats}

    def warmup():  # Numba compilation, outside the timings
        nmf.linear_nmf(X, k, init=(U0, V0), n_init=1, max_iter=2, tol=0.0)
        nmf.linear_nmf(X, k, solver="hals", init=(U0, V0), n_init=1, max_iter=2, tol=0.0)
        nmf.bilinear_nmf(X, k, init=(V0, V0), n_init=1, max_iter=2, tol=0.0)

    def ours(solver):
        return nmf.linear_nmf(X, k, solver=solver, init=(U0, V0), n_init=1, max_iter=iters, tol=0.0,
                              return_info=True)

    def theirs(solver, max_iter, tol=0.0):
        est = NMF(k, init="custom", solver=solver, beta_loss="frobenius", max_iter=max_iter, tol=tol,
                  random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            W = est.fit_transform(X, W=V0.copy(), H=U0.T.copy())
        return est, W

    # run alternately: the ratio then sees the same drift of the load on both sides
    mu = timed({"ours": lambda: ours("mu"), "sklearn": lambda: theirs("mu", iters)}, repeats, warmup=warmup)
    t_mu, t_sk, info, est = mu["ours"].median, mu["sklearn"].median, mu["ours"].result[3], mu["sklearn"].result[0]
    m_mu, m_sk = mu["ours"].fastest, mu["sklearn"].fastest
    j_ours = float(info.objective[-1])
    j_sk = 0.5 * est.reconstruction_err_ ** 2
    # CPU seconds (every thread) move far less with other jobs' load than wall seconds; their ratio is not a
    # speed-up when the two sides use different numbers of threads (scikit-learn's sparse products use one)
    out.update(ours_mu_seconds_per_iter=t_mu / iters, sklearn_mu_seconds_per_iter=t_sk / iters,
               ours_mu_cpu_seconds=mu["ours"].cpu, sklearn_mu_cpu_seconds=mu["sklearn"].cpu,
               mu_speedup_vs_sklearn=t_sk / t_mu, mu_speedup_vs_sklearn_fastest_runs=m_sk / m_mu,
               mu_objective_ours=j_ours, mu_objective_sklearn=j_sk,
               mu_objective_rel_diff=abs(j_ours - j_sk) / j_sk)
    # HALS: scikit-learn's coordinate descent to its own stopping point; ours for as many iterations
    cd = timed(lambda: theirs("cd", 1000, 1e-4), repeats)
    t_cd, est = cd.median, cd.result[0]
    n_cd = int(est.n_iter_)
    j_cd = 0.5 * est.reconstruction_err_ ** 2
    hals = timed(lambda: nmf.linear_nmf(X, k, solver="hals", init=(U0, V0), n_init=1, max_iter=n_cd, tol=0.0,
                                        return_info=True), repeats)
    t_h, hinfo = hals.median, hals.result[3]
    # objective[r] is the value after r iterations: time to reach scikit-learn's ~ t_h * r / n_cd
    reached = np.flatnonzero(hinfo.objective <= j_cd * (1 + 1e-9))
    r = int(reached[0]) if reached.size else None
    out.update(sklearn_cd_seconds=t_cd, sklearn_cd_n_iter=n_cd, sklearn_cd_objective=j_cd,
               ours_hals_seconds_same_iters=t_h, ours_hals_objective=float(hinfo.objective[-1]),
               ours_hals_iters_to_sklearn_objective=r, ours_hals_reached_sklearn_objective=r is not None,
               hals_speedup_vs_sklearn_cd=t_cd / (t_h * max(r, 1) / n_cd) if r is not None else t_cd / t_h)
    # the same with one sweep per factor update (plain fast HALS = scikit-learn's cd, iterate for iterate)
    from bigclust.nmf import ops
    sweeps = ops.HALS_SWEEPS
    try:
        ops.HALS_SWEEPS = 1
        hals1 = timed(lambda: nmf.linear_nmf(X, k, solver="hals", init=(U0, V0), n_init=1, max_iter=n_cd, tol=0.0,
                                             return_info=True), repeats)
    finally:
        ops.HALS_SWEEPS = sweeps
    t_1, info1 = hals1.median, hals1.result[3]
    reached = np.flatnonzero(info1.objective <= j_cd * (1 + 1e-9))
    r1 = int(reached[0]) if reached.size else None
    out.update(hals_sweeps=sweeps, hals_delta=ops.HALS_DELTA, ours_hals1_seconds_same_iters=t_1,
               ours_hals1_iters_to_sklearn_objective=r1,
               hals1_speedup_vs_sklearn_cd=t_cd / (t_1 * max(r1, 1) / n_cd) if r1 is not None else t_cd / t_1)
    t_bi = timed(lambda: nmf.bilinear_nmf(X, k, init=(V0, V0), n_init=1, max_iter=iters, tol=0.0), repeats).median
    out.update(bilinear_seconds_per_iter=t_bi / iters, bilinear_over_linear_per_iter=t_bi / t_mu)
    out.update(_streamed(X, k, iters, max_memory, seed))
    if dense_data and dense_data != "none":
        out.update(bench_dense(dense_data, dense_k, dense_iters, dense_repeats, seed))
    out["load_avg_after"] = load_avg()
    return out


def load_dense(name="mnist-test"):
    """Dense non-negative images as float64: a named data set (``$BIGCLUST_DATA``) with pixels / 255,
    or ``synthetic:NxMxNNZ`` (the synthetic tf-idf matrix made dense)."""
    import os
    from pathlib import Path

    root = os.environ.get("BIGCLUST_DATA")
    if name.startswith("synthetic") or not (root and Path(root).is_dir()):
        X, _, what = load_tfidf(name if name.startswith("synthetic") else "synthetic:10000x784x1500000")
        return X.toarray(), f"{what}, dense"
    from bigclust.datasets import open_dataset
    X = np.concatenate([np.asarray(Xc, dtype=np.float64) for Xc, _ in open_dataset(name, root).iter_chunks(4096)])
    return X / 255.0 if X.max() > 1.0 else X, f"{name} / 255"


def bench_dense(name="mnist-test", k=10, iters=200, repeats=3, seed=0):
    """Dense X: our MU and HALS against scikit-learn's ``NMF(solver="mu")`` and ``NMF(solver="cd")``.

    Protocol (said in the result's ``dense_protocol``): both get the same dense float64 X and the same
    initial factors; each timed call is a whole fit from that start (input checks, setup and iterations),
    ours and scikit-learn's interleaved, medians over ``repeats``.  MU: ``iters`` iterations each (tol = 0).
    HALS: scikit-learn's cd runs to its own stop (tol = 1e-4, at most 1000 iterations); ours is timed for
    the iterations it needs to reach scikit-learn's final objective (found by an untimed run), or for as
    many iterations as scikit-learn's when it does not reach it.
    """
    from sklearn.decomposition import NMF

    from bigclust import nmf
    from bigclust.nmf import ops, random_factors

    X, what = load_dense(name)
    n, m = X.shape
    U0, V0 = random_factors(seed, [(m, k), (n, k)], float(np.sqrt(X.mean() / k)))
    out = {"dense_data": what, "dense_n": n, "dense_m": m, "dense_nonzero_share": float(np.count_nonzero(X) / X.size),
           "dense_k": k, "dense_iters": iters, "dense_repeats": repeats, "dense_load_avg_before": load_avg(),
           "dense_products": "CSR kernels" if ops.product_form(X) is not X else "BLAS dgemm",
           "dense_protocol": "same dense float64 X and start (init=custom); whole fits timed, interleaved, medians; "
                             "MU: dense_iters iterations each, tol=0; HALS: sklearn cd to its stop (tol=1e-4), ours "
                             "for the iterations it needs to reach sklearn's final objective",
           "dense_mu_epsilon": "same update W <- W * (X H^T) / (W H H^T); a zero denominator becomes 1e-300 here "
                               "and float32 eps in sklearn (never reached from a positive start: denominators > 0)"}

    def ours(solver, max_iter, sweeps=None):
        old = ops.HALS_SWEEPS
        ops.HALS_SWEEPS = old if sweeps is None else sweeps
        try:
            return nmf.linear_nmf(X, k, solver=solver, init=(U0, V0), n_init=1, max_iter=max_iter, tol=0.0,
                                  return_info=True)[3]
        finally:
            ops.HALS_SWEEPS = old

    def theirs(solver, max_iter, tol=0.0):
        est = NMF(k, init="custom", solver=solver, beta_loss="frobenius", max_iter=max_iter, tol=tol, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit_transform(X, W=V0.copy(), H=U0.T.copy())
        return est

    def warmup():   # Numba compilation and first-touch costs, outside the timings
        ours("mu", 2)
        ours("hals", 2)

    mu = timed({"ours": lambda: ours("mu", iters), "sklearn": lambda: theirs("mu", iters)}, repeats, warmup=warmup)
    j_ours, j_sk = float(mu["ours"].result.objective[-1]), 0.5 * mu["sklearn"].result.reconstruction_err_ ** 2
    out.update(dense_ours_mu_seconds=mu["ours"].median, dense_sklearn_mu_seconds=mu["sklearn"].median,
               dense_ours_mu_cpu_seconds=mu["ours"].cpu, dense_sklearn_mu_cpu_seconds=mu["sklearn"].cpu,
               dense_mu_speedup_vs_sklearn=mu["sklearn"].median / mu["ours"].median,
               dense_mu_objective_ours=j_ours, dense_mu_objective_sklearn=j_sk,
               dense_mu_objective_rel_diff=abs(j_ours - j_sk) / j_sk)
    est = theirs("cd", 1000, 1e-4)
    n_cd, j_cd = int(est.n_iter_), 0.5 * est.reconstruction_err_ ** 2
    reached = np.flatnonzero(ours("hals", n_cd).objective <= j_cd * (1 + 1e-9))
    r = int(reached[0]) if reached.size else None
    hals = timed({"ours": lambda: ours("hals", r or n_cd), "sklearn": lambda: theirs("cd", 1000, 1e-4)}, repeats)
    # one sweep per factor update is scikit-learn's cd iterate for iterate: the formula check
    j_1 = float(ours("hals", n_cd, sweeps=1).objective[-1])
    out.update(dense_sklearn_cd_seconds=hals["sklearn"].median, dense_sklearn_cd_n_iter=n_cd,
               dense_sklearn_cd_objective=j_cd, dense_ours_hals_seconds=hals["ours"].median,
               dense_ours_hals_iters=r or n_cd, dense_ours_hals_reached_sklearn_objective=r is not None,
               dense_ours_hals_objective=float(hals["ours"].result.objective[-1]),
               dense_hals_speedup_vs_sklearn_cd=hals["sklearn"].median / hals["ours"].median,
               dense_hals1_objective_same_iters=j_1, dense_hals1_objective_rel_diff=abs(j_1 - j_cd) / j_cd,
               dense_load_avg_after=load_avg())
    return out


#: row blocks of the streamed run at least, even when the planner would hold X whole
OOC_MIN_BLOCKS = 8


def _streamed(X, k, iters, max_memory, seed):
    """Linear NMF on X stored in zarr, planned under ``max_memory``; peak RSS over the run."""
    from bigclust.algo.blocks import budget
    from bigclust.pipeline.stored_rows import RowReader, stored_shape
    from bigclust.nmf import linear_nmf_streamed
    from bigclust._util.plan import nmf_plan
    from bigclust.pipeline.store import Store, write_csr

    folder = tempfile.mkdtemp(prefix="bigclust-bench-nmf-")
    try:
        store = Store(f"{folder}/s.zarr", owner={"bench": "nmf"})
        with store.write("preprocess", "x", {}) as g:
            write_csr(g, "X", X.astype(np.float32))
        node = store.open("preprocess", "x")["X"]
        n, m, row_bytes = stored_shape(node)
        plan = nmf_plan(n, row_bytes, m, k, 1, budget(max_memory))
        bounds = plan.bounds
        if len(bounds) - 1 < OOC_MIN_BLOCKS:
            # X fits the budget (20 Newsgroups is 17 MB): split it anyway, so that what is timed and
            # measured is the streamed pass over blocks read from zarr, not one block held whole
            bounds = tuple(int(b) for b in np.linspace(0, n, OOC_MIN_BLOCKS + 1))
        reader = RowReader(store.path, "preprocess", "x", "X", bounds)
        with PeakRSS() as rss:
            secs = timed(lambda: linear_nmf_streamed(reader, bounds, m, k, n_init=1, max_iter=iters, tol=0.0,
                                                     random_state=seed)).median
        return {"ooc_max_memory_bytes": budget(max_memory), "ooc_x_bytes": int(n * row_bytes),
                "ooc_planned_in_memory": plan.in_memory, "ooc_blocks": len(bounds) - 1,
                "ooc_seconds_per_iter": secs / iters, "ooc_peak_rss_bytes": int(rss.peak),
                "ooc_rss_before_bytes": int(rss.start)}
    finally:
        import shutil
        shutil.rmtree(folder, ignore_errors=True)
