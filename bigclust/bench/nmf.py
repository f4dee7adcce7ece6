"""``bigclust bench nmf``: NMF per iteration against scikit-learn, bilinear vs linear, streamed memory.

Everything is measured in this run on the same tf-idf matrix and from the same
initial factors: ours and scikit-learn's ``NMF`` (``init="custom"``, its W =
our V, its H = our U^T), so the objectives can be compared iterate for iterate.
"""
from __future__ import annotations

import tempfile
import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import UserError
from bigclust.bench._measure import PeakRSS, machine, timed


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


def bench_nmf(k=20, iters=30, repeats=5, max_memory="256MB", data="news20-all", seed=0):
    """MU and HALS vs scikit-learn, bilinear vs linear per iteration, and streamed peak RSS.

    Returns a flat dict; the keys the issue names are ``mu_speedup_vs_sklearn``,
    ``hals_speedup_vs_sklearn_cd``, ``bilinear_over_linear_per_iter`` and
    ``ooc_peak_rss_bytes``.
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
    out.update(ours_mu_seconds_per_iter=t_mu / iters, sklearn_mu_seconds_per_iter=t_sk / iters,
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
