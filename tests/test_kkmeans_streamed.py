"""Kernel k-means with the kernel read in row blocks: equals the in-memory path, monotone, validated."""
import numpy as np
import pytest

from bigclust._util.errors import DataError, UserError
from bigclust.nmf import kernel_kmeans, kernel_kmeans_streamed


def _kernel(n_per=45, seed=0, kind="cos2"):
    rng = np.random.default_rng(seed)
    X = np.abs(np.vstack([rng.normal(c, 1.5, (n_per, 5)) for c in (0, 2, 4, 6)]))
    if kind == "gauss":
        return np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / 6.0)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return (X @ X.T) ** 2


def _reader(K, bounds):
    return lambda i: K[bounds[i]:bounds[i + 1]].astype(np.float32 if K.dtype == np.float32 else np.float64)


def ref_lloyd_history(K, idx, max_iter=100):
    """Batch kernel k-means in plain NumPy from seed points idx: labels and the objective of every assignment."""
    n = K.shape[0]
    kd = np.diag(K)
    D = kd[:, None] - 2 * K[:, idx] + kd[idx][None]
    labels, hist = np.full(n, -1), []
    for _ in range(max_iter):
        new = np.argmin(D, axis=1)
        hist.append(np.maximum(D[np.arange(n), new], 0).sum())
        if (new == labels).all():
            break
        labels = new
        Z = np.eye(len(idx))[labels]
        cnt = Z.sum(0)
        D = kd[:, None] - 2 * K @ Z / cnt + np.diag(Z.T @ K @ Z) / cnt ** 2
    return labels, np.array(hist)


@pytest.mark.parametrize("init", ["k-means++", "random"])
@pytest.mark.parametrize("ncw", [False, True])
def test_streamed_equals_in_memory(init, ncw):
    K = _kernel()
    n = K.shape[0]
    Km = K
    if ncw:
        w = K.sum(axis=1) ** -0.5                           # NCW (DESIGN section 4): d_i^(-1/2), d = K1
        Km = w[:, None] * K * w[None, :]                    # what the in-memory assign hook clusters
    a = kernel_kmeans(Km, 4, n_init=5, init=init, random_state=3, return_info=True)[2]
    for bounds in ([0, n], [0, 1, 37, 100, 101, 150, n]):   # one block; uneven blocks incl. a 1-row block
        b = kernel_kmeans_streamed(_reader(K, bounds), bounds, 4, n_init=5, init=init, random_state=3, ncw=ncw,
                                   return_info=True)[2]
        np.testing.assert_array_equal(a.extra["labels_all"], b.extra["labels_all"])
        np.testing.assert_array_equal(a.n_iters, b.n_iters)
        np.testing.assert_allclose(b.objectives, a.objectives, rtol=1e-12, atol=0)
        assert a.best == b.best
        # passes over K: validation + (k-means++) one per further seed point + one per non-final iteration
        assert b.extra["passes"] == 1 + (3 if init == "k-means++" else 0) + int(b.n_iters.max()) - 1


def test_streamed_follows_numpy_reference_and_never_increases():
    K = _kernel(kind="gauss", seed=2)                       # PSD: feature-space Lloyd is monotone
    n = K.shape[0]
    idx = np.array([[0, 1, 2, 3], [5, 50, 100, 170], [7, 8, 90, 91]])
    bounds = [0, 64, 128, n]
    labels, obj, info = kernel_kmeans_streamed(_reader(K, bounds), bounds, 4, n_init=3, init=idx,
                                               return_info=True)
    for r in range(3):
        ref_lab, ref_hist = ref_lloyd_history(K, idx[r])
        np.testing.assert_array_equal(info.extra["labels_all"][r], ref_lab)
        np.testing.assert_allclose(info.extra["history"][r], ref_hist, rtol=1e-10)
        h = np.asarray(info.extra["history"][r])
        assert len(h) >= 3 and (np.diff(h) <= 1e-12 * h[0]).all()
        assert h[-1] < h[0]
    assert obj == info.objectives.min() and obj == info.extra["history"][info.best][-1]


def test_max_iter_assigns_to_last_centres_like_in_memory():
    K = _kernel(seed=4)
    n = K.shape[0]
    a = kernel_kmeans(K, 4, n_init=3, max_iter=2, random_state=1, return_info=True)[2]
    b = kernel_kmeans_streamed(_reader(K, [0, 50, n]), [0, 50, n], 4, n_init=3, max_iter=2, random_state=1,
                               return_info=True)[2]
    assert (b.n_iters == 2).all() and not b.converged
    np.testing.assert_array_equal(a.extra["labels_all"], b.extra["labels_all"])
    np.testing.assert_allclose(b.objectives, a.objectives, rtol=1e-12)


def test_float32_blocks_and_empty_cluster_reseed():
    X = np.array([[0.0, 0], [0, 0], [0.1, 0], [5, 5], [5.1, 5], [5, 5.2]])
    K = X @ X.T + 1.0
    with pytest.warns(RuntimeWarning, match="re-seeded"):
        a = kernel_kmeans(K, 3, init=np.array([[0, 1, 3]]), n_init=1, return_info=True)
    with pytest.warns(RuntimeWarning, match="re-seeded"):
        b = kernel_kmeans_streamed(_reader(K, [0, 2, 6]), [0, 2, 6], 3, init=np.array([[0, 1, 3]]), n_init=1,
                                   return_info=True)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[2].n_empty_reseeded == b[2].n_empty_reseeded >= 1
    K32 = _kernel().astype(np.float32)
    n = K32.shape[0]
    c = kernel_kmeans(K32.astype(np.float64), 4, n_init=2, random_state=0)
    d = kernel_kmeans_streamed(_reader(K32, [0, 90, n]), [0, 90, n], 4, n_init=2, random_state=0)
    np.testing.assert_array_equal(c[0], d[0])


def test_bad_input_one_line():
    K = _kernel()
    n = K.shape[0]
    bad = K.copy()
    bad[3, 7] = np.nan
    with pytest.raises(DataError, match="non-finite entries \\(row 3\\)"):
        kernel_kmeans_streamed(_reader(bad, [0, 50, n]), [0, 50, n], 3)
    asym = K.copy()
    asym[0, 1:] += 0.5
    with pytest.raises(DataError, match="not symmetric"):
        kernel_kmeans_streamed(_reader(asym, [0, 50, n]), [0, 50, n], 3)
    with pytest.raises(DataError, match="block 1 of K has shape"):
        kernel_kmeans_streamed(lambda i: K[:50], [0, 50, n], 3)
    zero = K.copy()
    zero[5, :] = zero[:, 5] = 0
    with pytest.raises(DataError, match="NCW needs positive degrees.*row 5"):
        kernel_kmeans_streamed(_reader(zero, [0, n]), [0, n], 3, ncw=True)
    with pytest.raises(UserError, match="n_clusters=1"):
        kernel_kmeans_streamed(_reader(K, [0, n]), [0, n], 1)
    with pytest.raises(UserError, match="block_bounds"):
        kernel_kmeans_streamed(_reader(K, [0, n]), [0, 90, 80, n], 3)
    for e in (DataError, UserError):
        try:
            kernel_kmeans_streamed(_reader(bad, [0, n]), [0, n], 3)
        except e as err:
            assert "\n" not in str(err)
