"""Starts of the NMF family against references that share no code with bigclust.

* NNDSVD (Boutsidis & Gallopoulos 2008) against scikit-learn's ``_initialize_nmf(X, k, init="nndsvd")`` on
  the same matrix.  scikit-learn factors ``X ~ W H`` with samples as rows; ours is ``X ~ V U^T`` (documents
  as rows), so V corresponds to W and U to H^T.
* Kernel k-means++ seeding: D^2 sampling with the feature-space distance
  ``||phi_i - phi_p||^2 = K_ii + K_pp - 2 K_ip``, written here in NumPy with the same random draws: one
  splitmix64 stream per restart (Steele, Lea & Flood 2014, the generator bigclust documents), seeded by
  ``RandomState(random_state).randint(0, 2**64, n_init, dtype=uint64)``.  With ``max_iter=1`` the labels are
  those of the assignment to the means of the partition by nearest seed point, which pins the seeds down.
"""
import numpy as np
import pytest
from sklearn.decomposition._nmf import _initialize_nmf

from bigclust.nmf import kernel_kmeans, kernel_kmeans_streamed
from bigclust.nmf.init import nndsvd

# -- NNDSVD -------------------------------------------------------------------------------------------


def _nonneg_low_rank(m=40, n=30, k=6, seed=0):
    """Documents x terms, non-negative, with well separated singular values (the randomised SVD is exact)."""
    rng = np.random.default_rng(seed)
    A = rng.random((m, k)) * np.geomspace(8, 1, k)
    return A @ rng.random((k, n)) + 0.01 * rng.random((m, n))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nndsvd_equals_scikit_learn_on_the_same_matrix(seed):
    X = _nonneg_low_rank(seed=seed)
    k = 6
    W, H = _initialize_nmf(X, k, init="nndsvd", random_state=seed)
    U, V = nndsvd(X, k, seed, 0.0)                  # fill 0: the exact NNDSVD zeros
    assert V.shape == W.shape and U.shape == H.T.shape
    # scikit-learn zeroes entries below 1e-6, ours below 1e-12: compare where scikit-learn kept a value
    for ours, ref in ((V, W), (U, H.T)):
        kept = ref > 0
        np.testing.assert_allclose(ours[kept], ref[kept], rtol=1e-8, atol=0)
        assert np.all(ours[~kept] < 1e-6)
        assert kept[:, 1:].mean() < 0.9              # the later components are sign-pair halves (zeros)
    # the zeros are filled with the given value (scikit-learn's "nndsvda" uses the mean of X)
    Uf, Vf = nndsvd(X, k, seed, X.mean())
    np.testing.assert_array_equal(Vf[V == 0], X.mean())
    np.testing.assert_array_equal(Vf[V > 0], V[V > 0])


# -- kernel k-means++ ------------------------------------------------------------------------------------

MASK64 = (1 << 64) - 1


class SplitMix64:
    """splitmix64 with the 53-bit doubles and integer draws bigclust's k-means documents."""

    def __init__(self, seed):
        self.state = int(seed)

    def u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def double(self):
        return (self.u64() >> 11) * 2.0 ** -53

    def below(self, m):
        return min(int(self.double() * m), m - 1)


def ref_kmeanspp_kernel(K, k, seed):
    """k-means++ in the feature space of K: first point uniform, then D^2 sampling."""
    rng = SplitMix64(seed)
    n = K.shape[0]
    kd = np.diag(K)
    idx = [rng.below(n)]
    d2 = np.maximum(kd + kd[idx[0]] - 2 * K[:, idx[0]], 0)
    for _ in range(1, k):
        acc = np.cumsum(d2)                            # sequential sums, as the sampler adds them
        u = rng.double() * acc[-1]
        p = int(np.argmax(acc > u))
        idx.append(p)
        d2 = np.minimum(d2, np.maximum(kd + kd[p] - 2 * K[:, p], 0))
    return np.array(idx)


def ref_one_iteration(K, idx):
    """Assign to the seed points, then (``max_iter`` reached) to the means of that partition."""
    kd = np.diag(K)
    first = np.argmin(kd[:, None] - 2 * K[:, idx] + kd[idx][None], axis=1)
    Z = np.eye(len(idx))[first]
    cnt = Z.sum(0)
    return np.argmin(kd[:, None] - 2 * K @ Z / cnt + np.diag(Z.T @ K @ Z) / cnt ** 2, axis=1)


def _kernel(seed=0, n=90):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(c, 0.8, (n // 3, 3)) for c in (0.0, 2.0, 4.0)])
    return np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / 2.0)


@pytest.mark.parametrize("random_state", [0, 5])
def test_kernel_kmeanspp_seeds_are_numpy_d2_sampling(random_state):
    K = _kernel(seed=random_state)
    k, n_init = 4, 12
    seeds = np.random.RandomState(random_state).randint(0, 2**64, size=n_init, dtype=np.uint64)
    ref = np.array([ref_one_iteration(K, ref_kmeanspp_kernel(K, k, s)) for s in seeds])
    _, _, info = kernel_kmeans(K, k, n_init=n_init, max_iter=1, init="k-means++", random_state=random_state,
                               return_info=True)
    np.testing.assert_array_equal(info.extra["labels_all"], ref)
    n = K.shape[0]
    bounds = [0, 17, 50, n]
    _, _, sinfo = kernel_kmeans_streamed(lambda i: K[bounds[i]:bounds[i + 1]], bounds, k, n_init=n_init, max_iter=1,
                                         init="k-means++", random_state=random_state, return_info=True)
    np.testing.assert_array_equal(sinfo.extra["labels_all"], ref)
