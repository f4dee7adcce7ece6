"""AkS-SC: semi-supervised augmented kNN subspace clustering (paper 002, section 4.2, Appendix A).

Rows of the label matrix F (N, K) are the dictionary's atoms: the n
originals, then the augmented samples.  With C (N, n) the coefficients,
Theta[a, i] = 1/2 ||f_a - f_i||^2, Yhat (N, K) the one-hot labels of the
labelled originals (zero rows elsewhere) and Delta = diag(labelled), the
objective we minimise by two-block coordinate descent is

    sum_i 1/2 ||x_i - D^T c_i||^2 + lam R(C) + gamma sum_{a,i} |C[a,i]| Theta[a,i]
        + mu2/2 sum_{j, a in A(j)} ||f_j - f_a||^2 + mu1 tr((F - Yhat)^T Delta (F - Yhat))

subject to C[a, i] = 0 for a outside N_i (kNN support without i, A(i) and
cannot-links: atoms whose known label differs from a labelled sample's).

* C-step (F fixed): the per-column ADMM with thresholds ``lam + gamma Theta``
  (SSC), or ``gamma Theta`` with the l2 term in the Gram matrix (LSR), or
  the support-restricted LRR with an extra weighted l1 block (B.3.3).
* F-step (C fixed): the stationarity condition is the sparse system
  ``(gamma L1 + mu2 L2 + mu1 Delta) F = mu1 Delta Yhat`` where L1 is the
  Laplacian of W1 = (|Ct| + |Ct|^T)/2, Ct = [C, 0] padded to (N, N) (so
  ``gamma sum |C| Theta = gamma tr(F^T L1 F)``), and L2 the Laplacian of the
  symmetric sample-augmentation graph R.  Solved by conjugate gradients,
  one column of F at a time (Jacobi preconditioner).

Appendix A.2: M = gamma L1 + mu2 L2 + mu1 Delta is a Stieltjes matrix
(symmetric, off-diagonal <= 0, positive definite when every connected
component holds a labelled row), so M^{-1} >= 0 and F = M^{-1} mu1 Delta Yhat
>= 0; and M 1 = mu1 Delta 1 = mu1 Delta Yhat 1 (Laplacians annihilate 1,
Yhat's labelled rows sum to 1), so F 1 = 1.  CG solves only to ``cg_tol``,
so entries of order -cg_tol can appear: they are clipped to 0 and rows
rescaled to sum 1; ``info["min_entry"]`` and ``info["max_row_err"]`` record
the raw violations before that projection (tests check they are tiny).

A connected component with no labelled row makes M singular: its rows get a
ridge ``ridge * I`` with right-hand side ``ridge / K`` (a pull toward the
uniform distribution, which keeps F >= 0 and row-stochastic) and a warning.

Defaults (the paper's values are lost in the extracted text): ``mu1 = mu2 =
100`` ("set to a high value, since we want to preserve the given label
information"; 100 makes the label and augmentation terms dominate edge
weights |C| <= 1 by two orders of magnitude); ``gamma = 0.1``: Theta <= 1, so
``gamma Theta`` is at most 0.1, comparable to lam and to the coefficients'
correlations -- it removes links between samples of confidently different
labels without zeroing the first, label-free coefficient matrix (the paper
warns that a large gamma propagates labels too fast over a noisy graph).
At most ``max_outer = 10`` outer iterations (the paper's value).
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import DataError, UserError


def laplacian(W):
    """``diag(W 1) - W`` as CSR."""
    W = sp.csr_matrix(W, dtype=np.float64)
    return (sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W).tocsr()


def one_hot(y, n_rows, n_classes):
    """(n_rows, K) indicator of the labelled rows (``y >= 0``, length <= n_rows)."""
    Y = np.zeros((n_rows, n_classes))
    lab = np.flatnonzero(y >= 0)
    Y[lab, y[lab]] = 1.0
    return Y


def check_semi_labels(y, n, n_classes=None):
    """Validated int64 labels (-1 unlabelled) and the number of classes K.

    Classes are 0..K-1 with K = ``n_classes`` or ``max(y) + 1``; every one
    must have at least one labelled sample.
    """
    y = np.asarray(y)
    if y.shape != (n,):
        raise DataError(f"y must have one label per sample ({n}), got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError("y must be integer labels 0..K-1, with -1 for unlabelled samples")
    y = y.astype(np.int64)
    if y.min(initial=-1) < -1:
        raise DataError("y must be >= 0 for labelled samples and -1 for unlabelled ones")
    if not np.any(y >= 0):
        raise DataError("no labelled sample: y is -1 everywhere")
    K = int(y.max()) + 1 if n_classes is None else int(n_classes)
    if y.max() >= K:
        raise DataError(f"label {int(y.max())} is out of range for n_classes={K}")
    counts = np.bincount(y[y >= 0], minlength=K)
    missing = np.flatnonzero(counts == 0)
    if missing.size:
        raise DataError(f"class {int(missing[0])} has no labelled sample ({missing.size} such classes); "
                        f"every class needs at least one")
    return y, K


def propagate_labels(W1, labelled, Yhat, *, R=None, gamma=0.1, mu1=100.0, mu2=100.0, ridge=1e-6, cg_tol=1e-12,
                     solver="cg", return_info=False):
    """F-step: solve ``(gamma L1 + mu2 L2 + mu1 Delta) F = mu1 Delta Yhat`` by CG per column.

    Parameters
    ----------
    W1 : scipy.sparse matrix (N, N)
        Symmetric non-negative edge weights.
    labelled : ndarray of bool (N,)
        Delta's diagonal.
    Yhat : ndarray (N, K)
        One-hot on labelled rows.
    R : scipy.sparse matrix (N, N) or None
        Symmetric non-negative sample-augmentation graph.
    gamma, mu1, mu2 : float
        Weights of ``L1``, of the label fit ``Delta`` and of ``L2`` (R's Laplacian).
    ridge : float
        Added to M's diagonal, so that M is positive definite.
    cg_tol : float
        Relative tolerance of CG.
    solver : {"cg", "direct"}
        ``cg``: Jacobi-preconditioned conjugate gradients per column of F,
        relative tolerance ``cg_tol``.  ``direct``: one sparse LU
        factorisation (SuperLU) for all K columns -- much faster when M is
        ill-conditioned (mu2 = 100 on augmentation links against ``gamma |C| ~
        1e-2`` on coefficient links gives condition numbers ~1e5-1e6, where CG
        needs thousands of iterations per column).

    return_info : bool
        Also return the solver's checks.

    Returns
    -------
    F : ndarray (N, K)
        Non-negative, rows summing to 1 (see module docstring).
    info : dict
        Only with ``return_info=True``.
    """
    from scipy.sparse.csgraph import connected_components
    from scipy.sparse.linalg import cg

    N, K = Yhat.shape
    labelled = np.asarray(labelled, dtype=bool)
    G = sp.csr_matrix(W1, dtype=np.float64)
    M = gamma * laplacian(G)
    if R is not None:
        R = sp.csr_matrix(R, dtype=np.float64)
        M = M + mu2 * laplacian(R)
        G = G + R
    diag = mu1 * labelled.astype(np.float64)
    rhs = mu1 * labelled[:, None] * Yhat
    ncomp, comp = connected_components(G, directed=False)
    has_label = np.bincount(comp, weights=labelled.astype(np.float64), minlength=ncomp) > 0
    bad = ~has_label[comp]
    if bad.any():
        warnings.warn(f"label propagation: {int((~has_label).sum())} connected component(s) "
                      f"({int(bad.sum())} rows) hold no labelled sample; their labels are arbitrary "
                      f"(ridge {ridge:g} toward uniform)", RuntimeWarning, stacklevel=2)
        diag = diag + ridge * bad
        rhs = rhs + (ridge / K) * bad[:, None]
    M = (M + sp.diags(diag)).tocsr()
    if solver == "direct":
        from scipy.sparse.linalg import splu
        F = splu(M.tocsc()).solve(np.ascontiguousarray(rhs))
    elif solver == "cg":
        precond = sp.diags(1.0 / M.diagonal())
        F = np.empty((N, K))
        for c in range(K):
            F[:, c], _ = cg(M, rhs[:, c], rtol=cg_tol, atol=0.0, maxiter=10 * N, M=precond)
    else:
        raise UserError(f"solver={solver!r} must be 'cg' or 'direct'")
    info = dict(min_entry=float(F.min()), max_row_err=float(np.abs(F.sum(axis=1) - 1.0).max()),
                n_unlabelled_components=int((~has_label).sum()))
    F = np.maximum(F, 0.0)
    s = F.sum(axis=1)
    F /= np.where(s > 0, s, 1.0)[:, None]
    return (F, info) if return_info else F


def _augmentation_graph(dictionary):
    """Symmetric binary (N, N) graph linking each original to its augmented atoms."""
    N, n = dictionary.n_atoms, dictionary.n
    owners = dictionary.owners_matrix().tocoo()
    keep = owners.row >= n
    R = sp.csr_matrix((np.ones(int(keep.sum())), (owners.col[keep], owners.row[keep])), shape=(N, N))
    return (R + R.T).tocsr()


def aks_sc(X, y, *, X_aug=None, origin=None, regularizer="l1", n_neighbors=10, lam=None, alpha=20.0,
           gamma=0.1, mu1=100.0, mu2=100.0, max_outer=10, tol=1e-4, n_classes=None, knn_method="auto",
           ridge=1e-6, cg_tol=1e-12, f_solver="direct", random_state=0, return_info=False, **solver_options):
    # over 80 lines by its numpydoc docstring (36 lines); the code is the C-step / F-step alternation
    """AkS-SC by block coordinate descent over C and F (see the module docstring).

    Parameters
    ----------
    X : array-like (n, d)
        Samples as rows.
    y : array-like of int (n,)
        Labels 0..K-1, ``-1`` for unlabelled samples.
    X_aug, origin : ndarray or None
        Augmented samples and their sources (from :func:`augment_images` or :func:`interpolate`), or None
        (the "-LP" variants without augmentation).
    regularizer : {"l1", "l2", "nuclear"}
        SSC, LSR or LRR.
    n_neighbors : int
        Size of each sample's kNN dictionary.
    lam : float or None
        As in :func:`self_expression` (None: l1 -> mu/alpha, l2/nuclear -> 0.05).
    alpha : float
        Divisor of the automatic l1 weight, as in :func:`self_expression`.
    gamma, mu1, mu2 : float
        Coupling C-F, label fit, augmentation consistency (defaults 0.1, 100, 100).
    max_outer : int
        Outer iterations (default 10); stops earlier when
        ``||F_t - F_{t-1}||_F <= tol ||F_t||_F``.
    tol : float
        That relative change.
    n_classes : int or None
        K; default ``max(y) + 1``.  Every class needs a labelled sample.
    knn_method : {"auto", "exact", "pynndescent"}
        The neighbour search of the kNN dictionary.
    ridge, cg_tol : float
        As in :func:`propagate_labels`.
    f_solver : {"direct", "cg"}
        F-step solver (:func:`propagate_labels`).  Default ``direct`` (one
        sparse LU for all K columns): on COIL-20 with 11 augmentations and 4
        labels per class (N = 17280, K = 20) a whole AkS-SSC run took 60 s with
        it, while the Jacobi-CG F-steps alone had not finished after 185 s more
        (same machine, load ~20; the system is ill-conditioned, see
        :func:`propagate_labels`).  Both give F >= 0 and rows summing to 1 to
        1e-10 there.
    random_state : int
        Seed of the NN-descent index.
    return_info : bool
        Also return the intermediate results.
    **solver_options
        ADMM options (rho, eps_abs, eps_rel, max_iter) or LRR options.

    Returns
    -------
    labels : ndarray of int64 (n,)
        ``argmax`` of F's original rows.
    info : dict
        With ``return_info``: F, C, n_outer, history of F changes, propagation checks.
    """
    from bigclust.subspace.dictionary import atom_labels, build_dictionary, knn_dictionary
    from bigclust.subspace.lrr import lrr_knn
    from bigclust.subspace._common import ConvergenceWarning, assemble
    from bigclust.subspace.selfexpr import (ALPHA, EPS_ABS, EPS_REL, LAM_L2, LAM_NUCLEAR, MAX_ITER, REGULARIZERS, RHO_L1,
                                            _pos, admm_knn, ssc_lambda)

    if regularizer not in REGULARIZERS:
        raise UserError(f"unknown regularizer {regularizer!r}; expected one of {', '.join(REGULARIZERS)}")
    for name, v in (("gamma", gamma), ("mu1", mu1), ("mu2", mu2), ("ridge", ridge)):
        _pos(name, v)
    if not (isinstance(max_outer, numbers.Integral) and max_outer >= 1):
        raise UserError(f"max_outer={max_outer!r} must be a positive int")
    X = np.asarray(X)
    if X.ndim != 2:
        raise DataError(f"X must be 2-D (samples as rows), got shape {X.shape}")
    yv, K = check_semi_labels(y, X.shape[0], n_classes)
    D = build_dictionary(X, X_aug, origin)
    N, n = D.n_atoms, D.n
    nb = knn_dictionary(D, n_neighbors, y=yv, method=knn_method, random_state=random_state)
    Xs = D.atoms[:n]
    rho = float(solver_options.pop("rho", RHO_L1))
    eps_abs = float(solver_options.pop("eps_abs", EPS_ABS))
    eps_rel = float(solver_options.pop("eps_rel", EPS_REL))
    alm_max_iter = int(solver_options.get("max_iter", 1000))     # LRR's inexact ALM: its own default
    max_iter = int(solver_options.pop("max_iter", MAX_ITER))
    if regularizer == "l1":
        lam = ssc_lambda(Xs, D, nb, alpha if alpha is not None else ALPHA) if lam is None else _pos("lam", lam)
    elif regularizer == "l2":
        lam = LAM_L2 if lam is None else _pos("lam", lam)
    else:
        lam = LAM_NUCLEAR if lam is None else _pos("lam", lam)
    if solver_options and regularizer != "nuclear":
        raise UserError(f"aks_sc does not take {', '.join(sorted(solver_options))}")
    R = _augmentation_graph(D)
    lab_rows = np.zeros(N, dtype=bool)
    lab_rows[:n] = yv >= 0
    Yhat = one_hot(yv, N, K)
    F = np.zeros((N, K))
    history, prop_checks = [], []
    n_bad = 0
    t = 0
    for t in range(1, int(max_outer) + 1):
        Theta = 0.5 * ((F[nb] - F[:n, None, :]) ** 2).sum(axis=2)           # (n, k)
        if regularizer == "l1":
            coef, _, conv = admm_knn(Xs, D.atoms, nb, lam + gamma * Theta, 0.0, rho, eps_abs, eps_rel, max_iter)
            n_bad += int((~conv).sum())
        elif regularizer == "l2":
            coef, _, conv = admm_knn(Xs, D.atoms, nb, gamma * Theta, lam, rho, eps_abs, eps_rel, max_iter)
            n_bad += int((~conv).sum())
        else:
            opts = dict(rho=lam, rho_max=1e8, eta=1.1, tol=1e-7, max_iter=alm_max_iter)
            opts.update(solver_options)
            thr = gamma * Theta if np.any(Theta > 0) else None
            coef, _, conv, _ = lrr_knn(Xs, D.atoms, nb, lam, thresholds=thr, **opts)
            n_bad += int(not conv)
        C = assemble(nb, coef, D)
        absC = abs(C).tocoo()
        Ct = sp.csr_matrix((absC.data, (absC.row, absC.col)), shape=(N, N))
        W1 = (Ct + Ct.T) * 0.5
        F_new, pinfo = propagate_labels(W1, lab_rows, Yhat, R=R, gamma=gamma, mu1=mu1, mu2=mu2, ridge=ridge,
                                        cg_tol=cg_tol, solver=f_solver, return_info=True)
        prop_checks.append(pinfo)
        change = np.linalg.norm(F_new - F) / max(np.linalg.norm(F_new), 1e-300)
        history.append(change)
        F = F_new
        if change <= tol:
            break
    if n_bad:
        budget = alm_max_iter if regularizer == "nuclear" else max_iter
        warnings.warn(f"AkS-SC: {n_bad} C-step solves reached max_iter={budget} before their tolerance",
                      ConvergenceWarning, stacklevel=2)
    labels = np.argmax(F[:n], axis=1).astype(np.int64)
    if not return_info:
        return labels
    return labels, dict(F=F, C=C, dictionary=D, neighbors=nb, n_outer=t, change=history, lam=lam,
                        propagation=prop_checks, atom_labels=atom_labels(D, yv))
