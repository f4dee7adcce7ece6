"""Resumable chunked stages: a scratch folder in the store, done-markers, and chunks run as tasks.

A stage too long to lose to a ``kill -9`` (the chunked kNN affinity,
:mod:`bigclust.pipeline.stages.knn`; the streamed subspace stage,
:mod:`bigclust.subspace._chunked`) works in a folder of its own in the store,
``work/<stage>-<key>`` (not under ``tmp/``, which the store empties of dead
writers' leftovers), holding a zarr group and a ``done/`` folder of marker files::

    work/<stage>-<key>/
      zarr.json           the scratch group; its attributes say what it was made for
      <arrays>            what the chunks and steps write
      done/<name>         one marker per finished step or chunk (``<prefix><i>`` for chunk i)

A step or chunk writes its arrays first and its marker last, by an atomic
rename, so whatever a kill cuts off mid-write has no marker and is computed
again; a marker's text (bounds, seconds) is for a reader only.  When the group
was made for other settings (:func:`open_work`'s ``want``) it is started
afresh: a resume never mixes chunks of two configurations.  Once the stage's
result is committed to ``stages/`` the caller removes the folder.

:func:`run_chunks` runs the chunks without a marker, one after the other here
or as tasks on a ``dask.distributed`` client, and says how far it got.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from bigclust.pipeline.memory import NeedsDisk, is_memory_path
from bigclust.pipeline.scheduler import scattered

DONE = "done"


def say(msg: str):
    """The default progress log: a line on stderr."""
    print(msg, file=sys.stderr, flush=True)


def work_dir(store_path, stage: str, key: str) -> Path:
    """The scratch folder of stage instance ``<stage>/<key>`` of the store at ``store_path``."""
    if is_memory_path(store_path):   # resumable chunks are files: an estimator's fit goes to a store on disk
        raise NeedsDisk(f"stage {stage} works in resumable chunks, which need a store on disk")
    return Path(store_path) / "work" / f"{stage}-{key}"


def open_work(work, want: dict, arrays: dict | None = None, *, section: str = ""):
    """The scratch group of ``work``, reused when it was made for ``want``; else made afresh.

    ``want``: attributes that must match for a resume (JSON values).  ``arrays``:
    ``{name: create_array keywords}`` made with a fresh group (a group without
    them is not reused).  The attributes are written last, so matching ones
    vouch for the arrays.  ``section``: start afresh only one part of a group
    that several steps share: its attributes are stored as ``<section>_<key>``;
    on a mismatch its arrays are made again and its chunk markers
    (``<section>-<i>``) forgotten, while the other steps' arrays and markers stay.
    """
    import zarr  # heavy import, only when a chunked stage runs

    work = Path(work)
    attr = (lambda k: f"{section}_{k}") if section else str
    g = zarr.open_group(str(work), mode="r+") if (work / "zarr.json").exists() else None
    if g is not None and all(g.attrs.get(attr(k)) == v for k, v in want.items()) and all(a in g for a in arrays or ()):
        return g
    if section:
        for i in chunks_done(work, f"{section}-"):
            (work / DONE / f"{section}-{i}").unlink()
    elif work.exists():
        shutil.rmtree(work)
        g = None
    if g is None:
        work.mkdir(parents=True, exist_ok=True)
        g = zarr.open_group(str(work), mode="a")
    for a, spec in (arrays or {}).items():
        g.create_array(a, overwrite=True, **spec)
    (work / DONE).mkdir(exist_ok=True)
    g.attrs.update({attr(k): v for k, v in want.items()})
    return g


def mark(work, name: str, text: str = "", *, folder: str = DONE):
    """Write the marker ``work/<folder>/<name>`` atomically, after the data it vouches for."""
    d = Path(work) / folder
    tmp = d / f".{name}.{os.getpid()}"
    tmp.write_text(text + "\n")
    os.replace(tmp, d / name)


def finished(work) -> set[str]:
    """Names of the markers present (a writer's temporary ``.<name>.<pid>`` is not one)."""
    d = Path(work) / DONE
    return {f.name for f in d.iterdir() if not f.name.startswith(".")} if d.exists() else set()


def chunks_done(work, prefix: str = "") -> set[int]:
    """Indices of the chunks whose marker ``<prefix><i>`` exists."""
    return {int(m[len(prefix):]) for m in finished(work) if m.startswith(prefix) and m[len(prefix):].isdigit()}


def chunk_bounds(n: int, size: int):
    """``(i, start, stop)`` of every chunk of ``size`` items (rows, columns) of ``range(n)``."""
    return [(i, a, min(n, a + size)) for i, a in enumerate(range(0, n, size))]


class Stored:
    """An array of the scratch group that a chunk loads where it runs, once per process, in place of a shared
    input sent from the driver: the driver need not hold it, and ``client.scatter`` of an array costs the driver
    about its size again in serialisation buffers (mnist-8m's cell-sorted PCA-50 rows: 1.62 GB, which took
    the kNN stage's driver from 2.7 to 5.4 GB).  ``dtype``: cast as loaded."""

    def __init__(self, work, name, dtype=None):
        self.work, self.name, self.dtype = str(work), name, dtype

    def key(self):
        return self.work, self.name, str(self.dtype)


#: this process's loaded :class:`Stored` arrays: only those the running chunk names are kept (the caller of
#: :func:`run_chunks` runs :func:`forget_stored` on every worker when its passes are over)
_LOADED: dict = {}
_LOADING = threading.Lock()   # a worker of several threads loads an array once


def forget_stored():
    """Let this process's loaded :class:`Stored` arrays go."""
    with _LOADING:
        _LOADED.clear()
    release_heap()


def release_heap():
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing).

    Many small allocations freed (a cluster's bookkeeping of thousands of tasks, in the driver that hosts the
    scheduler) leave their pages in the process's heap, counted in its memory until the heap is trimmed."""
    if sys.platform.startswith("linux"):
        import ctypes
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)


def _stored_in(x):
    """The :class:`Stored` arrays of a shared input (one, or a tuple of inputs)."""
    return [v for v in (x if isinstance(x, tuple) else (x,)) if isinstance(v, Stored)]


def _resolve(x):
    """A shared input as the chunk's function takes it: :class:`Stored` (alone or in a tuple) loaded."""
    if isinstance(x, tuple):
        return tuple(_resolve(v) for v in x) if _stored_in(x) else x
    if not isinstance(x, Stored):
        return x
    if x.key() not in _LOADED:
        import numpy as np
        import zarr
        a = zarr.open_group(x.work, mode="r")[x.name][...]
        _LOADED[x.key()] = a if x.dtype is None else np.asarray(a).astype(x.dtype)
    return _LOADED[x.key()]


def _run_chunk(fn, work, name, a, b, *args):
    """One chunk (here or on a worker): ``fn(*args)`` writes its data, then its marker; returns seconds."""
    t0 = time.perf_counter()
    named = {v.key() for x in args for v in _stored_in(x)}
    with _LOADING:
        for key in set(_LOADED) - named:   # an earlier pass's inputs go before this one's are loaded
            del _LOADED[key]
        args = [_resolve(x) for x in args]
    fn(*args)
    sec = time.perf_counter() - t0
    mark(work, name, f"{a} {b} {sec:.3f}")
    return sec


def run_chunks(work, chunks, fn, args_of, *, shared=(), prefix: str = "", client=None, max_in_flight=None,
               title: str, what: str, log=say) -> list[int]:
    """Run every chunk of ``chunks`` without a marker; returns the indices computed by this call, sorted.

    ``chunks``: ``(i, start, stop)`` (:func:`chunk_bounds`, or the caller's own
    grouping).  Chunk i runs ``fn(*shared, *args_of(i, start, stop))``, which
    writes its results into the scratch group; its marker ``<prefix><i>`` follows.
    With a ``dask.distributed`` ``client`` every chunk is a task on the cluster:
    ``shared`` (the same large inputs for every chunk) is sent to every worker
    once (a :class:`Stored` array is loaded there instead), and ``max_in_flight``
    tasks per worker at most are submitted at a time (so the driver holds only
    that many chunks' ``args_of``; None: all at once).
    Without one the chunks run here in turn.  ``title`` and ``what`` name the
    progress lines (indented as a stage's): ``"<title>, 3 finished earlier, 5 to
    compute"``, then ``"<what> 4/8 done (...)"`` as each chunk finishes.
    """
    have = chunks_done(work, prefix)
    todo = [ch for ch in chunks if ch[0] not in have]
    log(f"  {title}, {len(have)} finished earlier, {len(todo)} to compute")
    computed = []

    def done(i, sec):
        computed.append(i)
        log(f"  {what} {i + 1}/{len(chunks)} done ({sec:.1f} s; {len(have) + len(computed)}/{len(chunks)})")

    if client is not None and todo:
        from distributed import wait

        sent = [x if _stored_in(x) else client.scatter(x, broadcast=True, hash=False) for x in shared]
        window = len(todo) if max_in_flight is None else max_in_flight * max(1, len(client.scheduler_info()["workers"]))
        pending = {}
        while todo or pending:
            while todo and len(pending) < max(1, window):
                i, a, b = todo.pop(0)
                own = [scattered(client, x) for x in args_of(i, a, b)]   # a chunk's atoms: 35 MiB at 1M
                fut = client.submit(_run_chunk, fn, str(work), f"{prefix}{i}", a, b, *sent, *own, pure=False)
                pending[fut] = i
            res = wait(list(pending), return_when="FIRST_COMPLETED")
            for fut in res.done:
                done(pending.pop(fut), fut.result())
    else:
        for i, a, b in todo:
            done(i, _run_chunk(fn, work, f"{prefix}{i}", a, b, *shared, *args_of(i, a, b)))
    missing = {ch[0] for ch in chunks} - chunks_done(work, prefix)
    if missing:  # pragma: no cover - a task that returned without its marker
        raise RuntimeError(f"{what}s {sorted(missing)[:5]} have no completion marker in {work}")
    return sorted(computed)
