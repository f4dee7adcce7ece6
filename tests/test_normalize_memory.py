"""The low-memory sparse check and Sinkhorn form give the bits of the NumPy code they replaced.

The reference functions below are that NumPy code (a transpose for the
symmetry test, nnz-long float64 temporaries); they live only here, as the
specification the compiled kernels are held to.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from bigclust._util.errors import DataError
from bigclust.normalize import ncut, sinkhorn
from bigclust.normalize._scaling import _SparseOp
from bigclust.normalize.checks import _check_values, _float_dtype, check_sparse


def _ref_check_sparse(K, what, *, nonneg=False, positive_rows=None):
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] == 0:
        raise DataError(f"K must be a non-empty square matrix, got shape {K.shape}")
    K = sp.csr_matrix(K, dtype=_float_dtype(K.dtype), copy=True)
    K.sum_duplicates()
    K.sort_indices()
    n = K.shape[0]
    bad = np.flatnonzero(~np.isfinite(K.data))
    if bad.size:
        row = int(np.searchsorted(K.indptr, bad[0], side="right") - 1)
        raise DataError(f"K has a non-finite entry at ({row}, {K.indices[bad[0]]}); {what} needs a finite K")
    T = K.T.tocsr()
    T.sort_indices()
    if not (np.array_equal(K.indptr, T.indptr) and np.array_equal(K.indices, T.indices)):
        raise DataError("K's sparsity pattern is not symmetric (an entry is stored at (i, j) but not at "
                        f"(j, i)); {what} works on a symmetric support: symmetrise K or eliminate_zeros()")
    asym = float(np.abs(K.data - T.data).max(initial=0.0))
    full = np.diff(K.indptr) > 0
    starts = K.indptr[:-1][full]
    lo, hi, rs = np.zeros(n), np.zeros(n), np.zeros(n)
    if starts.size:
        lo[full] = np.minimum.reduceat(K.data, starts)
        hi[full] = np.maximum.reduceat(K.data, starts)
        rs[full] = np.add.reduceat(K.data.astype(np.float64), starts)
    _check_values(what, asym, lo, hi, rs, K.dtype, nonneg, positive_rows)
    return K, rs


def _ref_form(K, u, v):
    rows = np.repeat(np.arange(K.shape[0]), np.diff(K.indptr))
    data = ((u[rows] * K.data) * v[K.indices]).astype(K.dtype)
    return data, np.bincount(rows, weights=data, minlength=K.shape[0])


def _graph(n, k, dtype, idx, seed, *, empty_row=False, zeros=False, dups=False, asym=0.0, flavour=sp.csr_matrix):
    """A random symmetric kNN-like graph, optionally with the awkward features of real input."""
    rng = np.random.default_rng(seed)
    i = np.repeat(np.arange(n), k)
    j = rng.integers(0, n, n * k)
    if empty_row:
        keep = (i != 3) & (j != 3)
        i, j = i[keep], j[keep]
    w = rng.random(i.size)
    if zeros:
        w[rng.random(i.size) < 0.05] = 0.0
    A = sp.coo_matrix((w, (i, j)), shape=(n, n)).tocsr()
    A = A + A.T  # symmetric values, duplicates summed
    A = sp.csr_matrix(A, dtype=dtype)
    if asym:
        A.data[np.flatnonzero(A.indices != np.repeat(np.arange(n), np.diff(A.indptr)))[0]] += asym
    if dups:  # every stored entry split in two, each row's entries shuffled: unsorted, with duplicates
        idx_rows, data, cols = [], [], []
        for r in range(n):
            lo, hi = A.indptr[r], A.indptr[r + 1]
            half = (A.data[lo:hi] / 2).astype(dtype)
            d = np.concatenate([half, (A.data[lo:hi] - half).astype(dtype)])
            c = np.concatenate([A.indices[lo:hi], A.indices[lo:hi]])
            o = rng.permutation(d.size)
            data.append(d[o])
            cols.append(c[o])
        indptr = np.concatenate([[0], np.cumsum([d.size for d in data])])
        A = sp.csr_matrix((np.concatenate(data), np.concatenate(cols), indptr), shape=(n, n))
        assert not A.has_canonical_format
    A = flavour(A)
    A.indices = A.indices.astype(idx)
    A.indptr = A.indptr.astype(idx)
    return A


CASES = [(dt, idx, fl) for dt in (np.float32, np.float64) for idx in (np.int32, np.int64)
         for fl in (sp.csr_matrix, sp.csr_array)]


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("dt, idx, fl", CASES)
@pytest.mark.parametrize("extra", [{}, {"zeros": True}, {"dups": True}, {"empty_row": True}])
def test_check_sparse_bits(dt, idx, fl, extra):
    K = _graph(300, 12, dt, idx, 1, flavour=fl, **extra)
    ref, rs0 = _ref_check_sparse(K, "t")
    shared = check_sparse(K, "t", copy=False)[0]
    # a canonical float input is shared, not copied; one with duplicates is not
    assert np.shares_memory(shared.data, K.data) == (not extra or "zeros" in extra or "empty_row" in extra)
    for copy in (True, False):
        got, rs = check_sparse(K, "t", copy=copy)
        assert got.has_canonical_format
        for a in ("data", "indices", "indptr"):
            _same(getattr(got, a), getattr(ref, a))
        _same(rs, rs0)


def test_row_sums_across_blocks(monkeypatch):
    from bigclust.normalize import checks

    K = _graph(2000, 40, np.float32, np.int32, 2)
    monkeypatch.setattr(checks, "_ROWSUM_BLOCK", 997)  # many blocks, rows cut nowhere else
    _same(check_sparse(K, "t")[1], _ref_check_sparse(K, "t")[1])


def _raises(fn, K, **kw):
    with pytest.raises(DataError) as e:
        fn(K, "t", **kw)
    return str(e.value)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_every_error_kept(dt):
    good = _graph(200, 8, dt, np.int32, 3)
    bad_val = _graph(200, 8, dt, np.int32, 3, asym=0.5)
    nonfin = good.copy()
    nonfin.data[17] = np.nan
    pattern = good.tolil()
    pattern[5, 150] = 1.0 if pattern[5, 150] == 0 else 0.0
    pattern = pattern.tocsr()
    if pattern[150, 5] != 0 and pattern[5, 150] == 0:
        pattern.eliminate_zeros()
    neg = good.copy()
    neg.data[:] = -neg.data
    empty = _graph(200, 8, dt, np.int32, 3, empty_row=True)
    cases = [(bad_val, {}), (nonfin, {}), (pattern, {}), (neg, {"nonneg": True}),
             (empty, {"positive_rows": "needs rows"}), (neg, {"positive_rows": "needs rows"}),
             (sp.csr_matrix((3, 4), dtype=dt), {})]
    for K, kw in cases:
        want = _raises(_ref_check_sparse, K, **kw)
        assert _raises(check_sparse, K, **kw) == want
        assert _raises(lambda *a, **k: check_sparse(*a, copy=False, **k), K, **kw) == want


@pytest.mark.parametrize("dt, idx, fl", CASES)
def test_form_bits(dt, idx, fl):
    K, _ = check_sparse(_graph(400, 10, dt, idx, 4, flavour=fl, zeros=True, empty_row=True), "t")
    rng = np.random.default_rng(5)
    u, v = rng.random(400) + 0.5, rng.random(400) + 0.5
    P, r = _SparseOp(K, K).form(u, v)
    d0, r0 = _ref_form(K, u, v)
    _same(P.data, d0)
    _same(r, r0)
    assert isinstance(P, type(sp.csr_matrix(K) if fl is sp.csr_matrix else K))


def _snapshot(K):
    return [getattr(K, a).copy() for a in ("data", "indices", "indptr")]


@pytest.mark.parametrize("dt, idx, fl", CASES)
def test_caller_matrix_untouched(dt, idx, fl):
    for extra in ({}, {"dups": True}):
        K = _graph(300, 10, dt, idx, 6, flavour=fl, **extra)
        before = _snapshot(K)
        P = sinkhorn(K, n_iter=50)
        ncut(K, 3)
        check_sparse(K, "t", copy=False)
        for a, b in zip(before, _snapshot(K)):
            _same(a, b)
        assert not np.shares_memory(P.data, K.data) and not np.shares_memory(P.indices, K.indices)
        assert type(P) is type(K)


def test_sinkhorn_matches_reference_pipeline(monkeypatch):
    """Whole runs (both variants, history with labels) give the bits of the old check + form."""
    from bigclust.normalize import _scaling

    def old_form(self, u, v):
        data, r = _ref_form(self.K, u, v)
        K = self.K
        return _scaling.like_sparse(self.template, data, K.indices.copy(), K.indptr.copy(), K.shape), r

    K = _graph(500, 10, np.float32, np.int32, 7, dups=True)
    y = np.arange(500) % 4
    runs = []
    for old in (False, True):
        with monkeypatch.context() as m:
            if old:
                m.setattr(_scaling, "check_sparse", lambda K, what, copy=True, **kw: _ref_check_sparse(K, what, **kw))
                m.setattr(_scaling._SparseOp, "form", old_form)
            runs.append([sinkhorn(K, n_iter=200, tol=1e-7, y=y, record_every=10, return_info=True, variant=var)
                         for var in ("symmetric", "alternating")])
    for (P, i), (P0, i0) in zip(*runs):
        for a in ("data", "indices", "indptr"):
            _same(getattr(P, a), getattr(P0, a))
        assert (i.n_iter, i.row_err, i.history) == (i0.n_iter, i0.row_err, i0.history)
        if i.mu is not None:
            _same(i.mu, i0.mu)


def test_stale_canonical_flag():
    """Indices reordered in place after scipy cached "canonical": the check reads them again, as before."""
    K = _graph(200, 8, np.float32, np.int32, 8)
    assert K.has_canonical_format
    lo, hi = K.indptr[0], K.indptr[1]
    K.indices[lo:hi] = K.indices[lo:hi][::-1].copy()
    K.data[lo:hi] = K.data[lo:hi][::-1].copy()
    ref, rs0 = _ref_check_sparse(K, "t")
    got, rs = check_sparse(K, "t", copy=False)
    for a in ("data", "indices", "indptr"):
        _same(getattr(got, a), getattr(ref, a))
    _same(rs, rs0)
