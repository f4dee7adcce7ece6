"""Sparse BBS without copies of K (issue 28, item 1: <= 4 GB a process at 8.1M rows), bit for bit.

The check shares a canonical K; the self-loop support's own copy of the values
becomes G's; G's indices reuse the dual's active-set buffer; the class sums of
the history need no nnz-long float64 array; the embed stage's renumbered K is
canonical (so the check shares it) and the dual does not renumber it again;
``copy=False`` zeroes K's diagonal in place for the solve instead of copying K's values.
The ``_old_*`` functions below are the code these replaced: every solver must
give their bits.
"""
import contextlib
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.algo import spectral
from bigclust.normalize import _bbs, _bbs_dense, _bbs_sparse, _csr_numba, _newton, bbs, checks, plugin
from bigclust.pipeline.methods import get

from test_bbs_dual_scale import components_graph, hub_graph, knn_graph
from test_normalize_memory import _graph, _same, _snapshot


# -- the code before: a copying check, fresh arrays for G, a float64 form for the class sums, a copy to renumber


def _old_local_order(K):
    if K.shape[0] < _bbs_sparse.REORDER_MIN_ROWS:
        return K, None
    A, order = spectral.local_order(K)
    return type(K)((A.data, A.indices, A.indptr), shape=K.shape), order


def _old_finish(template, K, mu, dt, method, n_cg, *_):
    data = np.empty(K.data.shape[0], dtype=dt)
    r = np.empty(K.shape[0])
    stats = np.zeros((3, _csr_numba._CHUNKS))
    _csr_numba.csr_dual_finish(K.data, K.indices, K.indptr, mu, data, r, stats)
    err = float(np.abs(r - 1.0).max())
    kkt = {"primal_row_err": err, "primal_min": float(stats[0].min()),
           "dual_feasibility": float(max(0.0, -stats[1].min())), "complementarity": float(stats[2].max())}
    G = _bbs_sparse.like_sparse(template, data, K.indices.copy(), K.indptr.copy(), K.shape)
    return G, _bbs_sparse.NormalizeInfo(n_iter=0, converged=True, row_err=err, kkt=kkt, method=method, mu=mu,
                                        n_inner=n_cg)


def _old_dual_class_sums(self, mu, codes):
    out = np.empty(self.K.data.shape[0])
    _csr_numba.csr_dual_form(self.K.data, self.indices, self.indptr, mu, out, np.empty(self.n))
    return self.class_sums(out, codes)


def _old_loop(evaluate, jacobian, mu, tol, max_iter, hist, class_sums, bar):
    mu = np.array(mu, dtype=np.float64)
    r, sq, state = evaluate(mu)
    F = r - 1.0
    theta = 0.5 * sq.sum() - 2.0 * mu.sum()
    n_cg = 0
    k = 0
    while True:
        err = float(np.abs(F).max())
        if hist.due(k):
            hist.add(k, r, class_sums(mu)[1] if hist.wants_classes else None)
        if err <= tol or k >= max_iter:
            return mu, k, err <= tol, err, n_cg
        solve = jacobian(mu, state)
        delta, it = solve(-F, min(1e-3, err), min(0.1, _newton.norm2(F)), max(50, min(mu.size, 1000)))
        n_cg += it
        slope = 2.0 * float(np.sum(F * delta))
        slack = 1e-12 * (0.5 * sq.sum() + 2.0 * np.abs(mu).sum())
        step = 1.0
        for _ in range(60):
            mu_t = mu + step * delta
            r_t, sq_t, state_t = evaluate(mu_t)
            theta_t = 0.5 * sq_t.sum() - 2.0 * mu_t.sum()
            if theta_t <= theta + 1e-4 * step * slope + slack:
                break
            step *= 0.5
        else:
            return mu, k, err <= tol, err, n_cg
        mu, r, sq, state, theta = mu_t, r_t, sq_t, state_t, theta_t
        F = r - 1.0
        k += 1
        bar.update(1)


class _NoBar:
    def update(self, _):
        pass


def _old_newton(evaluate, jacobian, mu, tol, max_iter, hist, class_sums):
    return _old_loop(evaluate, jacobian, mu, tol, max_iter, hist, class_sums, _NoBar())


@contextlib.contextmanager
def _old_code(monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(_bbs, "check_sparse", lambda K, what, copy=True, **kw: checks.check_sparse(K, what, **kw))
        for name in ("alternating", "dykstra", "dual"):  # the old solvers never wrote into K's values
            real = getattr(_bbs_sparse, name)
            m.setattr(_bbs_sparse, name, lambda *a, _f=real, scratch=False, **kw: _f(*a, **kw))
        m.setattr(_bbs_sparse, "_finish", _old_finish)
        m.setattr(_bbs_sparse, "_local_order", _old_local_order)
        m.setattr(_bbs_sparse.Support, "dual_class_sums", _old_dual_class_sums)
        m.setattr(_bbs_sparse, "newton", _old_newton)
        m.setattr(_bbs_dense, "newton", _old_newton)
        yield


def _shuffled_rows(K, seed=0):
    """K with each row's entries in a random order: not canonical, no duplicates."""
    K = sp.csr_matrix(K, copy=True)
    rng = np.random.default_rng(seed)
    for i in range(K.shape[0]):
        s = slice(K.indptr[i], K.indptr[i + 1])
        o = rng.permutation(K.indptr[i + 1] - K.indptr[i])
        K.indices[s], K.data[s] = K.indices[s][o], K.data[s][o]
    K.has_sorted_indices = False
    return K


def _bfs_ordered():
    return spectral.local_order(knn_graph(300).astype(np.float32), sort_rows=True)[0]


GRAPHS = {
    "knn32": lambda: knn_graph(300).astype(np.float32),
    "knn64": lambda: knn_graph(300),
    "knn32-array": lambda: sp.csr_array(knn_graph(300).astype(np.float32)),
    "zeros32": lambda: _graph(300, 12, np.float32, np.int32, 1, zeros=True),
    "zeros64-int64": lambda: _graph(300, 12, np.float64, np.int64, 2, zeros=True),
    "unsorted32": lambda: _shuffled_rows(knn_graph(300).astype(np.float32)),
    "dups64": lambda: _graph(300, 12, np.float64, np.int32, 3, dups=True),
    "hubs": hub_graph,
    "components": components_graph,
    "bfs32": _bfs_ordered,
}


def _run(K, **kw):
    G, info = bbs(K, return_info=True, **kw)
    return G, info


def _assert_same_result(new, old):
    (G, i), (G0, i0) = new, old
    assert type(G) is type(G0)
    for a in ("data", "indices", "indptr"):
        _same(getattr(G, a), getattr(G0, a))
    assert (i.n_iter, i.converged, i.row_err, i.kkt, i.history, i.n_inner, i.method) == \
           (i0.n_iter, i0.converged, i0.row_err, i0.kkt, i0.history, i0.n_inner, i0.method)
    if i0.mu is not None:
        _same(i.mu, i0.mu)


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("reorder", [False, True])
def test_dual_bits_against_the_previous_code(name, reorder, monkeypatch):
    K = GRAPHS[name]()
    y = np.arange(K.shape[0]) % 3
    monkeypatch.setattr(_bbs_sparse, "REORDER_MIN_ROWS", 0 if reorder else 1 << 62)
    for self_loops in ("zero", "keep", "drop", "cap"):
        kw = dict(solver="dual", tol=1e-10, y=y, record_every=1, self_loops=self_loops)
        before = _snapshot(K)
        new = _run(K, **kw)
        with _old_code(monkeypatch):
            old = _run(K, **kw)
        _assert_same_result(new, old)
        for a, b in zip(before, _snapshot(K)):  # the caller's matrix is never written
            _same(a, b)
        G = new[0]
        assert not np.shares_memory(G.data, K.data) and not np.shares_memory(G.indices, K.indices)
        if self_loops == "zero":   # K's diagonal zeroed in place for the solve instead of copied: the same bits
            _assert_same_result(_run(K, copy=False, **kw), old)
            for a, b in zip(before, _snapshot(K)):   # and put back
                _same(a, b)


@pytest.mark.parametrize("name", ["knn32", "zeros64-int64", "dups64", "hubs"])
@pytest.mark.parametrize("solver", ["alternating", "dykstra"])
def test_other_solvers_bits_against_the_previous_code(name, solver, monkeypatch):
    K = GRAPHS[name]()
    y = np.arange(K.shape[0]) % 4
    for self_loops, dtype in (("zero", None), ("keep", None), ("zero", np.float32), ("zero", np.float64)):
        kw = dict(solver=solver, n_iter=40, y=y, record_every=5, self_loops=self_loops, dtype=dtype)
        before = _snapshot(K)
        new = _run(K, **kw)
        with _old_code(monkeypatch):
            old = _run(K, **kw)
        _assert_same_result(new, old)
        for a, b in zip(before, _snapshot(K)):  # the iterate lives in the support's own copy, never in K
            _same(a, b)


def test_dense_dual_bits_against_the_previous_loop(monkeypatch):
    """The Newton loop is shared with the dense solver: its F-in-place and summed squares, same bits."""
    for K in (knn_graph(200).toarray(), hub_graph(150, fan=60).toarray().astype(np.float32)):
        y = np.arange(K.shape[0]) % 3
        kw = dict(solver="dual", tol=1e-12, y=y, record_every=1)
        new = _run(K, **kw)
        with _old_code(monkeypatch):
            old = _run(K, **kw)
        _same(new[0], old[0])
        assert (new[1].n_iter, new[1].history, new[1].kkt, new[1].n_inner) == \
               (old[1].n_iter, old[1].history, old[1].kkt, old[1].n_inner)
        _same(new[1].mu, old[1].mu)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("flavour", [sp.csr_matrix, sp.csr_array])
def test_a_canonical_kernel_is_shared_not_copied(dt, flavour, monkeypatch):
    K = flavour(knn_graph(300).astype(dt))
    seen = {}
    real = _bbs_sparse.dual

    def spy(template, Kc, *a, **kw):
        seen["Kc"], seen["scratch"] = Kc, kw.get("scratch")
        return real(template, Kc, *a, **kw)
    monkeypatch.setattr(_bbs_sparse, "dual", spy)
    for self_loops in ("keep", "zero"):
        G = bbs(K, self_loops=self_loops)
        Kc = seen["Kc"]
        assert np.shares_memory(Kc.indices, K.indices) and np.shares_memory(Kc.indptr, K.indptr)
        # "keep" reads K's own values; "zero" has its own copy, which becomes G's
        assert np.shares_memory(Kc.data, K.data) == (self_loops == "keep")
        assert seen["scratch"] == (self_loops == "zero")
        assert np.shares_memory(G.data, Kc.data) == (self_loops == "zero")
        assert not np.shares_memory(G.data, K.data) and not np.shares_memory(G.indices, K.indices)


def test_dual_finish_writes_over_its_input_with_the_same_bits():
    for dt in (np.float32, np.float64):
        K = _bbs_sparse.self_loop_support(hub_graph().astype(dt), "zero")
        mu = np.random.default_rng(1).uniform(-0.3, 0.1, K.shape[0])
        outs = []
        for in_place in (False, True):
            data = K.data.copy()
            out = data if in_place else np.empty_like(data)
            r, stats = np.empty(K.shape[0]), np.zeros((3, _csr_numba._CHUNKS))
            _csr_numba.csr_dual_finish(data, K.indices, K.indptr, mu, out, r, stats)
            outs.append((out, r, stats))
        for a, b in zip(*outs):
            _same(a, b)


def test_fused_class_sums_equal_form_then_sums():
    K = hub_graph()
    sup = _bbs_sparse.Support(K)
    mu = np.random.default_rng(2).uniform(-0.3, 0.1, K.shape[0])
    codes = np.arange(K.shape[0]) % 5
    for a, b in zip(sup.dual_class_sums(mu, codes), _old_dual_class_sums(sup, mu, codes)):
        _same(a, b)


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_dual_holds_two_arrays_of_nnz_entries_beyond_k(monkeypatch):
    """NumPy's allocations during bbs(K) on a canonical float32 K: its values' copy (G's values) and one
    index buffer (the active set, then G's indices), besides n-long vectors; before, also a copy of K and
    G's indices (measured with tracemalloc, which sees NumPy's arrays)."""
    K = _graph(20000, 40, np.float32, np.int32, 9)
    nnz_bytes, n = K.data.nbytes, K.shape[0]
    bbs(K, tol=1e-6)  # compile first
    new = _peak_bytes(lambda: bbs(K, tol=1e-6))
    with _old_code(monkeypatch):
        old = _peak_bytes(lambda: bbs(K, tol=1e-6))
    assert new <= 2 * nnz_bytes + 400 * n < old


def test_renumbered_kernel_is_canonical_and_checked_without_a_copy(monkeypatch):
    """The embed stage's renumbered K: the matrix the check's copy-and-sort made before, already canonical."""
    monkeypatch.setattr(spectral, "REORDER_MIN_ROWS", 100)
    K = knn_graph(600, 8, 4).astype(np.float32)
    y = np.arange(600) % 3
    old_K, old_order = spectral.local_order(K)       # the renumbering before: rows in K's stored order
    ref = checks.check_sparse(old_K, "t")[0]          # what the normalisers then checked (a sorted copy)
    Ks = [K.copy()]
    order, y2 = plugin._renumber(Ks, [1], get("sk"), y)
    A = Ks[0]
    assert np.array_equal(order, old_order) and np.array_equal(y2, y[order])
    assert sp.csr_matrix((A.data, A.indices, A.indptr), shape=A.shape).has_canonical_format
    for a in ("data", "indices", "indptr"):
        _same(getattr(A, a), getattr(ref, a))
    shared = checks.check_sparse(A, "t", copy=False)[0]
    assert all(np.shares_memory(getattr(shared, a), getattr(A, a)) for a in ("data", "indices", "indptr"))
    # breadth-first order of a breadth-first-ordered K is the identity: the dual solves K itself
    monkeypatch.setattr(_bbs_sparse, "REORDER_MIN_ROWS", 0)
    Kp, o = _bbs_sparse._local_order(A)
    assert Kp is A and o is None
    # a K with duplicates is renumbered as before (the check sums and sorts it)
    D = _graph(600, 8, np.float32, np.int32, 5, dups=True)
    Ks = [D]
    plugin._renumber(Ks, [1], get("sk"), None)
    assert not sp.csr_matrix((Ks[0].data, Ks[0].indices, Ks[0].indptr), shape=D.shape).has_canonical_format


def test_copy_false_zeroes_the_diagonal_in_place_and_puts_it_back(monkeypatch):
    """``copy=False`` (the embed stage's): no copy of K's values during the Newton steps, K as it was after --
    also after an error, and a read-only K is copied as before."""
    K = _graph(20000, 8, np.float32, np.int32, 9)   # few entries a row: the n-vectors do not hide a copy of K
    assert np.count_nonzero(K.diagonal()) > 0
    bbs(K, tol=1e-6, copy=False)  # compile first
    copied = _peak_bytes(lambda: bbs(K, tol=1e-6))
    in_place = _peak_bytes(lambda: bbs(K, tol=1e-6, copy=False))
    assert in_place <= copied - 0.5 * K.data.nbytes   # a copy of K's values would make them equal
    before = _snapshot(K)

    def stop(*a, **kw):
        raise RuntimeError("stopped mid-solve")
    with monkeypatch.context() as m:
        m.setattr(_bbs_sparse, "dual", stop)
        with pytest.raises(RuntimeError):
            bbs(K, copy=False)
    for a, b in zip(before, _snapshot(K)):
        _same(a, b)
    K.data.flags.writeable = False
    _assert_same_result(_run(K, tol=1e-6, copy=False), _run(K, tol=1e-6))
