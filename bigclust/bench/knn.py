"""``bigclust bench knn``: the kNN graph of MNIST, exact blocked search vs approximate libraries.

For every space (the PCA projection, and optionally the raw 784 pixels) and
every k it measures, in one run: the exact blocked search
(:func:`bigclust.algo.knn.knn_exact`), pynndescent with today's settings and with
tuned ones, hnswlib and faiss (HNSW) when installed; the median wall time over
``repeats`` (every library on all cores), recall@k against the exact graph of the same space, and the ratio
of every time to pynndescent's measured alongside.  The streamed PCA
(:func:`bigclust.algo.preprocess.pca_fit`) is timed on its own, and the PCA graph's
recall against the exact graph of the raw pixels is reported when that is
measured.  Nothing is asserted: the machine is shared, so the load average is
recorded and the ratios are the numbers to compare.
"""
from __future__ import annotations

import os

from bigclust.bench._data import load_points
from bigclust.bench._measure import load_avg, machine, timed

#: approximate searches measured, as (name in the report, library, parameters)
APPROX_RUNS = (
    ("pynndescent", "pynndescent", {}),                      # today's settings (the baseline of the ratios)
    ("pynndescent-tuned", "pynndescent", {"n_trees": 4, "n_iters": 4, "max_candidates": 16}),
    ("hnswlib", "hnswlib", {}),                             # bigclust.algo.knn.APPROX_PARAMS
    ("faiss-hnsw", "faiss", {}),
    ("ivf", "ivf", {}),                                     # bigclust.algo.knn.ivf, default cells and probes
    ("ivf-rows", "ivf-rows", {}),                           # bigclust.algo.knn.ivf_rows, default cells and probes
    ("faiss-ivf", "faiss-ivf", {}),                         # faiss IndexIVFFlat: n / 256 lists, 16 probed per row
)


def _faiss_ivf(X, k, n_probe=16, seed=0):
    """faiss's IVF-Flat beside ours: n / 256 lists trained on 40 rows per list, each row probing ``n_probe``."""
    import faiss
    import numpy as np

    from bigclust.algo.knn.approx import drop_self

    X = np.ascontiguousarray(X, dtype=np.float32)
    n, d = X.shape
    nlist = max(1, round(n / 256))
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    index = faiss.IndexIVFFlat(faiss.IndexFlatL2(d), d, nlist)
    index.cp.seed = seed
    sample = np.random.default_rng(seed).choice(n, min(n, 40 * nlist), replace=False)
    index.train(X[np.sort(sample)])
    index.add(X)
    index.nprobe = min(nlist, n_probe)
    d2, ind = index.search(X, k + 1)
    return drop_self(ind.astype(np.int64), d2.astype(np.float64), k)


def _search(X, k, lib, params):
    """One approximate search: a library (all cores) or bigclust's IVF searches (their Numba threads)."""
    from bigclust.algo.knn import knn_approx, knn_search

    if lib in ("ivf", "ivf-rows"):
        return knn_search(X, k, lib, **params)
    if lib == "faiss-ivf":
        return _faiss_ivf(X, k, **params)
    return knn_approx(X, k, lib, n_jobs=os.cpu_count(), **params)


def _record(res, key, run, recall=None):
    """A measurement's median wall and CPU seconds, every wall time and recall into ``res``; one line on stderr.

    The line is there so that a run cut short still leaves its numbers; CPU
    seconds (all threads of this process) move far less with the load of a
    shared machine than wall seconds.
    """
    import sys

    res[f"{key}_seconds"], res[f"{key}_times"], res[f"{key}_cpu_seconds"] = run.median, run.times, run.cpu
    if recall is not None:
        res[f"{key}_recall"] = recall
    print(f"{key}: {res.get(key + '_seconds')} s, cpu {res.get(key + '_cpu_seconds')} s, "
          f"recall {res.get(key + '_recall')}", file=sys.stderr, flush=True)


def _available(lib):
    import importlib

    if lib in ("ivf", "ivf-rows"):
        return True
    lib = "faiss" if lib == "faiss-ivf" else lib
    try:
        importlib.import_module(lib)
        return True
    except ImportError:
        return False


def _space(X, ks, repeats, exact_repeats, res, tag, runs):
    """Exact and approximate graphs of X for every k into ``res`` (keys prefixed by ``tag``)."""
    from bigclust.algo.knn import knn_exact, recall

    # compile every kernel (ours and pynndescent's Numba code) before anything is timed
    W = X[:min(len(X), 2000)]
    knn_exact(W, min(ks))
    for _, lib, params in runs:
        if _available(lib):
            _search(W, min(ks), lib, params)
    exact = {}
    for k in ks:
        run = timed(lambda: knn_exact(X, k), exact_repeats)
        exact[k] = ind = run.result[0]
        _record(res, f"{tag}_k{k}_exact", run, 1.0)
        for name, lib, params in runs:
            if not _available(lib):
                res[f"{tag}_k{k}_{name}_skipped"] = f"{lib} not installed (pip install 'bigclust[knn]')"
                continue
            run = timed(lambda: _search(X, k, lib, params), repeats)
            _record(res, f"{tag}_k{k}_{name}", run, recall(run.result[0], ind))
        base = res.get(f"{tag}_k{k}_pynndescent_seconds")
        for name in ["exact"] + [r[0] for r in runs]:
            t = res.get(f"{tag}_k{k}_{name}_seconds")
            if base and t is not None:
                res[f"{tag}_k{k}_{name}_ratio_vs_pynndescent"] = t / base
    return exact


def _points(points, n):
    """The first n rows of ``points`` (a ``.npy`` file or a zarr array, e.g. a store's PCA rows) as float32."""
    import numpy as np

    from bigclust._util.errors import UserError

    if str(points).endswith(".npy"):
        A = np.load(points, mmap_mode="r")
    else:
        import zarr

        A = zarr.open_array(str(points), mode="r")
    if A.shape[0] < n:
        raise UserError(f"--points has {A.shape[0]} rows, fewer than n={n}")
    return np.ascontiguousarray(A[:n], dtype=np.float32)


def bench_knn_sizes(sizes, points=None, k=10, repeats=1, approx=None, sample=2000, pca=50):
    """Time and recall@k of every search at growing n, and each one's log-log slope of time against n.

    Recall is measured on ``sample`` seeded rows against their exact lists (the
    exact search of all n rows is quadratic); rows are prefixes of ``points``
    (e.g. ``stages/preprocess/<key>/X`` of the mnist-1m store: its PCA-50 rows),
    else MNIST's PCA-``pca`` rows.  Returns a dict with the machine, load
    before/after, n, repeats, medians (``<name>_seconds[i]`` per size) and slopes.
    """
    import numpy as np

    from bigclust.algo.knn import knn_exact, recall

    runs = tuple(r for r in APPROX_RUNS if approx is None or r[0] in approx)
    res = {"machine": machine(), "sizes": list(sizes), "k": k, "repeats": repeats, "sample": sample,
           "data": str(points) if points else f"MNIST PCA-{pca}", "load_avg_before_size": []}
    W = _points(points, min(sizes)) if points else None
    for _, lib, params in runs:  # compile every kernel before anything is timed
        if _available(lib):
            _search(W[:2000] if W is not None else np.random.default_rng(0).normal(size=(2000, 50)), k, lib, params)
    for n in sizes:
        if points:
            X = _points(points, n)
        else:
            from bigclust.algo.preprocess import pca_fit, pca_transform

            X0 = load_points(n)[0]
            X = np.ascontiguousarray(pca_transform(X0, *pca_fit(X0, pca)), dtype=np.float32)
        res["load_avg_before_size"].append(load_avg())
        qs = np.sort(np.random.default_rng(0).choice(n, min(n, sample), replace=False))
        ref = knn_exact(X, k + 1, queries=X[qs])[0]
        ref = np.array([r[r != q][:k] for r, q in zip(ref, qs)])   # each sampled row's k nearest others
        for name, lib, params in runs:
            if not _available(lib):
                res[f"{name}_skipped"] = f"{lib} not installed (pip install 'bigclust[knn]')"
                continue
            run = timed(lambda: _search(X, k, lib, params), repeats)
            for key, v in ((f"{name}_seconds", run.median), (f"{name}_cpu_seconds", run.cpu),
                           (f"{name}_recall", recall(run.result[0][qs], ref))):
                res.setdefault(key, []).append(v)
            print(f"n={n} {name}: {run.median:.1f} s, cpu {run.cpu:.1f} s, recall {res[name + '_recall'][-1]:.4f}",
                  file=__import__("sys").stderr, flush=True)
    for name, _, _ in runs:
        t = res.get(f"{name}_seconds")
        if t and len(t) > 1:
            logn = np.log(sizes[:len(t)])
            res[f"{name}_slope"] = float(np.polyfit(logn, np.log(t), 1)[0])
            res[f"{name}_cpu_slope"] = float(np.polyfit(logn, np.log(res[f"{name}_cpu_seconds"]), 1)[0])
    res["load_avg_after"] = load_avg()
    return res


def bench_knn(n=70000, ks=(10,), pca=50, repeats=3, raw=False, exact_repeats=None, approx=None, sizes=None,
              points=None):
    """Time the MNIST kNN graph: streamed PCA, then exact vs approximate search per k.

    Parameters
    ----------
    n : int
        First n MNIST images (L2-normalised), random unit vectors without ``$BIGCLUST_DATA``.
    ks : sequence of int
        Neighbours per point (the point itself excluded).
    pca : int
        Components of the streamed PCA (0: search the raw pixels only).
    repeats : int
        Runs per measurement; medians reported.
    raw : bool
        Also search the raw 784-d pixels (exact there is ~16x the PCA-50 work).
    exact_repeats : int or None
        Runs of the exact search (default ``repeats``; 1 keeps raw-pixel runs short).
    approx : sequence of str or None
        Names of :data:`APPROX_RUNS` to measure (None: all; pynndescent is always kept, as the baseline).

    sizes : sequence of int or None
        Growing n instead: :func:`bench_knn_sizes` (recall on 2000 sampled rows, slopes), k = ``ks[0]``.
    points : str or None
        With ``sizes``: a ``.npy`` file or zarr array whose prefixes are searched.

    Returns
    -------
    dict
        Machine and load before/after, sizes, ``*_seconds`` medians and their
        ``*_times``, ``*_recall`` vs exact, ``*_ratio_vs_pynndescent``.
    """
    from bigclust.algo.preprocess import pca_fit, pca_transform

    if sizes:
        return bench_knn_sizes(sorted(sizes), points, ks[0], repeats, approx, pca=pca or 50)

    exact_repeats = repeats if exact_repeats is None else exact_repeats
    runs = tuple(r for r in APPROX_RUNS if approx is None or r[0] in approx or r[0] == "pynndescent")
    res = {"machine": machine(), "n": n, "k": list(ks), "pca": pca, "repeats": repeats,
           "exact_repeats": exact_repeats}
    loaded = timed(lambda: load_points(n))
    X, _, res["data"] = loaded.result
    res["seconds_load"] = loaded.median
    res["d"] = X.shape[1]
    exact_raw = _space(X, ks, repeats, exact_repeats, res, "raw", runs) if raw or not pca else None
    if pca:
        def fit():
            mean, comps = pca_fit(X, pca)
            return pca_transform(X, mean, comps)

        run = timed(fit, repeats)
        Z = run.result
        _record(res, "pca", run)
        exact_pca = _space(Z, ks, repeats, exact_repeats, res, f"pca{pca}", runs)
        for k in ks:
            res[f"pca{pca}_k{k}_pca_plus_exact_seconds"] = res["pca_seconds"] + res[f"pca{pca}_k{k}_exact_seconds"]
            if exact_raw is not None:
                from bigclust.algo.knn import recall

                # how much of the raw-pixel neighbourhood survives the projection
                res[f"pca{pca}_k{k}_exact_recall_vs_raw_exact"] = recall(exact_pca[k], exact_raw[k])
    res["load_avg_after"] = load_avg()
    return res


def format_report(res: dict) -> str:
    """Human-readable lines of :func:`bench_knn`'s dict."""
    m = res["machine"]
    if "sizes" in res:
        lines = [f"machine: {m['cpu']}, {m['logical_cores']} logical cores; load {m['load_avg_1min']} before, "
                 f"{res['load_avg_after']} after; data {res['data']}; k={res['k']}; recall on {res['sample']} rows; "
                 f"medians of {res['repeats']} run(s)"]
        for name in [r[0] for r in APPROX_RUNS]:
            if f"{name}_seconds" in res:
                cells = "  ".join(f"n={n}: {t:.1f} s ({c:.1f} cpu) r={r:.4f}" for n, t, c, r in zip(
                    res["sizes"], res[f"{name}_seconds"], res[f"{name}_cpu_seconds"], res[f"{name}_recall"]))
                lines.append(f"  {name:18s} {cells}  slope {res.get(name + '_slope', float('nan')):.2f}")
        return "\n".join(lines)
    lines = [f"machine: {m['cpu']}, {m['logical_cores']} logical cores, {m['ram_gb']} GB, numba threads "
             f"{m['numba_threads']}; load average {m['load_avg_1min']} before, {res['load_avg_after']} after",
             f"data: {res['data']}; n={res['n']} d={res['d']}; repeats={res['repeats']} "
             f"(exact: {res['exact_repeats']}); medians of wall seconds (cpu: all threads of this process)"]
    if "pca_seconds" in res:
        lines.append(f"streamed PCA-{res['pca']}: {res['pca_seconds']:.2f} s (cpu {res['pca_cpu_seconds']:.2f} s)")
    names = ["exact"] + [r[0] for r in APPROX_RUNS]
    tags = [t for t in ("raw", f"pca{res['pca']}") if any(key.startswith(t + "_") for key in res)]
    for tag in tags:
        for k in res["k"]:
            lines.append(f"{tag}, k={k}:")
            for name in names:
                pre = f"{tag}_k{k}_{name}"
                if f"{pre}_skipped" in res:
                    lines.append(f"  {name:18s} skipped: {res[pre + '_skipped']}")
                    continue
                if f"{pre}_seconds" not in res:
                    continue
                ratio = res.get(f"{pre}_ratio_vs_pynndescent")
                lines.append(f"  {name:18s} {res[pre + '_seconds']:8.2f} s (cpu {res[pre + '_cpu_seconds']:7.2f} s)  "
                             f"recall@{k} {res[pre + '_recall']:.4f}"
                             + (f"  x{ratio:.3f} of pynndescent" if ratio is not None else ""))
            if tag != "raw":
                lines.append(f"  PCA + exact: {res[f'{tag}_k{k}_pca_plus_exact_seconds']:.2f} s"
                             + (f"; recall vs exact on raw pixels {res[f'{tag}_k{k}_exact_recall_vs_raw_exact']:.4f}"
                                if f"{tag}_k{k}_exact_recall_vs_raw_exact" in res else ""))
    return "\n".join(lines)
