"""Starting points of the NMF and kernel k-means restarts: seeds, random or NNDSVD factors, explicit inits.

Every restart draws from its own seed (:func:`draw_seeds`), so a restart's
start does not depend on how many others run.
"""
from __future__ import annotations

import numpy as np

from bigclust._util.errors import DataError, UserError


def draw_seeds(random_state, size):
    """One uint64 seed per stream, drawn from ``random_state`` at the boundary (as k-means)."""
    from sklearn.utils import check_random_state

    return check_random_state(random_state).randint(0, 2**64, size=size, dtype=np.uint64)


def random_factors(seed, shapes, scale):
    """Draw factors ``scale * |N(0, 1)|`` of the given shapes, in order, from one seeded stream.

    Parameters
    ----------
    seed : int
        Seed of the stream.
    shapes : sequence of tuple of int
        Shape of each factor.
    scale : float
        Factor of every entry.

    Returns
    -------
    list of ndarray
        One non-negative array per shape.
    """
    rng = np.random.default_rng(int(seed))
    return [scale * np.abs(rng.standard_normal(s)) for s in shapes]


def nndsvd(X, k, seed, fill):
    """NNDSVD start (Boutsidis & Gallopoulos 2008) in our orientation: ``X ~ V U^T``.

    Returns ``(U (m, k), V (n, k))``.  Zeros are replaced by ``fill`` (the
    mean of X, scikit-learn's "nndsvda"): multiplicative updates never move an
    exact zero.
    """
    from sklearn.utils.extmath import randomized_svd

    Uv, S, Vt = randomized_svd(X, k, random_state=int(seed) % (2**32))  # X = Uv S Vt: Uv docs, Vt terms
    V = np.zeros((X.shape[0], k))
    U = np.zeros((X.shape[1], k))
    V[:, 0] = np.sqrt(S[0]) * np.abs(Uv[:, 0])
    U[:, 0] = np.sqrt(S[0]) * np.abs(Vt[0])
    for j in range(1, k):
        x, y = Uv[:, j], Vt[j]
        xp, xn = np.maximum(x, 0), np.maximum(-x, 0)
        yp, yn = np.maximum(y, 0), np.maximum(-y, 0)
        xpn, ypn = np.linalg.norm(xp), np.linalg.norm(yp)
        xnn, ynn = np.linalg.norm(xn), np.linalg.norm(yn)
        if xpn * ypn >= xnn * ynn:
            a, b, sigma = xp / max(xpn, 1e-300), yp / max(ypn, 1e-300), xpn * ypn
        else:
            a, b, sigma = xn / max(xnn, 1e-300), yn / max(ynn, 1e-300), xnn * ynn
        V[:, j] = np.sqrt(S[j] * sigma) * a
        U[:, j] = np.sqrt(S[j] * sigma) * b
    V[V < 1e-12] = fill
    U[U < 1e-12] = fill
    return U, V


def explicit_init(init, n_init, shapes, names):
    """Explicit initial factors: a tuple of arrays with shapes ``shapes`` (2-D: one restart) or
    ``(n_init,) + shape`` (3-D).  Returns a list (per restart) of tuples of float64 copies."""
    if not isinstance(init, (tuple, list)) or len(init) != len(shapes):
        raise UserError(f"init must be one of the method names or a tuple ({', '.join(names)}) of arrays")
    arrs = []
    for a, shape, name in zip(init, shapes, names):
        a = np.array(a, dtype=np.float64)
        if a.ndim == 2:
            a = a[None]
        if a.ndim != 3 or a.shape[1:] != shape:
            raise UserError(f"init {name} must have shape {shape} or (n_init,) + {shape}, got {np.shape(a)}")
        if a.shape[0] != n_init:
            raise UserError(f"init {name} holds {a.shape[0]} restart(s) but n_init={n_init}; "
                            f"pass n_init={a.shape[0]}")
        if not np.isfinite(a).all() or (a < 0).any():
            raise DataError(f"init {name} must be finite and non-negative")
        arrs.append(a)
    return [tuple(np.ascontiguousarray(a[r]) for a in arrs) for r in range(n_init)]


def seed_indices(init, n_init, k, n):
    """Explicit kernel k-means seeds: point indices (n_init, k) (or (k,) for one restart) as int64.

    One-line :class:`UserError` unless ``init`` is such an array of indices in ``[0, n)``.
    """
    idx = np.asarray(init)
    if idx.ndim == 1:
        idx = idx[None]
    if idx.shape != (n_init, k) or idx.dtype.kind not in "iu" or idx.min() < 0 or idx.max() >= n:
        raise UserError(f"init must be 'k-means++', 'random' or point indices of shape ({n_init}, {k})")
    return np.ascontiguousarray(idx, dtype=np.int64)
