"""ARPACK on a Chebyshev polynomial of P: the ``eigsh`` of :func:`bigclust.algo.spectral.top_eigenvectors` for
large sparse P.

On a large kNN graph the top of P's spectrum is flat (mnist-1m: the eleven largest eigenvalues of the
SK-normalised graph lie in [0.992, 1]) and ARPACK needs hundreds of Lanczos steps, each orthogonalised
against its whole basis: at 1M rows two thirds of its time is that orthogonalisation, not the products
(625 products of 24 ms in 45 s, one thread).  A polynomial ``p`` that is at most 1 in magnitude on
``[-rho, c]`` and grows fast above ``c`` (the Chebyshev polynomial of degree :data:`DEGREE` of that interval)
has the same eigenvectors as P, keeps the order of the eigenvalues above ``c`` and widens their gaps about
``2 m^2 / (1 + c)``-fold near ``c``; ARPACK on ``p(P)`` then needs about m times fewer steps for about as
many products.  Measured on the 1M SK graph (k = 11, one thread, the same run under load): 31 s against 90 s,
752 products against 625, the same subspace within 7e-8 rad.

The cut ``c`` must lie below the k-th eigenvalue: it is the k-th largest Ritz value of at most
:data:`PROBE_STEPS` plain Lanczos steps (a Ritz value of a Krylov space is below the eigenvalue of the same
rank), stopped before a Ritz pair converges (in finite precision the basis then loses its orthogonality and
repeats converged values, which would count twice), lowered by a
tenth of its distance to ``rho``.  The k values ARPACK returns are checked to lie above the cut (``p > 1``);
otherwise, or if ARPACK has not converged within :data:`MAX_RESTARTS` restarts, :func:`filtered_eigsh`
returns None and the caller runs ARPACK on P itself.
"""
from __future__ import annotations

import contextlib
import contextvars
import mmap

import numpy as np

from bigclust._util.jit import follow_share

#: rows from which ``eigsh`` runs on the filtered operator (the threshold of the breadth-first renumbering,
#: :data:`bigclust.algo.spectral.REORDER_MIN_ROWS`: below it ARPACK's own work is small and the committed
#: results of smaller graphs keep their bits)
FILTER_MIN_ROWS = 1 << 17
#: degree of the Chebyshev filter: products per ARPACK step
DEGREE = 8
#: plain Lanczos steps that estimate the k-th eigenvalue (the cut), at most
PROBE_STEPS = 100
#: ARPACK restarts on the filtered operator before P itself is solved instead.  The probe's cut lies below the
#: k-th eigenvalue (a Ritz value is below the eigenvalue of its rank), so the filter keeps P's order and the
#: limit guards only against rounding; it must not cut a slow but sound solve short: the 1M SK graph (k = 11)
#: took 6 restarts, mnist-8m's BBS-dual component (8.1M rows, a flatter top) 34, where plain ARPACK on P took
#: over 40 minutes against the filter's 19
MAX_RESTARTS = 100
#: rows of the eigenvectors rotated at a time (Rayleigh-Ritz)
ROTATE_ROWS = 1 << 16
#: ARPACK's tolerance on the filtered operator.  Its last digits are below what the flat top of a large graph
#: determines: on mnist-8m's 4M-row BBS-dual block (one thread) two solves at 1e-10 whose bases differ (ncv 21
#: and 31) agree to 6.1e-8 rad, and 1e-8 lands within 8.4e-8 rad of them in 1368 filter steps instead of 1600
#: (218 s instead of 286 s); on the 1M SK graph within 3.5e-9 rad in 800 steps instead of 880
TOL = 1e-8


#: the list :func:`solve_log` collects into (None: not collecting)
_LOG = contextvars.ContextVar("bigclust_solve_log", default=None)


@contextlib.contextmanager
def solve_log():
    """Collect what each ARPACK solve of at least :data:`FILTER_MIN_ROWS` rows inside the block did.

    Yields a list that gets one dict per solve: ``rows``, ``k``, ``ncv`` (ARPACK's basis: n x ncv doubles),
    ``iterations`` (ARPACK's Arnoldi update iterations, the first included: what ``maxiter`` bounds; it stops
    at the first one past it), ``products`` (products by P, the filter's and its probe's included),
    ``filter_degree`` (0: ARPACK on P itself) and ``converged`` (false also for a filtered solve whose values
    were refused; the caller's solve of P itself follows as its own entry).  The iterations are what grows
    when the top of the spectrum flattens with n; the embed stage records the list.
    """
    log = []
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


def _logged(n, k, degree):
    """The entry of a solve of n rows starting now, in the active :func:`solve_log` (a scratch dict when none is)."""
    log = _LOG.get()
    entry = {"rows": n, "k": k, "ncv": 0, "iterations": 0, "products": 0, "filter_degree": degree,
             "converged": False}
    if log is not None:
        log.append(entry)
    return entry


def start_vector(v0):
    """ARPACK's start: ``v0``, or what ``v0()`` draws.  Large solves pass the callable, so that while ARPACK runs
    (it copies its start into its own residual vector) no frame holds the n-vector: 62 MiB at 8.1M rows."""
    return v0() if callable(v0) else v0


def start(n, random_state, order=None, scatter=False):
    """ARPACK's start vector, as a callable (:func:`start_vector`): ``n`` draws of
    ``random_state`` in M's numbering, renumbered by ``order`` (``v[order]``; ``scatter``: ``v[order] = draws``),
    an array or a callable that makes it when the vector is drawn."""
    def draw():
        v = np.random.default_rng(random_state).uniform(0.5, 1.5, n)
        if order is None:
            return v
        idx = order() if callable(order) else order
        if not scatter:
            return v[idx]
        out = np.empty(n)
        out[idx] = v
        return out
    return draw


def probe_cut(matvec, v0, k: int, rho: float, steps: int = PROBE_STEPS) -> float:
    """The filter's cut: below the k-th largest eigenvalue of the symmetric operator ``matvec``.

    Up to ``steps`` steps of the three-term Lanczos recurrence (no basis kept) from ``v0`` less its mean
    (a start close to P's top eigenvector, as the constant vector is for a bi-stochastic P, would converge
    first and early), stopped before a Ritz pair converges (residual bound below sqrt(eps) rho), when the
    basis would begin to lose its orthogonality and repeat converged Ritz values.  The k-th largest Ritz
    value, lowered by a tenth of its distance to ``rho``; ``-rho`` if the space is too small.
    """
    from scipy.linalg import eigh_tridiagonal

    v = np.asarray(v0, dtype=np.float64)
    v = v - v.mean() if v.size > 1 and np.ptp(v) > 0 else v
    v = v / np.linalg.norm(v)
    prev = np.zeros_like(v)
    alpha, beta, b = [], [], 0.0
    theta, floor = np.empty(0), np.sqrt(np.finfo(np.float64).eps) * rho
    for j in range(1, steps + 1):
        w = matvec(v)
        w -= b * prev
        a = float(v @ w)
        w -= a * v
        b = float(np.linalg.norm(w))
        alpha.append(a)
        beta.append(b)
        if j % 5 == 0 or j == steps or b <= 1e-12 * rho:
            vals, vecs = eigh_tridiagonal(np.array(alpha), np.array(beta[:-1]))
            if np.min(np.abs(b * vecs[-1])) < floor:
                break          # a converged Ritz pair: the values of the previous check are the last sound ones
            theta = vals[::-1]
        if b <= 1e-12 * rho:   # an invariant subspace: its Ritz values are eigenvalues
            break
        prev, v = v, w / b
    if theta.size < k:
        return -rho
    t = float(theta[k - 1])
    return t - 0.1 * (rho - t)


def lean_eigsh(op, k: int, v0, tol: float, maxiter: int, entry=None, into=None):
    """``eigsh(op, k, which="LA", v0=v0, tol=tol, maxiter=maxiter)`` (the same bits), its Ritz vectors formed in
    ARPACK's own n x ncv basis; ``v0`` may be a callable (:func:`start_vector`).

    ``eigsh`` forms them in a second n x ncv array, then copies the k it returns: at 8.1M rows (ncv = 21) that
    array is 1.36 GB beside the basis and took the SK embed stage's worker to 4.43 GB.  ARPACK's ``dseupd``
    allows its output to be its basis (it rotates the basis in place, then copies); the basis is anonymous
    memory whose columns past the k returned are given back before they are copied out in C order, so the
    end of the solve holds no more than its iterations did.  Reached through scipy's
    ARPACK driver (``_SymmetricArpackParams``, from scipy 1.15's C ARPACK); below :data:`FILTER_MIN_ROWS`
    rows, or with another scipy, ``eigsh`` itself.  The solve is logged (:func:`solve_log`) in ``entry``, if
    given (its ``filter_degree`` P-products an application of ``op``), else in a new one.  ``into(x, out)``,
    if given, writes ``op @ x`` into ``out``: ARPACK's own work vector, so no product allocates its result.
    """
    from scipy.sparse.linalg import aslinearoperator, eigsh
    from scipy.sparse.linalg._eigen.arpack import arpack as ar

    n = op.shape[0]
    if n < FILTER_MIN_ROWS or not hasattr(ar, "_arpacklib") or not hasattr(ar, "HOWMNY_DICT"):
        return eigsh(op, k=k, which="LA", v0=start_vector(v0), tol=tol, maxiter=maxiter)
    entry = _logged(n, k, 0) if entry is None else entry
    product, per = aslinearoperator(op).matvec, entry["filter_degree"] or 1

    def counted(x):
        entry["products"] += per
        if into is None:
            return product(x)
        y = params.workd[params.ipntr[1]:params.ipntr[1] + n]   # where ARPACK copies the result: a no-op then
        into(np.ravel(x), y)
        return y
    params = ar._SymmetricArpackParams(n, k, "d", counted, 1, None, None, None, None,
                                       start_vector(v0), maxiter, "LA", tol, np.random.default_rng())
    entry["ncv"] = int(params.ncv)
    basis = mmap.mmap(-1, params.v.nbytes)   # anonymous memory: the columns past the k kept go back to the OS
    params.v = np.frombuffer(basis, dtype=np.float64).reshape(params.v.shape)
    try:
        while not params.converged:
            follow_share()   # on a cluster: the cores a stage beside this one gave back
            params.iterate()
    finally:
        entry["iterations"] = int(params.arpack_dict["iter"])
    entry["converged"] = True
    params.arpack_dict["info"] = 0
    d = np.zeros(k)
    z = params.v.reshape(-1).reshape(params.v.shape, order="F")   # ARPACK's column-major view of its basis
    params._arpack_extract(params.arpack_dict, 1, ar.HOWMNY_DICT["A"], np.zeros(params.ncv, dtype=np.int32),
                           d, z, params.sigma, params.resid, params.v, params.ipntr, params.workd, params.workl)
    info, nconv, infodict = params.arpack_dict["info"], params.arpack_dict["nconv"], params.extract_infodict
    del params   # its n x 3 work array
    if info != 0:
        raise ar.ArpackError(info, infodict=infodict)
    kept = -(-z[:, :nconv].nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
    if kept < len(basis) and hasattr(basis, "madvise"):   # before the copy: the peak stays the basis's
        basis.madvise(mmap.MADV_DONTNEED, kept, len(basis) - kept)
    return d[:nconv], np.ascontiguousarray(z[:, :nconv])


def filtered_eigsh(matvec, n: int, k: int, v0, rho: float, *, tol: float = TOL, degree: int = DEGREE,
                   csr=None, rows=None, upper=None):
    """``(values, vectors)`` of the k largest eigenvalues of the symmetric operator ``matvec`` (n x n, spectrum
    in ``[-rho, rho]``), or None when the cut was not below the k-th eigenvalue.

    ARPACK (``which="LA"``, ``tol``, start ``v0``, an array or a callable: :func:`start_vector`) on
    ``T_m(t(P))``, t mapping ``[-rho, c]`` to ``[-1, 1]``; the eigenvalues are then P's Rayleigh quotients on
    the vectors found (a k x k eigenproblem, which also rotates vectors of nearly equal eigenvalues into P's
    own).  ``csr``: ``(indptr, indices, data)`` of the
    matrix ``matvec`` multiplies by (with :func:`~bigclust.algo._spectral_numba.csr_matvec`'s or scipy's
    arithmetic); each step of the recurrence is then one pass of
    :func:`~bigclust.algo._spectral_numba.csr_chebyshev_step` instead of a product and three vector passes
    (the same bits; float32 values, the 1M SK graph, one thread, medians of 7: 24.0 against 28.1 ms a
    step).  With ``rows`` (sorted), ``matvec`` multiplies by the block of that matrix on ``rows`` (a connected
    component, x and the result in the order of ``rows``), and the recurrence runs on the block through
    :func:`~bigclust.algo._spectral_numba.csr_rows_chebyshev_step`.  With ``upper`` (the plan of
    :func:`bigclust.algo._upper.to_upper`) ``csr`` is P's upper triangle and each step is
    :func:`~bigclust.algo._upper.sym_upper_step`.
    """
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator

    entry = _logged(n, k, degree)

    def probe(x):
        entry["products"] += 1
        return matvec(x)
    c = probe_cut(probe, start_vector(v0), k, rho)
    if c <= -0.5 * rho:   # no useful pass band: the filter would only cost products
        return None
    scale, shift = 2.0 / (c + rho), (c - rho) / (c + rho)   # t(x) = scale x - shift

    if csr is None:
        def filtered(x):   # T_m(t(P)) x by the three-term recurrence
            x = np.ravel(x)
            t0, t1 = x, scale * matvec(x) - shift * x
            for _ in range(degree - 1):
                t2 = matvec(t1)
                t2 *= 2.0 * scale
                t2 -= (2.0 * shift) * t1
                t2 -= t0
                t0, t1 = t1, t2
            return t1
    elif rows is None:
        step = _stepper(csr, rows, upper)

        def filtered_into(x, out):   # the same recurrence, each step fused (ARPACK's x kept, one more n-vector)
            scratch = np.empty(n)
            # each step writes the older of the two vectors: the last one lands in out
            t0, t1 = (out, scratch) if (degree - 1) % 2 else (scratch, out)
            t0[:] = x
            step(t0, t1, scale, shift, False)
            for _ in range(degree - 1):
                step(t1, t0, 2.0 * scale, 2.0 * shift, True)
                t0, t1 = t1, t0
    else:   # P's block on rows: the recurrence on P's numbering, x in and out on rows
        from bigclust.algo._spectral_numba import put_rows, take_rows
        step = _stepper(csr, rows, upper)
        full = np.zeros((2, csr[0].shape[0] - 1))   # never read off the block's rows

        def filtered_into(x, out):
            t0, t1 = full
            put_rows(t0, rows, x)
            step(t0, t1, scale, shift, False)
            for _ in range(degree - 1):
                step(t1, t0, 2.0 * scale, 2.0 * shift, True)
                t0, t1 = t1, t0
            take_rows(t1, rows, out)

    if csr is not None:
        def filtered(x):
            out = np.empty(n)
            filtered_into(np.ravel(x), out)
            return out

    try:
        theta, V = lean_eigsh(LinearOperator((n, n), matvec=filtered, rmatvec=filtered, dtype=np.float64), k, v0,
                              tol, MAX_RESTARTS, entry, None if csr is None else filtered_into)
    except ArpackNoConvergence:   # not within a few times the restarts a sound cut takes
        return None
    if not theta.min() > 1.0:   # an eigenvalue at or below the cut: the filter's order is not P's
        entry["converged"] = False   # the caller solves P itself (its own entry)
        return None
    entry["products"] += k
    H = np.empty((k, k))
    for j in range(k):           # V^T P V a column at a time: no second n x k array
        H[:, j] = V.T @ matvec(V[:, j])
    w, Q = np.linalg.eigh(0.5 * (H + H.T))
    for r in range(0, n, ROTATE_ROWS):   # V Q in place: no second n x k array (0.65 GB at 8.1M rows, k = 10)
        V[r:r + ROTATE_ROWS] = V[r:r + ROTATE_ROWS] @ Q
    return w, V


def _stepper(csr, rows, upper):
    """``step(x, y, a, b, sub)``: ``y <- a P x - b x - y`` (``- y`` only with ``sub``) on ``rows`` (None: all),
    P the CSR ``csr``, or its upper triangle with ``upper`` (:func:`bigclust.algo._upper.to_upper`'s plan)."""
    ip, ix, data = csr
    if upper is not None:
        from bigclust.algo._upper import sym_upper_step
        return lambda x, y, a, b, sub: sym_upper_step(ip, ix, data, upper[0], x, y, a, b, sub, *upper[1:])
    if rows is None:
        from bigclust.algo._spectral_numba import csr_chebyshev_step
        return lambda x, y, a, b, sub: csr_chebyshev_step(ip, ix, data, x, y, a, b, sub)
    from bigclust.algo._spectral_numba import csr_rows_chebyshev_step
    return lambda x, y, a, b, sub: csr_rows_chebyshev_step(ip, ix, data, rows, x, y, a, b, sub)
