"""How the pipeline's embed stage runs each normalisation: the hooks of the registry entries.

In memory a hook gets K (a list of kernels for MBBS) and the method's
parameter dataclass and returns ``(P, info)``.  Out of core it gets the zarr
kernels and the stage's group, and returns ``(P, scale, info, extra)``: the
zarr array whose eigenvectors are wanted (a ``*_scratch`` array of the stage,
deleted before the stage is committed, or K itself), an optional diagonal
scaling applied on both sides, the solver's info and extra attributes.
"""
from __future__ import annotations

import numpy as np

from bigclust._util.errors import DataError, UserError


def _record(p, y):
    return {"y": y if p.record_every else None, "record_every": p.record_every}


def ra_memory(K, p, y):
    from bigclust.normalize import ra
    return ra(K, return_info=True)


def ncut_memory(K, p, y):
    from bigclust.normalize import ncut
    return ncut(K, n_iter=p.n_iter, return_info=True)


def sk_memory(K, p, y):
    from bigclust.normalize import sinkhorn
    return sinkhorn(K, n_iter=p.n_iter, tol=p.tol or None, return_info=True, **_record(p, y))


def bbs_memory(K, p, y):
    from bigclust.normalize import bbs
    return bbs(K, solver=p.solver, n_iter=p.n_iter, tol=p.tol or None, return_info=True, self_loops=p.self_loops,
               **_record(p, y))


def mbbs_memory(Ks, p, y):
    """The exact dual BBS as G-step (warm-started); float64 kernels."""
    from bigclust.normalize import mbbs
    Ks = [K.astype(np.float64) for K in Ks]
    P, info = mbbs(Ks, lam=p.lam, n_outer=p.n_outer, solver="dual", n_iter=p.n_iter, tol=p.tol, return_info=True)
    return P, info


# -- out of core: K stays in zarr ------------------------------------------------------------------


def ra_ooc(Ks, group, p, y, max_memory, client):
    return Ks[0], None, None, {}


def ncut_ooc(Ks, group, p, y, max_memory, client):
    """Ncut only scales K: ``diag(d) K diag(d)`` is applied as an operator and never written."""
    from bigclust.normalize.ooc import blocked_matvec_operator, sinkhorn_blocked
    K = Ks[0]
    if p.n_iter == 1:  # D^-1/2 K D^-1/2; K may have negative entries
        deg = blocked_matvec_operator(K, max_memory=max_memory) @ np.ones(K.shape[0])
        if np.any(deg <= 0):
            raise DataError(f"K has a row with non-positive sum (row {int(np.argmin(deg))}); Ncut needs D > 0")
        return K, 1.0 / np.sqrt(deg), None, {}
    info = sinkhorn_blocked(K, None, n_iter=p.n_iter, max_memory=max_memory, client=client)
    return K, info.mu, info, {}  # iterated Ncut is the symmetric Sinkhorn iteration from d = 1


def sk_ooc(Ks, group, p, y, max_memory, client):
    from bigclust.algo.blocks import create_like
    from bigclust.normalize.ooc import sinkhorn_blocked
    P = create_like(Ks[0], group, "P_scratch")
    info = sinkhorn_blocked(Ks[0], P, n_iter=p.n_iter, tol=p.tol or None, max_memory=max_memory, client=client)
    return P, None, info, {}


def bbs_ooc(Ks, group, p, y, max_memory, client):
    from bigclust.algo.blocks import create_like
    from bigclust.normalize.ooc import bbs_blocked
    n = Ks[0].shape[0]
    if p.solver != "alternating":
        raise UserError(f"out-of-core BBS (n={n} does not fit [store] max_memory) supports solver = "
                        f"\"alternating\" only ([bbs] solver), not {p.solver!r}; raise max_memory or use kind = \"knn\"")
    P = create_like(Ks[0], group, "P_scratch")
    info = bbs_blocked(Ks[0], P, n_iter=p.n_iter, tol=p.tol or None, max_memory=max_memory, client=client,
                       **_record(p, y))
    return P, None, info, {}


def mbbs_ooc(Ks, group, p, y, max_memory, client):
    """The m kernels stay in zarr; the G-step is the paper's Alg. 1 streamed (``n_iter`` passes)."""
    from bigclust.algo.blocks import create_like
    from bigclust.normalize.ooc import mbbs_blocked
    G = create_like(Ks[0], group, "G_scratch", np.float64)
    info = mbbs_blocked(Ks, G, create_like(Ks[0], group, "Kbar_scratch", np.float64), lam=p.lam,
                        n_outer=p.n_outer, n_iter=p.n_iter, tol=p.tol, max_memory=max_memory, client=client)
    return G, None, info, {"mbbs_solver": "alternating-ooc"}


def rc_memory(K, p, y):
    from bigclust.normalize import rc
    return rc(K, return_info=True)
