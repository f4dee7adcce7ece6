"""Lock files: which processes are writing an output folder, using a store, or computing a stage instance.

A lock is named inside a lock folder (``<output>/.bigclust-lock/``, ``<store>/locks/``); each process that
holds it has its own holder file ``<name>@<host>-<pid>-<id>.lock`` whose JSON says who it is (pid, host,
start time, the config, and an ``ident``).  A *shared* lock admits every holder of the same ``ident``
(runs of one config writing one output folder: they write the same files), an exclusive one admits a
single holder (a stage instance is computed once; the others wait and reuse it).

A holder is stale, and removed, when its process cannot be running any more:

* on this host: its pid is not alive (``kill -0``);
* on another host (its pid cannot be checked from here): its file was not touched for
  :data:`STALE_SECONDS`.  A live holder touches its files every :data:`BEAT_SECONDS` (a daemon thread),
  so only a dead or frozen process lets its lock age.

Every change of a lock folder happens under an exclusive ``flock`` of its ``.guard`` file (where the file
system offers ``flock``; elsewhere best effort), so two processes never both find a lock free; the folder
is removed when its last holder leaves.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
import uuid
from pathlib import Path

from bigclust._util.errors import StoreError

#: the lock folder inside an output folder (never a result: ``--replace`` leaves it)
OUT_LOCK = ".bigclust-lock"
#: a holder on another host whose file is older than this is taken for dead
STALE_SECONDS = 600.0
#: how often a live process touches the holder files it owns
BEAT_SECONDS = 60.0

HOST = socket.gethostname()
#: the host as it appears in file names
HOST_TAG = re.sub(r"[^\w.-]", "_", HOST)
_GUARD = ".guard"
_held: set[Path] = set()
_held_lock = threading.Lock()
_beat: threading.Thread | None = None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host is running (ours always is)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid > 0
    return True


def describe(holder: dict) -> str:
    """``pid 123 on host h since 12:00:01 (run of c.toml)`` for a message."""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started", 0)))
    what = f" ({holder['what']})" if holder.get("what") else ""
    return f"pid {holder.get('pid')} on host {holder.get('host')} since {since}{what}"


def stale(holder: dict, age: float) -> bool:
    """A holder whose process cannot be running: dead pid on this host, or not refreshed for too long elsewhere."""
    if holder.get("unreadable"):
        return True
    if holder.get("host") == HOST and isinstance(holder.get("pid"), int):
        return not pid_alive(holder["pid"])
    return age > STALE_SECONDS


class Held:
    """A lock this process holds; :meth:`release` gives it back (and removes the folder when it was the last)."""

    def __init__(self, path: Path):
        self.path = path
        with _held_lock:
            _held.add(path)
        _start_beat()

    def release(self):
        with _held_lock:
            _held.discard(self.path)
        with _guarded(self.path.parent, create=False) as ok:
            if ok:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                _remove_if_unused(self.path.parent)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def try_lock(folder, name: str, ident: str, *, shared: bool, what: str = "") -> tuple[Held | None, dict | None]:
    """Take lock ``name`` in ``folder``: ``(held, None)``, or ``(None, holder)`` naming a live holder in the way.

    Stale holders (see the module docstring) are removed on the way.
    """
    folder = Path(folder)
    with _guarded(folder, create=True):
        for path, holder in _holders(folder, name):
            if stale(holder, time.time() - _mtime(path)):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            elif not shared or holder.get("ident") != ident:
                return None, holder
        me = {"pid": os.getpid(), "host": HOST, "started": time.time(), "ident": ident, "what": what}
        path = folder / f"{name}@{HOST_TAG}-{os.getpid()}-{uuid.uuid4().hex[:8]}.lock"
        tmp = folder / f".{path.name}.tmp"
        tmp.write_text(json.dumps(me))
        os.replace(tmp, path)   # never half-written where another process reads it
        return Held(path), None


def holders(folder, name: str) -> list[dict]:
    """The live holders of lock ``name`` (stale ones left alone: this only looks)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return [h for p, h in _holders(folder, name) if not stale(h, time.time() - _mtime(p))]


def _holders(folder: Path, name: str):
    for p in sorted(folder.glob(f"{name}@*.lock")):
        try:
            h = json.loads(p.read_text())
            yield p, (h if isinstance(h, dict) else {})
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            # holders are written aside and renamed into place, so an unreadable one is no holder's: stale
            yield p, {"unreadable": True}


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


@contextlib.contextmanager
def _guarded(folder: Path, *, create: bool):
    """Hold the folder's ``.guard`` flock; yields False when the folder is gone (``create=False``).

    The guard is unlinked with the folder by the last holder, so after taking the flock we check the
    file we locked is still the one at that path, and start again otherwise.
    """
    try:
        import fcntl
    except ImportError:   # no flock here (Windows): best effort
        fcntl = None
    while True:
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(folder / _GUARD, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:
            if create:
                continue      # removed by its last holder between mkdir and open
            yield False
            return
        try:
            if fcntl is not None:
                with contextlib.suppress(OSError):   # a file system without flock (some NFS): best effort
                    fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.fstat(fd).st_ino == os.stat(folder / _GUARD).st_ino
            except FileNotFoundError:
                same = False
            if same:
                yield True
                return
        finally:
            os.close(fd)


def _remove_if_unused(folder: Path):
    """Remove a lock folder holding nothing but its guard (called under the guard)."""
    with contextlib.suppress(OSError):
        if all(p.name == _GUARD for p in folder.iterdir()):
            (folder / _GUARD).unlink()
            folder.rmdir()


def _start_beat():
    global _beat
    with _held_lock:
        if _beat is not None and _beat.is_alive():
            return
        _beat = threading.Thread(target=_touch_forever, name="bigclust-lock-beat", daemon=True)
        _beat.start()


def _touch_forever():
    while True:
        time.sleep(BEAT_SECONDS)
        with _held_lock:
            paths = list(_held)
        for p in paths:
            with contextlib.suppress(OSError):
                os.utime(p)


# -- the locks a run takes ------------------------------------------------------------------------------

@contextlib.contextmanager
def hold_output(out_dir, ident: str, what: str):
    """Hold an output folder for a run of the config whose hash is ``ident``.

    Runs of the same config share it (they write the same files); a live run of another config makes this
    one a :class:`StoreError`.  A folder this creates for the lock is removed again if nothing was written.
    """
    out_dir = Path(out_dir)
    created = not out_dir.exists()
    held, holder = try_lock(out_dir / OUT_LOCK, "output", ident, shared=True, what=what)
    if held is None:
        raise StoreError(f"output folder {out_dir} is being written by a run of another config ({describe(holder)});"
                         " wait for it to finish, or choose another --out")
    try:
        yield held
    finally:
        held.release()
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()   # only when empty: a run refused before it wrote anything leaves nothing


@contextlib.contextmanager
def use_store(store_path, what: str):
    """Mark a store as used by a run (shared by every run), so ``bigclust store clean`` waits for them."""
    held, holder = try_lock(Path(store_path) / "locks", "use", "run", shared=True, what=what)
    if held is None:
        raise StoreError(f"store {store_path} is being cleaned ({describe(holder)}); run again when it has finished")
    try:
        yield held
    finally:
        held.release()


@contextlib.contextmanager
def computing(store, stage: str, key: str, log, label: str, *, force: bool = False, poll: float = 1.0):
    """Hold stage instance ``stage/key`` of ``store`` while this process computes it; yields True to skip it.

    One process computes an instance at a time: a run that finds another live process computing it waits
    (saying so once) and skips it when another process finished it meanwhile (runs of one config started
    together thus compute each instance once).  The caller found it missing (or ``force``: recomputes it),
    so it is in the store now only if another run wrote it since.
    """
    waited = False
    while True:
        held, holder = try_lock(store.path / "locks", f"{stage}-{key}", "", shared=False, what=label.strip())
        if held is not None:
            break
        if not waited:
            log(f"  {label}: being computed by {describe(holder)}; waiting for it")
            waited = True
        time.sleep(poll)
    try:
        skip = (waited or not force) and store.has(stage, key)
        if skip:
            log(f"  {label}: finished by the other run, skipped")
        yield skip
    finally:
        held.release()
