"""Linear NMF drivers: in memory (dense or CSR X) and streamed over row blocks.

Orientation: X is n documents x m terms, ``X ~ V U^T`` with V (n x k) the
document factor and U (m x k) the term factor; the paper's X is its
transpose (paper: ``X ~ U V^T``).

Update order, the same in memory and streamed: every iteration updates V
first (from ``X U`` and ``U^T U``), then U (from ``X^T V`` and ``V^T V`` of
the *new* V).  The V-step of a document needs only its own row of X, so a
streamed iteration is one pass over the row blocks: each block updates its
rows of V and contributes ``X_b^T V_b`` and ``V_b^T V_b``; U is updated after
the pass.  scikit-learn's ``NMF`` uses the same order (its W = our V first).
The objective after the iteration costs nothing extra:
``J = 1/2 (||X||^2 - 2 sum(U o X^T V) + sum(U^T U o V^T V))``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from bigclust._util import progress
from bigclust.nmf import _ops
from bigclust.nmf._common import DataError, UserError, as_data, rel_change


def objective(xx, cross, GU, GV):
    """``1/2 ||X - V U^T||^2 = 1/2 (||X||^2 - 2 tr(V^T X U) + tr(U^T U V^T V))``."""
    return 0.5 * (xx - 2.0 * cross + float(np.sum(GU * GV)))


def run_in_memory(X, XT, U, V, solver, max_iter, tol, xx, bar=None, sweeps=None):
    """Iterate from (U, V) (both INOUT); returns ``(objective history, n_iter, converged)``.

    ``bar``: a progress bar (:mod:`bigclust._util.progress`) advanced once per iteration;
    ``sweeps``: HALS sweeps per factor update at most (see :func:`_ops.step`).
    """
    bar = bar if bar is not None else progress.NOBAR
    GU = _ops.gram(U)
    GV = _ops.gram(V)
    hist = []
    A = np.empty(V.shape)                           # reused: fresh pages every iteration cost time
    B = np.empty(U.shape)
    for it in range(1, max_iter + 1):
        A = _ops.matmul(X, U, A)                    # X U        (paper: X^T U)
        GV_new, c_old, _ = _ops.step(solver, V, A, GU, sweeps, old=it == 1)  # V-step   (3-3)
        if it == 1:
            hist.append(objective(xx, c_old, GU, GV))
        GV = GV_new
        B = _ops.tmatmul(X, V, XT, B)               # X^T V      (paper: X V)
        GU, _, c_new = _ops.step(solver, U, B, GV, sweeps, old=False)  # U-step     (3-2)
        hist.append(objective(xx, c_new, GU, GV))
        bar.update(1)
        if rel_change(hist[-2], hist[-1]) < tol:
            return np.array(hist), it, True
    return np.array(hist), max_iter, False


# -- streamed --------------------------------------------------------------------------------------


def in_process(fn, args_list):
    """Default ``map_blocks`` hook: run ``fn(*args)`` for each block here, lazily and in order."""
    return (fn(*a) for a in args_list)


def _read(read_block, i, start, stop, n_features):
    Xb = read_block(i)
    shape = (stop - start, n_features)
    if tuple(Xb.shape) != shape:
        raise DataError(f"block {i} has shape {tuple(Xb.shape)}, expected {shape} (rows {start}:{stop})")
    return as_data(Xb, f"X (block {i})", row0=start)


def block_stats(read_block, i, start, stop, n_features):
    """Validate block i and return ``(||X_b||^2, sum of X_b)`` (a module-level task)."""
    Xb = _read(read_block, i, start, stop, n_features)
    total = float(Xb.sum())
    return _ops.sqnorm(Xb), total


def block_step(read_block, i, start, stop, n_features, solver, states):
    """V-step of block i for every active restart (a module-level task).

    states : list of ``(U, U^T U, V_b)`` per restart (V_b is copied, not changed).
    Returns a list of ``(V_b new, X_b^T V_b new, V_b^T V_b new, sum V_b old o X_b U)``.
    """
    Xb = _read(read_block, i, start, stop, n_features)
    XbT = _ops.csr_transpose(Xb) if sp.issparse(Xb) else None
    out = []
    for U, GU, Vb in states:
        Vb = np.array(Vb, dtype=np.float64, order="C")
        A = _ops.matmul(Xb, U)
        GVb, c_old, _ = _ops.step(solver, Vb, A, GU)
        out.append((Vb, _ops.tmatmul(Xb, Vb, XbT), GVb, c_old))
    return out


def check_bounds(bounds):
    b = np.asarray(bounds)
    if b.ndim != 1 or b.size < 2 or b.dtype.kind not in "iu" or b[0] != 0 or (np.diff(b) <= 0).any():
        raise UserError("block_bounds must be increasing integers starting at 0 (block i = rows "
                        "bounds[i]:bounds[i+1]), e.g. [0, 1000, 2000, n]")
    return [int(v) for v in b]


def run_streamed(read_block, bounds, n_features, inits, solver, max_iter, tol, xx, map_blocks):
    """Streamed iterations of every restart (one pass over X per iteration for all of them).

    inits : list of ``[U, V]`` per restart (INOUT).  Returns per restart
    ``(history, n_iter, converged)``.
    """
    r = len(inits)
    GU = [_ops.gram(U) for U, _ in inits]
    GV = [_ops.gram(V) for _, V in inits]
    hist = [[] for _ in range(r)]
    n_iter = [0] * r
    done = [False] * r
    conv = [False] * r
    blocks = list(zip(bounds[:-1], bounds[1:]))
    for it in progress.iterate(range(1, max_iter + 1), f"linear NMF, streamed ({r} restarts)"):
        active = [j for j in range(r) if not done[j]]
        if not active:
            break
        args = [(read_block, b, s, e, n_features, solver,
                 [(inits[j][0], GU[j], inits[j][1][s:e]) for j in active]) for b, (s, e) in enumerate(blocks)]
        B = {j: 0.0 for j in active}
        GVn = {j: 0.0 for j in active}
        cold = {j: 0.0 for j in active}
        for (s, e), res in zip(blocks, map_blocks(block_step, args)):
            for j, (Vb, Bb, Gb, cb) in zip(active, res):
                inits[j][1][s:e] = Vb
                B[j] = B[j] + Bb
                GVn[j] = GVn[j] + Gb
                cold[j] += cb
        for j in active:
            if it == 1:
                hist[j].append(objective(xx, cold[j], GU[j], GV[j]))
            GV[j] = GVn[j]
            GU[j], _, c_new = _ops.step(solver, inits[j][0], np.ascontiguousarray(B[j]), GV[j])
            hist[j].append(objective(xx, c_new, GU[j], GV[j]))
            n_iter[j] = it
            if rel_change(hist[j][-2], hist[j][-1]) < tol:
                done[j] = conv[j] = True
    return [(np.array(hist[j]), n_iter[j], conv[j]) for j in range(r)]
