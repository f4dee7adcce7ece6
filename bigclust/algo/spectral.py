"""Spectral embedding: top-k eigenvectors, rows normalised (Ng, Jordan, Weiss).

For a symmetric similarity P (RA: K; Ncut: D^-1/2 K D^-1/2; SK/BBS: the
bi-stochastic matrix) the embedding is the k eigenvectors of the largest
eigenvalues, each row scaled to unit length (paper 000 section III-B).
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from bigclust._util.errors import UserError
from bigclust.algo._amg import AMG_TOL, have_pyamg, lobpcg_amg as _lobpcg_amg  # noqa: F401 (public names)
from bigclust.algo._filtered import solve_log  # noqa: F401 (public: what the large solves did)
from bigclust.algo.renumber import inverse, local_order, permute, unpermute

EIGH_MAX_N = 2000  # above this a full dense eigendecomposition costs more than Lanczos


def top_eigenvectors(P, k, *, solver="auto", random_state=0, order=None, overwrite=False):
    """Eigenvectors of the ``k`` largest (algebraic) eigenvalues of symmetric ``P``.

    Parameters
    ----------
    P : ndarray, scipy.sparse matrix or LinearOperator, shape (n, n), symmetric
        A LinearOperator (e.g. streaming row blocks from zarr) always goes
        to an iterative solver.
    k : int
        Number of eigenvectors, 1 <= k < n.
    solver : {"auto", "arpack", "eigh", "eigsh", "components", "lobpcg", "amg"}
        ``auto``: dense ``eigh`` for n <= 2000 (dense or sparse P),
        ``components`` for a larger sparse P whose graph is disconnected
        (ARPACK on the whole matrix misses copies of a repeated eigenvalue;
        :func:`_by_component` solves each connected block on its own), else
        ``eigsh`` (ARPACK) with a fallback to ``lobpcg`` when ARPACK does not
        converge (with a warning).  From ``FILTER_MIN_ROWS`` rows (131 072) of a
        sparse P (or of a component) ARPACK runs on a Chebyshev filter of P
        (:mod:`bigclust.algo._filtered`: the same eigenvectors, 2-3 times faster
        at 1M rows).  ``arpack``: as ``auto``, with ARPACK on P itself at every
        size (how results of large graphs made before the filter were computed).
        ``amg``: block LOBPCG on ``cI - P`` preconditioned by
        smoothed-aggregation multigrid (needs pyamg; see :func:`_lobpcg_amg`
        for why ``auto`` does not choose it).  For a sparse P the iterative
        solvers run with BLAS on one thread (see :data:`SPARSE_BLAS_THREADS`).
    random_state : int
        Seeds the start vector so that runs are reproducible.
    order : (n,) int array, optional
        P is already renumbered: ``P = M[order][:, order]`` for the matrix M
        meant (as :func:`local_order` makes it).  ``eigsh`` multiplies by P as
        it is, starts from the vector drawn in M's numbering (renumbered), and
        returns the vectors in M's numbering before the sign fix; any other
        solver gets M back first (a copy).
    overwrite : bool
        P's arrays may be overwritten (as scipy's ``overwrite_a``): a float32 P
        of :data:`~bigclust.algo._upper.UPPER_MIN_ROWS` rows or more is held as
        its upper triangle while ARPACK runs, half its memory given back, the
        products summed in another order (:mod:`bigclust.algo._upper`).  P is
        not usable afterwards.

    Returns
    -------
    values : (k,) ndarray, descending
    vectors : (n, k) ndarray, columns with a fixed sign (largest-magnitude
        entry positive) so that the embedding does not depend on the solver's
        arbitrary sign choice.
    """
    from scipy.sparse.linalg import LinearOperator

    n = P.shape[0]
    if not 1 <= k < n:
        raise UserError(f"number of eigenvectors k={k} must be between 1 and n-1={n - 1}")
    filtered = solver != "arpack"
    solver = "auto" if solver == "arpack" else solver
    if isinstance(P, LinearOperator) and solver in ("auto", "eigh"):
        solver = "eigsh"  # an operator streaming blocks from disk: never densify it
    if solver == "auto":
        solver = auto_solver(P, k)
    if order is not None and not sp.issparse(P):
        raise UserError("order= (P already renumbered) needs a sparse P")
    if order is not None and solver not in ("eigsh", "components"):
        P, order = permute(P, inverse(order)), None   # only these two paths know the renumbering
    if solver == "eigh":
        from scipy.linalg import eigh
        A = P.toarray() if sp.issparse(P) else np.asarray(P, dtype=np.float64)
        vals, vecs = eigh(A, subset_by_index=[n - k, n - 1])
    elif sp.issparse(P) and solver in ("eigsh", "components", "lobpcg", "amg"):
        from threadpoolctl import threadpool_limits
        with threadpool_limits(SPARSE_BLAS_THREADS, user_api="blas"):
            vals, vecs = _iterative(P, k, solver, random_state, order, filtered, overwrite)
    else:
        vals, vecs = _iterative(P, k, solver, random_state)
    order = np.argsort(vals)[::-1]
    vals, vecs = vals[order], np.asarray(vecs[:, order], dtype=np.float64)
    idx = np.argmax(np.abs(vecs), axis=0)
    vecs *= np.sign(vecs[idx, np.arange(vecs.shape[1])])
    return vals, vecs


#: BLAS threads while an iterative solver runs on a sparse P.  The matrix products are scipy's own
#: (single-threaded) CSR code; BLAS only sees ARPACK's and LOBPCG's small dense steps (dgemv on n x ncv),
#: where a second OpenBLAS thread costs more in synchronisation than it saves: on MNIST-70k (BBS-dual,
#: k = 10 eigenvectors, 385 products) eigsh took 1.7 s of CPU with one BLAS thread and 12.9 s with two,
#: the 17-21 s of issue 13.  Dense P (dgemv on n x n) keeps BLAS's threads, and its bits.
SPARSE_BLAS_THREADS = 1


def _iterative(P, k, solver, random_state, order=None, filtered=True, overwrite=False):
    """``(values, vectors)`` (any order) of an iterative solver; see :func:`top_eigenvectors`.

    ``order``: P is already renumbered by it (``eigsh`` only).  ``filtered``: ARPACK runs on a Chebyshev
    filter of a large sparse P (:func:`_arpack`); a float32 P stays float32 (renumbered or not), which the
    filter's recurrence and its other products widen as they read -- a float64 copy's bits, without the copy
    (12 bytes an entry) or scipy's one thread.  Otherwise ARPACK gets a float64 copy below
    :data:`FLOAT32_OPERATOR_NNZ` entries (the same values in the same places as ``local_order(M, np.float64)``).
    """
    from scipy.sparse.linalg import LinearOperator

    from bigclust.algo._filtered import FILTER_MIN_ROWS, start

    n = P.shape[0]
    if solver == "eigsh":
        from scipy.sparse.linalg import ArpackNoConvergence
        A = P
        fused = filtered and sp.issparse(P) and n >= FILTER_MIN_ROWS and P.dtype == np.float32
        if order is None and sp.issparse(P) and n >= REORDER_MIN_ROWS and P.nnz <= FLOAT32_OPERATOR_NNZ:
            A, order = local_order(P, dtype=None if fused else np.float64)   # else the copy ARPACK's product needs
        try:   # on A = P renumbered the start is v0 renumbered, and the eigenvectors are renumbered back
            op = _arpack_operand(A, widen=fused)   # the start is drawn where used: no frame holds it through the solve
            vals, vecs = _arpack(op, k, start(n, random_state, order), A if sp.issparse(A) and filtered else None,
                                 overwrite=overwrite)
            if order is not None:
                vecs = unpermute(vecs, order)
        except ArpackNoConvergence:
            warnings.warn(f"eigsh did not converge for k={k}, n={n}; falling back to lobpcg",
                          RuntimeWarning, stacklevel=3)
            vals, vecs = _lobpcg(P, k, random_state, order)
    elif solver == "components":
        if not sp.issparse(P):
            raise UserError("eigensolver 'components' needs a sparse matrix")
        vals, vecs = _by_component(P, k, random_state, order, filtered, overwrite)
    elif solver == "lobpcg":
        vals, vecs = _lobpcg(P, k, random_state)
    elif solver == "amg":
        if isinstance(P, LinearOperator):
            raise UserError("eigensolver 'amg' needs the matrix itself, not a streamed operator")
        if not have_pyamg():
            raise UserError("eigensolver 'amg' needs pyamg (pip install pyamg)")
        vals, vecs = _lobpcg_amg(P, k, random_state)
    else:
        raise UserError(f"unknown eigensolver {solver!r}; expected auto, eigh, eigsh, components, lobpcg or amg")
    return vals, vecs


def auto_solver(P, k) -> str:
    """The solver ``solver="auto"`` uses for P (see :func:`top_eigenvectors`)."""
    from scipy.sparse.linalg import LinearOperator

    n = P.shape[0]
    if isinstance(P, LinearOperator):
        return "eigsh"
    # ARPACK finds one vector per distinct eigenvalue of its Krylov space, so on a disconnected graph
    # it misses copies of the repeated top eigenvalue (one per component) and the embedding is wrong;
    # dense eigh is exact up to EIGH_MAX_N; above it each component is solved on its own (block
    # LOBPCG also finds repeated eigenvalues, but unpreconditioned it ran > 10 min at n = 1M)
    if n <= EIGH_MAX_N:
        return "eigh"
    if sp.issparse(P) and components(P)[0] > 1:
        return "components"
    return "eigsh"


def _by_component(P, k, random_state, order=None, filtered=True, overwrite=False):
    """Top-k eigenpairs of a sparse symmetric P whose graph is disconnected, one component at a time.

    P is block diagonal after sorting the rows by component, so its spectrum
    is the union of the blocks' spectra and each eigenvector lives on one
    block.  Single points contribute ``(P_ii, e_i)``, blocks of at most
    :data:`EIGH_MAX_N` rows (or at most k + 1) dense ``eigh``, larger blocks
    ARPACK (connected, so it sees every eigenvalue it needs).  The k largest
    of all candidates are kept; ties go to the lower component number, then
    to the block's own order, so the choice is deterministic.
    ``order``: P is renumbered by it (``P = M[order][:, order]``); components,
    blocks and vectors are M's, read from P's rows where they are.
    Each block is taken from P's arrays as it is needed -- a copy of its own
    rows in P's stored order and dtype, or none above
    :data:`FLOAT32_OPERATOR_NNZ` entries (ARPACK multiplies through the block's
    rows of P, :func:`_block_eigsh`) -- never a float64 or renumbered copy of the
    whole of P (the 8.1M-row BBS-dual embed stage's worker held 7.72 GB with them).  ``overwrite``: the
    largest block is solved last, and may overwrite P (:func:`top_eigenvectors`).
    """
    P = _csr(P)
    n = P.shape[0]
    ncomp, lab = components(P)  # stored zeros are not edges
    if order is not None:   # M's labels, numbered by each component's lowest row of M (as components(M))
        lab_m = np.empty_like(lab)
        lab_m[order] = lab
        first = np.full(ncomp, n, dtype=np.int64)
        np.minimum.at(first, lab_m, np.arange(n))
        lab = inverse(np.argsort(first, kind="stable"))[lab_m]
        del lab_m   # n-vectors are 65 MB each at 8.1M rows: none kept that the solves do not read
    rows_p = np.argsort(lab, kind="stable").astype(P.indices.dtype, copy=False)   # M's rows, component after
    if order is not None:                                                          # component, where they are in P
        rows_p = inverse(order)[rows_p]
    off = np.concatenate([[0], np.cumsum(np.bincount(lab, minlength=ncomp))])
    del lab
    in_m = (lambda r: r) if order is None else order.__getitem__   # P's rows -> M's, made when a solve ends
    cand_val, cand_comp, cand_rank, cand_vec = [], [], [], []   # per candidate; vectors as (rows, values)
    single = np.flatnonzero(np.diff(off) == 1)
    if single.size:  # vectorised: a point alone is an eigenvector with its diagonal entry as eigenvalue
        rows = rows_p[off[single]]
        cand_val.append(P.diagonal()[rows].astype(np.float64))
        cand_comp.append(single)
        cand_rank.append(np.zeros(single.size, dtype=np.int64))
        cand_vec.extend((r, np.ones(1)) for r in np.split(in_m(rows), rows.size))
    pos = None   # P's column -> its place in its block, written for each block it serves
    blocks = np.flatnonzero(np.diff(off) > 1)
    last = blocks[np.argmax(np.diff(off)[blocks])] if overwrite and blocks.size else -1
    for c in [*blocks[blocks != last], *blocks[blocks == last]]:   # candidates are sorted below: order is free
        a, b = off[c], off[c + 1]
        m, rows = b - a, rows_p[a:b]
        kk = min(k, m)
        nnz = int(P.indptr[rows + 1].sum() - P.indptr[rows].sum())
        small = m <= max(EIGH_MAX_N, k + 1)
        if small or nnz <= FLOAT32_OPERATOR_NNZ:
            pos = np.empty(n, dtype=P.indices.dtype) if pos is None else pos
            pos[rows] = np.arange(m)
            B = _take_block(P, rows, pos, np.float64 if small else P.dtype)
        if small:
            w, U = np.linalg.eigh(B.toarray())
            w, U = w[::-1][:kk], U[:, ::-1][:, :kk]
        else:  # the same ARPACK call (and fallback) as a connected graph gets
            w, U = _iterative(B, kk, "eigsh", random_state, filtered=filtered) if nnz <= FLOAT32_OPERATOR_NNZ else \
                _block_eigsh(P, rows, kk, random_state, filtered, overwrite and c == last)
            o = np.argsort(w)[::-1]
            w, U = w[o], U[:, o]
        cand_val.append(w)
        cand_comp.append(np.full(kk, c))
        cand_rank.append(np.arange(kk))
        cand_vec.extend((in_m(rows), U[:, j]) for j in range(kk))
    val, comp, rank = (np.concatenate(x) for x in (cand_val, cand_comp, cand_rank))
    # candidates were appended singles first, then blocks: sort by value, then component, then rank
    pick = np.lexsort((rank, comp, -val))[:k]
    vecs = np.zeros((n, k))
    for j, i in enumerate(pick):
        rows, v = cand_vec[i]
        vecs[rows, j] = v
    return val[pick], vecs


def _take_block(P, rows, pos, dtype):
    """Copy of P's block on ``rows`` (a connected component), its columns renamed by ``pos``, values as ``dtype``;
    each row in P's stored order less its stored zeros (one may point into another component)."""
    from bigclust.algo._spectral_numba import csr_rows_nonzeros, csr_take_block

    indptr = np.zeros(rows.size + 1, dtype=P.indptr.dtype)
    csr_rows_nonzeros(P.indptr, P.data, rows, indptr[1:])
    np.cumsum(indptr, out=indptr)
    B = sp.csr_matrix((np.empty(indptr[-1], dtype), np.empty(indptr[-1], P.indices.dtype), indptr),
                      shape=(rows.size, rows.size))
    csr_take_block(P.indptr, P.indices, P.data, rows, pos, B.indptr, B.indices, B.data)
    return B


def _block_eigsh(P, rows, k, random_state, filtered=True, overwrite=False):
    """:func:`_iterative`'s ``eigsh`` on P's block of ``rows`` (M's order), without copying it.

    ARPACK multiplies by the block with its rows in P's order, reading x by P's own column numbers from an
    n-vector, so no entry pays a renaming gather.  8.1M rows, 108.9M entries, one thread, same run (load 9-10):
    1.38 CPU s a product, scipy's on a float64 copy 1.34, which needed that 1.3 GB copy.  Each row sums in P's
    stored order with its values widened.  The start vector is drawn in M's order and the vectors return in it
    (where each of ``rows`` is in P's order is found then, not held through the solve).  If ARPACK does not
    converge the block is copied for LOBPCG.
    """
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator

    from bigclust.algo._filtered import start
    from bigclust.algo._spectral_numba import csr_rows_matvec, put_rows

    m = rows.size
    srt = np.sort(rows)

    def back():   # M's place t in the block -> P's order (rows is a permutation of srt)
        return np.searchsorted(srt, rows).astype(rows.dtype, copy=False)

    def matvec(x):   # the filter's steps do not call it: its n-vector exists during a product only
        full = np.zeros(P.shape[0])   # x by P's row numbers: read only on the block's rows
        put_rows(full, srt, np.ravel(x))
        y = np.empty(m)
        csr_rows_matvec(P.indptr, P.indices, P.data, srt, full, y)
        return y
    try:
        w, U = _arpack(LinearOperator((m, m), matvec=matvec, rmatvec=matvec, dtype=np.float64), k,
                       start(m, random_state, back, scatter=True), P if filtered else None, srt, overwrite)
    except ArpackNoConvergence:
        warnings.warn(f"eigsh did not converge for k={k}, n={m}; falling back to lobpcg", RuntimeWarning,
                      stacklevel=4)
        pos = np.empty(P.shape[0], dtype=P.indices.dtype)   # the copy's row i is M's place inverse(back)[i]
        pos[srt] = np.arange(m)
        return _lobpcg(_take_block(P, srt, pos, P.dtype), k, random_state, inverse(back()))
    return w, U[back()]


def _arpack(op, k, v0, P=None, rows=None, overwrite=False):
    """ARPACK's k largest eigenpairs of ``op``; of a Chebyshev filter of it (:mod:`bigclust.algo._filtered`) when
    ``op`` is the sparse P's block on ``rows`` (None: all of P) of at least ``FILTER_MIN_ROWS`` rows.
    ``v0``: the start, an array or a callable (:func:`~bigclust.algo._filtered.start`).  ``overwrite``: a
    float32 P of ``UPPER_MIN_ROWS`` rows or more becomes its upper triangle for the solve (whole again if
    ARPACK raises).  Raises ArpackNoConvergence as ``eigsh``."""
    from scipy.sparse.linalg import LinearOperator, aslinearoperator

    from bigclust.algo import _upper
    from bigclust.algo._filtered import FILTER_MIN_ROWS, filtered_eigsh, lean_eigsh
    from bigclust.algo._spectral_numba import csr_rows_max_abs_sum

    n = op.shape[0]
    csr = upper = None
    if P is not None and n >= FILTER_MIN_ROWS and k < n // 2:
        A = _csr(P)
        rows = None if A.shape[0] == n else rows   # None: all of P
        rho = csr_rows_max_abs_sum(A.indptr, A.data, np.arange(n) if rows is None else rows)
        fused = A.dtype == np.float32   # on a float64 copy scipy's product + NumPy's passes: 28 vs 38 ms a step, 1M
        csr, matvec = (A.indptr, A.indices, A.data), aslinearoperator(op).matvec
        if overwrite and fused and n >= _upper.UPPER_MIN_ROWS:   # rho first: the same value as from P itself
            csr, upper = _upper.to_upper(A, rows)
            matvec = _upper.product(csr, upper)
            op = LinearOperator((n, n), matvec=matvec, rmatvec=matvec, dtype=np.float64)
        found = filtered_eigsh(matvec, n, k, v0, rho, csr=csr if fused else None, rows=rows, upper=upper)
        if found is not None:
            return found
    try:
        return lean_eigsh(op, k, v0, 1e-10, max(5000, 20 * n))
    except Exception:   # the caller's fallback needs P itself
        if upper is not None:
            _upper.restore(A, csr)
        raise


def _csr(P):
    """P as a CSR matrix: P itself when it is one (``overwrite`` replaces its arrays: no frame may hold views
    of them), else a CSR sharing its arrays or a copy."""
    return P if type(P) is sp.csr_matrix else sp.csr_matrix(P)


def _as_operand(P):
    from scipy.sparse.linalg import LinearOperator
    if isinstance(P, LinearOperator):
        return P
    return sp.csr_matrix(P, dtype=np.float64) if sp.issparse(P) else np.asarray(P, dtype=np.float64)


#: stored entries of a float32 P above which ARPACK multiplies through :func:`_arpack_operand`'s kernel
#: instead of a float64 copy of the values (8 bytes per entry): 64M entries (a 0.5 GB copy; about 4.6M rows
#: at 10 neighbours).  Below it scipy's product on the copy is faster (1M rows, one thread: 61 ms against
#: 100 ms per product); above it the copy is what breaks a 4 GB process (0.9 GB at 8.1M rows).
FLOAT32_OPERATOR_NNZ = 64_000_000


def csr_product(A, x):
    """``A @ x`` in float64 for a CSR A of float32 or float64 values: scipy's sums in scipy's order (the same bits),
    each value widened as it is read instead of from a float64 copy of A's values."""
    from bigclust.algo._spectral_numba import csr_matvec
    y = np.empty(A.shape[0])
    csr_matvec(A.indptr, A.indices, A.data, np.ascontiguousarray(x, dtype=np.float64), y)
    return y


def _arpack_operand(P, widen=False):
    """What ARPACK multiplies by: a large float32 CSR P (any, with ``widen``) stays float32 behind a Numba product.

    ARPACK needs float64 products; scipy gets them from a float64 copy of the values (8.1M rows x 10
    neighbours: 0.9 GB beside the float32 P and ARPACK's 1.4 GB basis).  Above :data:`FLOAT32_OPERATOR_NNZ`
    entries the kernel widens each value as it reads it and sums in scipy's order: the same bits.
    """
    from scipy.sparse.linalg import LinearOperator

    if not (sp.issparse(P) and P.dtype == np.float32 and (widen or P.nnz > FLOAT32_OPERATOR_NNZ)):
        return _as_operand(P)
    A = _csr(P)   # stored entries in stored order, as scipy's product reads them
    matvec = lambda x: csr_product(A, np.ravel(x))   # noqa: E731
    return LinearOperator(A.shape, matvec=matvec, rmatvec=matvec, dtype=np.float64)


#: rows from which ARPACK multiplies by P renumbered in breadth-first order (:func:`local_order`).  A product
#: gathers ``x[j]`` for the columns of each row; on a kNN graph in data order (mnist-1m lists the copies of an
#: image 70000 rows apart) those reads miss the cache once x (8 bytes a row) outgrows it.  Measured on the
#: mnist-1m graph, one thread, CPU ms per product: 1M rows 58 -> 38 (order and copy 0.6 s, paid back after
#: ~30 of ARPACK's ~660 products; the whole eigsh 87 -> 61 CPU s); its 131k-row prefix 2.7 -> 1.7, its 70k
#: prefix 1.2 -> 1.0; on MNIST-70k's own graph the whole eigsh gains about 0.05 of 1.8 s, inside the noise --
#: so the threshold sits above 70k, where the committed 70k reproductions keep their bits.
REORDER_MIN_ROWS = 1 << 17


def _lobpcg(P, k, random_state, order=None):
    """LOBPCG's top-k pairs; ``order``: P is renumbered by it (start block drawn in the original numbering)."""
    from scipy.sparse.linalg import lobpcg
    n = P.shape[0]
    X0 = np.random.default_rng(random_state).standard_normal((n, k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        vals, vecs = lobpcg(_as_operand(P), X0 if order is None else X0[order], largest=True, tol=1e-8,
                            maxiter=2000)
    return vals, (vecs if order is None else unpermute(vecs, order))


def embed(P, k, *, solver="auto", random_state=0, order=None, overwrite=False):
    """Row-normalised spectral embedding (n, k) of a symmetric similarity.

    Rows of zero length (isolated points) are left at zero rather than
    divided by zero; k-means then places them with whichever centre is
    nearest the origin.  ``order``: P is renumbered by it, the rows of the
    embedding are not; ``overwrite``: P may be overwritten (see :func:`top_eigenvectors`).
    """
    _, V = top_eigenvectors(P, k, solver=solver, random_state=random_state, order=order, overwrite=overwrite)
    norms = np.linalg.norm(V, axis=1)
    nz = norms > 0
    V[nz] /= norms[nz, None]
    return V


def components(K):
    """``(n_components, labels)`` of the graph of K's non-zero entries (dense or sparse, symmetric).

    Explicitly stored zeros are not edges (scipy's csgraph would count them:
    the exact BBS keeps the entries it clips to 0 in K's pattern).
    """
    from bigclust.algo._spectral_numba import csr_components, dense_components
    if sp.issparse(K):
        K = sp.csr_matrix(K)          # shares a CSR's arrays
        labels = np.empty(K.shape[0], dtype=np.int64)
        return int(csr_components(K.indptr, K.indices, K.data, labels)), labels
    A = np.asarray(K)
    if A.dtype not in (np.float32, np.float64):
        A = A.astype(np.float64)
    labels = np.empty(A.shape[0], dtype=np.int64)
    return int(dense_components(np.ascontiguousarray(A), labels)), labels


def check_connected(K, what="affinity graph") -> int:
    """Number of connected components of the graph of ``K``; one warning line when there are several.

    Spectral clustering proceeds on a disconnected graph, but each component
    adds an eigenvalue at the top of the spectrum, so k-means sees the
    components before any structure inside them.
    """
    ncomp, labels = components(K)
    if ncomp > 1:
        sizes = np.bincount(labels)
        warnings.warn(f"{what} has {ncomp} connected components (largest {int(sizes.max())}, "
                      f"{int((sizes == 1).sum())} isolated points); clustering goes on, each component adds an "
                      "eigenvalue at the top of the spectrum (raise n_neighbors or gamma to connect them)",
                      RuntimeWarning, stacklevel=3)
    return ncomp
