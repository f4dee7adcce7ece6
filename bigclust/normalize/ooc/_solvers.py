"""The out-of-core solvers: BBS (Alg. 1), symmetric Sinkhorn-Knopp and MBBS over zarr row blocks."""
from __future__ import annotations

import numpy as np

from bigclust._util import progress
from bigclust._util.errors import DataError, UserError
from bigclust.normalize._common import NormalizeInfo
from bigclust.algo.blocks import blocks_for, budget, map_blocks, read_rows
from bigclust._util.plan import consumer_rows
from bigclust.normalize.ooc._io import _check, _check_args, _first_pass, _not_converged, _scan_part


def _nb():
    from bigclust.normalize import _numba as normalize_numba

    return normalize_numba


# -- block kernels ------------------------------------------------------
#
# A block kernel ``fn(blk, row0, serial, *args) -> (result, to_write)`` works on
# one row block already in memory; it is module level so that Dask can pickle
# it.  ``serial`` picks the nogil kernel inside Dask tasks and the prange one
# in-process (one level of parallelism).


def _k_bbs_scan(blk, r0, serial, idx):
    rs = blk.sum(axis=1, dtype=np.float64)  # what the in-memory solver starts from
    return (rs, _scan_part(blk, r0, idx, False, "BBS", rs)), blk


def _k_bbs_alt(blk, r0, serial, r, S, codes):
    nb, b = _nb(), blk.shape[0]
    out = np.empty(b)
    (nb.bbs_alt_pass_serial if serial else nb.bbs_alt_pass)(blk, r, S, r0, out)
    rc = None
    if codes is not None:  # same-class sums of the new rows, for MC (no extra I/O)
        rc, rs = np.empty(b), np.empty(b)
        (nb.quality_block_serial if serial else nb.quality_block)(blk, codes, r0, rs, rc)
    return (out, rc), blk


def _k_sk_matvec(blk, r0, serial, d):
    out = np.empty(blk.shape[0])
    (_nb().sk_matvec_block_serial if serial else _nb().sk_matvec_block)(blk, d, out)
    return out, None


def _k_sk_scan(blk, r0, serial, idx):
    Kd = _k_sk_matvec(blk, r0, serial, np.ones(blk.shape[1]))[0]  # K d for d = 1, as in memory
    return (Kd, _scan_part(blk, r0, idx, True, "Sinkhorn scaling", Kd)), None


def _k_sk_form(blk, r0, serial, d, dtype):
    if serial:
        # normalize._numba.sk_form has no serial twin; these are its operations,
        # ((d_i K_ij) d_j) in float64 then one rounding, so the values agree bit for bit
        P = ((d[r0:r0 + blk.shape[0], None] * blk) * d[None, :]).astype(dtype, copy=False)
        return P.sum(axis=1, dtype=np.float64), P
    P = blk if blk.dtype == dtype else np.empty(blk.shape, dtype=dtype)  # sk_form may work in place
    out = np.empty(blk.shape[0])
    _nb().sk_form(blk, d, d, r0, P, out)
    return out, P


# -- BBS (paper 000, Alg. 1) --------------------------------------------------------------


def bbs_blocked(K, G, *, n_iter=1000, tol=None, max_memory, y=None, record_every=0, client=None,
                callback=None):
    """Alg. 1 (alternating projection) of Euclidean BBS with K and G in zarr.

    Each iteration reads every row block of G, applies
    ``G <- max(G + (1 + S/n)/n 11^T - (r 1^T + 1 r^T)/n, 0)`` with the row sums
    ``r`` and total ``S`` of the *previous* G, writes the block back and
    collects its new row sums.  The first iteration reads K instead of G (no
    copy of K).  G then equals the in-memory ``bbs(K, "alternating", n_iter,
    tol)`` bit for bit, for an exactly symmetric K (that solver symmetrises a
    K with round-off asymmetry first, which needs column blocks here).

    Parameters
    ----------
    K : zarr.Array, shape (n, n)
        Symmetric, finite kernel, chunked by rows (like G, so that no chunk is
        read twice).  Read only.
    G : zarr.Array, shape (n, n), float32 or float64
        Output, e.g. :func:`create_like`; its dtype is the iterate's storage
        type.  Blocks are whole chunks of G: chunk it in rows that fit.
    n_iter : int
        Iterations; 0 copies K into G.
    tol : float or None
        Stop when ``max_i |sum_j G_ij - 1| <= tol`` (None: run all).
    max_memory : int or str
        Budget for the blocks in flight (``"1GB"``); with a client, each task
        holds one block.
    y, record_every
        Class labels and the interval of the ``(iteration, MB, MC)`` history
        (0: none), as in :func:`bigclust.normalize.bbs`.
    client : distributed.Client, optional
        One task per row block on the cluster (store on a shared file system).
    callback : callable, optional
        ``callback(t, row_err)`` after every iteration, and with ``t = 0``
        after the first pass (which only reads K).

    Returns
    -------
    NormalizeInfo
        ``method="bbs/alternating-ooc"``; G holds the result.
    """
    _check(K, G, "G", client)
    n_iter, tol, record_every = _check_args(n_iter, tol, record_every)
    n, dt = K.shape[0], np.dtype(G.dtype)
    codes = None if y is None else np.unique(np.ravel(y), return_inverse=True)[1].astype(np.int64)
    if codes is not None and codes.size != n:
        raise DataError(f"y has {codes.size} labels but K has {n} rows")
    itemsize = max(dt.itemsize, np.dtype(K.dtype).itemsize)
    blocks = blocks_for(G, consumer_rows("normalize", n, itemsize, budget(max_memory)))
    ring = [None] * 3
    r = _first_pass(client, ring, blocks, _k_bbs_scan, K, dt, G if n_iter == 0 else None)
    err, converged, t, history = float(np.abs(r - 1.0).max()), False, 0, []
    if callback is not None:
        callback(0, err)
    r_new, rc = np.empty(n), np.empty(n)
    for t in progress.iterate(range(1, n_iter + 1), "BBS (alternating, out of core)"):
        due = record_every > 0 and t % record_every == 0
        want_rc = due and codes is not None
        src = K if t == 1 else G
        parts = map_blocks(client, ring, blocks, _k_bbs_alt, src, dt, G, r, float(r.sum()), codes if want_rc else None)
        for (r0, r1), (rs, rcb) in zip(blocks, parts):
            r_new[r0:r1] = rs
            if want_rc:
                rc[r0:r1] = rcb
        r, r_new = r_new, r
        err = float(np.abs(r - 1.0).max())
        if due:
            history.append((t, float(np.mean(np.abs(r - 1.0))),
                            float(np.mean(np.abs(rc - 1.0))) if want_rc else float("nan")))
        if callback is not None:
            callback(t, err)
        if tol is not None and err <= tol:
            converged = True
            break
    if tol is not None and not converged:
        _not_converged("BBS (alternating, out of core)", t, err, tol)
    return NormalizeInfo(n_iter=t, converged=converged or tol is None, row_err=err, history=history,
                         method="bbs/alternating-ooc")


# -- Sinkhorn-Knopp (symmetric) -------------------------------------------------------------


def sinkhorn_blocked(K, P_out, *, n_iter=1000, tol=None, max_memory, client=None):
    """Symmetric Sinkhorn-Knopp ``d <- sqrt(d / (K d))`` streaming K, then ``P = diag(d) K diag(d)``.

    Each iteration is one read of K (the row sums of the current P are
    ``d * (K d)``); at the end P is formed block by block into ``P_out``.
    Equals the in-memory ``sinkhorn(K, n_iter, tol)`` bit for bit.

    Parameters
    ----------
    K : zarr.Array, shape (n, n)
        Symmetric, finite, ``K >= 0`` with total support; read only.
    P_out : zarr.Array, shape (n, n), float32 or float64, or None
        Output, chunked by rows (e.g. :func:`create_like`).  None: only the
        scaling ``d`` is computed, for callers that apply
        ``diag(d) K diag(d)`` as an operator (iterated Ncut) without writing it.
    n_iter, tol
        Maximum iterations; stop when the max row-sum error is ``<= tol``.
    max_memory, client
        As in :func:`bbs_blocked`.

    Returns
    -------
    NormalizeInfo
        ``method="sk/symmetric-ooc"``, ``mu`` holds ``d``; ``row_err`` is that
        of the written P (of ``d * (K d)`` without ``P_out``).
    """
    _check(K, P_out, "P_out", client)
    n_iter, tol, _ = _check_args(n_iter, tol, 0)
    n, kt = K.shape[0], np.dtype(K.dtype)
    out = K if P_out is None else P_out
    blocks = blocks_for(out, consumer_rows("normalize", n, max(kt.itemsize, np.dtype(out.dtype).itemsize),
                                              budget(max_memory)))
    ring = [None] * 3
    Kd = _first_pass(client, ring, blocks, _k_sk_scan, K, kt, None)
    d, t, converged = np.ones(n), 0, False
    with progress.bar(n_iter, "Sinkhorn (out of core)") as bar:
        return _sk_loop(client, ring, blocks, K, kt, P_out, n_iter, tol, d, t, converged, Kd, bar)


def _sk_loop(client, ring, blocks, K, kt, P_out, n_iter, tol, d, t, converged, Kd, bar):
    while True:  # the loop of normalize._scaling._symmetric, step for step
        err = float(np.abs(d * Kd - 1.0).max())
        if tol is not None and err <= tol:
            converged = True
            break
        if t == n_iter:
            break
        bad = ~(Kd > 0) | ~np.isfinite(Kd)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(f"Sinkhorn scaling broke down at iteration {t} (K d = {Kd[i]:.3g} in row {i}): "
                            "K has no total support")
        d = np.sqrt(d / Kd)
        t += 1
        bar.update(1)
        Kd = np.concatenate(map_blocks(client, ring, blocks, _k_sk_matvec, K, kt, None, d))
    if P_out is not None:
        r = np.concatenate(map_blocks(client, ring, blocks, _k_sk_form, K, kt, P_out, d, np.dtype(P_out.dtype)))
        err = float(np.abs(r - 1.0).max())
    if tol is not None and not converged:
        _not_converged("Sinkhorn (symmetric, out of core)", t, err, tol)
    return NormalizeInfo(n_iter=t, converged=converged or tol is None, row_err=err, method="sk/symmetric-ooc",
                         mu=d)




# -- MBBS (paper 000, section V) ----------------------------------------------------------------


def _k_combine(blk, r0, serial, others, alpha):
    """Rows of ``sum_i alpha_i K_i`` (float64), the in-memory ``_DenseBlocks.combine`` entry by entry."""
    acc = np.multiply(blk, alpha[0])
    r1 = r0 + blk.shape[0]
    for a, K in zip(alpha[1:], others):
        acc += a * read_rows(K, r0, r1, np.float64)
    return None, acc


def _k_divergences(blk, r0, serial, Ks):
    """Per row and kernel ``1/2 sum_j (G_ij - K_ij)^2``: an (m, b) array."""
    nb, r1 = _nb(), r0 + blk.shape[0]
    out = np.empty((len(Ks), blk.shape[0]))
    for i, K in enumerate(Ks):
        (nb.half_sqdist_rows_serial if serial else nb.half_sqdist_rows)(blk, read_rows(K, r0, r1, np.float64), out[i])
    return out, None


def mbbs_blocked(Ks, G, Kbar, *, lam=1.0, n_outer=20, n_iter=1000, tol=1e-6, max_memory, client=None):
    """Multiple BBS with the kernels, their combination and G in zarr; the G-step is Alg. 1 out of core.

    The block coordinate descent of :func:`bigclust.normalize.mbbs` with
    ``solver="alternating"``: each outer iteration streams
    ``Kbar = sum_i alpha_i K_i`` into ``Kbar``, runs :func:`bbs_blocked`
    (``n_iter`` passes) from it into G, then streams G beside every K_i for
    ``g_i = 1/2 ||G - K_i||_F^2`` and sets ``alpha = Proj_simplex(-g / (2 lam))``.
    G, alpha and the objective equal the in-memory run bit for bit.

    Parameters
    ----------
    Ks : sequence of zarr.Array, shape (n, n) each
        Symmetric finite kernels (e.g. a γ sweep), chunked by rows; read only.
    G, Kbar : zarr.Array, shape (n, n), float64
        Output and scratch, chunked by rows (e.g. :func:`create_like`).
    lam, n_outer, tol
        As in :func:`bigclust.normalize.mbbs`.
    n_iter : int
        Alg. 1 passes per G-step.
    max_memory, client
        As in :func:`bbs_blocked`; the combination and divergence passes hold
        five blocks (three streamed, one accumulator, one kernel block).

    Returns
    -------
    NormalizeInfo
        ``method="mbbs/alternating-ooc"`` with ``alpha``, ``alpha_history``,
        ``objective_history``; G holds the result.
    """
    from bigclust.normalize._multi import alpha_step

    if isinstance(Ks, (str, bytes)) or not hasattr(Ks, "__len__") or len(Ks) == 0:
        raise UserError("mbbs_blocked needs a non-empty list of zarr kernels")
    if isinstance(lam, bool) or not isinstance(lam, (int, float, np.floating)) or not lam > 0:
        raise UserError(f"mbbs lam must be a positive number, got {lam!r}")
    for K in Ks:
        _check(K, None, "", client)
        if K.shape != Ks[0].shape:
            raise DataError(f"mbbs kernels have different shapes: {K.shape} and {Ks[0].shape}")
    for A, name in ((G, "G"), (Kbar, "Kbar")):
        _check(Ks[0], A, name, client)
        if np.dtype(A.dtype) != np.float64:
            raise UserError(f"{name} must be float64 (the in-memory MBBS works in float64), got {A.dtype}")
    n_outer = _check_args(n_outer, None, 0)[0]
    n_iter, tol, _ = _check_args(n_iter, tol, 0)
    if n_outer < 1 or n_iter < 1:
        raise UserError(f"n_outer and n_iter must be >= 1, got {n_outer} and {n_iter}")
    n, m = Ks[0].shape[0], len(Ks)
    blocks = blocks_for(G, consumer_rows("multi", n, 8, budget(max_memory)))
    ring = [None] * 3
    alpha = np.full(m, 1.0 / m)
    alphas, objective, converged, t, ginfo = [alpha.copy()], [], False, 0, None
    for t in progress.iterate(range(1, n_outer + 1), "MBBS (outer, out of core)"):
        map_blocks(client, ring, blocks, _k_combine, Ks[0], np.float64, Kbar, list(Ks[1:]), alpha)
        ginfo = bbs_blocked(Kbar, G, n_iter=n_iter, max_memory=max_memory, client=client)
        parts = map_blocks(client, ring, blocks, _k_divergences, G, np.float64, None, list(Ks))
        g = np.concatenate(parts, axis=1).sum(axis=1)  # each row vector summed whole, as in memory
        alpha, change = alpha_step(g, alpha, lam, objective)
        alphas.append(alpha.copy())
        if tol is not None and change < tol:
            converged = True
            break
    return NormalizeInfo(n_iter=t, converged=converged or tol is None, row_err=ginfo.row_err,
                         method="mbbs/alternating-ooc", alpha=alpha, alpha_history=alphas,
                         objective_history=objective, n_inner=ginfo.n_iter)
