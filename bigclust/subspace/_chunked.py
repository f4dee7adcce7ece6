"""Ak-SC at scale: the subspace stage streamed through zarr, its coefficient columns in resumable chunks.

``[subspace] chunk_cols = c > 0`` runs the pipeline's subspace stage here
instead of in one in-memory call (:func:`bigclust.subspace.subspace_affinity`).
Every step writes into the stage's scratch group in the store, ``work/subspace-<key>``,
behind a marker that is written only once its arrays are
(:mod:`bigclust.pipeline.resumable`, as the chunked kNN stage's), so a run
killed anywhere resumes at the first step or chunk without a marker:

1. augmentation: none stored.  The copies are a function of (seed, row) -- every random draw is made up
   front -- so :class:`AugmentedRows` makes the rows a pass reads when it reads them (one Numba kernel
   call per chunk, ndimage's copies bit for bit: :func:`bigclust.subspace.transforms.transform_rows`):
   making them in every pass costs a few CPU-seconds a pass (storing them cost 20 minutes at MNIST-70k);
2. features: PCA fitted on the originals and their copies together, in passes over row chunks of
   ``[X; copies]`` (:func:`bigclust.algo.preprocess.pca_fit`, the chunks of the in-memory path, so
   the same bits), its mean and components kept (marker ``pca``); then the unit-norm dictionary
   ``atoms`` (N x pca float64), the copies projected ``[subspace] augment_chunk_rows`` source images at
   a time.  X itself is never read whole: every pass reads its stored rows by zarr chunk
   (:class:`bigclust.subspace.features.BlockRows`) and makes their copies then, so the step holds a block
   and its output (mnist-1m with 2 copies: 3M atoms, 1.2 GB; X would be 3.1 GB, 6.3 GB in float64);
3. the dictionary kNN N_i (exact below 20000 originals, NN-descent above, or ``[subspace] knn`` =
   ``"ivf"`` / ``"ivf-rows"``, :mod:`bigclust.algo.knn`'s inverted files, for a million points:
   :func:`bigclust.subspace.knn_dictionary`) behind its marker, and SSC's lambda.  ``"ivf-rows"`` runs in
   resumable chunks of ``c`` atoms, one Dask task each (:func:`knn_ivf_rows_chunked`: its partition,
   then its probe pass and refine passes, as the pipeline's kNN stage), the same lists as the one call;
   the other searches are one call;
4. the coefficient columns in chunks of ``c`` columns, one Dask task per chunk
   (on the workers of a ``dask.distributed`` cluster with ``--scheduler``, else
   one after the other in this process), each writing its rows of ``coef``
   and then its marker ``done/<i>``: a resume computes only the chunks
   without a marker.  A task receives only its columns' samples and their k
   gathered atoms (c x k x d floats), so its memory is bounded by the chunk,
   not by n; the driver keeps the dictionary (needed by the kNN search anyway);
5. fold-back and W = |C̄| + |C̄|ᵀ, committed with the neighbour lists and the
   coefficients; the scratch group is then removed.

Every step's wall and CPU seconds and the peak RSS after it are attributes of the stage
(``<step>_seconds``, ``<step>_cpu_seconds``, ``<step>_peak_rss_mb`` for augment -- the share of the
passes spent making copies --, pca, atoms, features = both, knn, coef, fold), which the plug-in
reports in ``results.json``: the CPU of this process and of the Dask workers that ran the step's
chunks, the peak RSS of the largest of them (:class:`StepClock`).

The per-column solver is the in-memory one (:func:`bigclust.subspace.selfexpr.admm_knn`,
:func:`bigclust.subspace._numba.ridge_columns`) on a chunk's gathered atoms: columns are independent, so
the coefficients equal the in-memory ones bit for bit on the same dictionary and supports, whatever the
chunk size and wherever the chunks run.  The scratch group records what it was made for (n, k, chunk
sizes, features, augmentation, seed); a resume with other values starts afresh.
"""
from __future__ import annotations

import shutil
import time

import numpy as np

from bigclust._util.errors import DataError, UserError
from bigclust._util.plan import peak_rss_mb
from bigclust.pipeline import resumable

#: rows per chunk of the PCA passes (the in-memory path's default, so the sums are added in the same order)
PCA_CHUNK_ROWS = 4096
#: fewest rows of X per block of the originals' projection (OpenBLAS gives a slice of at least this many
#: rows the bits of the one-shot product; it rounds otherwise only on its small-matrix path, ~100 rows)
PROJECT_ROWS = 4096


class AugmentedRows:
    """The augmented copies of X's images as a row-sliceable array that makes its rows when read.

    Row ``a`` is copy ``a % per`` of image ``a // per`` (sample-major, :mod:`bigclust.subspace.transforms`);
    ``self[a0:a1]`` transforms the images those rows come from (one kernel call), so a pass over the
    copies costs their making and no store: the copies are a function of (seed, row).  ``seconds`` /
    ``cpu_seconds`` add up the time spent making copies, over every pass.
    """

    def __init__(self, X, plan, shape, order, dtype):
        from bigclust.subspace.transforms import warp_params
        self.X, self.plan, self.shape_, self.order, self.dtype = X, plan, shape, order, np.dtype(dtype)
        self.per = plan.per
        self.params = warp_params(plan, shape)     # every copy's coordinates map, formed once for all passes
        self.shape = (X.shape[0] * self.per, X.shape[1])
        self.seconds = self.cpu_seconds = 0.0

    def __getitem__(self, s):
        from bigclust.subspace.transforms import transform_rows
        a0, a1, _ = s.indices(self.shape[0])
        if a1 <= a0:
            return np.empty((0, self.shape[1]), dtype=self.dtype)
        t0, c0 = time.perf_counter(), time.process_time()
        i0, i1 = a0 // self.per, -(-a1 // self.per)
        rows = transform_rows(self.X, i0, i1, self.shape_, self.order, self.plan, self.dtype, params=self.params)
        self.seconds += time.perf_counter() - t0
        self.cpu_seconds += time.process_time() - c0
        return rows[a0 - i0 * self.per:a1 - i0 * self.per]


# -- steps 1-3: augmentation, features, kNN -------------------------------------------------------


def augment_step(X, augment, seed, image_shape=None, order=None):
    """``(copies, origin)``: the augmented copies of X (:class:`AugmentedRows`, made when read) and their
    sources.  ``augment``: a preset name or a description (:mod:`bigclust.subspace.transforms`); every
    random draw is made here, up front, so a copy does not depend on which chunk or pass reads it."""
    from bigclust.subspace.augment import _check_images, resolve
    from bigclust.subspace.transforms import plan

    desc, shape, order = resolve(augment, image_shape, order)
    if callable(desc):   # only Python code passes a callable, and it augments in memory (chunk_cols = 0)
        raise UserError("[subspace] chunk_cols streams preset or table augmentations; a callable augment runs "
                        "in memory (set chunk_cols = 0)")
    n, d = X.shape
    _, shape = _check_images(np.empty((0, d)), shape, order)
    for r0 in range(0, n, 1 << 14):      # once here: the passes then read rows known to be finite
        if not np.all(np.isfinite(X[r0:r0 + (1 << 14)])):
            raise DataError(f"X rows {r0}..{min(n, r0 + (1 << 14)) - 1} contain NaN or infinite values")
    pl = plan(n, desc, seed)
    dtype = np.float32 if X.dtype == np.float32 else np.float64
    return AugmentedRows(X, pl, shape, order, dtype), np.repeat(np.arange(n, dtype=np.int64), pl.per)


def features_step(X, g, work, aug, n_components, chunk_rows, log=resumable.say):
    """Unit-norm dictionary atoms (originals then copies) into ``g["atoms"]`` (marker ``atoms``).

    The PCA reads ``[X; copies]`` in ``n_iter + 2`` passes, the copies made anew in each
    (:class:`AugmentedRows`), and its mean and components are kept behind the marker ``pca``; a last pass
    projects the originals in blocks of :data:`PROJECT_ROWS` to ``2 PROJECT_ROWS`` rows and the copies
    ``chunk_rows`` source images at a time.  ``X`` is only ever sliced (zarr rows, :class:`BlockRows`): what
    this step holds besides a block is its output, the atoms (N x pca float64).  Returns ``(atoms, steps)``.
    """
    from bigclust.algo.preprocess import pca_fit, pca_transform
    from bigclust.subspace.features import Stacked

    if "atoms" in resumable.finished(work):
        return np.asarray(g["atoms"][...]), {}
    n = X.shape[0]
    N = n + (0 if aug is None else aug.shape[0])
    steps = {}
    t0, c0 = time.perf_counter(), time.process_time()
    if n_components and "pca" in resumable.finished(work):
        mean, comps = np.asarray(g["pca_mean"][...]), np.asarray(g["pca_components"][...])
    elif n_components:
        src = X if aug is None else Stacked(X, aug)
        mean, comps = pca_fit(src, int(n_components), chunk_rows=PCA_CHUNK_ROWS)
        g.create_array("pca_mean", shape=mean.shape, dtype=np.float64, overwrite=True)[...] = mean
        g.create_array("pca_components", shape=comps.shape, dtype=np.float64, overwrite=True)[...] = comps
        resumable.mark(work, "pca", f"{time.perf_counter() - t0:.3f}")
    steps["pca"] = (time.perf_counter() - t0, time.process_time() - c0, peak_rss_mb())
    t0, c0 = time.perf_counter(), time.process_time()
    dim = int(n_components) if n_components else X.shape[1]
    out = np.empty((N, dim))
    # blocks of >= PROJECT_ROWS rows: the bits of the one-shot product (tests/test_subspace_stream_blocks.py)
    cuts = np.linspace(0, n, max(1, n // PROJECT_ROWS) + 1).astype(np.int64)
    for r0, r1 in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        blk = np.asarray(X[r0:r1], dtype=np.float64)
        out[r0:r1] = _unit_block(pca_transform(blk, mean, comps) if n_components else blk, "X", r0)
    if aug is not None:
        step = int(chunk_rows) * aug.per
        for a0 in range(0, aug.shape[0], step):
            blk = np.asarray(aug[a0:a0 + step], dtype=np.float64)
            feat = pca_transform(blk, mean, comps) if n_components else blk
            out[n + a0:n + a0 + blk.shape[0]] = _unit_block(feat, "X_aug", a0)
    A = g.create_array("atoms", shape=(N, dim), chunks=(min(N, 1 << 16), dim), dtype=np.float64, overwrite=True)
    for a0 in range(0, N, A.chunks[0]):   # a chunk at a time: a whole-array write encodes ~10 chunks at once
        A[a0:a0 + A.chunks[0]] = out[a0:a0 + A.chunks[0]]
    resumable.mark(work, "atoms", f"{time.perf_counter() - t0:.3f}")
    steps["atoms"] = (time.perf_counter() - t0, time.process_time() - c0, peak_rss_mb())
    log(f"  subspace: features ({'PCA-' + str(n_components) if n_components else 'raw'}, {N} atoms) "
        f"{steps['pca'][0] + steps['atoms'][0]:.1f} s")
    return out, steps


def _unit_block(M, what, r0):
    """Rows of a block scaled to unit length; an all-zero row is named by its row in all of X (or X_aug)."""
    from bigclust.subspace.dictionary import _unit_rows

    try:
        return _unit_rows(M, what)
    except DataError as e:
        raise DataError(f"{e}; the row counted within {what}'s rows {r0}..{r0 + M.shape[0] - 1}") from None


def dictionary_of(atoms, n, origin):
    """The :class:`Dictionary` of already unit-norm atoms (rows n.. made from ``origin``)."""
    from bigclust.subspace.dictionary import build_dictionary

    # build_dictionary would scale the atoms again (a no-op up to rounding) in two more N x pca arrays: its
    # ownership maps come from a one-column stand-in, the atoms are given as they are
    D = build_dictionary(np.ones((n, 1)), None if origin is None else np.ones((atoms.shape[0] - n, 1)), origin)
    D.atoms = atoms
    return D


def knn_step(D, g, work, k, method, seed, chunk_rows=0, *, client=None, log=resumable.say):
    """The supports N_i into ``g["nb"]`` (marker ``knn``).

    ``method = "ivf-rows"`` on atoms of at most :data:`~bigclust.algo.knn.ivf_rows.PROJECT_ABOVE` dimensions
    with ``chunk_rows > 0`` runs in resumable chunks (:func:`knn_ivf_rows_chunked`: the same lists); every
    other search is one call here.
    """
    from bigclust.algo.knn.ivf_rows import PROJECT_ABOVE
    from bigclust.subspace.dictionary import knn_dictionary

    if "knn" in resumable.finished(work):
        return np.asarray(g["nb"][...])
    t0 = time.perf_counter()
    if method == "ivf-rows" and chunk_rows and D.atoms.shape[1] <= PROJECT_ABOVE:
        nb = knn_ivf_rows_chunked(D, int(k), work, int(chunk_rows), int(seed), client=client, log=log)
    else:
        nb = knn_dictionary(D, int(k), method=method, random_state=seed)
    g.create_array("nb", shape=nb.shape, dtype=np.int64, overwrite=True)[...] = nb
    resumable.mark(work, "knn", f"{time.perf_counter() - t0:.3f}")
    log(f"  subspace: dictionary kNN ({method}, k={k}) {time.perf_counter() - t0:.1f} s")
    return nb


def knn_pass_task(Xs, source, p0, p1, q, probe, work, r):
    """Pass r of the dictionary's ``ivf-rows`` search on positions ``p0:p1`` of the cell-sorted atoms Xs, into
    rows of the scratch arrays ``knn_nbr<r>`` / ``knn_d<r>``.  ``source``: the partition (pass 0 probes each
    row's nearest cells) or every row's lists of pass r - 1 (refined)."""
    import zarr

    from bigclust.algo.knn import ivf_rows

    if r == 0:
        ind, d2 = ivf_rows.fill_missing(Xs, *ivf_rows.search_rows(Xs, source, q, p0, p1, probe), p0)
    else:
        ind, d2 = ivf_rows.refine_rows(Xs, source, p0, p1)
    g = zarr.open_group(str(work), mode="r+")
    g[f"knn_nbr{r}"][p0:p1] = ind
    g[f"knn_d{r}"][p0:p1] = d2


def knn_ivf_rows_chunked(D, k, work, chunk_rows, seed, *, client=None, log=resumable.say):
    """The supports of ``knn_dictionary(D, k, method="ivf-rows", random_state=seed)`` in resumable chunks.

    The search of :func:`bigclust.algo.knn.ivf_rows.knn_ivf_rows_lists` over the float32 atoms, cut where
    the kNN stage cuts it (:mod:`bigclust.pipeline.stages.knn`): the partition once, behind the marker
    ``knn-partition``; then pass 0 (each atom probing its nearest cells) and the refine passes, each in
    chunks of ``chunk_rows`` positions of the cell-sorted atoms, one task per chunk on the ``client``'s
    workers (else here), each writing its rows and then its marker ``knn<pass>c<chunk_rows>-<i>``.  A row's
    list depends on the stored partition and the previous pass only, so the lists are the one-call
    search's whatever the chunking and wherever the chunks run; the originals' candidates are then
    filtered as there (never i nor A(i)).
    """
    from bigclust.algo.knn import ivf_rows
    from bigclust.subspace.dictionary import candidates_filtered, n_candidates, search_inputs

    k, y, lab = search_inputs(D, k)
    q = n_candidates(D, k)                 # other atoms per list: the search's k is q + 1 (itself first)
    N, n = D.n_atoms, D.n
    C, P, R = ivf_rows.resolve(N, 0, 0)
    spec = {"shape": (N, q), "chunks": (chunk_rows, q)}
    arrays = {}
    for r in range(R + 1):
        arrays[f"knn_nbr{r}"] = spec | {"dtype": np.int64, "fill_value": -1}
        arrays[f"knn_d{r}"] = spec | {"dtype": np.float64, "fill_value": 0}
    g = resumable.open_work(work, {"chunk_rows": int(chunk_rows), "q": int(q), "cells": int(C), "probe": int(P),
                                   "refine": int(R)}, section="knn", arrays=arrays)
    X = np.ascontiguousarray(D.atoms, dtype=np.float32)      # the one-call search's input, and ours to sort
    if "knn-partition" not in resumable.finished(work):
        t0 = time.perf_counter()
        part = ivf_rows.partition(X, C, random_state=seed)
        for name in ("cent", "graph", "order", "off"):
            a = getattr(part, name)
            g.create_array(f"knn_{name}", shape=a.shape, dtype=a.dtype, overwrite=True)[...] = a
        resumable.mark(work, "knn-partition", f"{time.perf_counter() - t0:.3f}")
        log(f"  subspace: dictionary kNN (ivf-rows): {part.cent.shape[0]} cells, {P} probed per atom, {R} refine "
            f"pass(es); partition {time.perf_counter() - t0:.1f} s")
    part = ivf_rows.Partition(*(np.asarray(g[f"knn_{name}"][...]) for name in ("cent", "graph", "order", "off")))
    ivf_rows.sort_rows(X, part)
    chunks = resumable.chunk_bounds(N, chunk_rows)
    for r in range(R + 1):
        # int32 positions: half the bytes sent to every worker; read by chunk, never an int64 copy whole
        source = part if r == 0 else np.empty((N, q), np.int32)
        for p0 in range(0, N if r else 0, chunk_rows):
            source[p0:p0 + chunk_rows] = g[f"knn_nbr{r - 1}"][p0:p0 + chunk_rows]
        # the chunk size in the markers' names: a resume with another size does not read the old ones
        resumable.run_chunks(work, chunks, knn_pass_task, lambda i, a, b, r=r: (a, b, q, P, str(work), r),
                             shared=(X, source), prefix=f"knn{r}c{chunk_rows}-", client=client, log=log,
                             title=f"subspace: dictionary kNN pass {r}, {len(chunks)} chunks of {chunk_rows} atoms",
                             what=f"dictionary kNN pass {r} chunk")
        del source
    del X
    cand = np.empty((n, q), np.int64)
    for p0 in range(0, N, chunk_rows):      # positions -> atoms, each list sorted by (distance, atom)
        rows, ind, _ = ivf_rows.to_rows(part.order, g[f"knn_nbr{R}"][p0:p0 + chunk_rows],
                                        g[f"knn_d{R}"][p0:p0 + chunk_rows], p0)
        keep = rows < n
        cand[rows[keep]] = ind[keep, 1:]
    return candidates_filtered(D, cand, k, y, lab)


# -- step 4: coefficient columns in chunks --------------------------------------------------------


def gather_chunk(D, nb, c0, c1):
    """A chunk's inputs: its samples (c, d) and their gathered atoms (c*k, d), local supports (c, k)."""
    sub = nb[c0:c1]
    A = np.ascontiguousarray(D.atoms[sub.ravel()])
    return np.ascontiguousarray(D.atoms[c0:c1]), A, np.arange(A.shape[0], dtype=np.int64).reshape(sub.shape)


def solve_chunk(Xs, A, local_nb, regularizer, lam, max_iter=0):
    """Coefficients (c, k), iterations and convergence of one chunk's columns (the in-memory solvers).

    ``max_iter``: ADMM iterations per column, 0 = the default (``selfexpr.MAX_ITER``).
    """
    from bigclust.subspace import _numba
    from bigclust.subspace.selfexpr import EPS_ABS, EPS_REL, MAX_ITER, RELAX, RHO_L1, admm_knn

    c, k = local_nb.shape
    if regularizer == "l2":
        out = np.empty((c, k))
        _numba.ridge_columns(A, Xs, local_nb, float(lam), out)
        return out, np.zeros(c, dtype=np.int64), np.ones(c, dtype=np.bool_)
    thr = np.full((c, k), float(lam))
    return admm_knn(Xs, A, local_nb, thr, 0.0, RHO_L1, EPS_ABS, EPS_REL, max_iter or MAX_ITER, True, RELAX)


def coef_task(Xs, A, local_nb, regularizer, lam, work, c0, c1, max_iter=0):
    """One chunk (columns c0:c1, here or on a worker): solve, then its rows of ``coef`` / ``iters`` / ``conv``."""
    import zarr

    out, its, conv = solve_chunk(Xs, A, local_nb, regularizer, lam, max_iter)
    g = zarr.open_group(str(work), mode="r+")
    g["coef"][c0:c1] = out
    g["iters"][c0:c1] = its
    g["conv"][c0:c1] = conv


def coefficients_chunked(D, nb, regularizer, lam, chunk_cols, work, *, client=None, log=resumable.say,
                         max_in_flight=4, max_iter=0):
    """All coefficient columns (n, k) by resumable chunks; returns ``(coef, iters, conv, computed)``.

    ``work`` is a folder (created if needed) holding the scratch arrays and markers;
    chunks with a marker are not recomputed.  With a ``dask.distributed``
    ``client`` every missing chunk is a task on the cluster (at most
    ``max_in_flight`` per worker submitted at a time, so the driver never holds
    more than that many gathered chunks); without one they run here in turn.
    """
    if regularizer not in ("l1", "l2"):
        raise UserError(f"chunked coefficients are per column: regularizer {regularizer!r} is not "
                        "(LRR's nuclear norm couples the columns); set [subspace] chunk_cols = 0")
    n, k = nb.shape
    want = {"n": int(n), "k": int(k), "chunk_cols": int(chunk_cols), "regularizer": regularizer,
            "lam": float(lam)}
    if max_iter:                  # only when set: folders of earlier runs (without the key) stay resumable
        want["max_iter"] = int(max_iter)
    # a section of the stage's group: other settings redo the coefficients only, not steps 1-3
    g = resumable.open_work(work, want, section="coef", arrays={
        "coef": {"shape": (n, k), "chunks": (chunk_cols, k), "dtype": np.float64},
        "iters": {"shape": (n,), "chunks": (chunk_cols,), "dtype": np.int64},
        "conv": {"shape": (n,), "chunks": (chunk_cols,), "dtype": np.bool_}})
    chunks = resumable.chunk_bounds(n, chunk_cols)
    computed = resumable.run_chunks(
        work, chunks, coef_task, lambda i, c0, c1: (*gather_chunk(D, nb, c0, c1), regularizer, float(lam),
                                                    str(work), c0, c1, max_iter),
        prefix="coef-", client=client, max_in_flight=max_in_flight, log=log,
        title=f"subspace: coefficients in {len(chunks)} chunks of {chunk_cols} columns", what="coefficient chunk")
    return np.asarray(g["coef"][...]), np.asarray(g["iters"][...]), np.asarray(g["conv"][...]), computed


# -- the stage ------------------------------------------------------------------------------------


def _usage():
    """CPU seconds (all threads) and peak RSS (MB) of this process so far."""
    import os

    t = os.times()
    return t.user + t.system, peak_rss_mb()


def workers_usage(client):
    """``{worker: (CPU seconds, peak RSS MB)}`` of the processes of a ``dask.distributed`` client ({} without)."""
    return {} if client is None else client.run(_usage)


class StepClock:
    """The steps' ``{name: (wall s, CPU s, peak RSS MB so far)}``: CPU of this process (all its threads) and of
    the client's workers, which run the chunks; the RSS of the largest of those processes."""

    def __init__(self, client=None, log=None):
        self.client, self.log, self.steps = client, log, {}
        self.start()

    def start(self):
        """A step starts now."""
        self.t0, self.c0, self.w0 = time.perf_counter(), time.process_time(), workers_usage(self.client)

    def stop(self, name):
        """Step ``name`` ends now (and the next one starts); returns every step so far."""
        w1 = workers_usage(self.client)
        cpu = time.process_time() - self.c0 + sum(v[0] - self.w0.get(a, (0.0, 0.0))[0] for a, v in w1.items())
        wall, rss = time.perf_counter() - self.t0, max([peak_rss_mb()] + [v[1] for v in w1.values()])
        self.steps[name] = (wall, cpu, rss)
        if self.log:     # now, not only with the stage's attributes: a run killed later still said it
            self.log(f"  subspace: {name} step {wall:.1f} s, {cpu:.1f} CPU-s, largest process {rss:.0f} MB")
        self.start()
        return self.steps


def step_attrs(steps):
    """``{<step>_seconds, <step>_cpu_seconds, <step>_peak_rss_mb}`` of ``{step: (wall, cpu, rss)}``."""
    out = {}
    for name, (wall, cpu, rss) in steps.items():
        out.update({f"{name}_seconds": float(wall), f"{name}_cpu_seconds": float(cpu),
                    f"{name}_peak_rss_mb": float(rss)})
    return out


def _checked(mp):
    """The method's parameters, if the chunked path runs them: else a one-line :class:`UserError`."""
    if mp.regularizer == "nuclear" or mp.n_neighbors == 0:
        raise UserError("[subspace] chunk_cols needs per-column problems on kNN supports: regularizer \"l1\" or "
                        "\"l2\" and n_neighbors >= 1 (set chunk_cols = 0 for LRR and the full dictionary)")
    if getattr(mp, "features", "pixels") != "pixels":
        raise UserError("[subspace] chunk_cols streams pixel features (with [aksc] pca); [aksc] features = "
                        f"\"{mp.features}\" runs in memory only (set chunk_cols = 0)")
    return mp


def subspace_chunked(store_path, key, attrs, p, *, client=None, log=resumable.say, **_):
    """The subspace stage's W by the streamed, resumable path (see the module docstring).

    ``p`` is the stage's :class:`bigclust.pipeline.stages.SubspaceParams` with ``chunk_cols > 0``.
    The stage's attributes record the seconds of every step, ``coef_chunks`` =
    [total, computed by this run, reused], the chunks computed, lambda and the
    driver's peak RSS.
    """
    import warnings

    from bigclust.pipeline import methods
    from bigclust.pipeline.store import Store, is_sparse, read_matrix, write_csr, write_dense
    from bigclust.subspace.augment import aksc_layout
    from bigclust.subspace.features import BlockRows
    from bigclust.subspace.fold import affinity, fold_back
    from bigclust.subspace._common import ConvergenceWarning, assemble
    from bigclust.subspace.selfexpr import LAM_L2, ssc_lambda

    mp = _checked(methods.get(p.method).make(p.method_params))
    store = Store(store_path)
    grp = store.open(p.src, p.input)
    if is_sparse(grp, "X"):     # documents, never images: read whole as before
        X = np.ascontiguousarray(read_matrix(grp, "X").toarray())
    else:                       # the stored rows, read block by block by every pass (mnist-1m: 3.1 GB whole)
        X = BlockRows(grp["X"])
    n = X.shape[0]
    work = resumable.work_dir(store_path, "subspace", key)
    layout = aksc_layout(mp.image, mp.image_shape, mp.order)
    want = {"n": int(n), "augment": mp.augment, "pca": int(mp.pca), "seed": int(p.seed),
            "augment_chunk_rows": int(p.augment_chunk_rows), "k": int(mp.n_neighbors), "knn": p.knn or "auto",
            "layout": [None if layout[0] is None else list(layout[0]), layout[1]]}
    # "stream": the copies are made in every pass, not stored; a folder of the older layout starts afresh
    g = resumable.open_work(work, {**want, "stream": 1})
    clock = StepClock(client, log)
    if mp.augment == "none":
        aug = origin = None
    else:
        aug, origin = augment_step(X, mp.augment, int(p.seed), *layout)
    atoms, feat = features_step(X, g, work, aug, mp.pca, int(p.augment_chunk_rows), log)
    del X
    D = dictionary_of(atoms, n, origin)
    steps = clock.stop("features")
    if aug is not None:   # the copies are made inside the PCA and projection passes: their share, apart
        steps["augment"] = (aug.seconds, aug.cpu_seconds, feat.get("pca", (0, 0, peak_rss_mb()))[2])
    steps.update(feat)
    nb = knn_step(D, g, work, mp.n_neighbors, p.knn or "auto", int(p.seed), int(p.chunk_cols), client=client,
                  log=log)
    clock.stop("knn")
    if mp.regularizer == "l2":
        lam = mp.lam or LAM_L2
    else:
        # as self_expression(None, ...): the rule sees the samples re-scaled by _samples (same bits)
        lam = mp.lam or ssc_lambda(D.atoms[:n], D, nb, mp.alpha)
    clock.start()      # lambda's seconds are not the coefficients'
    coef, its, conv, computed = coefficients_chunked(D, nb, mp.regularizer, lam, int(p.chunk_cols), work,
                                                     client=client, log=log, max_iter=mp.max_iter)
    clock.stop("coef")
    n_bad = int((~conv).sum())
    if n_bad:
        from bigclust.subspace.selfexpr import MAX_ITER
        warnings.warn(f"ADMM: {n_bad} of {n} columns reached max_iter={mp.max_iter or MAX_ITER} before the "
                      "primal and dual residuals fell below their tolerances", ConvergenceWarning, stacklevel=2)
    clock.start()
    W = affinity(fold_back(assemble(nb, coef, D), D))
    clock.stop("fold")
    total = len(resumable.chunk_bounds(n, int(p.chunk_cols)))
    with store.write("subspace", key, attrs) as out:
        write_csr(out, "K", W)
        write_dense(out, "neighbors", nb)
        write_dense(out, "coef", coef)
        out.attrs.update({"nnz": int(W.nnz), "n_atoms": int(D.n_atoms), "lam": float(lam),
                          "coef_chunks": [total, len(computed), total - len(computed)],
                          "coef_chunks_computed": computed, "admm_not_converged": n_bad,
                          "admm_iter_median": float(np.median(its)), "n_iter": int(np.max(its, initial=0)),
                          "driver_peak_rss_mb": peak_rss_mb(), **step_attrs(steps)})
    log("  subspace: " + ", ".join(f"{k_} {v[0]:.1f} s ({v[1]:.1f} CPU-s)" for k_, v in steps.items())
        + f"; peak RSS {peak_rss_mb():.0f} MB")
    shutil.rmtree(work, ignore_errors=True)
