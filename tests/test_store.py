"""The store: atomic stage writes, ownership, leftovers of killed writers."""
import os

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust._util.errors import StoreError
from bigclust.pipeline.store import Store, read_matrix, write_csr, write_dense


def test_atomic_stage_write_and_read(tmp_path):
    from bigclust._util.hashing import stable_hash
    s = Store(tmp_path / "s.zarr", owner={"name": "a"})
    M = sp.random(30, 20, density=0.2, format="csr", random_state=0)
    k1 = stable_hash({"a": 1})  # a stage's key is the hash of its parameters
    with s.write("x", k1, {"params": {"a": 1}}) as g:
        write_dense(g, "A", np.arange(12.0).reshape(4, 3), chunk_rows=2)
        write_csr(g, "M", M)
        assert not s.has("x", k1)  # not visible before it is complete
    assert s.has("x", k1)
    g = s.open("x", k1)
    np.testing.assert_array_equal(read_matrix(g, "A"), np.arange(12.0).reshape(4, 3))
    assert (read_matrix(g, "M") != M).nnz == 0
    assert g.attrs["params"] == {"a": 1} and g.attrs["seconds"] >= 0


def test_failed_stage_leaves_nothing(tmp_path):
    s = Store(tmp_path / "s.zarr", owner={"name": "a"})
    with pytest.raises(RuntimeError, match="^boom$"):
        with s.write("x", "k", {}) as g:
            write_dense(g, "A", np.ones(3))
            raise RuntimeError("boom")
    assert not s.has("x", "k")
    assert not any((tmp_path / "s.zarr" / "tmp").iterdir())


def test_existing_instance_replaced_only_when_new_one_is_complete(tmp_path):
    s = Store(tmp_path / "s.zarr", owner={"name": "a"})
    with s.write("x", "k", {}) as g:
        write_dense(g, "A", np.ones(3))
    with pytest.raises(RuntimeError, match="^killed mid-write$"):
        with s.write("x", "k", {}) as g:
            write_dense(g, "A", np.zeros(3))
            raise RuntimeError("killed mid-write")
    np.testing.assert_array_equal(read_matrix(s.open("x", "k"), "A"), np.ones(3))
    with s.write("x", "k", {}) as g:
        write_dense(g, "A", np.zeros(3))
    np.testing.assert_array_equal(read_matrix(s.open("x", "k"), "A"), np.zeros(3))


def test_owner_mismatch_refused(tmp_path):
    s = Store(tmp_path / "s.zarr", owner={"name": "a"})
    with s.write("ingest", "k", {}) as g:  # data of "a" are in the store: its results must not be mixed in
        write_dense(g, "X", np.ones((2, 2)))
    with pytest.raises(StoreError, match="written for other data"):
        Store(tmp_path / "s.zarr", owner={"name": "b"})
    Store(tmp_path / "s.zarr", owner={"name": "b"}, force=True)


def test_store_without_finished_ingest_is_taken_over(tmp_path):
    # a first run that failed in its ingest, or was killed mid-ingest (a dead writer's tmp/ folder)
    Store(tmp_path / "s.zarr", owner={"name": "a"})
    (tmp_path / "s.zarr" / "tmp" / "ingest-k-999999999-deadbeef").mkdir(parents=True)
    s = Store(tmp_path / "s.zarr", owner={"name": "b"})
    assert dict(s.root.attrs)["owner"] == {"name": "b"}
    assert not (tmp_path / "s.zarr" / "tmp" / "ingest-k-999999999-deadbeef").exists()


def test_foreign_folder_refused(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "file.txt").write_text("mine")
    with pytest.raises(StoreError, match="not a bigclust store"):
        Store(tmp_path / "d", owner={"name": "a"})
    with pytest.raises(StoreError, match="no bigclust store"):
        Store(tmp_path / "missing")


def test_leftovers_of_dead_writer_are_removed(tmp_path):
    s = Store(tmp_path / "s.zarr", owner={"name": "a"})
    dead = tmp_path / "s.zarr" / "tmp" / "x-k-999999-deadbeef"
    dead.mkdir(parents=True)
    (dead / "junk").write_text("half")
    mine = tmp_path / "s.zarr" / "tmp" / f"x-k-{os.getpid()}-cafe0000"
    mine.mkdir()
    Store(tmp_path / "s.zarr", owner={"name": "a"})
    assert not dead.exists() and mine.exists()
    assert not s.has("x", "k")
