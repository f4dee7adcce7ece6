"""Exact BBS on a kNN graph: self-loops must not cut points off (issue 13 item 5)."""

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.algo.affinity import knn_kernel
from bigclust.bench.sparse import diagonal_rows, positive_part
from bigclust._util.errors import UserError
from bigclust.normalize import bbs
from bigclust.normalize._bbs_sparse import self_loop_support
from bigclust.algo.spectral import components


def _points(seed=0, n_blob=200, n_out=20, radius=8.0):
    rng = np.random.default_rng(seed)
    O = rng.normal(size=(n_out, 5))
    return np.vstack([rng.normal(size=(n_blob, 5)), radius * O / np.linalg.norm(O, axis=1, keepdims=True)])


def _gamma(X, k):
    K1 = knn_kernel(X, k, 1.0)
    return float(np.median(-np.log(K1.data[K1.data < 1.0])))


def _planted(seed=0, n_blob=200, n_out=20, radius=8.0, k=6):
    """A tight blob and points on a sphere around it, each linked to the blob by its kNN edges.

    gamma is the median squared kNN distance (the bench's rule).  The kNN graph
    is connected, but every outlying point's edges are weak next to its
    self-loop K_ii = 1.
    """
    X = _points(seed, n_blob, n_out, radius)
    return knn_kernel(X, k, _gamma(X, k))


def _support(K, mode="keep"):
    """Dense values and support mask of K after a self-loop mode, written from its definition.

    keep: K as stored.  zero: K_ii = 0, the diagonal stays in the support (as slack).  drop: the
    diagonal leaves the support, except in a row without any off-diagonal entry.  cap:
    ``K_ii = min(K_ii, max_{j != i} K_ij)`` over the row's stored off-diagonal entries.
    """
    coo = sp.coo_matrix(K)
    A = np.zeros(K.shape)
    E = np.zeros(K.shape)
    A[coo.row, coo.col] = coo.data
    E[coo.row, coo.col] = 1.0             # the stored pattern, explicit zeros included
    off = E.copy()
    np.fill_diagonal(off, 0.0)
    has_off = off.sum(axis=1) > 0
    i = np.flatnonzero(np.diag(E) > 0)    # rows with a stored diagonal
    if mode == "zero":
        A[i, i] = 0.0
    elif mode == "drop":
        i = i[has_off[i]]
        A[i, i] = E[i, i] = 0.0
    elif mode == "cap":
        i = i[has_off[i]]
        A[i, i] = np.minimum(A[i, i], np.where(off > 0, A, -np.inf).max(axis=1)[i])
    return A, E


def _dense_bbs_on_support(K, iters=20000, mode="keep"):
    """Reference: Dykstra's projections on the support written with dense NumPy (slow, small n).

    Alternates the projection onto {G symmetric on E, G1 = 1} (the KKT system
    ``(D + A_E) mu = 1 - G1`` solved densely) with the clip onto G >= 0, with
    Dykstra's correction on the clip: converges to argmin ||G - K|| on E.
    """
    A, E = _support(K, mode)
    M = np.diag(E.sum(1)) + E          # signless Laplacian, diagonal counted twice
    Minv = np.linalg.pinv(M)
    G, Q = A.copy(), np.zeros_like(A)
    for _ in range(iters):
        mu = Minv @ (1.0 - G.sum(1))
        Y = (G + (mu[:, None] + mu[None, :])) * E
        G = np.maximum(Y + Q, 0.0)
        Q = (Y + Q) - G
        if np.abs(G.sum(1) - 1).max() < 1e-11:
            break
    return G


def test_planted_outliers_split_with_self_loops_kept_and_stay_connected_with_zero():
    K = _planted()
    assert components(K)[0] == 1
    G_keep = positive_part(bbs(K, "dual", self_loops="keep"))
    assert components(G_keep)[0] > 5              # the behaviour before issue 13: outliers cut off
    assert diagonal_rows(G_keep) >= 20
    G = bbs(K, "dual", self_loops="zero")
    Gp = positive_part(G)
    assert components(Gp)[0] == 1
    assert diagonal_rows(Gp) == 0
    # doubly stochastic, symmetric, non-negative to tolerance
    np.testing.assert_allclose(np.asarray(G.sum(axis=1)).ravel(), 1.0, atol=1e-9)
    assert abs(G - G.T).max() < 1e-12 and G.data.min() >= 0


@pytest.mark.parametrize("mode", ["zero", "drop", "cap"])
def test_self_loop_modes_are_the_exact_bbs_of_the_modified_support(mode):
    K = _planted(n_blob=40, n_out=6, radius=6.0, k=4)
    Km = self_loop_support(sp.csr_matrix(K), mode)
    G = bbs(K, "dual", self_loops=mode).toarray()
    ref = _dense_bbs_on_support(K, mode=mode)
    A, E = _support(K, mode)
    np.testing.assert_array_equal(Km.toarray(), A)
    assert Km.nnz == E.sum()
    np.testing.assert_allclose(G, ref, atol=1e-7)
    np.testing.assert_allclose(G.sum(1), 1.0, atol=1e-9)
    if mode == "drop":
        assert np.all(np.diag(G) == 0)
    d = K.diagonal()
    off = (K - sp.diags(d)).tocsr()
    if mode == "cap":
        np.testing.assert_allclose(Km.diagonal(), np.minimum(d, off.max(axis=1).toarray().ravel()))
    if mode == "zero":
        assert np.all(Km.diagonal() == 0) and Km.nnz == K.nnz   # still in the support, as slack


def test_drop_keeps_the_diagonal_of_an_isolated_point():
    K = sp.csr_matrix(np.array([[1.0, 0.4, 0.3, 0], [0.4, 1.0, 0.5, 0], [0.3, 0.5, 1.0, 0], [0, 0, 0, 1.0]]))
    Km = self_loop_support(K, "drop")
    assert Km[3, 3] == 1.0 and Km[0, 0] == 0 and Km.nnz == 7
    G = bbs(K, "dual", self_loops="drop").toarray()
    np.testing.assert_allclose(G.sum(1), 1.0, atol=1e-10)
    assert G[3, 3] == pytest.approx(1.0)


def test_self_loops_do_not_touch_dense_input_and_are_validated():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))
    np.testing.assert_array_equal(bbs(K, "dual", self_loops="keep"), bbs(K, "dual", self_loops="zero"))
    with pytest.raises(UserError, match="self_loops"):
        bbs(K, "dual", self_loops="nope")


def test_pipeline_warns_once_when_normalisation_splits_the_graph(tmp_path):
    """The embed stage's ``warning:`` line fires for keep, not for zero (the new default)."""
    import subprocess
    import sys

    X = _points().astype(np.float32)
    y = np.r_[np.zeros(200, int), np.ones(20, int)]
    np.savez(tmp_path / "pts.npz", X=X, y=y)
    gamma = _gamma(X, 6)
    outs = {}
    for mode in ("keep", "zero"):
        cfg = tmp_path / f"{mode}.toml"
        cfg.write_text(f"""
[data]
path = "{tmp_path / 'pts.npz'}"
[preprocess]
l2_normalize = false
[affinity]
kind = "knn"
n_neighbors = 6
gamma = {gamma}
[method]
names = ["bbs"]
[bbs]
solver = "dual"
self_loops = "{mode}"
[cluster]
n_clusters = 2
n_init = 2
[store]
path = "{tmp_path / (mode + '.zarr')}"
[output]
dir = "{tmp_path / ('out-' + mode)}"
plots = false
""")
        r = subprocess.run([sys.executable, "-m", "bigclust.cli", "pipeline", "run", str(cfg)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        outs[mode] = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:") and "split" in ln]
    assert len(outs["keep"]) == 1 and "connected component(s) before" in outs["keep"][0]
    assert outs["zero"] == []
