"""The Dask side of a run: the client's lifecycle, the scheduler checked before any work, stages as tasks.

A scheduler address is checked before anything is computed (a TCP connect, a bounded handshake and an
``identity`` request): nothing listening, a service that is not a Dask scheduler, or an address without a port
is one line.  A stage that needs every row runs as one task (:func:`submit`); warnings it raises on a worker
are recorded there and re-emitted on the client, and a scheduler lost mid-run is one line saying that the same
command resumes.  A ``local-cluster`` run keeps distributed's WARNING log lines off the terminal; a worker of it
that dies (over its memory limit, say) is one line instead (:class:`_WorkerDeaths`).
"""
from __future__ import annotations

import contextlib
import os
import time
import uuid

from bigclust._util.errors import UserError


@contextlib.contextmanager
def keep_environ():
    """Give ``os.environ`` back as it was: a ``dask.distributed`` Nanny sets its workers' ``OMP_NUM_THREADS=1``
    (and MKL's, OpenBLAS's) in the process that starts it and leaves them there (dask/distributed#6749), which
    would make every later subprocess of ours run single-threaded and compute other last bits."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for k in set(os.environ) - set(saved):
            del os.environ[k]
        os.environ.update(saved)


@contextlib.contextmanager
def dask_client(scheduler: str | None, n_workers: int = 1, probe: bool = True):
    """The Dask context for a run.

    ``""``/``None``: Dask's local threaded scheduler in this process;
    ``"synchronous"``: everything in the calling thread (debugging);
    ``"local-cluster"``: a ``LocalCluster`` of ``n_workers`` processes for the
    run's lifetime; ``tcp://HOST:PORT``: an existing ``dask.distributed``
    scheduler (checked first, within :data:`SCHEDULER_TIMEOUT` seconds, unless
    ``probe`` is false: :func:`check_scheduler`).  Yields the distributed
    ``Client`` or ``None``.  A scheduler lost mid-run is one UserError line.
    """
    import dask

    if not scheduler:
        # the threaded scheduler itself, not its name: Dask looks a name up only after importing
        # distributed to look for a client (0.5 s of every fresh process, for nothing)
        import dask.threaded
        with dask.config.set(scheduler=dask.threaded.get):
            yield None
        return
    if scheduler == "synchronous":
        with dask.config.set(scheduler="synchronous"):
            yield None
        return
    from distributed import Client, LocalCluster

    if scheduler == "local-cluster":
        import logging
        import warnings

        from distributed.scheduler import KilledWorker, NoValidWorkerError, NoWorkerError

        # silence_logs: while the cluster runs, distributed's stderr handlers (here: scheduler and nannies; in the
        # workers: their memory monitor) show ERROR and above only -- not a WARNING line per memory alarm and
        # restart among the stage lines; a worker that dies is said once, by _WorkerDeaths.  The scheduler's HTTP
        # routes (no dashboard) on a free loopback port: on 8787, taken by any other cluster, it warns and moves
        with keep_environ(), _no_worker_timeout(), \
                LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                             scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                             silence_logs=logging.ERROR) as cluster, \
                Client(cluster) as client, _WorkerDeaths(cluster, client, n_workers) as deaths:
            try:
                yield client
            except (KilledWorker, *_lost_scheduler_errors()) as e:
                if not deaths.wait():
                    raise
                said = deaths.say(f"and the run cannot go on ({type(e).__name__})")
                raise UserError(f"{said}; {_RESUMES}") from None
            except (NoWorkerError, NoValidWorkerError):
                deaths.said = True   # this line is the run's one line
                raise UserError(f"the local Dask cluster had no running worker for {NO_WORKER_SECONDS:g} s (a worker "
                                "did not come back after its restart; is the machine out of memory or processes?); "
                                f"{_RESUMES}") from None
            finally:
                if deaths.died and not deaths.said:
                    warnings.warn(deaths.say("and its tasks were run again on a new worker"), RuntimeWarning)
        return
    timeout = f"{SCHEDULER_TIMEOUT:g}s"
    if probe:
        _probe_scheduler(scheduler, SCHEDULER_TIMEOUT)
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": timeout}):
            client = Client(scheduler, timeout=timeout)
    except (OSError, TimeoutError) as e:
        raise UserError(f"cannot connect to Dask scheduler {scheduler}: {e}") from None
    with _quiet_lost_scheduler(), client:   # closing the client cancels its reconnect: keep quiet until then
        try:
            yield client
        except _lost_scheduler_errors() as e:
            raise UserError(f"lost the Dask scheduler {scheduler} mid-run ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else 'no message'}); {_RESUMES}") from None


#: what a run stopped by its cluster says last
_RESUMES = "finished stages are kept in the store: running the same command again resumes"
#: seconds a local cluster's task waits with no worker running before the run stops (a restart takes about 3 s)
NO_WORKER_SECONDS = 300.0
#: seconds to wait for a Dask scheduler to connect and answer its handshake
SCHEDULER_TIMEOUT = 10.0


class _WorkerDeaths:
    """The workers of a run's LocalCluster that die mid-run, from the scheduler's events: the nanny's kill
    over the memory limit, the system's out-of-memory killer, a crash.  :meth:`say` makes the one line a run
    gives about them (the first death: its tasks -- a stage task is named after its stage, :func:`_submit` --,
    its cause, what to change); the scheduler's own ERROR lines about the same deaths are dropped meanwhile.

    The events are read in the scheduler itself (the LocalCluster's scheduler runs in this process), through
    a plugin's ``log_event`` hook, not by subscribing the client to the scheduler's "all" topic: that topic
    also carries events that cannot be sent over a comm (distributed 2026.8's "replicate" event holds
    WorkerState objects, so a broadcast scatter closed the client's comm and failed the run)."""

    name = "bigclust-worker-deaths"

    def __init__(self, cluster, client, n_workers: int):
        import threading
        self.scheduler, self.client, self.n_workers = cluster.scheduler, client, n_workers
        self.died: list[tuple[str, list[str]]] = []   # (worker, names of the tasks it was running)
        self.rss: dict[str, int] = {}                 # worker -> its memory when its nanny stopped it
        self.said, self._seen = False, threading.Event()
        workers = client.scheduler_info()["workers"].values()
        self.limit = min((w.get("memory_limit") or 0 for w in workers), default=0)

    def __enter__(self):
        import logging
        from distributed.diagnostics.plugin import SchedulerPlugin

        # a SchedulerPlugin for the scheduler's other hooks (no-ops), built here: distributed is imported lazily
        hook = type("_DeathsHook", (SchedulerPlugin,), {"log_event": lambda _, topic, msg: self.log_event(topic, msg)})
        self.scheduler.add_plugin(hook(), name=self.name)   # the broker iterates over a copy of the plugins
        logging.getLogger("distributed.scheduler").addFilter(self._not_ours)
        return self

    def __exit__(self, *exc_info):
        import logging
        logging.getLogger("distributed.scheduler").removeFilter(self._not_ours)
        self.scheduler.plugins.pop(self.name, None)
        return False

    def log_event(self, topic: str, msg) -> None:
        """The scheduler's plugin hook, on its event loop: every event of every topic."""
        if topic == "worker-restart-memory":
            self.rss[msg["worker"]] = msg["rss"]
        elif topic == "all":
            self._event(msg)

    @staticmethod
    def _not_ours(record) -> bool:
        """False for the scheduler's ERROR lines about a dead worker ("... lose scattered data", "Task ... marked
        as failed because 4 workers died"): the run says it (:meth:`say`)."""
        msg = record.getMessage()
        return not (msg.startswith("Removing worker") or "workers died while trying to run it" in msg)

    def _event(self, msg):
        from dask.utils import key_split
        ours = msg.get("worker") in _STAGES.restarted   # restarted for a stage (_fresh_worker): not a death
        if msg.get("action") == "remove-worker" and not msg.get("expected") and not ours:
            self.died.append((msg["worker"], sorted({key_split(k) for k in msg.get("processing-tasks", ())})))
            self._seen.set()

    def wait(self, timeout: float = 2.0) -> bool:
        """Whether a worker died (its event may reach the client just after the failure it caused)."""
        return bool(self.died) or self._seen.wait(timeout)

    def say(self, outcome: str) -> str:
        """The line about the first death (and how many there were): ``outcome`` follows its cause."""
        import dask
        from dask.utils import format_bytes
        self.said = True
        worker, tasks = self.died[0]
        limit = format_bytes(self.limit) if self.limit else "no limit"
        if worker in self.rss:
            frac = dask.config.get("distributed.worker.memory.terminate") or 1
            cause = f"its nanny stopped it at {format_bytes(self.rss[worker])}, over {frac:.0%} of its {limit} limit"
        else:
            cause = "its process ended unexpectedly, e.g. killed by the system's out-of-memory killer"
        more = f"; {len(self.died)} worker deaths in all" if len(self.died) > 1 else ""
        return (f"a Dask worker of the local cluster died while running {', '.join(tasks) or 'no task'} "
                f"({cause}{more}) {outcome}: to give a stage more memory, run fewer [dask] n_workers "
                f"({self.n_workers} now, {limit} each) or set [store] max_memory well below {limit}")


def _lost_scheduler_errors() -> tuple:
    """What a client raises when its scheduler goes away (cancelled futures, closed comms)."""
    import asyncio

    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    return (FutureCancelledError, CommClosedError, asyncio.CancelledError)


@contextlib.contextmanager
def _no_worker_timeout():
    """For a LocalCluster made inside: a task that waits :data:`NO_WORKER_SECONDS` with no worker running fails
    (``NoWorkerError``, said in one line by :func:`dask_client`) instead of the run waiting for ever -- a worker
    that did not come back after its restart, seen once under heavy load.  The scheduler's own ERROR line per
    such task is dropped."""
    import logging

    import dask

    def keep(record):
        return not (record.levelno >= logging.ERROR and "timed out waiting" in record.getMessage())

    with _log_filter("distributed.scheduler", keep), \
            dask.config.set({"distributed.scheduler.no-workers-timeout": f"{NO_WORKER_SECONDS:g}s"}):
        yield


@contextlib.contextmanager
def _log_filter(name: str, keep):
    """``keep`` filters the records of the logger ``name`` inside the block."""
    import logging

    logger = logging.getLogger(name)
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


@contextlib.contextmanager
def _quiet_lost_scheduler():
    """While a run uses its client: drop the client's own ERROR records of a failed reconnect to a scheduler
    that went away ("Failed to reconnect ...", a cancelled reconnect with its 23-line traceback); the run
    says it in one line (:func:`dask_client`).  Every
    other record of the client, and every record after the run, is logged as before."""
    import logging

    lost = _lost_scheduler_errors()

    def keep(record):
        exc = record.exc_info[1] if record.exc_info else None
        return not (record.levelno >= logging.ERROR and (isinstance(exc, lost) or
                                                        record.getMessage().startswith("Failed to reconnect")))

    with _log_filter("distributed.client", keep):
        yield


def check_scheduler(address: str | None):
    """Before any work: an address that is not one, or no Dask scheduler answering there, is one line."""
    if address and address not in ("synchronous", "local-cluster"):
        _probe_scheduler(address, SCHEDULER_TIMEOUT)


def _parse_scheduler(address: str, where: str = "--scheduler or [dask] scheduler"):
    """``(scheme, host, port)`` of a scheduler address; one line (naming ``where`` it was set) when it is not one."""
    from distributed.comm.addressing import parse_address
    try:
        scheme, loc = parse_address(address, strict=True)
        host, _, port = loc.rpartition(":")
        if scheme in ("tcp", "tls", "ws", "wss") and (not host or not port.isdigit()):
            raise ValueError(f"missing port number in {address!r}")
    except ValueError as e:
        raise UserError(f"scheduler {address!r} ({where}) is not an address: expected "
                        f"tcp://HOST:PORT, 'local-cluster' or 'synchronous' ({e})") from None
    return scheme, host, port


def _probe_scheduler(address: str, timeout: float):
    """One line, within ``timeout`` seconds, unless a Dask scheduler answers at ``address``.

    ``distributed.Client`` bounds the TCP connect by its timeout but not the
    handshake that follows, so a port where something else listens (a silent
    socket, a web server) would hang it forever.  Here the connect, the
    handshake and an ``identity`` request are bounded together.
    """
    import asyncio

    from distributed.comm import connect

    scheme, host, port = _parse_scheduler(address)

    if scheme in ("tcp", "tls", "ws", "wss"):  # is anything there at all? (refused at once, or unreachable)
        import socket
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except OSError as e:
            why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
            raise UserError(f"cannot connect to Dask scheduler {address}: {why} "
                            "(is it running? is the address right?)") from None

    async def identity():
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    def probe():  # in a thread of its own: asyncio.run cannot start inside a running loop (Jupyter)
        return asyncio.run(asyncio.wait_for(identity(), timeout))

    from concurrent.futures import ThreadPoolExecutor
    try:
        with ThreadPoolExecutor(1) as pool:
            ident = pool.submit(probe).result()
    except (asyncio.TimeoutError, TimeoutError):
        raise UserError(f"no Dask scheduler at {address}: something accepts connections there "
                        f"({_what_listens(host, port) if scheme == 'tcp' else 'unknown'}) but did not answer the "
                        f"Dask handshake within {timeout:g} s") from None
    except Exception as e:  # closed mid-handshake, or bytes that do not deserialise: not a Dask peer
        raise UserError(f"no Dask scheduler at {address}: something listens there "
                        f"({_what_listens(host, port) if scheme == 'tcp' else 'unknown'}) but it does not speak "
                        f"the Dask protocol ({type(e).__name__})") from None
    if not isinstance(ident, dict) or ident.get("type") != "Scheduler":
        kind = ident.get("type") if isinstance(ident, dict) else type(ident).__name__
        raise UserError(f"no Dask scheduler at {address}: a Dask {kind} answers there, not a scheduler")


def _what_listens(host, port) -> str:
    """A guess at the service on ``host:port``: does it answer an HTTP request? (2 s at most)"""
    import socket
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2) as s:
            s.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
            head = s.recv(64)
    except OSError:
        return "it does not answer an HTTP request either"
    if head.startswith(b"HTTP/"):
        return "an HTTP server: " + head.split(b"\r\n")[0].decode("latin-1")
    return "it answers neither Dask nor HTTP" if head else "it does not answer an HTTP request either"


def _run_recording_warnings(fn, *args, **kwargs):
    """Run ``fn`` (on a worker) and return ``(result, warnings raised)`` so the client can show them.

    Its Numba kernels start on the worker's share of the cores (:class:`_Stages`); the worker thread's
    own count is put back after, for the chunk tasks it runs next."""
    import warnings

    import numba

    from bigclust._util.jit import follow_share
    from bigclust._util.progress import disabled
    before = numba.get_num_threads()
    follow_share()
    try:
        with warnings.catch_warnings(record=True) as caught, disabled():  # a worker's stderr is nobody's terminal
            warnings.simplefilter("always")
            out = fn(*args, **kwargs)
    finally:
        numba.set_num_threads(before)
    return out, [(w.message, w.category, w.filename, w.lineno) for w in caught]


class _Stages:
    """The in-memory stages running on a cluster at once (the method units' threads submit them side by
    side) and the cores they share: each stage's Numba kernels get ``cores // running`` threads.

    The workers of a LocalCluster run one task each, but Numba starts as many threads as the host has cores
    in every process: SK's and BBS-dual's solves side by side on two workers ran four threads on two cores.
    With one thread each while both run (the solve left alone takes both cores back at its next step),
    mnist-1m end to end took 113.9-119.4 s in 4 runs against 124.0-132.3 s in 5 runs before, on one host."""

    def __init__(self):
        import threading
        self.lock, self.running, self.cores = threading.Lock(), 0, {}
        self.fresh: set = set()   # names of the workers restarted for a stage that runs on them now
        self.restarted: set = set()   # addresses of the worker processes restarted so (ended, not died)

    def _cores(self, client):
        """Cores of the cluster's hosts (each host once), asked once per client."""
        address = client.scheduler.address
        if address not in self.cores:
            self.cores[address] = sum(dict(client.run(_host_cores).values()).values())
        return self.cores[address]

    def change(self, client, delta):
        with self.lock:
            self.running += delta
            if self.running > 0:
                from bigclust._util.jit import share_threads
                with contextlib.suppress(Exception):   # a lost cluster: its error is the one the stage says
                    client.run(share_threads, max(1, self._cores(client) // self.running))


def _host_cores():
    """``(host, cores this process may run on)``, on a worker."""
    import socket
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return socket.gethostname(), n


_STAGES = _Stages()


def _reemit(caught):
    """Warnings recorded on a worker, warned again here once each (the CLI shows each as one line)."""
    import warnings
    seen = set()
    for message, category, filename, lineno in caught:
        text = str(message)
        if (text, category) in seen:
            continue
        seen.add((text, category))
        warnings.warn_explicit(message if isinstance(message, Warning) else text, category, filename, lineno)


#: arrays above this many bytes go to the workers by ``client.scatter``, not inside the task: Dask warns on
#: every task graph above 10 MB ("Sending large graph"), e.g. the labels of 8.1M rows (62 MiB) a stage reads
SCATTER_BYTES = 1 << 20


def scattered(client, value, workers=None):
    """``value``, or a future of it on the cluster (on ``workers``, addresses: names are not resolved here) when
    it is an array of more than :data:`SCATTER_BYTES`."""
    import numpy as np
    if isinstance(value, np.ndarray) and value.nbytes > SCATTER_BYTES:
        return client.scatter(value, hash=False, workers=workers)
    return value


def _fresh_worker(client):
    """``(name, address)`` of an idle worker of the cluster, restarted by its nanny for a stage, or None (none
    idle, none with a nanny, or the restart failed).

    A worker keeps what its earlier tasks loaded -- compiled kernels, imported modules, its allocator's
    heap: after the ingest, PCA and kNN tasks of mnist-8m a worker sat at 406 MiB, a new one at 113, and
    the 8.1M-row BBS-dual embed stage peaked 280 MiB higher on the former.  Idle means no task running and
    no data held, so the restart loses nothing; the worker is reserved until :func:`_submit` is done."""
    with _STAGES.lock:
        try:
            workers = client.scheduler_info(n_workers=-1)["workers"]
            busy = {a for d in (client.processing(), client.has_what()) for a, keys in d.items() if keys}
        except Exception:   # a lost cluster: its error is the one the stage says
            return None
        idle = [(w["name"], a) for a, w in sorted(workers.items(), key=lambda aw: -aw[1]["metrics"]["memory"])
                if a not in busy and w.get("nanny") and w["name"] not in _STAGES.fresh]
        if not idle:
            return None
        name, address = idle[0]
        _STAGES.fresh.add(name)
        _STAGES.restarted.add(address)   # not a death (_WorkerDeaths)
    said = None   # no answer: as a restart that timed out
    with contextlib.suppress(Exception):
        said = client.restart_workers([name], raise_for_error=False).get(name)
        for _ in range(100 if said == "OK" else 0):   # the new process's address (scatter resolves no name)
            now = [a for a, w in client.scheduler_info(n_workers=-1)["workers"].items() if w["name"] == name]
            if now:
                return name, now[0]
            time.sleep(0.1)
    if said != "OK":   # the worker may be gone with its nanny (_replace); the stage runs where the scheduler says
        _replace(client, name)
    _STAGES.fresh.discard(name)
    return None


def _replace(client, name):
    """A new worker for ``name`` on the run's own LocalCluster after a failed restart: distributed removes a worker
    whose nanny did not stop in time (heavy load) and the nanny closes; it was idle, so closing it loses nothing."""
    cluster = getattr(client, "cluster", None)
    if name in getattr(cluster, "worker_spec", {}):   # a new name: the closed nanny stays in .workers a while
        cluster.worker_spec[f"{name}.{uuid.uuid4().hex[:8]}"] = cluster.worker_spec.pop(name)
        cluster.scale(len(cluster.worker_spec))   # the cluster's loop closes the old worker, starts the new


def _submit(client, fn, *args, fresh=False, **kwargs):
    """Run one in-memory stage: on a worker when a cluster is attached, else here.

    ``fresh``: on a worker restarted for it when one is idle (:func:`_fresh_worker`).
    Warnings the stage raises on the worker (a solver short of its tolerance,
    a disconnected graph) are sent back and warned again here.
    """
    if client is None:
        return fn(*args, **kwargs)
    from bigclust._util.progress import gather
    worker = _fresh_worker(client) if fresh else None
    where = {} if worker is None else {"workers": [worker[1]], "allow_other_workers": True}
    try:
        args = [scattered(client, a, where.get("workers")) for a in args]
        kwargs = {k: scattered(client, v, where.get("workers")) for k, v in kwargs.items()}
        name = getattr(fn, "__name__", "stage")   # the task is named after its stage, e.g. in _WorkerDeaths.say
        _STAGES.change(client, +1)   # after the restart: the new process gets its share of the cores too
        try:
            fut = client.submit(_run_recording_warnings, fn, *args, **kwargs, key=f"{name}-{uuid.uuid4().hex}",
                                **where)
            out, caught = gather(client, [fut], f"{name} on the cluster")[0]
        finally:
            _STAGES.change(client, -1)
    finally:
        _STAGES.fresh.discard(worker and worker[0])
    _reemit(caught)
    return out
