"""Memory planning: in memory or out of core, and rows per streamed block.

Pure integer arithmetic, no I/O: every rule that decides
where an array lives or how many rows a block holds is here, once, so that it
can be property-tested (``tests/test_plan.py``: a plan never holds more than
its budget) and so that the pipeline, the stages and the out-of-core solvers
cannot disagree.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from bigclust._util.errors import UserError

#: the largest block a dense kernel is computed in (a Dask task's output)
MAX_KERNEL_BLOCK = 64 << 20

_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9, "GB": 10**9,
          "T": 10**12, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
#: sizes above this are not a memory budget but a typo (and overflow int64 arithmetic downstream)
MAX_BYTES = 2**60


class PlanError(UserError):
    """A budget that cannot hold even the smallest unit of work."""


def parse_bytes(value) -> int:
    """A byte count from ``1000``, ``"1GB"``, ``"512 MiB"`` or ``"1e9"``.

    Raises ValueError for anything else: zero or negative sizes, unknown units,
    non-finite numbers (``"infGB"``, ``"1e400"``) and sizes above 2**60 bytes.
    """
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        out = value
    else:
        m = _SIZE.match(str(value))
        if not m or m.group(2).upper() not in _UNITS:
            raise ValueError(value)
        num = float(m.group(1)) * _UNITS[m.group(2).upper()]
        if not math.isfinite(num) or num > MAX_BYTES:
            raise ValueError(value)
        out = int(num)
    if not 0 < out <= MAX_BYTES:
        raise ValueError(value)
    return out


def fits(n_arrays: int, n: int, itemsize: int, budget: int) -> bool:
    """Whether ``n_arrays`` dense n x n arrays of ``itemsize`` bytes fit ``budget``."""
    return n_arrays * n * n * itemsize <= budget


def block_rows(n: int, itemsize: int, budget: int, n_buffers: int = 3) -> int:
    """Rows per block so that ``n_buffers`` blocks of ``rows x n`` items fit ``budget``.

    A streaming loop holds the block being computed, the next one being read
    and the previous one being written (``n_buffers=3``).  Returns
    ``min(n, budget // (n_buffers * n * itemsize))``; PlanError when that is 0.
    """
    if n < 1 or itemsize < 1 or n_buffers < 1:
        raise PlanError(f"block_rows needs n, itemsize, n_buffers >= 1 (got {n}, {itemsize}, {n_buffers})")
    row_bytes = n * itemsize
    rows = budget // (n_buffers * row_bytes)
    if rows < 1:
        raise PlanError(f"max_memory={budget} bytes cannot hold {n_buffers} rows of {row_bytes} bytes "
                        f"(n={n}); give at least {n_buffers * row_bytes} bytes")
    return int(min(n, rows))


#: row blocks alive at once in the streaming consumers of a dense kernel, and their bytes per entry:
#: BBS/SK (block computed, next read, previous written), the streamed eigensolver operator (block and
#: its float64 product), several kernels (MBBS: K_i, the weighted sum, G, reader and writer)
CONSUMERS = {"normalize": (3, None), "operator": (2, 8), "multi": (5, 8)}


def consumer_rows(consumer: str, n: int, itemsize: int, budget: int) -> int:
    """Rows per block of one streaming consumer of an n x n array (:data:`CONSUMERS`)."""
    n_buffers, size = CONSUMERS[consumer]
    return block_rows(n, size or itemsize, budget, n_buffers)


def kernel_chunk_rows(n: int, itemsize: int, budget: int | None) -> int:
    """Rows per zarr chunk (= Dask block) of a dense n x n kernel written to the store.

    At most :data:`MAX_KERNEL_BLOCK` bytes, and no more rows than the most
    frugal streaming consumer reads at once, so that a block of whole chunks
    never exceeds any consumer's budget.
    """
    cap = max(1, MAX_KERNEL_BLOCK // (n * itemsize))
    if budget is None:
        return min(n, cap)
    widest = max(n_buf * (size or itemsize) for n_buf, size in CONSUMERS.values())  # bytes per column
    return int(min(n, cap, max(1, budget // (widest * n))))


@dataclass(frozen=True)
class NormalizePlan:
    """Where a dense normalisation runs.

    Attributes
    ----------
    in_memory : bool
        All arrays of the method (K, its iterate, for MBBS the m kernels and
        their sum) fit the budget.
    block_rows : int
        Out of core: rows per streamed block (n when in memory).
    working_set : int
        Bytes the plan holds at once.
    """

    in_memory: bool
    block_rows: int
    working_set: int


def normalize_plan(n: int, itemsize: int, budget: int, *, n_kernels: int = 1) -> NormalizePlan:
    """Plan a dense normalisation of ``n_kernels`` n x n kernels (``itemsize`` bytes per entry).

    One kernel (RA, Ncut, SK, BBS): K and the iterate G in memory when
    ``2 n^2 itemsize`` fits, else three row blocks streamed.
    Several kernels (MBBS, float64 in memory): the m kernels, their weighted
    sum and G, ``(m + 2) n^2 8`` bytes, else five row blocks (K_i, sum, G and
    the reader/writer pair).
    """
    if n_kernels == 1:
        if fits(2, n, itemsize, budget):
            return NormalizePlan(True, n, 2 * n * n * itemsize)
        rows = consumer_rows("normalize", n, itemsize, budget)
        return NormalizePlan(False, rows, 3 * rows * n * itemsize)
    if fits(n_kernels + 2, n, 8, budget):
        return NormalizePlan(True, n, (n_kernels + 2) * n * n * 8)
    rows = consumer_rows("multi", n, 8, budget)
    return NormalizePlan(False, rows, 5 * rows * n * 8)


@dataclass(frozen=True)
class StreamPlan:
    """Linear NMF on stored documents: in memory, or streamed in row blocks of ``bounds``."""

    in_memory: bool
    bounds: tuple
    working_set: int


def nmf_plan(n: int, row_bytes: float, m: int, k: int, n_init: int, budget: int) -> StreamPlan:
    """Plan linear NMF on n stored documents of ``row_bytes`` each (m terms, k components).

    In memory X is held twice (it and its transpose, for ``X^T V``) beside the
    factors of every restart (``(n + m) k n_init`` float64, and as much again
    for products).  Streamed, only the factors and three row blocks are held
    (read, computed, the next prefetched): the block size follows from what
    the factors leave of the budget, so memory does not grow with n beyond V.
    """
    factors = 2 * (n + m) * k * n_init * 8
    data = int(2 * n * row_bytes)
    if data + factors <= budget:
        return StreamPlan(True, (0, n), data + factors)
    left = budget - factors
    rows = int(left // (3 * max(row_bytes, 1.0)))
    if rows < 1:
        raise PlanError(f"max_memory={budget} bytes cannot hold the NMF factors ({factors} bytes for n={n}, "
                        f"m={m}, k={k}, n_init={n_init}) and a row of X; raise max_memory or lower n_init")
    rows = min(rows, n)
    bounds = tuple(range(0, n, rows)) + (n,)
    return StreamPlan(False, bounds, factors + int(3 * rows * row_bytes))


def min_budget(n: int, itemsize: int, *, n_kernels: int = 1) -> int:
    """The smallest ``max_memory`` under which a dense n x n kernel can be normalised and embedded.

    One row block of every streaming consumer that reads it (:data:`CONSUMERS`):
    ``normalize`` (three blocks of ``itemsize``), the streamed eigensolver
    ``operator`` and, for several kernels, ``multi``.  Below it
    :func:`block_rows` would raise PlanError mid-run; the pipeline checks it
    before any work.
    """
    used = ["normalize", "operator"] + (["multi"] if n_kernels > 1 else [])
    return max(CONSUMERS[c][0] * (CONSUMERS[c][1] or itemsize) * n for c in used)


def chunk_bytes(chunk_rows: int, n_features: int, itemsize: int = 4) -> int:
    """Bytes of one row chunk of the data (float32 at ingest), which is held in memory whole."""
    return chunk_rows * max(n_features, 1) * itemsize


def format_bytes(b: int) -> str:
    """``1234567`` -> ``"1.23 MB"`` (decimal units, as :func:`parse_bytes` reads them)."""
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b} B"


def peak_rss_mb() -> float:
    """This process's largest resident set so far, in MiB: the kernel's high-water mark of its own memory
    (``VmHWM``).  Not ``getrusage``'s ``ru_maxrss``: across ``exec`` it keeps the parent's, so a Dask worker that
    a LocalCluster's nanny (in the driver) restarts reported the driver's 3.6 GB as its own peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
