"""Numba kernels of :mod:`bigclust.subspace.dictionary`: which atoms may represent a sample.

The candidate lists of the dictionary kNN are filtered per sample (``prange``
over samples); inputs are int64 C-contiguous arrays, outputs preallocated by
the caller (IN / OUT as in :mod:`bigclust.subspace._numba`).
"""
from numba import prange

from bigclust._util.jit import njit


@njit
def is_excluded(i, a, own_ptr, own_idx, atom_label, y):
    """True when atom ``a`` may not represent sample ``i``.

    Excluded: atoms owned by i (i itself and its augmentations A(i)), and,
    when ``y[i] >= 0``, atoms whose (known) label differs from ``y[i]``
    (cannot-links of AkS-SC).  own_ptr/own_idx : IN CSR atom -> owning
    originals.  atom_label : IN (N,) int64, -1 when unknown.  y : IN (n,) int64.
    """
    for t in range(own_ptr[a], own_ptr[a + 1]):
        if own_idx[t] == i:
            return True
    if y[i] >= 0 and atom_label[a] >= 0 and atom_label[a] != y[i]:
        return True
    return False


@njit(parallel=True)
def filter_candidates(cand, k, own_ptr, own_idx, atom_label, y, rows, out, out_count):
    """Keep the first ``k`` admissible atoms of each candidate list.

    cand : IN (m, q) candidate atoms of the samples ``rows`` (m,), nearest first
    (entries < 0 are ignored).  out : OUT (m, k).  out_count : OUT (m,) number kept
    (< k means too few candidates survived: the caller asks for more).
    """
    m, q = cand.shape
    for r in prange(m):
        i = rows[r]
        cnt = 0
        for t in range(q):
            a = cand[r, t]
            if a < 0:
                continue
            if is_excluded(i, a, own_ptr, own_idx, atom_label, y):
                continue
            dup = False
            for s in range(cnt):
                if out[r, s] == a:
                    dup = True
                    break
            if dup:
                continue
            out[r, cnt] = a
            cnt += 1
            if cnt == k:
                break
        out_count[r] = cnt
