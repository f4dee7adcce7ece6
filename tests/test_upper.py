"""P held as its upper triangle while ARPACK runs (bigclust.algo._upper): the step is the full CSR step to
rounding for any chunking, the conversion happens in P's own arrays and gives their memory back, the eigenpairs
are those of P, and a solve that falls back gets P whole again."""
import weakref

import numba
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import subspace_angles

from bigclust.algo import _filtered, _upper, spectral
from bigclust.algo._spectral_numba import csr_chebyshev_step, csr_rows_chebyshev_step
from bigclust.algo._upper import chunk_bounds, sym_upper_step, to_upper
from bigclust.algo.affinity import knn_kernel
from bigclust.algo.spectral import top_eigenvectors
from bigclust.normalize import sinkhorn


def _sym(n, density, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=density, random_state=rng, format="csr")
    P = (A + A.T + sp.diags(rng.uniform(0, 1, n))).tocsr().astype(dtype)
    P.indices = P.indices.astype(np.int32)
    P.indptr = P.indptr.astype(np.int32)
    return P


def _plan(U, rows, n_chunks):
    r = np.empty(0, np.int32) if rows is None else rows
    bounds = chunk_bounds(U[0], r, n_chunks)
    ends = _upper._ends(r, bounds, U[0].size - 1)
    off = np.concatenate([[0], np.cumsum(U[0].size - 1 - ends)]).astype(np.int64)
    return r, bounds, ends, off, np.empty(int(off[-1]))


def _triangle(P):
    return to_upper(P.copy())[0]


def test_the_triangle_is_triu_in_stored_order():
    P = _sym(500, 0.02, 0)
    P.indices, P.data = P.indices.copy(), P.data.copy()
    perm = np.random.default_rng(1).permutation(P.indptr[-1])   # rows in an order of their own
    for i in range(500):
        lo, hi = P.indptr[i], P.indptr[i + 1]
        o = lo + np.argsort(perm[lo:hi])
        P.indices[lo:hi], P.data[lo:hi] = P.indices[o], P.data[o]
    ip, ix, data = _triangle(P)
    T = sp.triu(P).tocsr()
    assert np.array_equal(ip, T.indptr)
    for i in range(500):    # each row's kept entries in P's stored order
        keep = P.indices[P.indptr[i]:P.indptr[i + 1]] >= i
        assert np.array_equal(ix[ip[i]:ip[i + 1]], P.indices[P.indptr[i]:P.indptr[i + 1]][keep])
        assert np.array_equal(data[ip[i]:ip[i + 1]], P.data[P.indptr[i]:P.indptr[i + 1]][keep])


@pytest.mark.parametrize("n_chunks", [1, 2, 3, 7, 64])
@pytest.mark.parametrize("sub_t0", [False, True])
def test_the_upper_step_is_the_full_step(n_chunks, sub_t0):
    P = _sym(3000, 0.003, n_chunks)
    rng = np.random.default_rng(1)
    t1, t0 = rng.standard_normal(3000), rng.standard_normal(3000)
    ref = t0.copy()
    csr_chebyshev_step(P.indptr, P.indices, P.data, t1, ref, 1.7, 0.3, sub_t0)
    U = _triangle(P)
    got = t0.copy()
    r, *plan = _plan(U, None, n_chunks)
    sym_upper_step(*U, r, t1, got, 1.7, 0.3, sub_t0, *plan)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("n_chunks", [1, 2, 5])
def test_the_upper_step_on_a_block_s_rows(n_chunks):
    A, B = _sym(1200, 0.005, 3), _sym(800, 0.008, 4)
    P = sp.block_diag([A, B], format="csr")
    order = np.random.default_rng(0).permutation(2000)   # the blocks' rows interleaved
    P = P[order][:, order].tocsr()
    P.indices = P.indices.astype(np.int32)
    inv = np.empty(2000, np.int64)
    inv[order] = np.arange(2000)
    rows = np.sort(inv[:1200]).astype(np.int32)           # block A's rows in P
    other = np.setdiff1d(np.arange(2000), rows)
    links = sp.coo_matrix((np.full(40, 7.0), (rows[:40], other[:40])), shape=(2000, 2000))
    P = (P + links + links.T).tocsr()                      # stored zeros into the other block (BBS clips so)
    P.indices = P.indices.astype(np.int32)
    P.data[P.data == 7.0] = 0.0
    assert P.nnz > sp.csr_matrix(P.toarray()).nnz          # the zeros are stored
    rng = np.random.default_rng(2)
    t1 = np.zeros(2000)
    t1[rows] = rng.standard_normal(rows.size)
    ref, got = np.zeros(2000), np.zeros(2000)
    ref[rows] = got[rows] = rng.standard_normal(rows.size)
    csr_rows_chebyshev_step(P.indptr, P.indices, P.data, rows, t1, ref, 1.3, 0.2, True)
    U = _triangle(P)
    r, *plan = _plan(U, rows, n_chunks)
    sym_upper_step(*U, r, t1, got, 1.3, 0.2, True, *plan)
    np.testing.assert_allclose(got[rows], ref[rows], rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    assert not got[other].any()                            # no other row written


def test_chunks_split_the_entries_evenly():
    P = _sym(10000, 0.001, 5)
    U = _triangle(P)
    r, bounds, ends, off, buf = _plan(U, None, 2)
    assert bounds[0] == 0 and bounds[-1] == 10000 and ends[-1] == 10000
    half = U[0][bounds[1]]
    assert abs(half - U[0][-1] / 2) <= np.diff(U[0]).max()
    assert buf.size == 10000 - bounds[1]                  # half an n-vector of buffer on two chunks


def _graph(n=3000, seed=0, blobs=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(scale=1.5, size=(blobs, 6))[rng.integers(blobs, size=n)] + rng.normal(size=(n, 6))
    P = sp.csr_matrix(sinkhorn(knn_kernel(X, 15, gamma="median"), n_iter=500, tol=1e-10)).astype(np.float32)
    P.indices, P.indptr = P.indices.astype(np.int32), P.indptr.astype(np.int32)
    return P


@pytest.fixture
def upper_everywhere(monkeypatch):
    monkeypatch.setattr(_filtered, "FILTER_MIN_ROWS", 0)
    monkeypatch.setattr(_upper, "UPPER_MIN_ROWS", 0)
    monkeypatch.setattr(spectral, "FLOAT32_OPERATOR_NNZ", 0)   # blocks multiplied from P's arrays, as at 8.1M


def _same_pairs(P, k, w, V, w0, V0):
    np.testing.assert_allclose(w, w0, rtol=0, atol=1e-9)
    assert np.max(subspace_angles(V, V0)) < 1e-6
    assert np.max(np.abs(P @ V - V * w)) < 1e-6


@pytest.fixture
def arpack_sees(monkeypatch):
    """Calls ``check()`` whenever ARPACK starts; the results, in order."""
    seen, real = [], _filtered.lean_eigsh

    def spy(*a, **kw):
        seen.append(spy.check())
        return real(*a, **kw)
    spy.check = lambda: None
    monkeypatch.setattr(_filtered, "lean_eigsh", spy)
    return spy, seen


def test_overwrite_solves_from_the_triangle_and_frees_p_first(upper_everywhere, arpack_sees):
    P = _graph()
    keep = P.copy()
    w0, V0 = top_eigenvectors(keep.copy(), 8)
    full = [weakref.ref(a) for a in (P.indices, P.data, P.indptr)]
    arpack_sees[0].check = lambda: [r() is None for r in full]
    arpack_sees[1].clear()
    w, V = top_eigenvectors(P, 8, overwrite=True)
    assert arpack_sees[1] == [[True] * 3]                  # P's full arrays were gone when ARPACK started
    _same_pairs(keep, 8, w, V, w0, V0)
    T = sp.triu(keep).tocsr()
    assert np.array_equal(P.indptr, T.indptr) and P.indices.size == T.nnz < 0.6 * keep.nnz


def test_overwrite_on_a_split_graph_solves_the_largest_block_last(upper_everywhere, arpack_sees, monkeypatch):
    A, B = _graph(2500, 2, 3), _graph(2100, 3, 4)   # both above EIGH_MAX_N: both ARPACK
    P = sp.block_diag([A, B], format="csr")
    order = np.random.default_rng(0).permutation(P.shape[0])
    P = P[order][:, order].tocsr()
    P.indices = P.indices.astype(np.int32)
    keep = P.copy()
    seen = []
    real = _upper.to_upper
    monkeypatch.setattr(_upper, "to_upper", lambda A, rows=None: seen.append(len(rows)) or real(A, rows))
    w0, V0 = top_eigenvectors(keep.copy(), 8)
    data = weakref.ref(P.data)
    arpack_sees[0].check = lambda: data() is None
    arpack_sees[1].clear()
    w, V = top_eigenvectors(P, 8, overwrite=True)
    assert seen == [2500]                                  # the largest block only, after the other one
    assert arpack_sees[1] == [False, True]                 # P's full values freed before the large block's ARPACK
    _same_pairs(keep, 8, w, V, w0, V0)


def test_a_solve_that_falls_back_gets_p_whole_again(upper_everywhere, monkeypatch):
    P = _graph(seed=4)
    keep = P.copy()
    w0, V0 = top_eigenvectors(keep.copy(), 6)
    from scipy.sparse.linalg import ArpackNoConvergence

    def fails(*a, **kw):
        raise ArpackNoConvergence("no", np.zeros(0), np.zeros((0, 0)))
    monkeypatch.setattr(_filtered, "filtered_eigsh", lambda *a, **kw: None)
    monkeypatch.setattr(_filtered, "lean_eigsh", fails)
    with pytest.warns(RuntimeWarning, match="falling back to lobpcg"):
        w, V = top_eigenvectors(P, 6, overwrite=True)      # LOBPCG on P itself
    assert (P != keep).nnz == 0
    _same_pairs(keep, 6, w, V, w0, V0)


def test_the_bits_do_not_depend_on_the_live_thread_count(upper_everywhere):
    P = _graph(seed=5)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        w1, V1 = top_eigenvectors(P.copy(), 6, overwrite=True)
    finally:
        numba.set_num_threads(threads)
    w2, V2 = top_eigenvectors(P.copy(), 6, overwrite=True)
    assert np.array_equal(w1, w2) and np.array_equal(V1, V2)
