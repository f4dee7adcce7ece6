"""The zarr store: one directory holding every stage's named arrays.

Layout::

    <store>/                 zarr group; attrs: bigclust version, owner (the data it was made for)
      stages/<stage>/<key>/  one finished stage instance: arrays + provenance attrs
      tmp/<stage>-<key>-<id> a stage being written (never read; removed on the next open)

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
import shutil
import time
import uuid
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from bigclust._util.version import __version__
from bigclust._util.errors import StoreError

_ROOT_MARK = "bigclust_store"
_DROPPED = "dropped_arrays"


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

    def __init__(self, path, owner: dict | None = None, *, force: bool = False):
        zarr = _zarr()
        self.path = Path(path)
        if owner is None and not (self.path / "zarr.json").exists():
            raise StoreError(f"{self.path} holds no bigclust store")
        if self.path.exists() and not (self.path / "zarr.json").exists():
            if any(self.path.iterdir()):
                raise StoreError(f"store path {self.path} exists and is not a bigclust store; "
                                 "choose another [store] path")
        self.root = zarr.open_group(str(self.path), mode="a")
        attrs = dict(self.root.attrs)
        if owner is not None:
            owner_js = json.loads(json.dumps(owner, default=str))
            if _ROOT_MARK not in attrs:
                if len(list(self.root.group_keys())) and not force:
                    raise StoreError(f"store {self.path} was not written by bigclust; choose another [store] path")
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
        elif _ROOT_MARK not in attrs:
            raise StoreError(f"{self.path} is not a bigclust store")
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
        return _zarr().open_group(str(self._stage_dir(stage, key)), mode="r")

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
        tmp = self.path / "tmp" / f"{stage}-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
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
            shutil.rmtree(tmp, ignore_errors=True)
            raise

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
        except (OSError, ValueError):
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

    def _clean_tmp(self):
        # leftovers of a killed writer; only our own pid could still be writing
        tmp = self.path / "tmp"
        if tmp.exists():
            for p in tmp.iterdir():
                parts = p.name.rsplit("-", 2)
                if len(parts) == 3 and parts[1].isdigit() and _pid_alive(int(parts[1])):
                    continue
                shutil.rmtree(p, ignore_errors=True)
        for old in (self.path / "stages").glob("*/*.old-*"):
            shutil.rmtree(old, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    import dask.array as da

    dtype = np.dtype(dtype or X.dtype)
    chunks = (min(chunk_rows, max(1, X.shape[0])),) + tuple(X.shape[1:])
    kw = {} if compress else {"compressors": None}
    arr = group.create_array(name, shape=X.shape, chunks=chunks, dtype=dtype, fill_value=0, **kw)
    if isinstance(X, da.Array):
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


def is_sparse(group, name) -> bool:
    node = group[name]
    return node.attrs.get("format") == "csr"


def read_matrix(group, name, *, lazy=False):
    """Read a named matrix: ndarray, scipy CSR, or (``lazy=True``, dense only) a dask array."""
    node = group[name]
    if node.attrs.get("format") == "csr":
        return sp.csr_matrix((node["data"][...], node["indices"][...], node["indptr"][...]),
                             shape=tuple(node.attrs["shape"]))
    if lazy:
        import dask.array as da
        return da.from_zarr(node)
    return node[...]
