"""The per-column ADMM kernel's speed-ups change nothing but the time and the last bits.

``admm_columns`` runs blocks of columns with per-block scratch, a 4-row
mat-vec with fused multiply-adds, a branch-free fused update pass whose sums
are reassociated (vectorised), and a per-column cache of inverses keyed by the
shift, each from a Cholesky factor in padded rows.  A plain reference kernel
written here (one column at a time, scratch per column, one row per mat-vec
pass, strict IEEE sums, LAPACK's LU inverse
recomputed at every change of rho) must take the same iterations and reach the same
coefficients to rounding, with residual balancing moving rho up and down; a
column's bits do not depend on the block or call it runs in.  The solutions
themselves are checked against references in test_ref_subspace_admm.py and
test_subspace_solvers.py.
"""
import numpy as np
import pytest
from numba import njit

from bigclust.subspace import _numba as K
from bigclust.subspace import build_dictionary, knn_dictionary


@njit(cache=False)
def _reference_columns(D, X, nbr, thr, ridge, rho0, eps_abs, eps_rel, max_iter, relax, balance, out_c, out_iter,
                       out_rho):
    n, k = nbr.shape
    for i in range(n):
        A = np.empty((k, D.shape[1]))
        for p in range(k):
            A[p, :] = D[nbr[i, p]]
        G = A @ A.T                             # G_pq = <D[N_i[p]], D[N_i[q]]>, b_p = <D[N_i[p]], x_i>
        b = A @ X[i]
        rho = rho0
        M = np.linalg.inv(G + (ridge + rho) * np.eye(k))
        z = np.zeros(k)
        u = np.zeros(k)
        c = np.zeros(k)
        sk = np.sqrt(k)
        it = 0
        n_changes = 0
        while it < max_iter:
            it += 1
            rhs = b + rho * z - u
            zprev = z.copy()
            for p in range(k):
                c[p] = 0.0
            for q in range(k):
                for p in range(k):
                    c[p] += M[q, p] * rhs[q]
            r2 = s2 = cn = zn = un = 0.0
            for p in range(k):
                ch = relax * c[p] + (1.0 - relax) * zprev[p]
                v = ch + u[p] / rho
                t = thr[i, p] / rho
                zp = v - t if v > t else (v + t if v < -t else 0.0)
                z[p] = zp
                u[p] += rho * (ch - zp)
                diff = c[p] - zp
                dz = zp - zprev[p]
                r2 += diff * diff
                s2 += dz * dz
                cn += c[p] * c[p]
                zn += zp * zp
                un += u[p] * u[p]
            r = np.sqrt(r2)
            s = rho * np.sqrt(s2)
            if r <= sk * eps_abs + eps_rel * np.sqrt(max(cn, zn)) and s <= sk * eps_abs + eps_rel * np.sqrt(un):
                break
            if it % 10 == 0 and (r > balance * s or s > balance * r):
                rho = rho * 2.0 if r > balance * s else rho * 0.5
                n_changes += 1
                M = np.linalg.inv(G + (ridge + rho) * np.eye(k))
        out_c[i] = z
        out_iter[i] = it
        out_rho[i] = n_changes


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(3)
    n, d, k = 200, 30, 13                      # k not a multiple of 4: the mat-vec's tail rows run too
    bases = [np.linalg.qr(rng.standard_normal((d, 4)))[0] for _ in range(5)]
    X = np.stack([bases[i % 5] @ rng.standard_normal(4) for i in range(n)]) + 0.05 * rng.standard_normal((n, d))
    D = build_dictionary(X)
    nb = knn_dictionary(D, k)
    return D, nb, rng


@pytest.mark.parametrize("ridge,relax,eps,weighted", [(0.0, 1.8, 1e-10, False), (0.05, 1.0, 1e-7, True),
                                                      (0.0, 1.5, 1e-12, True)])
def test_admm_columns_same_iterates_as_plain_kernel(problem, ridge, relax, eps, weighted):
    D, nb, rng = problem
    n, k = nb.shape
    thr = np.full(nb.shape, 0.02)
    if weighted:
        thr = thr * (1.0 + rng.random(nb.shape))
    X = np.ascontiguousarray(D.atoms[:n])
    c0, it0, ch0 = np.empty((n, k)), np.empty(n, np.int64), np.empty(n, np.int64)
    _reference_columns(D.atoms, X, nb, thr, ridge, 0.1, eps, eps, 3000, relax, K.BALANCE, c0, it0, ch0)
    assert ch0.max() >= 2 and np.median(it0) > 20        # rho really moves, so the cache is exercised
    c1, it1, ok1 = np.empty((n, k)), np.empty(n, np.int64), np.empty(n, np.bool_)
    K.admm_columns(D.atoms, X, nb, thr, ridge, 0.1, eps, eps, 3000, True, relax, c1, it1, ok1)
    # the same algorithm: rounding may move a stop or a change of rho by one test in a rare column
    assert np.mean(it0 == it1) >= 0.95 and np.abs(it0 - it1).max() <= 10
    assert np.abs(c0 - c1).max() < max(1e-9, 1e3 * eps)
    assert np.mean((c0 == 0) == (c1 == 0)) > 0.999                     # the same supports
    assert np.array_equal(ok1, it1 < 3000)
    # columns do not depend on their block: a shifted slice gives the same bits
    c2, it2, ok2 = np.empty((n - 7, k)), np.empty(n - 7, np.int64), np.empty(n - 7, np.bool_)
    K.admm_columns(D.atoms, X[7:], nb[7:], thr[7:], ridge, 0.1, eps, eps, 3000, True, relax, c2, it2, ok2)
    assert np.array_equal(c2.view(np.int64), c1[7:].view(np.int64)) and np.array_equal(it2, it1[7:])


def test_numpy_reference_of_the_bench_balances_like_the_kernel():
    import inspect

    from bigclust.bench.subspace import numpy_admm
    assert inspect.signature(numpy_admm).parameters["balance"].default == K.BALANCE and K.BALANCE_EVERY == 10


@pytest.mark.parametrize("k", [1, 3, 4, 9, 16, 50, 70])
def test_sym_matvec_is_the_matrix_product(k):
    rng = np.random.default_rng(k)
    kp = K.padded(k)
    M = np.zeros((kp, kp))
    S = rng.standard_normal((k, k))
    M[:k, :k] = S + S.T                       # rows padded past k (as in the inverse cache)
    r = rng.standard_normal(kp)
    out = np.full(kp, np.nan)
    K.sym_matvec(M, r, out, k)
    np.testing.assert_allclose(out[:k], M[:k, :k] @ r[:k], rtol=1e-12, atol=1e-12)
    assert not out[k:].any()                  # the padded width is written, with zeros


@pytest.mark.parametrize("k", [1, 3, 7, 8, 9, 13, 21, 50])
def test_spd_inverse_shifted_is_the_inverse(k):
    """Cholesky, triangular inverse and product in padded rows: the inverse to rounding, exactly symmetric,
    zero past k; a matrix that is not positive definite is refused."""
    rng = np.random.default_rng(k)
    A = rng.standard_normal((k + 5, k))
    A /= np.linalg.norm(A, axis=0)
    G = A.T @ A
    kp = K.padded(k)
    assert kp % K.PAD == 0 and k <= kp < k + K.PAD
    U, Y, M = (np.full((kp, kp), np.nan) for _ in range(3))   # scratch garbage must not leak into M
    assert K.spd_inverse_shifted(G, 0.1, U, Y, M)
    ref = np.linalg.inv(G + 0.1 * np.eye(k))
    assert np.abs(M[:k, :k] - ref).max() < 1e-12 * np.abs(ref).max() * k
    assert np.array_equal(M, M.T)
    assert not M[k:].any() and not M[:, k:].any()
    np.testing.assert_allclose(np.triu(U[:k, :k]).T @ np.triu(U[:k, :k]), G + 0.1 * np.eye(k), atol=1e-12)
    assert not K.spd_inverse_shifted(-G, 0.01, U, Y, M)       # pivot -0.99: refused


def test_cached_inverse_reuses_a_shift_and_evicts_round_robin():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 5))
    G = A.T @ A
    kp = K.padded(5)
    U, Y = np.empty((kp, kp)), np.empty((kp, kp))
    S = 2
    cache = np.zeros((S, kp, kp))
    keys = np.full(S, np.nan)
    state = np.zeros(1, dtype=np.int64)
    s1 = K.cached_inverse(G, 0.1, U, Y, cache, keys, state)
    np.testing.assert_allclose(cache[s1, :5, :5] @ (G + 0.1 * np.eye(5)), np.eye(5), atol=1e-10)
    s2 = K.cached_inverse(G, 0.2, U, Y, cache, keys, state)
    assert s2 != s1
    cache[s1, 0, 0] = 12345.0                     # a reused slot is not recomputed
    assert K.cached_inverse(G, 0.1, U, Y, cache, keys, state) == s1 and cache[s1, 0, 0] == 12345.0
    s3 = K.cached_inverse(G, 0.4, U, Y, cache, keys, state)   # third shift: overwrites the oldest slot
    assert s3 == s1 and keys[s1] == 0.4 and 0.1 not in keys
    np.testing.assert_allclose(cache[s3, :5, :5] @ (G + 0.4 * np.eye(5)), np.eye(5), atol=1e-10)


def test_a_failed_factor_is_never_used():
    """A factor that fails (a pivot <= 0) leaves no key behind; the ADMM then keeps its rho (balancing) or stops
    at z = 0 reporting no convergence (first factor) -- never iterates with a stale or garbage inverse."""
    rng = np.random.default_rng(1)
    k = 6
    A = rng.standard_normal((k, k))
    G = A @ A.T
    kp = K.padded(k)
    U, Y = np.empty((kp, kp)), np.empty((kp, kp))
    cache = np.full((2, kp, kp), 7.0)
    keys = np.full(2, np.nan)
    state = np.zeros(1, dtype=np.int64)
    s = K.cached_inverse(G, 0.5, U, Y, cache, keys, state)
    assert s >= 0 and keys[s] == 0.5
    assert K.cached_inverse(-G, 0.5 + 1e-3, U, Y, cache, keys, state) == -1
    assert np.isnan(keys).sum() == 1 and keys[s] == 0.5          # the failed slot holds no key
    assert K.cached_inverse(-G, 0.5 + 1e-3, U, Y, cache, keys, state) == -1   # and is not found later
    c, z, u, rhs, tr = (np.empty(k) for _ in range(5))
    cache2 = np.empty((K.INVERSE_SLOTS, kp, kp))
    keys2 = np.full(K.INVERSE_SLOTS, np.nan)
    its, ok = K.admm_one(-G, rng.standard_normal(k), np.full(k, 0.1), 0.0, 0.5, 1e-9, 1e-9, 100, True, 1.8,
                         U, Y, cache2, keys2, np.zeros(1, dtype=np.int64), c, z, u, rhs, tr)
    assert (its, ok) == (0, False) and not z.any()
