"""LRR on kNN supports: nuclear norm of the whole coefficient matrix (paper 002, Ak-LRR; B.3.3).

Problem (our reading of Eq. 6 with R = nuclear norm, restricted to the kNN
dictionary as in the paper's B.3.3):

    min_C  1/2 ||X - D^T C||_F^2 + lam ||C||_*   s.t.  C[a, i] = 0 for a not in N_i,

with C of shape (N atoms, n samples).  The support constraint is what makes
Ak-LRR scalable and excludes i and A(i); the nuclear norm couples all
columns, so this is NOT a per-column problem.  B.3.3 splits C = J and runs
(inexact ALM = ADMM with an increasing penalty, Lin, Chen & Ma 2010):

    J <- SVT_{lam/rho}(C + Y/rho)                         (dense N x n)
    c_i <- (A_i^T A_i + rho I)^{-1} (A_i^T x_i + rho J[N_i, i] - Y[N_i, i])
    Y <- Y + rho (C - J),  rho <- min(eta rho, rho_max)

and stops when ``max|C - J|`` and ``max|J - J_prev|`` are both below ``tol``.
The C-step is the per-column Numba kernel with the Gram matrices computed
once (n k^2 floats).  The returned coefficients are C (exactly supported on
the N_i).

``neighbors=None`` (the full-dictionary LRR baseline, no augmentation) is
solved in closed form: with X = U S V^T and the dictionary equal to the
samples, ``min 1/2 ||X - X Z||^2 + lam ||Z||_*`` has the solution
``Z = V diag(max(0, 1 - lam / s_j^2)) V^T`` (Favaro, Vidal & Ravichandran
2011).  Like the classical LRR it does not exclude self-representation;
:func:`fold_back` discards the diagonal.

SVT: ``svt="exact"`` is a thin LAPACK SVD of the N x n matrix every
iteration, O(N n^2) -- fine at paper scale (COIL-20 with 11 augmentations:
N = 17280, n = 1440, ~1-3 s per iteration on two cores).  ``svt="randomized"``
keeps only the top ``rank`` singular triplets from a randomised range finder
(Halko, Martinsson & Tropp 2011; scikit-learn's ``randomized_svd``), cost
O(N n rank); exact whenever fewer than ``rank`` singular values exceed the
threshold, otherwise the tail is thresholded to zero (a slightly stronger
low-rank bias).  Use it when n is in the tens of thousands.  ``svt="gram"`` takes the SVD
from the eigendecomposition of the n x n Gram matrix M^T M (GEMM-bound, about
8x faster than gesdd for N >> n; inaccurate only for singular values below
~1e-8 of the largest).

Only atoms that belong to some support N_i take part: a row of C and Y that
is zero stays zero through SVT (it is zero in U), so the iteration runs on
the rows ``unique(neighbors)`` -- exactly the same iterates, fewer rows.
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import UserError
from bigclust.subspace._common import ConvergenceWarning, assemble


def svt(M, tau, method="exact", rank=None, random_state=0):
    """Singular value thresholding ``U max(S - tau, 0) V^T`` and the number of kept values."""
    if method == "exact":
        from scipy.linalg import svd
        U, s, Vt = svd(M, full_matrices=False, check_finite=False, lapack_driver="gesdd")
    elif method == "gram":
        # M^T M = V S^2 V^T (n x n, one GEMM + eigh); U S = M V.  Loses accuracy in singular values
        # below ~1e-8 s_max, which only matters when tau is that small.
        w, V = np.linalg.eigh(M.T @ M)
        s = np.sqrt(np.maximum(w, 0.0))[::-1]
        V = V[:, ::-1]
        keep = int(np.count_nonzero(s > tau))
        scale = (s[:keep] - tau) / s[:keep]
        return (M @ (V[:, :keep] * scale)) @ V[:, :keep].T, keep
    else:
        from sklearn.utils.extmath import randomized_svd
        r = min(int(rank), min(M.shape))
        U, s, Vt = randomized_svd(M, r, n_oversamples=10, n_iter=4, random_state=random_state)
    s = s - tau
    keep = int(np.count_nonzero(s > 0))
    return (U[:, :keep] * s[:keep]) @ Vt[:keep], keep


def lrr(Xs, dictionary, neighbors, lam, *, rho=None, rho_max=1e8, eta=1.1, tol=1e-7, max_iter=1000,
        svt_method="exact", rank=100, random_state=0, return_info=False):
    """Support-restricted LRR by inexact ALM (see the module docstring).

    Parameters
    ----------
    Xs : ndarray (n, d)
        Unit-norm samples.
    dictionary : Dictionary
    neighbors : ndarray (n, k) or None
        Supports; None = closed-form full-dictionary LRR (originals only).
    lam : float
    rho : float or None
        Initial penalty; None = ``lam`` (the penalty grows by ``eta`` per
        iteration up to ``rho_max``, so the start only sets the early pace).
    tol : float
        Stop when ``max|C - J| < tol`` and ``max|J - J_prev| < tol``.
    svt_method : {"exact", "gram", "randomized"}
    rank : int
        Singular triplets kept by the randomized SVT.

    Returns
    -------
    C : scipy.sparse.csc_matrix (N, n), optionally with an info dict.
    """
    if svt_method not in ("exact", "gram", "randomized"):
        raise UserError(f"svt_method={svt_method!r} must be 'exact', 'gram' or 'randomized'")
    if not (isinstance(rank, numbers.Integral) and rank >= 1):
        raise UserError(f"rank={rank!r} must be a positive int")
    if neighbors is None:
        if dictionary.n_atoms != dictionary.n:
            raise UserError("full-dictionary LRR is the classical baseline without augmentation; "
                            "use kNN supports (neighbors) with an augmented dictionary")
        # samples are rows: X (d, n) in the paper's column convention is Xs^T = V S U^T,
        # so the paper's right singular vectors are the columns of U here
        U, s, _ = np.linalg.svd(Xs, full_matrices=False)
        w = np.maximum(0.0, 1.0 - lam / np.maximum(s, 1e-300) ** 2)
        Z = (U * w) @ U.T
        C = sp.csc_matrix(Z)
        info = dict(lam=lam, n_iter=0, converged=True, rank=int(np.count_nonzero(w)))
        return (C, info) if return_info else C
    from bigclust.subspace import _numba

    C, it, conv, keep = lrr_knn(Xs, dictionary.atoms, neighbors, lam, rho=lam if rho is None else rho,
                                rho_max=rho_max, eta=eta, tol=tol, max_iter=max_iter, svt_method=svt_method,
                                rank=rank, random_state=random_state, kernels=_numba)
    if not conv:
        warnings.warn(f"LRR: inexact ALM reached max_iter={max_iter} before tol={tol}", ConvergenceWarning,
                      stacklevel=3)
    Cs = assemble(neighbors, C, dictionary)
    info = dict(lam=lam, n_iter=it, converged=conv, rank=keep)
    return (Cs, info) if return_info else Cs


def lrr_knn(Xs, D, nb, lam, *, rho, rho_max, eta, tol, max_iter, svt_method="exact", rank=100, random_state=0,
            kernels=None, thresholds=None):
    """Validated-input core; returns (coef (n, k) on the supports, iterations, converged, rank).

    ``thresholds`` (n, k), optional: an extra weighted l1 term
    ``sum thr |C|`` on the support (AkS-LRR's gamma Theta, B.3.3); it is
    handled by a third block Z with its own multiplier.
    """
    if kernels is None:
        from bigclust.subspace import _numba as kernels
    n, k = nb.shape
    Gs = np.empty((n, k, k))
    bs = np.empty((n, k))
    kernels.gram_columns(D, Xs, nb, Gs, bs)
    active, local = np.unique(nb, return_inverse=True)     # rows outside every support stay zero
    N = active.size
    cols = np.repeat(np.arange(n), k)
    rows = local.ravel()
    coef = np.zeros((n, k))
    J = np.zeros((N, n))
    Y = np.zeros((N, n))
    Csc = np.zeros((N, n))
    if thresholds is not None:
        Z = np.zeros((n, k))
        Y2 = np.zeros((n, k))
    conv = False
    keep = 0
    it = 0
    while it < max_iter:
        it += 1
        Csc[rows, cols] = coef.ravel()
        Jp = J
        J, keep = svt(Csc + Y / rho, lam / rho, svt_method, rank, random_state)
        Jg = J[rows, cols].reshape(n, k)
        Yg = Y[rows, cols].reshape(n, k)
        if thresholds is None:
            kernels.lrr_c_step(Gs, bs, rho, rho, Jg, Yg, coef)
        else:
            # two equality constraints C = J and C = Z: (G + 2 rho I) c = b + rho (J + Z) - Y - Y2
            kernels.lrr_c_step(Gs, bs + rho * Z - Y2, 2.0 * rho, rho, Jg, Yg, coef)
            V = coef + Y2 / rho
            Z = np.sign(V) * np.maximum(np.abs(V) - thresholds / rho, 0.0)
            Y2 += rho * (coef - Z)
        Csc[rows, cols] = coef.ravel()
        R = Csc - J
        Y += rho * R
        err = max(np.abs(R).max(), np.abs(J - Jp).max())
        if thresholds is not None:
            err = max(err, np.abs(coef - Z).max())
        if err < tol:
            conv = True
            break
        rho = min(eta * rho, rho_max)
    if thresholds is not None:
        coef = Z
    return coef, it, conv, keep
