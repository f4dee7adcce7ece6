"""Progress bars on stderr: per-iteration bars with an ETA, and Dask's tasks as they finish.

One switch for the whole package.  Bars are shown when stderr is a terminal,
unless the run is quiet (``bigclust pipeline run --quiet``, :func:`quiet`);
``BIGCLUST_PROGRESS=1`` forces them on (``0`` off) whatever stderr is, so
that tests can see them.  ``--quiet`` wins over the variable.  When bars are
off nothing of tqdm is imported and the stage lines are all that is printed.

The solvers' loops call a Numba kernel per iteration (or per slice of
restarts / columns), so a bar is updated between kernel calls, never from
inside compiled code; slicing never changes a result (restarts and columns are
independent).  Stages run as tasks on a Dask worker show no bar of their own
(their stderr is the worker's): the client shows the tasks instead
(:func:`gather`, :func:`compute`).
"""
from __future__ import annotations

import contextlib
import os
import sys

#: seconds between two redraws of a bar (tests set 0 to see every update)
MININTERVAL = 0.2

_quiet = False
_off = 0  # nesting depth of disabled() (a task on a worker, a run told to be quiet)


def enabled() -> bool:
    """Whether bars are shown now (see the module docstring for the rules)."""
    if _quiet or _off:
        return False
    env = os.environ.get("BIGCLUST_PROGRESS", "").strip()
    if env in ("0", "1"):
        return env == "1"
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def set_quiet(flag: bool = True):
    """Process-wide: no bars at all (``--quiet``); the stage lines stay."""
    global _quiet
    _quiet = bool(flag)


@contextlib.contextmanager
def disabled():
    """No bars inside this block (a stage running as a Dask task, a helper's inner loop)."""
    global _off
    _off += 1
    try:
        yield
    finally:
        _off -= 1


class _NoBar:
    """What :func:`bar` returns when bars are off: every call does nothing."""

    n = 0

    def update(self, n=1):
        pass

    def set_postfix_str(self, s="", refresh=True):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


#: a bar that does nothing (a default argument for loops driven by a caller's bar)
NOBAR = _NoBar()


def bar(total, desc: str, unit: str = "it"):
    """A tqdm bar on stderr (a context manager), or a do-nothing one when bars are off.

    ``total``: the number of updates expected (iterations, restarts, columns);
    loops that stop early on a tolerance just close the bar.
    """
    if not enabled():
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc=f"    {desc}", unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True,
                mininterval=MININTERVAL)


def iterate(iterable, desc: str, total: int | None = None, unit: str = "it"):
    """``iterable`` with a bar that advances as each item's loop body finishes (a loop may ``break``)."""
    if not enabled():
        yield from iterable
        return
    b = bar(len(iterable) if total is None else total, desc, unit)
    try:
        for item in iterable:
            yield item
            b.update(1)
    finally:
        b.close()


def slices(total: int, n_pieces: int = 50, at_least: int = 1):
    """``(start, stop)`` bounds cutting ``range(total)`` into about ``n_pieces`` pieces for a bar.

    With bars off one piece (one kernel call, as without progress).
    """
    if not enabled() or total <= at_least:
        return [(0, total)]
    step = max(at_least, -(-total // n_pieces))
    return [(a, min(total, a + step)) for a in range(0, total, step)]


def gather(client, futures, desc: str):
    """``client.gather(futures)`` (results in order), with a bar fed as the tasks finish."""
    if not enabled() or len(futures) == 0:
        return client.gather(futures)
    from distributed import as_completed
    with bar(len(futures), desc, "task") as b:
        for _ in as_completed(futures):
            b.update(1)
    return client.gather(futures)


def compute(collection, desc: str):
    """Compute a Dask collection / delayed with a bar over its tasks (distributed or local scheduler)."""
    import dask
    if not enabled():
        return dask.compute(collection)[0]
    client = _default_client()
    if client is not None:
        from distributed import futures_of
        persisted = client.persist(collection)
        futs = futures_of(persisted)
        gather(client, futs, desc)
        return dask.compute(persisted)[0]
    from dask.callbacks import Callback

    class _Tasks(Callback):
        def _start_state(self, dsk, state):
            self.bar = bar(sum(len(state[k]) for k in ("ready", "waiting", "running", "finished")), desc, "task")

        def _posttask(self, key, result, dsk, state, worker_id):
            self.bar.update(1)

        def _finish(self, dsk, state, errored):
            self.bar.close()

    with _Tasks():
        return dask.compute(collection)[0]


def _default_client():
    import dask
    if dask.config.get("scheduler", None) not in ("dask.distributed", "distributed"):
        return None  # a client may exist in the process, but this run computes with the local scheduler
    try:
        from distributed import default_client
        return default_client()
    except (ImportError, ValueError):
        return None
