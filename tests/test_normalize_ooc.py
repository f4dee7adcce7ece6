"""Out-of-core BBS / Sinkhorn equal the in-memory solvers, whatever the blocks or the scheduler."""
import warnings

import numpy as np
import pytest
import scipy.linalg
import zarr
from scipy.sparse.linalg import eigsh

from bigclust._util.errors import DataError, UserError
from bigclust.normalize import NormalizeConvergenceWarning, bbs, mbbs, ncut, sinkhorn
from bigclust.algo.blocks import create_like
from bigclust.normalize.ooc import bbs_blocked, blocked_matvec_operator, mbbs_blocked, sinkhorn_blocked

N = 61  # prime: no block size divides it


def _kernel(n=N, seed=0, dtype=np.float64):
    """A Gaussian kernel, made exactly symmetric (the blocked solvers assume it, see bbs_blocked)."""
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(c, 0.5, (n // 3 + 1, 4)) for c in (0.0, 2.0, 4.0)])[:n]
    K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / 2.0)
    K = (K + K.T) / 2
    return K.astype(dtype), np.repeat([0, 1, 2], n // 3 + 1)[:n]


def _zarr(tmp_path, K, chunk_rows, name="K"):
    g = zarr.open_group(str(tmp_path / f"s{chunk_rows}.zarr"), mode="a")
    A = g.create_array(name, shape=K.shape, chunks=(chunk_rows, K.shape[1]), dtype=K.dtype, compressors=None)
    A[...] = K
    return g, A


def alg1_ref(K, n_iter):
    """Paper 000's Alg. 1 in NumPy (DESIGN section 4): the affine projection
    ``G + (1 + S/n)/n 11^T - (r1^T + 1r^T)/n`` then ``max(G, 0)``, n_iter times from G = K."""
    G = np.array(K, dtype=np.float64)
    n = G.shape[0]
    for _ in range(n_iter):
        r = G.sum(axis=1)
        G = np.maximum(G + (1 + r.sum() / n) / n - (r[:, None] + r[None, :]) / n, 0.0)
    return G


def _budget(rows, n=N, itemsize=8):
    """max_memory giving exactly ``rows`` rows per block (3 buffers)."""
    return 3 * rows * n * itemsize


# -- BBS -----------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_rows,rows,n_iter", [(1, 1, 4), (3, 7, 30), (7, 7, 30), (5, 61, 30), (61, 61, 30)])
def test_bbs_blocked_equals_in_memory(tmp_path, chunk_rows, rows, n_iter):
    K, _ = _kernel()
    g, Kz = _zarr(tmp_path, K, chunk_rows)
    G = create_like(Kz, g, "G")
    info = bbs_blocked(Kz, G, n_iter=n_iter, max_memory=_budget(rows))
    ref, ref_info = bbs(K, "alternating", n_iter=n_iter, return_info=True)
    np.testing.assert_allclose(G[...], ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(G[...], alg1_ref(K, n_iter), rtol=0, atol=1e-12)   # the reference, not the shared pass
    assert info.n_iter == n_iter and info.row_err == pytest.approx(ref_info.row_err, abs=1e-14)


def test_bbs_blocked_compressed_k_with_other_chunks(tmp_path):
    """K through zarr's codecs (compressed, chunks not aligned with G's blocks), G as plain chunk files."""
    K, _ = _kernel()
    g = zarr.open_group(str(tmp_path / "c.zarr"), mode="w")
    Kz = g.create_array("K", shape=K.shape, chunks=(4, N), dtype=K.dtype)  # zarr's default compressor
    Kz[...] = K
    G = g.create_array("G", shape=K.shape, chunks=(6, N), dtype=K.dtype, compressors=None)
    bbs_blocked(Kz, G, n_iter=10, max_memory=_budget(13))
    np.testing.assert_array_equal(G[...], bbs(K, "alternating", n_iter=10))


def test_bbs_blocked_float32_and_mixed_types(tmp_path):
    K, _ = _kernel(dtype=np.float32)
    g, Kz = _zarr(tmp_path, K, 4)
    G = create_like(Kz, g, "G")
    bbs_blocked(Kz, G, n_iter=20, max_memory=_budget(9, itemsize=4))
    np.testing.assert_array_equal(G[...], bbs(K, "alternating", n_iter=20))
    # float64 K into a float32 G: the same as in memory with dtype=float32
    K64, _ = _kernel()
    g, Kz = _zarr(tmp_path / "b", K64, 4)
    G = create_like(Kz, g, "G", dtype=np.float32)
    bbs_blocked(Kz, G, n_iter=20, max_memory=_budget(9))
    np.testing.assert_array_equal(G[...], bbs(K64, "alternating", n_iter=20, dtype=np.float32))


def test_bbs_blocked_tol_history_and_zero_iterations(tmp_path):
    K, y = _kernel()
    g, Kz = _zarr(tmp_path, K, 10)
    G = create_like(Kz, g, "G")
    info = bbs_blocked(Kz, G, n_iter=5000, tol=1e-4, max_memory=_budget(30), y=y, record_every=10)
    ref, ref_info = bbs(K, "alternating", n_iter=5000, tol=1e-4, y=y, record_every=10, return_info=True)
    assert info.converged and info.n_iter == ref_info.n_iter and info.row_err <= 1e-4
    assert len(info.history) == info.n_iter // 10 > 2
    # the in-memory solver takes its row sums from a class-sum kernel on recorded iterations,
    # which may round differently in the last bit; the blocked one always uses bbs_alt_pass
    np.testing.assert_allclose(G[...], ref, atol=1e-12)
    np.testing.assert_allclose(G[...], alg1_ref(K, info.n_iter), atol=1e-12)
    np.testing.assert_allclose(np.array(info.history), np.array(ref_info.history), atol=1e-12)
    with pytest.warns(NormalizeConvergenceWarning):
        assert not bbs_blocked(Kz, G, n_iter=3, tol=1e-12, max_memory=_budget(10)).converged
    bbs_blocked(Kz, G, n_iter=0, max_memory=_budget(10))
    np.testing.assert_array_equal(G[...], K)


def test_bbs_blocked_checks_input(tmp_path):
    K, _ = _kernel()
    K[0, 30] += 0.5  # not symmetric; row 0 is one of the sampled rows
    g, Kz = _zarr(tmp_path, K, 7)
    with pytest.raises(DataError, match="not symmetric"):
        bbs_blocked(Kz, create_like(Kz, g, "G"), n_iter=1, max_memory=_budget(7))
    K, _ = _kernel()
    K[40, 2] = np.nan
    g, Kz = _zarr(tmp_path / "nan", K, 7)
    with pytest.raises(DataError, match=r"non-finite entry at \(40, 2\)"):
        bbs_blocked(Kz, create_like(Kz, g, "G"), n_iter=1, max_memory=_budget(7))
    with pytest.raises(UserError, match="another array than K"):
        bbs_blocked(Kz, Kz, n_iter=1, max_memory=_budget(7))
    with pytest.raises(UserError, match="cannot hold"):
        bbs_blocked(Kz, create_like(Kz, g, "G2"), n_iter=1, max_memory=100)
    g, Kz = _zarr(tmp_path / "big", _kernel()[0], 20)
    with pytest.warns(RuntimeWarning, match="over the memory budget"):
        bbs_blocked(Kz, create_like(Kz, g, "G"), n_iter=1, max_memory=_budget(7))


# -- Sinkhorn ---------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_rows,rows", [(1, 3), (3, 7), (61, 61)])
def test_sinkhorn_blocked_equals_in_memory(tmp_path, chunk_rows, rows):
    K, _ = _kernel()
    g, Kz = _zarr(tmp_path, K, chunk_rows)
    P = create_like(Kz, g, "P")
    info = sinkhorn_blocked(Kz, P, n_iter=500, tol=1e-9, max_memory=_budget(rows))
    ref, ref_info = sinkhorn(K, n_iter=500, tol=1e-9, return_info=True)
    np.testing.assert_allclose(P[...], ref, rtol=0, atol=1e-12)
    assert info.n_iter == ref_info.n_iter and info.converged and info.row_err <= 1e-9
    np.testing.assert_allclose(info.mu, ref_info.mu, rtol=1e-13)


@pytest.mark.parametrize("n_iter", [1, 2, 7])
def test_scaling_only_is_iterated_ncut(tmp_path, n_iter):
    # iterated Ncut = symmetric Sinkhorn from d = 1 (Zass-Shashua); without P_out only d is computed
    K, _ = _kernel()
    g, Kz = _zarr(tmp_path, K, 4)
    info = sinkhorn_blocked(Kz, None, n_iter=n_iter, max_memory=_budget(9))
    P, ref = ncut(K, n_iter=n_iter, return_info=True)
    np.testing.assert_array_equal(info.mu, ref.mu)
    np.testing.assert_allclose(info.mu[:, None] * K * info.mu[None, :], P, rtol=1e-14)
    assert info.row_err == pytest.approx(float(np.abs(P.sum(axis=1) - 1).max()), abs=1e-13)
    assert "P_out" not in g


def test_sinkhorn_blocked_needs_nonnegative_k(tmp_path):
    K, _ = _kernel()
    K[10, 11] = K[11, 10] = -0.1
    g, Kz = _zarr(tmp_path, K, 7)
    with pytest.raises(DataError, match="negative"):
        sinkhorn_blocked(Kz, create_like(Kz, g, "P"), n_iter=3, max_memory=_budget(7))


# -- MBBS -----------------------------------------------------------------------------------------


def _kernels3(n=N):
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.5, (n // 3 + 1, 4)) for c in (0.0, 2.0, 4.0)])[:n]
    D = ((X[:, None] - X[None]) ** 2).sum(-1)
    return [np.exp(-D / gamma) for gamma in (0.5, 1.0, 2.0)]


def _zarr_kernels(tmp_path, Ks, chunk_rows):
    g = zarr.open_group(str(tmp_path / f"m{chunk_rows}.zarr"), mode="a")
    Kz = []
    for i, K in enumerate(Ks):
        A = g.create_array(f"K{i}", shape=K.shape, chunks=(chunk_rows, K.shape[1]), dtype=K.dtype, compressors=None)
        A[...] = K
        Kz.append(A)
    return g, Kz


@pytest.mark.parametrize("chunk_rows,rows", [(1, 2), (4, 9), (61, 61)])
def test_mbbs_blocked_equals_in_memory(tmp_path, chunk_rows, rows):
    Ks = _kernels3()
    g, Kz = _zarr_kernels(tmp_path, Ks, chunk_rows)
    G, Kbar = create_like(Kz[0], g, "G"), create_like(Kz[0], g, "Kbar")
    info = mbbs_blocked(Kz, G, Kbar, lam=300.0, n_outer=10, n_iter=30, tol=1e-9, max_memory=5 * rows * N * 8)
    ref, ref_info = mbbs(Ks, lam=300.0, n_outer=10, solver="alternating", n_iter=30, tol=1e-9, return_info=True)
    assert 0.05 < ref_info.alpha.min() < ref_info.alpha.max() < 0.95  # weights that are not one-hot
    np.testing.assert_array_equal(G[...], ref)
    np.testing.assert_array_equal(info.alpha, ref_info.alpha)
    assert info.objective_history == ref_info.objective_history and info.n_iter == ref_info.n_iter
    assert info.method == "mbbs/alternating-ooc" and info.converged


def test_mbbs_blocked_checks_input(tmp_path):
    Ks = _kernels3()
    g, Kz = _zarr_kernels(tmp_path, Ks, 8)
    G, Kbar = create_like(Kz[0], g, "G"), create_like(Kz[0], g, "Kbar", np.float32)
    with pytest.raises(UserError, match="Kbar must be float64"):
        mbbs_blocked(Kz, G, Kbar, max_memory="1MB")
    with pytest.raises(UserError, match="lam must be a positive"):
        mbbs_blocked(Kz, G, G, lam=0, max_memory="1MB")
    with pytest.raises(UserError, match="non-empty list"):
        mbbs_blocked([], G, G, max_memory="1MB")


# -- the same on a dask.distributed cluster -------------------------------------------------------


def test_blocked_on_local_cluster_equals_in_process(tmp_path):
    distributed = pytest.importorskip("distributed")
    K, y = _kernel()
    g, Kz = _zarr(tmp_path, K, 5)
    G_loc, G_dist = create_like(Kz, g, "G_loc"), create_like(Kz, g, "G_dist")
    P_loc, P_dist = create_like(Kz, g, "P_loc"), create_like(Kz, g, "P_dist")
    mem = _budget(12)  # 6 blocks of 10 rows and one of 1
    i_loc = bbs_blocked(Kz, G_loc, n_iter=12, max_memory=mem, y=y, record_every=4)
    s_loc = sinkhorn_blocked(Kz, P_loc, n_iter=12, max_memory=mem)
    gm, Ksz = _zarr_kernels(tmp_path, _kernels3(), 5)
    M_loc, M_dist, Kbar = (create_like(Ksz[0], gm, name) for name in ("M_loc", "M_dist", "Kbar"))
    m_loc = mbbs_blocked(Ksz, M_loc, Kbar, lam=100.0, n_outer=3, n_iter=5, max_memory=5 * 12 * N * 8)
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        i_dist = bbs_blocked(Kz, G_dist, n_iter=12, max_memory=mem, y=y, record_every=4, client=client)
        s_dist = sinkhorn_blocked(Kz, P_dist, n_iter=12, max_memory=mem, client=client)
        m_dist = mbbs_blocked(Ksz, M_dist, Kbar, lam=100.0, n_outer=3, n_iter=5, max_memory=5 * 12 * N * 8,
                              client=client)
    np.testing.assert_array_equal(M_dist[...], M_loc[...])
    np.testing.assert_array_equal(m_dist.alpha, m_loc.alpha)
    np.testing.assert_array_equal(G_dist[...], G_loc[...])  # same kernels row by row: bit for bit
    np.testing.assert_allclose(G_dist[...], bbs(K, "alternating", n_iter=12), rtol=0, atol=1e-12)
    assert len(i_dist.history) == 3
    np.testing.assert_allclose(np.array(i_dist.history), np.array(i_loc.history), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(P_dist[...], P_loc[...])
    np.testing.assert_allclose(P_dist[...], sinkhorn(K, n_iter=12), rtol=0, atol=1e-12)
    assert s_dist.row_err == pytest.approx(s_loc.row_err, abs=1e-14)


# -- spectral step ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_blocked_operator_eigsh_equals_dense_eigh(tmp_path, dtype):
    K, _ = _kernel(n=120)
    P = sinkhorn(K, n_iter=300).astype(dtype)
    g, Pz = _zarr(tmp_path, P, 10)
    op = blocked_matvec_operator(Pz, max_memory=2 * 8 * 120 * 30)  # blocks of 30 rows
    x = np.random.default_rng(1).normal(size=(120, 3))
    np.testing.assert_allclose(op.matmat(x), P.astype(np.float64) @ x, atol=1e-12)
    np.testing.assert_allclose(op.rmatvec(x[:, 0]), P.astype(np.float64) @ x[:, 0], atol=1e-12)
    k = 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vals, vecs = eigsh(op, k=k, which="LA", tol=1e-12, v0=np.ones(120))
    ref_vals, ref_vecs = scipy.linalg.eigh(P.astype(np.float64), subset_by_index=[120 - k, 119])
    np.testing.assert_allclose(np.sort(vals), ref_vals, atol=1e-10)
    # same invariant subspace: the projections agree
    np.testing.assert_allclose(vecs @ vecs.T, ref_vecs @ ref_vecs.T, atol=1e-7)
    assert op.passes > 0
