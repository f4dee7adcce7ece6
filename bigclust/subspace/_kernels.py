"""Numba kernels of the augmentation and the exact dictionary search (Ak-SC at speed, issue 29).

``warp_images``: the rotations, zooms and shifts of :mod:`bigclust.subspace.transforms` for a whole chunk
of images in one call.  scipy.ndimage does the same arithmetic per image but costs ~70 us of Python
and per-call set-up per copy (48 CPU-s for MNIST-70k's 700 000 copies, paid in every streamed pass);
here the coordinates are formed in the order ndimage forms them (``affine_transform``: offset first,
then each input axis; ``zoom_shift``: ``(io + shift) * zoom``), the weights as its order-1 spline makes
them (``1 - t`` and ``1 - (1 - t)``) and summed corner by corner (``value * w_row * w_col``, rows outer), with
ndimage's ``mode="constant"`` rule (a coordinate outside ``[0, len - 1]`` gives 0), so the copies are
ndimage's bit for bit (tests/test_subspace_augment_fast.py checks it on MNIST and COIL-20 layouts).

``top_k_rows``: the k largest entries of every row of a similarity block, most similar first, ties by
the smaller column; one pass keeping a sorted list of k, where ``argpartition`` + ``lexsort`` made three
passes and a copy over blocks of n x N similarities.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from bigclust._util.jit import njit

#: kinds of copy (a row of ``params``): rotation (offset, matrix), zoom / shift ((io + shift) * zoom)
ROTATE, ZOOM = 0, 1


@njit(parallel=True)
def warp_images(imgs, kinds, params, out):
    """``out[i, j]`` = copy j of image i: ``imgs`` (n, h, w, c) float64, ``kinds`` (m,), ``params`` (n, m, 6),
    ``out`` (n, m, h, w, c) float64.

    ROTATE params: (off_r, off_c, m_rr, m_rc, m_cr, m_cc), input coordinate = off + M @ output index;
    ZOOM params: (shift_r, shift_c, zoom_r, zoom_c, -, -), input coordinate = (index + shift) * zoom.
    """
    n, h, w, nc = imgs.shape
    m = kinds.shape[0]
    # over (image, copy) pairs: a slice of a few large images keeps every thread busy
    for ij in prange(n * m):
        i = ij // m
        j = ij - i * m
        img = imgs[i]
        p0, p1, p2, p3, p4, p5 = (params[i, j, 0], params[i, j, 1], params[i, j, 2], params[i, j, 3],
                                  params[i, j, 4], params[i, j, 5])
        rot = kinds[j] == ROTATE
        o = out[i, j]
        for a in range(h):
            for b in range(w):
                if rot:
                    cy = p0 + a * p2
                    cy = cy + b * p3
                    cx = p1 + a * p4
                    cx = cx + b * p5
                else:
                    cy = (a + p0) * p2
                    cx = (b + p1) * p3
                if not (cy >= 0.0 and cy <= h - 1 and cx >= 0.0 and cx <= w - 1):
                    for ch in range(nc):
                        o[a, b, ch] = 0.0
                    continue
                y0 = int(cy)          # = floor: cy >= 0 here
                x0 = int(cx)
                # ndimage's order-1 weights: 1 - t, then 1 minus that (not t: it rounds differently)
                wy0 = 1.0 - (cy - y0)
                wx0 = 1.0 - (cx - x0)
                ty = 1.0 - wy0
                tx = 1.0 - wx0
                # a corner past the last row / column has weight 0: read the edge instead (same sum)
                y1 = min(y0 + 1, h - 1)
                x1 = min(x0 + 1, w - 1)
                for ch in range(nc):
                    t = 0.0
                    t += img[y0, x0, ch] * wy0 * wx0
                    t += img[y0, x1, ch] * wy0 * tx
                    t += img[y1, x0, ch] * ty * wx0
                    t += img[y1, x1, ch] * ty * tx
                    o[a, b, ch] = t


@njit(parallel=True)
def top_k_rows(S, k, out):
    """``out[r]`` = the columns of the k largest ``S[r]``, largest first, ties by the smaller column.

    Needs at least k entries of every row above -inf (the caller checks the admissible atoms).
    """
    b, N = S.shape
    for r in prange(b):
        vals = np.empty(k)
        idx = np.empty(k, dtype=np.int64)
        cnt = 0
        row = S[r]
        for j in range(N):
            v = row[j]
            if cnt == k and not v > vals[k - 1]:
                continue   # the common case: not better than the k-th (an equal value has a larger column)
            pos = cnt if cnt < k else k - 1
            while pos > 0 and v > vals[pos - 1]:
                vals[pos] = vals[pos - 1]
                idx[pos] = idx[pos - 1]
                pos -= 1
            vals[pos] = v
            idx[pos] = j
            if cnt < k:
                cnt += 1
        for q in range(k):
            out[r, q] = idx[q]
