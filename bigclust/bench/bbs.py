"""``bigclust bench``: speed and memory of the normalisers, as ratios against references run alongside.

Every function returns one flat dict: the machine (:func:`machine`), the sizes,
and the measured numbers (medians over repeats).  Nothing is estimated: a
quantity that could not be measured completely (a capped Dykstra run, an
abandoned scikit-learn run) is reported with a flag that says so.
"""
from __future__ import annotations

import gc
import os
import shutil
import statistics
import tempfile
import threading
import time
import warnings

import numpy as np

from bigclust._util.errors import UserError

GB = 1e9


# -- measuring ----------------------------------------------------------------------------


def machine() -> dict:
    """CPU model, cores, RAM, Numba threads and the load average (other jobs skew timings)."""
    import numba
    import psutil

    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    return {"cpu": model, "logical_cores": os.cpu_count(), "physical_cores": psutil.cpu_count(logical=False),
            "ram_gb": round(psutil.virtual_memory().total / GB, 2), "numba_threads": numba.get_num_threads(),
            "load_avg_1min": round(os.getloadavg()[0], 2)}


class Sampler:
    """Calls ``self._sample()`` every ``interval`` s from a thread inside a ``with`` block, and once at its end."""

    def __init__(self, interval):
        self.interval = interval
        self._stop = threading.Event()

    def _sample(self):
        raise NotImplementedError

    def _run(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


class PeakRSS(Sampler):
    """Peak resident set size of this process, sampled every ``interval`` s by a thread.

    ``with PeakRSS() as m: ...`` then ``m.peak`` (bytes), ``m.start``.
    """

    def __init__(self, interval=0.05):
        import psutil

        super().__init__(interval)
        self._proc = psutil.Process()
        self.start = self.peak = self._proc.memory_info().rss

    def _sample(self):
        self.peak = max(self.peak, self._proc.memory_info().rss)


def timed(fn, repeats):
    """``(median wall time of fn() over repeats runs, the last run's result)``."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _median_time(fn, repeats, setup=None):
    """Median wall time of ``fn(state)`` over ``repeats`` runs; ``setup()`` (untimed) makes the state."""
    times = []
    for _ in range(repeats):
        state = setup() if setup is not None else None
        t0 = time.perf_counter()
        fn(state)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def load_points(n, *, seed=0):
    """First ``n`` MNIST images (training then test) L2-normalised, or random unit vectors.

    Returns ``(X float32, y or None, description)``; MNIST is used when
    ``$BIGCLUST_DATA`` holds it.
    """
    from bigclust.algo.preprocess import l2_normalize

    root = os.environ.get("BIGCLUST_DATA")
    if root and os.path.isdir(os.path.join(root, "mnist")):
        from bigclust.datasets import open_dataset

        Xs, ys, got = [], [], 0
        for X, y in open_dataset("mnist", root).iter_chunks(min(n, 10000)):
            Xs.append(X[:n - got])
            ys.append(y[:n - got])
            got += Xs[-1].shape[0]
            if got >= n:
                break
        if got < n:
            raise UserError(f"MNIST has {got} images, fewer than n={n}")
        return l2_normalize(np.vstack(Xs)), np.concatenate(ys), f"MNIST, first {n} images, L2-normalised"
    X = np.random.default_rng(seed).standard_normal((n, 784)).astype(np.float32)
    return l2_normalize(X), None, f"random normal points in 784-d, L2-normalised (seed {seed}; BIGCLUST_DATA unset)"


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


# -- bench bbs ---------------------------------------------------------------------------------


def _compile(dtype):
    """Run every kernel once on a tiny array of ``dtype`` so that no timing includes compilation."""
    from bigclust.bench import _numba as bn
    from bigclust.normalize import _numba as nb
    from bigclust.normalize import bbs

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
    """One timing (seconds) of each reference sweep over an array like K.

    Write references (2 x K.nbytes moved): a numba parallel copy, np.copyto and
    an in-place ``a += 0``; read references (K.nbytes): numba parallel row
    sums and BLAS gemv ``K @ v``.
    """
    from bigclust.bench import _numba as bn

    A, B, out, v = K.copy(), np.empty_like(K), np.empty(K.shape[0]), np.ones(K.shape[0], dtype=K.dtype)
    np.copyto(B, A)  # page B in: first touches are not bandwidth
    write = {"numba parallel copy": lambda: bn.copy_rows(A, B), "np.copyto": lambda: np.copyto(B, A),
             "numba parallel in-place a += 0": lambda: bn.touch_rows(B)}
    read = {"numba parallel row sums": lambda: bn.sum_rows(A, out), "BLAS gemv K @ v": lambda: A @ v}
    return ({k: _median_time(lambda _: f(), 1) for k, f in write.items()},
            {k: _median_time(lambda _: f(), 1) for k, f in read.items()})


def bench_bbs(n=6000, dtype="float64", repeats=5, iters=20, max_dykstra_seconds=300.0, tol=1e-8):
    """In-memory BBS and Sinkhorn iterations against NumPy and the memory system; dual vs Dykstra.

    Returns a dict with (among others) ``seconds_per_iter``, ``bandwidth_gbs``,
    ``copy_bandwidth_gbs``, ``bandwidth_fraction``, ``numpy_seconds_per_iter``,
    ``speedup_vs_numpy``, the ``sk_*`` equivalents, ``dual_seconds``,
    ``dykstra_seconds`` and ``speedup_dual_vs_dykstra``.
    """
    from bigclust.normalize import _numba as nb
    from bigclust.algo.affinity import dense_kernel

    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise UserError(f"dtype must be float32 or float64, got {dtype}")
    if repeats < 1 or iters < 1 or n < 16:
        raise UserError("need repeats >= 1, iters >= 1 and n >= 16")
    X, _, data = load_points(n)
    K = np.ascontiguousarray(dense_kernel(X, "gaussian", 1.0, dtype=dt).compute(scheduler="threads"))
    K = ((K + K.T) / 2).astype(dt)  # exactly symmetric, as every solver assumes
    _compile(dt)
    out = {**machine(), "bench": "bbs", "n": n, "dtype": dt.name, "repeats": repeats, "iters": iters,
           "data": data, "kernel": "gaussian, gamma = 1",
           "timing": "median over repeats of iters iterations each, compilation excluded"}

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

    def sk(_):
        d, Kd = np.ones(n), np.empty(n)
        for _ in range(iters):
            nb.sk_matvec_block(K, d, Kd)
            d = np.sqrt(d / Kd)

    def numpy_sk(_):
        d = np.ones(n, dtype=dt)
        for _ in range(iters):
            d = numpy_sk_iteration(K, d)

    # interleaved: every repeat times all contenders and references back to back, so that the
    # per-repeat ratios compare runs made under the same conditions (this VM's speed drifts)
    rows = []
    for _ in range(repeats):
        wr, rd = _references(K)
        rows.append({"alt": _median_time(alt, 1, lambda: (K.copy(), K.sum(axis=1, dtype=np.float64))) / iters,
                     "np": _median_time(numpy_alt, 1, K.copy) / iters, "sk": _median_time(sk, 1) / iters,
                     "np_sk": _median_time(numpy_sk, 1) / iters,
                     **{("w", k): 2 * K.nbytes / t / GB for k, t in wr.items()},
                     **{("r", k): K.nbytes / t / GB for k, t in rd.items()}})
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

    infos = []
    t_dual = _median_time(lambda _: infos.append(bbs(K, "dual", tol=tol, n_iter=200, return_info=True)[1]),
                          repeats)
    di = infos[-1]

    def dykstra(n_iter):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NormalizeConvergenceWarning)
            t0 = time.perf_counter()
            info = bbs(K, "dykstra", tol=tol, n_iter=n_iter, return_info=True)[1]
            return time.perf_counter() - t0, info, caught

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
    return {"tol": tol, "dual_seconds": t_dual, "dual_newton_steps": di.n_iter, "dual_cg_steps": di.n_inner,
            "dual_converged": di.converged, "dual_row_err": di.row_err,
            "dykstra_seconds": t_dyk, "dykstra_iters": ki.n_iter, "dykstra_converged": ki.converged,
            "dykstra_row_err": ki.row_err, "dykstra_runs": runs, "dykstra_iteration_budget": budget,
            "dykstra_lower_bound": capped, "max_dykstra_seconds": cap,
            "dykstra_warning": str(caught[0].message) if capped and caught else None,
            "speedup_dual_vs_dykstra": t_dyk / t_dual,
            "speedup_dual_vs_dykstra_is_lower_bound": capped}


# -- bench ooc -----------------------------------------------------------------------------------


def bench_ooc(n=30000, max_memory="1GB", iters=20, dtype="float64", workdir=None, chunk_bytes=16 << 20):
    """Out-of-core Alg. 1 on a dense Gaussian K of size n x n written to a temporary zarr store.

    K is built block by block from Dask (never whole in memory) into an
    uncompressed zarr array, then :func:`~bigclust.normalize.ooc.bbs_blocked`
    runs ``iters`` iterations; the peak RSS of this process is sampled every
    50 ms over them.  The store is deleted afterwards.
    """
    import dask
    import dask.array as da
    import psutil
    import zarr

    from bigclust.algo.affinity import dense_kernel, kernel_block_rows
    from bigclust.algo.blocks import budget as parse_budget
    from bigclust.algo.blocks import create_like, row_blocks
    from bigclust.normalize.ooc import bbs_blocked
    from bigclust._util.plan import consumer_rows

    dt, budget = np.dtype(dtype), parse_budget(max_memory)
    row_bytes = n * dt.itemsize
    rows = consumer_rows("normalize", n, dt.itemsize, budget)
    # chunks well below a block: Dask builds K in small tasks, and blocks (whole chunks)
    # can fill the budget closely
    chunk_rows = kernel_block_rows(n, dt.itemsize, min(rows, max(1, chunk_bytes // row_bytes)) * row_bytes)
    blocks = row_blocks(n, chunk_rows, rows)
    need = 2 * n * row_bytes
    parent = workdir or tempfile.gettempdir()
    free = shutil.disk_usage(parent).free
    if free < 1.05 * need:
        raise UserError(f"K and G need {need / GB:.1f} GB in {parent}, only {free / GB:.1f} GB free; "
                        "use --workdir on a larger disk")
    out = {**machine(), "bench": "ooc", "n": n, "dtype": dt.name, "iters": iters, "max_memory_bytes": budget,
           "rows_per_block": blocks[0][1], "n_blocks": len(blocks), "chunk_rows": chunk_rows,
           "block_bytes": blocks[0][1] * row_bytes, "store_bytes_K_plus_G": need, "disk_free_bytes_before": free,
           "workdir": parent, "kernel": "gaussian, gamma = 1"}
    folder = tempfile.mkdtemp(prefix="bigclust-bench-ooc-", dir=parent)
    try:
        with PeakRSS() as build_mem:
            X, _, out["data"] = load_points(n)
            t0 = time.perf_counter()
            g = zarr.open_group(os.path.join(folder, "store.zarr"), mode="w")
            Kz = g.create_array("K", shape=(n, n), chunks=(chunk_rows, n), dtype=dt, compressors=None, fill_value=0)
            Kd = dense_kernel(X, "gaussian", 1.0, dtype=dt, block_bytes=chunk_rows * row_bytes)
            with dask.config.set(scheduler="threads"):
                da.store(Kd, Kz, lock=False)
            out["build_seconds"] = time.perf_counter() - t0
            del X, Kd
        out["build_peak_rss_bytes"] = build_mem.peak
        G = create_like(Kz, g, "G")
        _compile(dt)
        gc.collect()
        stamps = []
        with PeakRSS() as mem:
            t0 = time.perf_counter()
            info = bbs_blocked(Kz, G, n_iter=iters, max_memory=budget,
                               callback=lambda t, err: stamps.append(time.perf_counter()))
            total = time.perf_counter() - t0
        per = np.diff([t0] + stamps)  # [first pass (reads K only), iteration 1 (reads K, writes G), ...]
        steady = per[2:] if iters > 1 else per[1:]
        out.update({"seconds_first_pass_read_K": per[0], "seconds_first_iter_K_to_G": per[1],
                    "seconds_per_iter": float(np.median(steady)), "seconds_per_iter_max": float(steady.max()),
                    "seconds_total": total, "io_gbs": 2 * n * row_bytes / float(np.median(steady)) / GB,
                    "row_err": info.row_err, "rss_before_bytes": mem.start, "peak_rss_bytes": mem.peak,
                    "peak_rss_increase_bytes": mem.peak - mem.start,
                    "peak_rss_increase_over_budget": (mem.peak - mem.start) / budget,
                    "process_max_rss_bytes": _ru_maxrss(),
                    "page_cache_note": ("K and G together are smaller than RAM, so the page cache can hold them: "
                                        "the I/O measured is largely cached" if need < psutil.virtual_memory().total
                                        else "K and G together exceed RAM: I/O reaches the disk")})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out


def _ru_maxrss():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


# -- bench sparse -----------------------------------------------------------------------------------


def _child(queue, fn, kwargs):
    """Run ``fn(**kwargs)`` in a fresh process; its stdout goes to stderr so ``--json`` stays clean."""
    os.dup2(2, 1)
    try:
        res = fn(**kwargs)
        res["process_max_rss_bytes"] = _ru_maxrss()
        queue.put(res)
    except BaseException as e:  # report, the parent decides
        queue.put({"error": f"{type(e).__name__}: {e}"})


def _in_child(fn, timeout=None, **kwargs):
    """``fn(**kwargs)`` in a spawned process (own peak RSS); None when it ran past ``timeout`` s."""
    import multiprocessing as mp
    import queue as q

    ctx = mp.get_context("spawn")
    qu = ctx.Queue()
    p = ctx.Process(target=_child, args=(qu, fn, kwargs))
    p.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            res = qu.get(timeout=1.0)
            break
        except q.Empty:
            if not p.is_alive():
                try:  # it may have put its result just before exiting
                    res = qu.get(timeout=1.0)
                except q.Empty:
                    res = {"error": f"process died with exit code {p.exitcode}"}
                break
            if deadline is not None and time.monotonic() > deadline:
                p.terminate()
                p.join()
                return None
    p.join()
    return res


def _scores(y, labels, best):
    from bigclust.algo.metrics import batch_scores

    acc, nm = batch_scores(y, labels)
    return {"acc": float(acc[best]), "nmi": float(nm[best]), "acc_mean": float(acc.mean()),
            "acc_max": float(acc.max()), "nmi_mean": float(nm.mean()), "nmi_max": float(nm.max())}


def sparse_ours(n, k, gamma, n_init, n_clusters=10, self_loops="zero", pca=50, knn="auto"):
    """kNN affinity, SK and BBS-dual on it, embedding, k-means, scores: times per phase and peak RSS.

    The pipeline's ``[preprocess] pca`` and ``[affinity] knn``: ``pca``
    components (0: search the raw pixels) from the streamed randomised PCA,
    then the kNN search ``knn`` (:func:`bigclust.algo.knn.resolve_method`; its
    libraries on one thread, as in the pipeline).  ``self_loops``: BBS's
    support (:func:`bigclust.normalize.bbs`; "keep" is the behaviour before
    issue 13).  The graph diagnostics of :func:`bigclust.bench.sparse.graph_stats`
    are computed outside the timed phases.
    """
    from bigclust.algo.affinity import knn_kernel
    from bigclust.bench.sparse import graph_stats
    from bigclust.algo.kmeans import kmeans
    from bigclust.algo.knn import resolve_method
    from bigclust.normalize import bbs, sinkhorn
    from bigclust.algo.preprocess import pca_fit, pca_transform
    from bigclust.algo.spectral import embed

    res, clock = {}, time.perf_counter
    with PeakRSS() as mem:
        t = clock()
        X, y, res["data"] = load_points(n)
        res["seconds_load"] = clock() - t
        t = clock()
        if pca:
            X = pca_transform(X, *pca_fit(X, pca)).astype(np.float32)
        res["pca"], res["seconds_pca"] = int(pca), clock() - t
        res["knn"] = resolve_method(knn, *X.shape)
        t = clock()
        K = knn_kernel(X, k, 1.0, method=knn)
        if gamma == "median":
            # K_ij = exp(-d_ij^2) at gamma = 1, so exp(-d^2 / g) = K^(1/g): rescale instead of
            # searching the neighbours again
            off = K.data[K.data < 1.0]
            g = float(np.median(-np.log(off)))
            K.data **= 1.0 / g
            res["gamma"], res["gamma_rule"] = g, "median squared kNN distance (off-diagonal stored entries)"
        else:
            res["gamma"], res["gamma_rule"] = float(gamma), "given"
        res["seconds_knn_affinity"], res["nnz"] = clock() - t, int(K.nnz)
        for name, norm in (("sk", lambda: sinkhorn(K, n_iter=10000, tol=1e-8, return_info=True)),
                           ("bbs_dual", lambda: bbs(K, "dual", return_info=True, self_loops=self_loops))):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                t = clock()
                P, info = norm()
                res[f"{name}_seconds_normalize"] = clock() - t
                res.update({f"{name}_iters": info.n_iter, f"{name}_converged": info.converged,
                            f"{name}_row_err": info.row_err,
                            f"{name}_nnz_positive": int(np.count_nonzero(P.data > 0))})
                t = clock()
                V = embed(P, n_clusters)
                res[f"{name}_seconds_embed"] = clock() - t
                t = clock()
                km = kmeans(V, n_clusters, n_init=n_init, random_state=0)
                res[f"{name}_seconds_kmeans"] = clock() - t
                res.update(graph_stats(K, P, n_clusters, prefix=f"{name}_"))
            res[f"{name}_warnings"] = sorted({str(w.message)[:200] for w in caught}) or None
            res.update({f"{name}_{key}": v for key, v in _scores(y, km.labels, km.best).items()})
            res[f"{name}_seconds_total"] = res["seconds_load"] + res["seconds_pca"] + res["seconds_knn_affinity"] + sum(
                res[f"{name}_seconds_{p}"] for p in ("normalize", "embed", "kmeans"))
            del P, V
    res["peak_rss_bytes"] = mem.peak
    return res


def sparse_sklearn(n, k, n_clusters=10, eigen_solver="arpack"):
    """scikit-learn's SpectralClustering on the same points: time, peak RSS, ACC, NMI.

    ``eigen_solver``: scikit-learn's ``arpack`` (its default: shift-invert,
    a sparse LU of the Laplacian), ``lobpcg`` or ``amg`` (needs pyamg).
    """
    from sklearn.cluster import SpectralClustering

    from bigclust.algo.metrics import accuracy, nmi

    X, y, data = load_points(n)
    with PeakRSS() as mem:
        t = time.perf_counter()
        lab = SpectralClustering(n_clusters=n_clusters, affinity="nearest_neighbors", n_neighbors=k,
                                 eigen_solver=eigen_solver, assign_labels="kmeans",
                                 random_state=0).fit_predict(X)
        sec = time.perf_counter() - t
    return {"data": data, "eigen_solver": eigen_solver, "seconds_fit": sec, "peak_rss_bytes": mem.peak,
            "acc": float(accuracy(y, lab)),
            "nmi": float(nmi(y, lab))}


def bench_sparse(n=70000, k=10, gamma="median", n_init=10, sklearn_timeout=900.0, sklearn_subset=20000,
                 sklearn_eigen_solver="amg", self_loops="zero", pca=50, knn="auto"):
    """End to end on MNIST with a sparse kNN affinity, beside scikit-learn's SpectralClustering.

    Each pipeline runs in its own spawned process so that its peak RSS is its
    own.  When scikit-learn runs past ``sklearn_timeout`` seconds it is
    stopped and run again (with ours, for comparison) on the first
    ``sklearn_subset`` points.  ``pca`` / ``knn``: ours searches the
    neighbours after PCA to ``pca`` dimensions (0: raw pixels) with the search
    ``knn``, as ``[preprocess] pca`` and ``[affinity] knn`` do in the pipeline;
    scikit-learn gets the raw pixels, as its users call it.
    """
    if not os.environ.get("BIGCLUST_DATA"):
        raise UserError("bench sparse needs MNIST: set BIGCLUST_DATA to the shared data folder")
    if sklearn_eigen_solver == "amg":
        try:
            import pyamg  # noqa: F401
        except ImportError:
            raise UserError("--sklearn-eigen-solver amg needs pyamg: pip install -e '.[bench]'") from None
    out = {**machine(), "bench": "sparse", "n": n, "k": k, "n_init": n_init,
           "kmeans_note": f"k-means with n_init={n_init} restarts (scikit-learn's default is 10 too); "
                          "acc/nmi are of the lowest-inertia restart"}
    out["bbs_self_loops"] = self_loops
    ours = _in_child(sparse_ours, n=n, k=k, gamma=gamma, n_init=n_init, self_loops=self_loops, pca=pca, knn=knn)
    out.update({f"ours_{key}": v for key, v in ours.items()})
    sk = _in_child(sparse_sklearn, timeout=sklearn_timeout, n=n, k=k, eigen_solver=sklearn_eigen_solver)
    out["sklearn_n"], out["sklearn_timed_out_full"] = n, sk is None
    if sk is None:
        m = min(n, sklearn_subset)
        out["sklearn_n"], out["sklearn_note"] = m, (f"scikit-learn did not finish n={n} within "
                                                    f"{sklearn_timeout:.0f} s; both run on the first {m} points")
        sk = (_in_child(sparse_sklearn, timeout=sklearn_timeout, n=m, k=k, eigen_solver=sklearn_eigen_solver)
              or {"error": "timed out on subset too"})
        sub = _in_child(sparse_ours, n=m, k=k, gamma=gamma, n_init=n_init, self_loops=self_loops, pca=pca,
                        knn=knn)
        out.update({f"ours_subset_{key}": v for key, v in sub.items()})
    out.update({f"sklearn_{key}": v for key, v in sk.items()})
    return out


# -- printing ----------------------------------------------------------------------------------------


def format_report(res: dict) -> str:
    """``key  value`` lines; floats to 4 significant digits, byte counts also in GB."""
    lines = []
    for key, v in res.items():
        if isinstance(v, dict):
            v = ", ".join(f"{a}: {b:.4g}" for a, b in v.items())
        elif isinstance(v, float):
            v = f"{v:.4g}"
        if key.endswith("_bytes") and isinstance(v, (int, np.integer)):
            v = f"{v} ({v / GB:.3f} GB)"
        lines.append(f"{key:<40} {v}")
    return "\n".join(lines)
