"""Bilinear (kernel) NMF (paper 001, 3-6..3-17), NCW and kernel k-means against NumPy references."""
import warnings

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from bigclust._util.errors import DataError
from bigclust.algo.kmeans import kmeans
from bigclust.algo.metrics import accuracy
from bigclust.nmf import (NMFConvergenceWarning, bilinear_nmf, kernel_kmeans, linear_nmf, ncw_vectors,
                          ncw_weights)
from bigclust.nmf import _bilinear
from bigclust.nmf._bilinear import KernelOp
from bigclust.nmf._numba import EPS

from test_nmf import docs

pytestmark = pytest.mark.filterwarnings("ignore::bigclust.nmf.NMFConvergenceWarning")


def split(K):
    return (np.abs(K) + K) / 2, (np.abs(K) - K) / 2           # K+ = (|K| + K)/2, K- = (|K| - K)/2


def ref_bilinear(K, W, V, iters, rules):
    """Paper's rules with K formed: W-step then V-step.  rules: "split" (3-12, 3-14) or "simple" (3-13, 3-15)."""
    Kp, Km = split(K)
    out = []
    for _ in range(iters):
        KV = K @ V
        if rules == "split":
            Pp, Pm = Kp @ W @ (V.T @ V), Km @ W @ (V.T @ V)
            W = W * (KV + np.sqrt(KV ** 2 + 4 * Pp * Pm)) / np.maximum(2 * Pp, EPS)     # (3-12)
        else:
            W = W * KV / np.maximum(K @ W @ (V.T @ V), EPS)                              # (3-13)
        KW = K @ W
        if rules == "split":
            Qp, Qm = V @ (W.T @ Kp @ W), V @ (W.T @ Km @ W)
            V = V * (KW + np.sqrt(KW ** 2 + 4 * Qp * Qm)) / np.maximum(2 * Qp, EPS)     # (3-14)
        else:
            V = V * KW / np.maximum(V @ (W.T @ K @ W), EPS)                              # (3-15)
        out.append((W, V))
    return out


def J_bilinear(K, W, V):
    """1/2 ||X - X W V^T||^2 written with K = X^T X (paper): 1/2 tr((I - W V^T)^T K (I - W V^T))."""
    E = np.eye(K.shape[0]) - W @ V.T
    return 0.5 * np.trace(E.T @ K @ E)


def mixed_kernel(n=60, seed=0):
    """A positive semidefinite kernel with negative entries: K = Xc Xc^T, Xc centred documents."""
    X, y = docs(n=n, m=30, seed=seed)
    Xc = X - X.mean(axis=0)
    return Xc @ Xc.T, Xc, y


def starts(n, k, seed=1):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.1, 1, (n, k)), rng.uniform(0.1, 1, (n, k))


def _iterate(op, W, V, iters):
    out = []
    for _ in range(iters):
        h, _, _, _ = _bilinear.run(op, W, V, 1, 0.0)
        out.append((W.copy(), V.copy(), h[-1]))
    return out


@pytest.mark.parametrize("case", ["nonneg-dense", "nonneg-csr", "nonneg-linear", "nonneg-linear-csr",
                                  "split-dense", "split-csr"])
def test_bilinear_iterates_match_reference(case):
    X, _ = docs(n=50, m=30)
    if case.startswith("nonneg"):
        K, rules = X @ X.T, "simple"
    else:
        K, _, _ = mixed_kernel(50)
        K[np.abs(K) < 0.5 * np.abs(K).mean()] = 0.0             # sparse-ish and still symmetric
        rules = "split"
    if "linear" in case:
        op = KernelOp("linear", sp.csr_matrix(X) if case.endswith("csr") else X)
    else:
        A = sp.csr_matrix(K) if case.endswith("csr") else K
        if sp.issparse(A):
            A.indices, A.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
        op = KernelOp("precomputed", A)
    assert op.split == (rules == "split")
    W0, V0 = starts(50, 3)
    W, V = W0.copy(), V0.copy()
    for t, ((Wr, Vr), (W, V, j)) in enumerate(zip(ref_bilinear(K, W0, V0, 5, rules), _iterate(op, W, V, 5))):
        np.testing.assert_allclose(W, Wr, rtol=1e-10, atol=1e-14, err_msg=f"W after iteration {t + 1}")
        np.testing.assert_allclose(V, Vr, rtol=1e-10, atol=1e-14, err_msg=f"V after iteration {t + 1}")
        assert j == pytest.approx(J_bilinear(K, Wr, Vr), rel=1e-9, abs=1e-9 * np.trace(K))


@pytest.mark.parametrize("kind", ["nonneg", "mixed-dense", "mixed-csr", "mixed-linear"])
def test_bilinear_objective_never_increases(kind):
    X, _ = docs(n=60, m=30, seed=4)
    if kind == "nonneg":
        A, kernel = X, "linear"
    else:
        K, Xc, _ = mixed_kernel(60, seed=4)
        A, kernel = {"mixed-dense": (K, "precomputed"), "mixed-csr": (sp.csr_matrix(K), "precomputed"),
                     "mixed-linear": (Xc, "linear")}[kind]
    _, W, V, info = bilinear_nmf(A, 3, kernel=kernel, n_init=2, max_iter=150, tol=0, random_state=0,
                                 return_info=True)
    h = info.objective
    assert info.method == ("bilinear/nonneg" if kind == "nonneg" else "bilinear/split")
    assert np.all(np.diff(h) <= 1e-12 * h[0]), np.diff(h).max()
    assert h[-1] < 0.8 * h[0]
    assert (W >= 0).all() and (V >= 0).all()


def test_simplified_rules_break_on_a_mixed_sign_kernel():
    K, _, _ = mixed_kernel(50)
    op = KernelOp("precomputed", K)
    W, V = starts(50, 3)
    with np.errstate(all="ignore"):
        _bilinear.run(op, W, V, 1, 0.0, simplified=True)
    assert (W < 0).any()                                       # (3-13) leaves the cone at once
    W, V = starts(50, 3)
    _bilinear.run(op, W, V, 20, 0.0)
    assert (W >= 0).all() and (V >= 0).all()                   # (3-12, 3-14) keep it


@pytest.mark.parametrize("mixed", [False, True])
def test_bilinear_normalisation(mixed):
    X, _ = docs(n=40, m=30)
    K = mixed_kernel(40)[0] if mixed else X @ X.T
    W0, V0 = starts(40, 3)
    W, V = W0.copy(), V0.copy()
    op = KernelOp("precomputed", K)
    _bilinear.run(op, W, V, 10, 0.0)
    _, Wn, Vn = bilinear_nmf(K, 3, kernel="precomputed", init=(W0, V0), n_init=1, max_iter=10, tol=0)
    np.testing.assert_allclose(Wn @ Vn.T, W @ V.T, rtol=1e-11, atol=1e-15)   # X W V^T unchanged
    np.testing.assert_allclose(np.diag(Wn.T @ K @ Wn), 1.0, rtol=1e-11)       # ||r_c|| = 1
    np.testing.assert_allclose(Vn, V * np.sqrt(np.diag(W.T @ K @ W)), rtol=1e-11)  # (3-16)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("ncw", [False, True])
def test_linear_kernel_never_formed_equals_formed(sparse, ncw):
    X, _ = docs(n=50, m=30, seed=8)
    K = X @ X.T
    init = starts(50, 3, seed=2)
    kw = dict(init=init, n_init=1, max_iter=30, tol=0, return_info=True, ncw=ncw)
    a = bilinear_nmf(sp.csr_matrix(X) if sparse else X, 3, kernel="linear", **kw)
    if ncw:                                                    # BiNMF-NCW = bilinear NMF on D^-1/2 K D^-1/2
        d = K.sum(axis=1)
        b = bilinear_nmf(K / np.sqrt(np.outer(d, d)), 3, kernel="precomputed", **{**kw, "ncw": False})
        np.testing.assert_allclose(a[3].ncw_weights, d ** -0.5, rtol=1e-12)
    else:
        b = bilinear_nmf(sp.csr_matrix(K) if sparse else K, 3, kernel="precomputed", **kw)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-9)
    np.testing.assert_allclose(a[2], b[2], rtol=1e-9)
    np.testing.assert_allclose(a[3].objective, b[3].objective, rtol=1e-9)


def test_ncw_weights_and_vectors():
    X, _ = docs(n=30)
    d = (X @ X.T).sum(axis=1)
    np.testing.assert_allclose(ncw_weights(sp.csr_matrix(X)), d ** -0.5, rtol=1e-12)
    np.testing.assert_allclose(ncw_weights(X @ X.T, kernel="precomputed"), d ** -0.5, rtol=1e-12)
    Y = ncw_vectors(sp.csr_matrix(X))
    assert sp.issparse(Y)
    np.testing.assert_allclose(Y.toarray(), X / np.sqrt(d)[:, None], rtol=1e-12)
    K = mixed_kernel(30)[0]
    with pytest.raises(DataError, match=r"^NCW needs positive degrees d = K 1, but row \d+ of K has d = ") as e:
        bilinear_nmf(K, 3, kernel="precomputed", ncw=True)
    assert "\n" not in str(e.value)


def test_planted_clusters_bilinear():
    X, y = docs(n=150, m=60, k=3, seed=2)
    for A, kernel, ncw in ((sp.csr_matrix(X), "linear", False), (X, "linear", True),
                           (np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / 200.0), "precomputed", True)):
        lab, _, _ = bilinear_nmf(A, 3, kernel=kernel, ncw=ncw, n_init=5, random_state=0)
        assert accuracy(y, lab) >= 0.95, (kernel, ncw)


@pytest.mark.parametrize("make,match", [
    (lambda K: K + np.triu(np.ones_like(K), 1), "not symmetric"),
    (lambda K: np.where(np.eye(len(K)) > 0, np.inf, K), "non-finite"),
    (lambda K: K * (np.arange(len(K)) != 2)[:, None] * (np.arange(len(K)) != 2)[None], "all-zero row.*row 2"),
    (lambda K: K[:2, :2], "n_components=3 is larger"),
])
def test_bilinear_bad_inputs(make, match):
    X, _ = docs(n=20)
    with pytest.raises(DataError, match=match) as e:
        bilinear_nmf(make(X @ X.T), 3, kernel="precomputed", n_init=1, max_iter=2)
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match="not finite|non-finite"):
        bilinear_nmf(np.where(X > 2, np.nan, X), 3)


def test_indefinite_mixed_kernel_diverges_loudly():
    A = np.random.default_rng(0).normal(size=(40, 40))
    with pytest.raises(DataError, match="not positive semidefinite") as e:
        bilinear_nmf(A + A.T, 3, kernel="precomputed", n_init=1, max_iter=300, random_state=0)
    assert "\n" not in str(e.value)


def test_convergence_warning():
    X, _ = docs(n=30)
    with pytest.warns(NMFConvergenceWarning, match="reached max_iter=3"):
        linear_nmf(X, 3, n_init=1, max_iter=3, tol=1e-12)


# -- kernel k-means ----------------------------------------------------------------------------------


def ref_kernel_kmeans(K, idx, max_iter=100):
    """Lloyd in feature space with K only: seeds = points idx, then cluster means; stop when no label changes."""
    n = K.shape[0]
    kdiag = np.diag(K)
    D = kdiag[:, None] - 2 * K[:, idx] + kdiag[idx][None]    # distances to the seed points
    labels = np.full(n, -1)
    for _ in range(max_iter):
        new = np.argmin(D, axis=1)
        if (new == labels).all():
            break
        labels = new
        Z = np.eye(len(idx))[labels]                          # n x k indicator
        cnt = Z.sum(0)
        D = kdiag[:, None] - 2 * K @ Z / cnt + np.diag(Z.T @ K @ Z) / cnt ** 2
    return labels, D[np.arange(n), labels].sum()


def test_kernel_kmeans_matches_references():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 1.0, (40, 4)) for c in (0, 3, 6)])
    idx = np.array([[0, 1, 2], [5, 50, 100], [7, 8, 90]])
    K = X @ X.T
    lab, obj, info = kernel_kmeans(K, 3, init=idx, n_init=3, return_info=True)
    km = kmeans(X, 3, init=X[idx], n_init=3)
    for r in range(3):
        ref_lab, ref_obj = ref_kernel_kmeans(K, idx[r])
        np.testing.assert_array_equal(info.extra["labels_all"][r], ref_lab)
        np.testing.assert_array_equal(info.extra["labels_all"][r], km.labels[r])   # linear kernel = k-means
        assert info.objectives[r] == pytest.approx(km.inertia[r], rel=1e-9)
        assert info.objectives[r] == pytest.approx(ref_obj, rel=1e-9)
    G = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / 8.0)  # a Gaussian kernel: reference only
    lab, obj, info = kernel_kmeans(G, 3, init=idx, n_init=3, return_info=True)
    for r in range(3):
        np.testing.assert_array_equal(info.extra["labels_all"][r], ref_kernel_kmeans(G, idx[r])[0])
    assert obj == info.objectives.min()


def test_kernel_kmeans_determinism_and_threads():
    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal(c, 1.5, (50, 3)) for c in (0, 3, 6, 9)])
    y = np.repeat(np.arange(4), 50)
    K = X @ X.T
    a = kernel_kmeans(K, 4, n_init=6, random_state=3, return_info=True)
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        b = kernel_kmeans(K, 4, n_init=6, random_state=3, return_info=True)
    finally:
        numba.set_num_threads(old)
    np.testing.assert_array_equal(a[2].extra["labels_all"], b[2].extra["labels_all"])
    assert a[1] == b[1]
    assert accuracy(y, a[0]) > 0.9
    c = kernel_kmeans(K, 4, n_init=6, init="random", random_state=3)
    assert accuracy(y, c[0]) > 0.9


def test_kernel_kmeans_reseeds_empty_cluster_and_warns():
    X = np.array([[0.0, 0], [0, 0], [0.1, 0], [5, 5], [5.1, 5], [5, 5.2]])
    with pytest.warns(RuntimeWarning, match="re-seeded"):
        lab, _, info = kernel_kmeans(X @ X.T + 1.0, 3, init=np.array([[0, 1, 3]]), n_init=1, return_info=True)
    assert info.n_empty_reseeded >= 1
    assert set(lab.tolist()) == {0, 1, 2}
