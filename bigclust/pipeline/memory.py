"""A store held in memory: the estimators' path for in-memory data that fits, without zarr and without files.

An estimator's fit on a NumPy or scipy.sparse X used to ingest X into a zarr store in a temporary folder,
run the stages there and read the results back: for data of a few thousand rows, writing and reading the
store and importing zarr and Dask cost more than the clustering.  :class:`MemoryStore` has the part of
:class:`bigclust.pipeline.store.Store`'s interface the stages use (``open``, ``write``, ``has``, groups with
``attrs``, ``create_array``, ``create_group``, arrays with ``shape``, ``dtype``, ``chunks`` and NumPy
indexing), so the very same stage functions run on it, and their arrays are the same to the bit.

A memory store is registered under a path of its own (``memory:<id>``) while :func:`memory_store` is
open: ``Store(path)`` inside a stage function then returns it (the stages receive a store path, as
they do when shipped to a Dask worker).  Out-of-core code needs files (chunk files read straight into
buffers, resumable scratch folders): it meets :class:`NeedsDisk`, and the estimator runs again on a
temporary zarr store -- its own check (:mod:`bigclust.estimators._base`) keeps that for data beyond
``max_memory``.  A finished array is read-only, so a stage that changed what it read in place (which a
zarr read, a fresh copy, would allow) is an error here rather than a silent difference.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import time

import numpy as np

from bigclust._util.errors import StoreError
from bigclust._util.version import __version__

#: the memory stores open now, by path
_OPEN: dict = {}
_IDS = itertools.count()
PREFIX = "memory:"


class NeedsDisk(AttributeError):
    """Something only a store on disk has was asked of a memory store (an out-of-core step)."""


def is_memory_path(path) -> bool:
    return str(path).startswith(PREFIX)


def opened(path):
    """The memory store registered under ``path``, or None."""
    return _OPEN.get(str(path))


class MemoryArray:
    """A dense array of a memory store: NumPy indexing, ``resize`` that grows in place (amortised)."""

    def __init__(self, shape, chunks=None, dtype=np.float64, fill_value=0, **_):
        self.dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        self._buf = np.full(shape, fill_value, dtype=self.dtype) if fill_value else np.zeros(shape, self.dtype)
        self._n = shape[0] if shape else 0
        self.chunks = tuple(int(c) for c in chunks) if chunks is not None else shape
        self.attrs: dict = {}

    @property
    def _data(self):
        return self._buf[:self._n] if self._buf.ndim else self._buf

    @property
    def shape(self):
        return self._data.shape

    @property
    def ndim(self):
        return self._buf.ndim

    @property
    def size(self):
        return self._data.size

    @property
    def nbytes(self):
        return self._data.nbytes

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, idx):
        return self._data[idx]

    def __setitem__(self, idx, value):
        self._data[idx] = value

    def __array__(self, dtype=None, copy=None):
        return self._data if dtype is None else self._data.astype(dtype)

    def resize(self, shape):
        """Rows may grow (doubling the buffer as needed: an ingest appends chunk after chunk); columns stay."""
        shape = tuple(int(s) for s in shape)
        if shape[1:] != self._buf.shape[1:]:
            raise ValueError(f"a memory array keeps its columns: {self._buf.shape} -> {shape}")
        if shape[0] > self._buf.shape[0]:
            grown = np.zeros((max(shape[0], 2 * self._buf.shape[0]),) + shape[1:], self.dtype)
            grown[:self._n] = self._buf[:self._n]
            self._buf = grown
        self._n = shape[0]

    def freeze(self, write=False):
        """Trim the buffer and make it read-only (a finished stage's array); ``write=True``: writable again."""
        if self._buf.ndim and self._buf.shape[0] != self._n:
            self._buf = self._buf[:self._n].copy()
        self._buf.setflags(write=write)

    def __getattr__(self, name):   # zarr's own attributes (store, metadata, path): an out-of-core step
        if name.startswith("__"):
            raise AttributeError(name)
        raise NeedsDisk(f"a memory store's array has no {name!r} (that step needs a store on disk)")


class MemoryGroup:
    """A group of a memory store: named arrays and subgroups (a CSR matrix) and ``attrs``."""

    def __init__(self, path=""):
        self.attrs: dict = {}
        self.path = path
        self._members: dict = {}

    def create_array(self, name, *, shape, dtype, chunks=None, fill_value=0, overwrite=False, **_):
        if name in self._members and not overwrite:
            raise StoreError(f"array {name!r} exists")
        arr = self._members[name] = MemoryArray(shape, chunks, dtype, fill_value)
        return arr

    def create_group(self, name):
        g = self._members[name] = MemoryGroup(f"{self.path}/{name}")
        return g

    def require_group(self, name):
        return self._members[name] if name in self._members else self.create_group(name)

    def __getitem__(self, name):
        return self._members[name]

    def __contains__(self, name):
        return name in self._members

    def __delitem__(self, name):
        del self._members[name]

    def __iter__(self):
        return iter(self._members)

    def keys(self):
        return self._members.keys()

    def array_keys(self):
        return [k for k, v in self._members.items() if isinstance(v, MemoryArray)]

    def group_keys(self):
        return [k for k, v in self._members.items() if isinstance(v, MemoryGroup)]

    def freeze(self, write=False):
        for v in self._members.values():
            v.freeze(write)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NeedsDisk(f"a memory store's group has no {name!r} (that step needs a store on disk)")


class MemoryStore:
    """What the stages use of a :class:`~bigclust.pipeline.store.Store`, in memory (see the module docstring)."""

    in_memory = True

    def __init__(self, path):
        self.path = path
        self._stages: dict = {}

    def has(self, stage: str, key: str) -> bool:
        return (stage, key) in self._stages

    def dropped(self, stage: str, key: str) -> bool:
        return False

    def stage_keys(self, stage: str) -> list:
        return sorted(k for s, k in self._stages if s == stage)

    def stages(self) -> list:
        return sorted({s for s, _ in self._stages})

    def open(self, stage: str, key: str, *, dropped_ok: bool = False):
        if (stage, key) not in self._stages:
            raise StoreError(f"stage {stage}/{key} is not in the memory store")
        return self._stages[(stage, key)]

    @contextlib.contextmanager
    def write(self, stage: str, key: str, attrs: dict):
        """A fresh group, kept as ``stage/key`` with the provenance attributes once the block ends without an
        exception (as :meth:`Store.write`; attributes go through JSON as zarr's do: tuples come back lists)."""
        group = MemoryGroup(f"stages/{stage}/{key}")
        t0 = attrs.get("started", time.time())
        yield group
        meta = {"bigclust_version": __version__, "stage": stage, "key": key, "seconds": time.time() - t0,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **attrs, "members": sorted(group.keys())}
        group.attrs.update(meta)
        group.freeze()   # the attributes of the group and of its CSR subgroups, as zarr gives them back
        for g in [group, *(group[name] for name in group.group_keys())]:
            g.attrs = json.loads(json.dumps(g.attrs, default=str))
        self._stages[(stage, key)] = group

    def thaw(self):
        """Every array writable again: the run is over, and what is read now is handed to the caller (as a
        zarr read is, a copy of its own) without a copy."""
        for group in self._stages.values():
            group.freeze(write=True)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NeedsDisk(f"a memory store has no {name!r} (that step needs a store on disk)")


@contextlib.contextmanager
def memory_store():
    """A memory store registered under a ``memory:<id>`` path for the block, forgotten afterwards."""
    store = MemoryStore(f"{PREFIX}{next(_IDS)}")
    _OPEN[store.path] = store
    try:
        yield store
    finally:
        _OPEN.pop(store.path, None)
