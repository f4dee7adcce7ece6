"""The zarr store: one directory holding every stage's named arrays.

Layout::

    <store>/                 zarr group; attrs: bigclust version, owner (the data it was made for)
      stages/<stage>/<key>/  one finished stage instance: arrays + provenance attrs
      tmp/<stage>-<key>-<pid>-<id>@<host>  a stage being written (never read; removed on an open once its
                             writer is dead)
      locks/                 who uses the store and computes which instance (bigclust.pipeline.locks)

A store is only ever a folder bigclust made: a zarr group it did not create (no ``bigclust_store``
attribute) is refused unless empty, and nothing in it is rewritten or deleted.  A damaged
``zarr.json`` of an instance is one line naming it and the ``store clean --stage`` command that drops it.

``key`` is a hash of the stage's parameters and of its inputs' keys, so a
stage instance is content-addressed: changing one sweep value creates a new
key only for the stages downstream of it, and nothing is overwritten.  A stage
is written under ``tmp/`` and renamed into place when complete (a rename within
one file system is atomic), so a ``kill -9`` mid-stage leaves no half-written
array where a reader would find it.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from bigclust._util.version import __version__
from bigclust._util.errors import StoreError
from bigclust.pipeline.locks import HOST_TAG as _HOST
from bigclust.pipeline.locks import pid_alive as _pid_alive
from bigclust.pipeline.memory import MemoryArray, opened

_ROOT_MARK = "bigclust_store"
_DROPPED = "dropped_arrays"
_MEMBERS = "members"


def disk_bytes(path: Path) -> int:
    """Bytes a file or folder takes on disk (allocated blocks where the OS says, else apparent sizes)."""
    path = Path(path)
    if path.is_file():
        st = path.stat()
        return st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                st = os.stat(os.path.join(root, f))
            except OSError:  # removed meanwhile
                continue
            total += st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size
    return total


def _zarr():
    import zarr  # heavy import, only when a store is touched
    return zarr


class Store:
    """A bigclust zarr store bound to one data set.

    Parameters
    ----------
    path : str or Path
        Directory of the store (created if missing).
    owner : dict
        What the store is for (the config's ``[data]`` section).  Opening an
        existing store made for other data raises :class:`StoreError` unless
        ``force`` is set, so results of another pipeline are never mixed in.
    force : bool
        Rebind a store made for other data to this owner (its stage results
        stay, they are content-addressed and cannot collide).
    """

    def __new__(cls, path=None, *args, **kwargs):
        # a stage function opens its store by path: an estimator's memory store while its fit runs
        mem = opened(path) if path is not None else None
        return mem if mem is not None else super().__new__(cls)

    def __init__(self, path, owner: dict | None = None, *, force: bool = False):
        zarr = _zarr()
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"store path {self.path} is a file, not a folder; choose another [store] path")
        meta = _root_meta(self.path)
        if meta is None:
            if owner is None:
                raise StoreError(f"{self.path} holds no bigclust store")
            if self.path.exists() and any(self.path.iterdir()):
                raise StoreError(f"store path {self.path} exists and is not a bigclust store; "
                                 "choose another [store] path")
        elif _ROOT_MARK not in meta.get("attributes", {}):
            if owner is None:
                raise StoreError(f"{self.path} is not a bigclust store")
            theirs = sorted(p.name for p in self.path.iterdir() if p.name != "zarr.json")
            if theirs or meta.get("attributes"):
                # a zarr group bigclust did not create: nothing of it may be rewritten or deleted
                # (tmp/ would be cleaned, the root attributes replaced), whatever --force says
                held = f"arrays or groups {', '.join(theirs[:5])}" if theirs else "attributes"
                raise StoreError(f"store path {self.path} is a zarr group that bigclust did not create (it holds "
                                 f"{held}); bigclust writes only into its own stores: choose another [store] path")
        for name in ("stages", "tmp", "locks"):   # bigclust's own folders: a file there is someone else's
            if (self.path / name).exists() and not (self.path / name).is_dir():
                raise StoreError(f"store {self.path} holds a file {name!r} where bigclust keeps a folder; "
                                 "move that file out of the store")
        try:
            self.root = zarr.open_group(str(self.path), mode="a")
        except zarr.errors.ContainsGroupError:   # another run created it since zarr looked: open that one
            self.root = zarr.open_group(str(self.path), mode="r+")
        attrs = dict(self.root.attrs)
        if owner is not None:
            owner_js = json.loads(json.dumps(owner, default=str))
            if _ROOT_MARK not in attrs:      # a new (or empty) store
                self.root.attrs.update({_ROOT_MARK: __version__, "owner": owner_js})
            elif attrs.get("owner") != owner_js:
                if not force and not self.stage_keys("ingest"):
                    # nothing was ever ingested (a first run that failed or was killed mid-ingest): no
                    # result of the other data can be mixed in, so the store is simply taken over
                    force = True
                if not force:
                    raise StoreError(
                        f"store {self.path} was written for other data ({_describe(attrs.get('owner'))}), "
                        f"not {_describe(owner_js)}; use another [store] path or --force")
                self.root.attrs["owner"] = owner_js
        self._clean_tmp()

    # -- stage instances -------------------------------------------------
    def _stage_dir(self, stage, key) -> Path:
        return self.path / "stages" / stage / key

    def has(self, stage: str, key: str) -> bool:
        """True when the stage instance is complete (present under ``stages/``) and not dropped."""
        d = self._stage_dir(stage, key)
        return (d / "zarr.json").exists() and not self.dropped(stage, key)

    def open(self, stage: str, key: str, *, dropped_ok: bool = False):
        """Open a finished stage instance read-only (a zarr group); ``dropped_ok``: also a dropped one
        (its attributes and array shapes only: never read its dropped arrays)."""
        if not (self.has(stage, key) or (dropped_ok and self.dropped(stage, key))):
            raise StoreError(f"stage {stage}/{key} is not in store {self.path}")
        d = self._stage_dir(stage, key)
        # the metadata of the instance and of its arrays (two levels: a CSR matrix is a group of arrays),
        # read now so that a damaged file is one line naming the instance, not a JSONDecodeError later
        for f in [d / "zarr.json", *d.glob("*/zarr.json"), *d.glob("*/*/zarr.json")]:
            try:
                meta = json.loads(f.read_text())
            except (OSError, ValueError) as e:
                why = getattr(e, "strerror", None) or "not valid JSON"
                raise damaged(self.path, stage, key, f"{f.relative_to(d)}: {why}") from None
            if not isinstance(meta, dict) or meta.get("node_type") not in ("group", "array"):
                raise damaged(self.path, stage, key, f"{f.relative_to(d)} is not zarr metadata")
            if f.parent == d:
                members = (meta.get("attributes") or {}).get(_MEMBERS, ())
                gone = [m for m in members if not (d / m / "zarr.json").exists()]
                if gone:   # a partly deleted instance (recorded since members were; older ones are not checked)
                    raise damaged(self.path, stage, key, f"its array {gone[0]!r} is missing")
        try:
            return _zarr().open_group(str(d), mode="r")
        except Exception as e:  # noqa: BLE001  (zarr's own errors for metadata it cannot parse)
            raise damaged(self.path, stage, key, f"{type(e).__name__}: {e}".splitlines()[0]) from None

    @contextlib.contextmanager
    def write(self, stage: str, key: str, attrs: dict):
        """Write a stage instance atomically.

        Yields a fresh zarr group under ``tmp/``; when the ``with`` block ends
        without an exception the provenance attributes (``attrs`` plus
        version, stage, key, seconds) are added and the group is renamed into
        ``stages/<stage>/<key>``.  On an exception the temporary group is
        deleted and the previous instance (if any) is untouched.  An existing
        instance of the same key (same parameters and inputs: only recomputed
        under ``--force``) is swapped out only after the new one is complete.
        """
        zarr = _zarr()
        if "params" in attrs:
            # a stage's key is the hash of its parameters (stages.stage_key): a writer whose parameters
            # differ (e.g. a task of a half-cancelled distributed run, resubmitted with other inputs)
            # must not commit under this key, or later runs would read the wrong results as finished
            from bigclust.pipeline.config import stable_hash
            got = stable_hash(attrs["params"])
            if got != key:
                raise StoreError(f"refusing to commit stage {stage}/{key} of store {self.path}: its parameters "
                                 f"hash to {got}, not to its key (a stale or mismatched task); nothing was "
                                 "written, re-run to recompute it")
        # the writer's pid and host: opening the store removes only the leftovers of dead writers
        tmp = self.path / "tmp" / f"{stage}-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}@{_HOST}"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        group = zarr.open_group(str(tmp), mode="w")
        # the stage's clock starts when its driver says so (``attrs["started"]``,
        # wall time, so it works across processes): the computation usually
        # happens before the results are written
        t0 = attrs.get("started", time.time())
        try:
            yield group
            meta = {"bigclust_version": __version__, "stage": stage, "key": key,
                    "seconds": time.time() - t0,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            meta.update(json.loads(json.dumps(attrs, default=str)))
            meta[_MEMBERS] = sorted(group.keys())   # what open() checks is all there (not part of the key)
            group.attrs.update(meta)
            final = self._stage_dir(stage, key)
            self.root.require_group(f"stages/{stage}")
            if final.exists():
                # move the old instance aside first so the rename below cannot fail
                old = final.with_name(final.name + f".old-{uuid.uuid4().hex[:8]}")
                os.replace(final, old)
                os.replace(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, final)
        except BaseException:
            _remove_settled(tmp)
            raise

    def written_here(self, stage: str, key: str) -> bool:
        """Whether ``stages/<stage>/<key>`` is an instance bigclust wrote (its attributes name it)."""
        try:
            attrs = json.loads((self._stage_dir(stage, key) / "zarr.json").read_text()).get("attributes", {})
            return attrs.get("stage") == stage and attrs.get("key") == key
        except (OSError, ValueError, AttributeError):
            return False

    def stage_keys(self, stage: str) -> list[str]:
        """Keys of the complete instances of ``stage`` (dropped ones included, see :meth:`drop`)."""
        d = self.path / "stages" / stage
        return sorted(p.name for p in d.iterdir() if (p / "zarr.json").exists()) if d.exists() else []

    def stages(self) -> list[str]:
        """Names of the stages with at least one instance directory."""
        d = self.path / "stages"
        return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.exists() else []

    def dropped(self, stage: str, key: str) -> bool:
        """True when the instance's large arrays were deleted (``[store] keep = "results"``)."""
        f = self._stage_dir(stage, key) / "zarr.json"
        if not f.exists():
            return False
        try:
            return bool(json.loads(f.read_text()).get("attributes", {}).get(_DROPPED))
        except (OSError, ValueError, AttributeError):   # damaged: open() says so, naming the instance
            return False

    def drop(self, stage: str, key: str, arrays) -> int:
        """Delete the data of ``arrays`` of a finished instance, keep its attributes; returns bytes freed.

        The instance then counts as missing (:meth:`has` is False, a run
        recomputes it) but its metadata stays readable, so a run whose later
        stages are all finished does not recompute it.  The mark is set before
        anything is deleted: a kill in between leaves a dropped instance.
        """
        if not self.has(stage, key):
            return 0
        d = self._stage_dir(stage, key)
        g = _zarr().open_group(str(d), mode="r+")
        g.attrs[_DROPPED] = sorted(arrays)
        freed = 0
        for name in arrays:
            node = d / name
            # an array's chunks are in sub-folders beside its zarr.json; a CSR group's parts are arrays
            for arr in [p for p in node.iterdir() if (p / "zarr.json").exists()] or [node]:
                for sub in arr.iterdir():
                    if sub.is_dir() and not (sub / "zarr.json").exists():
                        freed += disk_bytes(sub)
                        shutil.rmtree(sub, ignore_errors=True)
        return freed

    def remove(self, stage: str, key: str) -> tuple[int, OSError | None]:
        """Remove a stage instance; returns (bytes freed, the error that kept some of its files, or None).

        It is renamed aside first (``<key>.old-*``, one atomic step, so no reader finds it half deleted;
        the next open removes what is left of it) and then deleted.  An OSError of the rename (a
        read-only file system) is raised: then nothing was removed.
        """
        d = self._stage_dir(stage, key)
        size = disk_bytes(d)
        trash = d.with_name(f"{d.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(d, trash)
        errors = []
        shutil.rmtree(trash, onerror=lambda fn, path, exc: errors.append(exc[1]))
        left = disk_bytes(trash) if trash.exists() else 0
        return size - left, (errors[0] if errors else None)

    def _clean_tmp(self):
        # leftovers of a killed writer: ``<stage>-<key>-<pid>-<id>@<host>`` (no host: written before hosts
        # were recorded, taken as this host's).  A writer of this host is dead when its pid is; one of another
        # host (a worker of a distributed run) cannot be checked from here: left alone for a day
        # (anything else there is no writer's: left alone)
        tmp = self.path / "tmp"
        if tmp.is_dir():
            for p in tmp.iterdir():
                m = _TMP_NAME.search(p.name)
                if m is None or not p.is_dir():
                    continue
                if (m["host"] or _HOST) == _HOST and _pid_alive(int(m["pid"])):
                    continue
                if (m["host"] or _HOST) != _HOST and time.time() - _mtime(p) < _FOREIGN_TMP_SECONDS:
                    continue
                shutil.rmtree(p, ignore_errors=True)
        for old in (self.path / "stages").glob("*/*.old-*"):
            shutil.rmtree(old, ignore_errors=True)


#: ``tmp/`` names: ``<stage>-<key>-<pid>-<8 hex>[@<host>]``
_TMP_NAME = re.compile(r"-(?P<pid>\d+)-[0-9a-f]{8}(?:@(?P<host>.+))?$")
_FOREIGN_TMP_SECONDS = 86400.0


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def _root_meta(path: Path) -> dict | None:
    """The root ``zarr.json`` of a store path (None when there is none); one line when it is not a group's."""
    f = path / "zarr.json"
    if not f.exists():
        return None
    try:
        meta = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or "not valid JSON"
        raise StoreError(f"store {path}: its root metadata {f} is unreadable ({why}); the store cannot be used: "
                         "move it aside or choose another [store] path") from None
    if not isinstance(meta, dict) or meta.get("node_type") not in ("group", "array"):
        raise StoreError(f"store {path}: its root metadata {f} is not zarr metadata; the store cannot be used: "
                         "move it aside or choose another [store] path")
    if meta["node_type"] == "array":
        raise StoreError(f"store path {path} is a zarr array, not a bigclust store; choose another [store] path")
    return meta


def damaged(path, stage: str, key: str, why: str) -> StoreError:
    """The one-line error for a stage instance whose files are damaged, with the command that drops it."""
    return StoreError(f"stage {stage}/{key} of store {path} is damaged ({why}); drop it with "
                      f"`bigclust store clean {path} --stage {stage}/{key}` and run again to recompute it")


def _describe(owner) -> str:
    if not isinstance(owner, dict):
        return repr(owner)
    return ", ".join(f"{k}={v!r}" for k, v in owner.items() if v is not None)


# -- matrices in groups ------------------------------------------------------

def write_dense(group, name, X, *, chunk_rows=4096, dtype=None, compress=True):
    """Write a 2-D (or 1-D) ndarray / dask array as a row-chunked zarr array.

    A dask array is written block by block (``dask.array.to_zarr``), so it
    never has to be in memory as a whole.  ``compress=False`` stores raw
    chunks: kernel values hardly compress, and arrays that are streamed on
    every iteration should not pay a codec (they can then be read straight
    into a buffer, see :mod:`bigclust.normalize.ooc`).
    """
    dtype = np.dtype(dtype or X.dtype)
    chunks = (min(chunk_rows, max(1, X.shape[0])),) + tuple(X.shape[1:])
    kw = {} if compress else {"compressors": None}
    arr = group.create_array(name, shape=X.shape, chunks=chunks, dtype=dtype, fill_value=0, **kw)
    if hasattr(X, "dask") and hasattr(X, "compute"):   # a Dask array (dask itself imported only then)
        import dask.array as da
        # blocks aligned with the zarr chunks: every task writes whole chunks of its own, no lock needed
        from bigclust._util.progress import compute
        compute(da.store(X.astype(dtype).rechunk(chunks), arr, lock=False, compute=False), f"writing {name}")
    else:
        arr[...] = np.asarray(X, dtype=dtype)
    return arr


#: bytes per zarr chunk of a stored CSR matrix's ``data`` / ``indices`` / ``indptr``
CSR_CHUNK_BYTES = 1 << 20


def write_csr(group, name, M, *, dtype=None):
    """Write a scipy CSR matrix as a subgroup with ``data``, ``indices``, ``indptr``."""
    M = sp.csr_matrix(M)
    g = group.create_group(name)
    g.attrs.update({"format": "csr", "shape": list(M.shape)})
    for part, arr in (("data", M.data.astype(dtype or M.data.dtype)), ("indices", M.indices.astype(np.int64)),
                      ("indptr", M.indptr.astype(np.int64))):
        # 1 MiB chunks: a streamed row block decompresses only the chunks it overlaps, and 8 MiB
        # chunks made a streamed NMF pass over 20 Newsgroups in 8 blocks ~1.7x slower (``bigclust bench nmf``)
        a = g.create_array(part, shape=arr.shape, chunks=(max(1, min(arr.size, CSR_CHUNK_BYTES // arr.itemsize)),),
                           dtype=arr.dtype, fill_value=0)
        a[...] = arr
    return g


def _node(group, name):
    """``group[name]``; a missing array of a finished stage instance (a partly deleted one) is one line."""
    try:
        return group[name]
    except KeyError:
        where = Path(str(getattr(group.store, "root", ""))) / group.path
        if len(where.parts) > 3 and where.parts[-3] == "stages":
            raise damaged(where.parents[2], where.parts[-2], where.parts[-1], f"its array {name!r} is missing") \
                from None
        raise


def is_sparse(group, name) -> bool:
    node = _node(group, name)
    return node.attrs.get("format") == "csr"


def read_matrix(group, name, *, lazy=False):
    """Read a named matrix: ndarray, scipy CSR, or (``lazy=True``, dense only) a dask array."""
    node = _node(group, name)
    if node.attrs.get("format") == "csr":
        return sp.csr_matrix((node["data"][...], node["indices"][...], node["indptr"][...]),
                             shape=tuple(node.attrs["shape"]))
    if lazy:
        import dask.array as da
        # a memory store's array: the same chunks, hence the same Dask graph (and sums) as from zarr
        return da.from_array(node[...], chunks=node.chunks) if isinstance(node, MemoryArray) else da.from_zarr(node)
    return node[...]


def _remove_settled(path: Path, settle: float = 1.0):
    """Remove a failed write's folder, and again while it reappears for up to ``settle`` seconds: when one
    task of Dask's threaded scheduler raises, the others still running finish their chunk writes into it."""
    deadline = time.monotonic() + settle
    while True:
        shutil.rmtree(path, ignore_errors=True)
        if time.monotonic() >= deadline:
            return
        time.sleep(0.05)
        if not path.exists():
            time.sleep(0.1)          # a last chunk may still be on its way
            if not path.exists():
                return

