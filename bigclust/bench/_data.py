"""The points the dense and kNN benches share (``bench bbs``, ``ooc``, ``sparse``, ``knn``): MNIST or a stand-in."""
from __future__ import annotations

import os

import numpy as np

from bigclust._util.errors import UserError


def load_points(n, *, seed=0):
    """First ``n`` MNIST images (training then test) L2-normalised, or random unit vectors.

    Returns ``(X float32, y or None, description)``; MNIST is used when
    ``$BIGCLUST_DATA`` holds it.
    """
    from bigclust.algo.preprocess import l2_normalize

    root = os.environ.get("BIGCLUST_DATA")
    if root and os.path.isdir(os.path.join(root, "mnist")):
        from bigclust.datasets import open_dataset

        Xs, ys, got = [], [], 0
        for X, y in open_dataset("mnist", root).iter_chunks(min(n, 10000)):
            Xs.append(X[:n - got])
            ys.append(y[:n - got])
            got += Xs[-1].shape[0]
            if got >= n:
                break
        if got < n:
            raise UserError(f"MNIST has {got} images, fewer than n={n}")
        return l2_normalize(np.vstack(Xs)), np.concatenate(ys), f"MNIST, first {n} images, L2-normalised"
    X = np.random.default_rng(seed).standard_normal((n, 784)).astype(np.float32)
    return l2_normalize(X), None, f"random normal points in 784-d, L2-normalised (seed {seed}; BIGCLUST_DATA unset)"
