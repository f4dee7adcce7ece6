"""The rows of a labels file as bytes, in one Numba pass (:func:`bigclust.report.labels.labels_csv`).

Formatted row by row in Python, mnist-8m's two label files (8.1M rows each) took 13 s of the driver at the
end of every run; here each row is its digits written in place."""
from __future__ import annotations

import numpy as np

from bigclust._util.jit import njit


@njit
def _int(v, out, p):
    """``v``'s decimal digits at ``out[p:]``; returns the position after them."""
    if v < 0:
        out[p] = 45   # '-'
        p += 1
        v = -v
    digits, t = 1, v
    while t >= 10:
        t //= 10
        digits += 1
    for j in range(digits - 1, -1, -1):
        out[p + j] = 48 + v % 10
        v //= 10
    return p + digits


@njit
def csv_rows(labels, cell_of, cells, starts, out):
    """``index,label[,cell]\\n`` of every row into ``out`` (long enough); returns the bytes written.

    ``cell_of[i]``: row i's entry of ``cells`` (its bytes ``cells[starts[c]:starts[c + 1]]``); an empty
    ``cell_of``: no third column."""
    p = 0
    with_cell = cell_of.size > 0
    for i in range(labels.size):
        p = _int(i, out, p)
        out[p] = 44   # ','
        p = _int(labels[i], out, p + 1)
        if with_cell:
            out[p] = 44
            p += 1
            c = cell_of[i]
            for q in range(starts[c], starts[c + 1]):
                out[p] = cells[q]
                p += 1
        out[p] = 10   # '\n'
        p += 1
    return p


def rows_bytes(labels, cell_of=None, texts=()):
    """:func:`csv_rows` of int ``labels`` and, with ``cell_of``, the third column ``texts[cell_of[i]]``."""
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    encoded = [t.encode() for t in texts]
    starts = np.zeros(len(encoded) + 1, dtype=np.int64)
    starts[1:] = np.cumsum([len(b) for b in encoded])
    cells = np.frombuffer(b"".join(encoded), dtype=np.uint8) if encoded else np.zeros(0, np.uint8)
    cell_of = np.zeros(0, np.int64) if cell_of is None else np.ascontiguousarray(cell_of, dtype=np.int64)
    width = len(str(max(labels.size - 1, 0))) + max((len(str(v)) for v in (labels.min(initial=0),
                                                                          labels.max(initial=0))), default=1)
    widest = max((len(b) for b in encoded), default=0)
    out = np.empty(labels.size * (width + widest + 4), dtype=np.uint8)
    return out[:csv_rows(labels, cell_of, cells, starts, out)].tobytes()
