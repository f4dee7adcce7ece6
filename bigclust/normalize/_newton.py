"""Semismooth Newton method on the dual of the Euclidean BBS problem.

The exact BBS solution (paper 000, Eq. 10) is
``G* = max(K + mu 1^T + 1 mu^T, 0)`` where ``mu`` solves the n equations

    F(mu)_i = sum_j max(K_ij + mu_i + mu_j, 0) - 1 = 0.

``F = grad(theta) / 2`` for the convex, continuously differentiable dual
function ``theta(mu) = 1/2 ||max(K + mu 1^T + 1 mu^T, 0)||_F^2 - 2 1^T mu``,
whose generalised Hessian (halved) is ``J = diag(A 1) + A`` with ``A`` the
0/1 active set ``[K_ij + mu_i + mu_j > 0]``: the signless Laplacian of the
active graph, symmetric positive semi-definite.  Each step solves
``(J + eps I) delta = -F`` by Jacobi-preconditioned CG with an inexact
tolerance ``min(0.1, ||F||)`` (superlinear, then quadratic convergence) and
``eps = min(1e-3, ||F||_inf)`` (a vanishing regularisation that covers rows with
an empty active set and bipartite active components), then backtracks on the
Armijo condition for ``theta``.  The line search is on ``theta`` and not on
``||F||``: ``delta`` is a descent direction for ``theta`` (``J + eps I`` is
positive definite) but not necessarily for ``||F||`` at a kink, and Armijo on
``theta`` is what makes the method globally convergent (Qi and Sun, 2006).
A round-off slack lets the unit step through once ``theta`` can no longer
resolve the decrease.
"""
from __future__ import annotations

import numpy as np

from bigclust._util import progress
from bigclust.normalize._common import norm2


def newton(evaluate, jacobian, mu, tol, max_iter, hist, class_sums):
    """Run semismooth Newton from ``mu``; dense and sparse share this loop.

    Parameters
    ----------
    evaluate : callable ``mu -> (r, sq, state)``
        Row sums and row sums of squares of ``G(mu)``, and what the Jacobian
        there needs (the active counts; the sparse solver adds the active set,
        listed in the same pass into one buffer: the loop solves at a point
        before it evaluates a trial point, and always goes on from the point
        it evaluated last).
    jacobian : callable ``(mu, state) -> solve``
        ``solve(rhs, eps, rtol, maxiter) -> (delta, cg_iterations)`` solves
        ``(J + eps I) delta = rhs`` at ``mu`` (``state``: from ``evaluate(mu)``).
    mu : (n,) float64
        Starting point (not modified).
    tol : float
        Stop when ``max |F| <= tol``.
    max_iter : int
        Maximum number of Newton steps.
    hist : History
        MB/MC recorder; ``class_sums(mu) -> (r, rc)`` provides the class sums.

    Returns
    -------
    mu, n_steps, converged, err, n_cg
    """
    # the loop holds n-vectors only (the sparse solver's memory besides K: 8 bytes a row each): F overwrites
    # the row sums it comes from, the squares are kept as their sum, and a step's solve (with the
    # Jacobian's diagonal) is dropped once it has returned -- the same numbers as keeping them all.  The
    # start is copied into this frame's own ``mu``: a caller that passes it as a temporary holds none
    with progress.bar(None, "BBS (dual Newton)", "step") as bar:  # ~10 steps: no meaningful ETA
        mu = np.array(mu, dtype=np.float64)
        F, sq, state = _at(evaluate, mu)
        theta = 0.5 * sq - 2.0 * mu.sum()
        n_cg = 0
        k = 0
        while True:
            err = float(np.abs(F).max())
            if hist.due(k):
                hist.add_errors(k, F, class_sums(mu)[1] if hist.wants_classes else None)
            if err <= tol or k >= max_iter:
                return mu, k, err <= tol, err, n_cg
            delta, it = jacobian(mu, state)(-F, min(1e-3, err), min(0.1, norm2(F)), max(50, min(mu.size, 1000)))
            n_cg += it
            slope = 2.0 * float(np.sum(F * delta))  # directional derivative of theta, < 0
            slack = 1e-12 * (0.5 * sq + 2.0 * np.abs(mu).sum())
            step = 1.0
            for _ in range(60):
                mu_t = mu + step * delta
                F_t, sq_t, state_t = _at(evaluate, mu_t)
                theta_t = 0.5 * sq_t - 2.0 * mu_t.sum()
                if theta_t <= theta + 1e-4 * step * slope + slack:
                    break
                step *= 0.5
            else:
                # no decrease representable any more: we are at the accuracy floor
                return mu, k, err <= tol, err, n_cg
            mu, F, sq, state, theta = mu_t, F_t, sq_t, state_t, theta_t
            k += 1
            bar.update(1)


def _at(evaluate, mu):
    """``(F, sum of squares, state)`` at ``mu``: ``F = r - 1`` written over r, the squares summed at once."""
    r, sq, state = evaluate(mu)
    r -= 1.0
    return r, sq.sum(), state
