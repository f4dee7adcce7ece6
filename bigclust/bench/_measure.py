"""How every ``bigclust bench`` command measures: the machine, wall time, peak memory, and the printed report.

Said once so that the commands' numbers mean the same thing:

* :func:`machine` describes the machine and its load before a run,
  :func:`load_avg` the load after it (other jobs skew timings on a shared machine);
* :func:`timed` is the one timing helper: the median wall (and CPU) seconds over
  repeats, with warm-up (Numba compilation) and per-run setup outside the
  timings, and several functions interleaved when their ratio is what counts;
* :class:`PeakRSS` is the one memory sampler: a thread that samples the RSS of
  this process (and optionally of its children, per stage) inside a ``with``
  block; :func:`in_child` runs a function in a fresh process so that the peak
  is that function's alone.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field

import numpy as np

GB = 1e9


# -- the machine ----------------------------------------------------------------------------------


def load_avg() -> list:
    """The 1, 5 and 15 minute load averages, rounded to 2 decimals."""
    return [round(v, 2) for v in os.getloadavg()]


def machine() -> dict:
    """CPU model, cores, RAM, Numba threads and the load average (other jobs skew timings)."""
    import numba
    import psutil

    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    return {"cpu": model, "logical_cores": os.cpu_count(), "physical_cores": psutil.cpu_count(logical=False),
            "ram_gb": round(psutil.virtual_memory().total / GB, 2), "numba_threads": numba.get_num_threads(),
            "load_avg_1min": load_avg()[0]}


# -- time ---------------------------------------------------------------------------------------------


@dataclass
class Timing:
    """What :func:`timed` measured of one function: seconds of every run and the last run's result."""

    times: list = field(default_factory=list)      # wall seconds per run
    cpu_times: list = field(default_factory=list)  # CPU seconds (user + system, every thread of this process)
    result: object = None                          # the last run's return value
    kept: list = field(default_factory=list)       # keep(result) of every run

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def cpu(self) -> float:
        """Median CPU seconds: on a shared machine it moves far less with the load than the wall time."""
        return statistics.median(self.cpu_times)

    @property
    def fastest(self) -> float:
        return min(self.times)


def timed(fn, repeats=1, *, setup=None, warmup=None, keep=None):
    """Run ``fn`` ``repeats`` times and time each run; everything but ``fn`` itself is left out of the timings.

    Parameters
    ----------
    fn : callable or dict of name -> callable
        A dict's functions run interleaved (a, b, a, b, ...): on a shared
        machine all see the same drift of the load, so the ratio of their
        times (per repeat, or of the medians) compares like with like.
    repeats : int
        Runs of each function (at least one).
    setup : callable, dict of name -> callable, or None
        Called before every run, untimed; its value is passed to ``fn`` (a
        fresh copy of an array updated in place, a seed).  A dict gives one per
        function of a dict ``fn`` (functions without one get no argument).
    warmup : callable or None
        Called once before anything is timed (Numba compilation on a small
        input, a cache load).
    keep : callable or None
        Applied to every run's result, untimed (a score); the values go to
        :attr:`Timing.kept`.

    Returns
    -------
    Timing, or a dict of name -> Timing for a dict ``fn``.
    """
    fns = fn if isinstance(fn, dict) else {None: fn}
    setups = setup if isinstance(setup, dict) else {name: setup for name in fns}
    out = {name: Timing() for name in fns}
    if warmup is not None:
        warmup()
    for _ in range(max(1, repeats)):
        for name, f in fns.items():
            args = () if setups.get(name) is None else (setups[name](),)
            t, c = time.perf_counter(), time.process_time()
            res = f(*args)
            rec = out[name]
            rec.times.append(time.perf_counter() - t)
            rec.cpu_times.append(time.process_time() - c)
            rec.result = res
            if keep is not None:
                rec.kept.append(keep(res))
    return out if isinstance(fn, dict) else out[None]


# -- memory ---------------------------------------------------------------------------------------------


class PeakRSS:
    """Peak resident set size, sampled every ``interval`` s by a thread inside a ``with`` block and at both ends.

    ``with PeakRSS() as m: ...`` then ``m.start`` and ``m.peak`` (bytes).

    ``children=True`` samples the child processes too (the workers of a
    ``local-cluster``; a remote scheduler's workers are not children):
    ``m.peak`` is then the largest RSS of any one process, ``m.peak_sum`` the
    largest sum, ``m.per_process`` each process's peak.  ``m.stage(label)``
    attributes the samples from then on to ``label`` (None: to none):
    ``m.stage_peak[label]`` and ``m.stage_peak_sum[label]``.
    """

    def __init__(self, interval=0.05, *, children=False):
        import psutil

        self.interval, self.children = interval, children
        self._me = psutil.Process()
        self._stop = threading.Event()
        self.label = None
        self.start = self.peak = self.peak_sum = self._me.memory_info().rss
        self.per_process, self.stage_peak, self.stage_peak_sum = {}, {}, {}

    @staticmethod
    def process_max() -> int:
        """The kernel's own record of this process's largest RSS over its whole life (bytes)."""
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux

    def _sample(self):
        import psutil

        procs = [self._me]
        if self.children:
            try:
                procs += self._me.children(recursive=True)
            except psutil.Error:
                pass
        rss = []
        for p in procs:
            try:
                r = p.memory_info().rss
                key = "driver" if p.pid == self._me.pid else f"child {p.pid} {p.name()}"
            except psutil.Error:  # a worker that exited between the listing and the reading
                continue
            rss.append(r)
            self.per_process[key] = max(self.per_process.get(key, 0), r)
        if rss:
            self.peak, self.peak_sum = max(self.peak, max(rss)), max(self.peak_sum, sum(rss))
            if self.label is not None:
                self.stage_peak[self.label] = max(self.stage_peak.get(self.label, 0), max(rss))
                self.stage_peak_sum[self.label] = max(self.stage_peak_sum.get(self.label, 0), sum(rss))

    def stage(self, label):
        """Attribute the samples from now on to ``label`` (None: to no stage)."""
        self._sample()
        self.label = label
        if label is not None:
            self._sample()

    def _run(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


def _child(queue, fn, kwargs):
    """Run ``fn(**kwargs)`` in a fresh process; its stdout goes to stderr so ``--json`` stays clean."""
    os.dup2(2, 1)
    try:
        res = fn(**kwargs)
        res["process_max_rss_bytes"] = PeakRSS.process_max()
        queue.put(res)
    except BaseException as e:  # report, the parent decides
        queue.put({"error": f"{type(e).__name__}: {e}"})


def in_child(fn, timeout=None, **kwargs):
    """``fn(**kwargs)`` (a dict) in a spawned process, so that its peak RSS is its own; None past ``timeout`` s.

    The dict gains ``process_max_rss_bytes`` (the child's whole life), or is
    ``{"error": ...}`` when the child raised or died.
    """
    import multiprocessing as mp
    import queue as q

    ctx = mp.get_context("spawn")
    qu = ctx.Queue()
    p = ctx.Process(target=_child, args=(qu, fn, kwargs))
    p.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            res = qu.get(timeout=1.0)
            break
        except q.Empty:
            if not p.is_alive():
                try:  # it may have put its result just before exiting
                    res = qu.get(timeout=1.0)
                except q.Empty:
                    res = {"error": f"process died with exit code {p.exitcode}"}
                break
            if deadline is not None and time.monotonic() > deadline:
                p.terminate()
                p.join()
                return None
    p.join()
    return res


# -- printing ---------------------------------------------------------------------------------------------


def format_report(res: dict) -> str:
    """``key  value`` lines; floats to 4 significant digits, byte counts also in GB."""
    def num(v):
        return f"{v:.4g}" if isinstance(v, float) else v

    lines = []
    for key, v in res.items():
        if isinstance(v, dict):  # e.g. the machine of bench knn / subspace: strings beside numbers
            v = ", ".join(f"{a}: {num(b)}" for a, b in v.items())
        else:
            v = num(v)
        if key.endswith("_bytes") and isinstance(v, (int, np.integer)):
            v = f"{v} ({v / GB:.3f} GB)"
        lines.append(f"{key:<40} {v}")
    return "\n".join(lines)
