"""Random draws of k-means seeding and the re-seed donor of an empty cluster, as Numba functions.

Shared by :mod:`bigclust.algo.kmeans` and by kernel k-means
(:mod:`bigclust.nmf`), so that both seed and re-seed with the same rules.

Randomness comes only from explicit per-restart ``uint64`` seeds through the
splitmix64 generator below (Steele, Lea & Flood 2014), never from Numba's
``np.random``: inside ``prange`` that state is per thread, so results would
depend on how restarts are spread over threads.  With one private generator
per restart (a ``uint64`` array of one element, ``state``) the output is the
same for any number of threads.
"""
import numpy as np

from bigclust._util.jit import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0  # 2**-53

#: codes of the seeding methods (``init`` = "k-means++" / "random"), see :func:`method_code`
METHOD_KMEANSPP = 0
METHOD_RANDOM = 1


@njit
def _next_u64(state):
    """splitmix64: advance ``state`` (INOUT uint64[1]) and return 64 random bits."""
    z = state[0] + _GOLDEN
    state[0] = z
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@njit
def _next_double(state):
    """Uniform float64 in [0, 1) with 53 random bits."""
    return float(_next_u64(state) >> _S11) * _INV53


@njit
def next_below(state, m):
    """Uniform integer in [0, m) (exact enough for m < 2**53)."""
    j = int(_next_double(state) * m)
    return j if j < m else m - 1


@njit
def d2_draw(d2, state):
    """A row drawn with probability proportional to ``d2`` (IN (n,)), k-means++'s D^2 sampling."""
    n = d2.shape[0]
    total = 0.0
    for i in range(n):
        total += d2[i]
    if not total > 0.0:
        # Every point coincides with a chosen centre (fewer distinct
        # points than k): no D^2 mass left, fall back to a uniform draw.
        return next_below(state, n)
    u = _next_double(state) * total
    acc = 0.0
    last_pos = -1
    for i in range(n):
        if d2[i] > 0.0:
            last_pos = i
        acc += d2[i]
        if acc > u:
            return i
    return last_pos  # u rounded up to total: the last point of positive weight


@njit
def farthest_donor(labels, counts, d2):
    """The point farthest from its centre among clusters of two or more points (the re-seed donor).

    ``n >= k`` guarantees one exists when a cluster is empty.
    """
    far = -1
    fd = -1.0
    for i in range(labels.shape[0]):
        if counts[labels[i]] > 1 and d2[i] > fd:
            fd = d2[i]
            far = i
    return far


@njit
def random_distinct(state, n, k, idx):
    """k distinct indices of 0..n-1 into idx (OUT int64 (k,)) by a partial Fisher-Yates shuffle with ``state``."""
    perm = np.arange(n)
    for j in range(k):
        m = j + next_below(state, n - j)
        tmp = perm[j]
        perm[j] = perm[m]
        perm[m] = tmp
        idx[j] = perm[j]


def warn_empty(n_empty, n_init, what):
    """One RuntimeWarning when clusters were re-seeded (``what``: "empty", or "starved" in mini-batch)."""
    import warnings

    if n_empty:
        warnings.warn(
            f"k-means: {n_empty} {what} cluster(s) re-seeded over {n_init} restart(s)",
            RuntimeWarning, stacklevel=3)


def method_code(method):
    """The kernel code of a seeding method name (:data:`METHOD_KMEANSPP` or :data:`METHOD_RANDOM`).

    One-line :class:`~bigclust._util.errors.UserError` for any other name.
    """
    from bigclust._util.errors import UserError

    if method not in ("k-means++", "random"):
        raise UserError(f"init={method!r} must be one of k-means++, random or an array of centres")
    return METHOD_KMEANSPP if method == "k-means++" else METHOD_RANDOM
