"""The estimators' in-memory path: NumPy / scipy.sparse X that fits runs the same stages on a memory store
(no zarr store, no files, neither zarr nor Dask imported), with the same labels and fitted arrays to the bit
as on a temporary zarr store; data beyond ``max_memory``, Dask arrays and steps that need files keep the store.
"""
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.estimators import NMFClustering, SpectralClustering, SubspaceClustering, _base

from conftest import blobs, docs

FITTED = ("labels_", "embedding_", "affinity_matrix_", "inertia_", "n_iter_", "normalization_info_", "gamma_",
          "components_", "document_factor_", "objective_", "label_distributions_", "classes_")


def _subspaces(n_per=20, k=3, d=12, dim=2, seed=0):
    """Samples of k random ``dim``-dimensional subspaces of R^d, and their classes."""
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(size=(n_per, dim)) @ rng.normal(size=(dim, d)) for _ in range(k)])
    return X, np.repeat(np.arange(k), n_per)


def _fit_both(monkeypatch, make, X, y=None):
    """The fit on a memory store (a fit that took the store path would fail), then on a temporary zarr store."""
    def no_disk(*a, **k):
        raise AssertionError("took the store path")

    with monkeypatch.context() as m:
        m.setattr(_base, "_run_on_disk", no_disk)
        mem = make().fit(X, y)
    with monkeypatch.context() as m:
        m.setattr(_base, "IN_MEMORY", False)
        disk = make().fit(X, y)
    return mem, disk


def _assert_same(a, b):
    for name in FITTED:
        if not hasattr(b, name):
            continue
        va, vb = getattr(a, name), getattr(b, name)
        if sp.issparse(vb):
            assert sp.issparse(va) and (va != vb).nnz == 0, name
            np.testing.assert_array_equal(va.toarray(), vb.toarray())
        elif isinstance(vb, np.ndarray):
            np.testing.assert_array_equal(va, vb, err_msg=name)
            assert va.dtype == vb.dtype and va.flags.writeable, name
        elif isinstance(vb, float) and vb != vb:
            assert va != va, name
        else:
            assert va == vb, name


@pytest.mark.parametrize("kw", [
    dict(normalization="bbs"), dict(normalization="bbs", solver="alternating", n_iter=50),
    dict(normalization="sk", n_iter=100), dict(normalization="ncut"), dict(normalization="ncut", l2_normalize=True),
    dict(normalization="ncut", affinity="knn", n_neighbors=30), dict(normalization="ra", affinity="cosine")])
def test_spectral_in_memory_equals_the_store(monkeypatch, kw):
    X, _ = blobs(n=160, k=4, d=6, seed=3, sep=3.0)
    mem, disk = _fit_both(monkeypatch, lambda: SpectralClustering(4, random_state=5, n_init=3, **kw), X)
    _assert_same(mem, disk)


@pytest.mark.parametrize("kw, sparse", [
    (dict(), False), (dict(), True), (dict(solver="hals", init="nndsvd"), True), (dict(ncw=True), True),
    (dict(model="bilinear", kernel="gaussian"), False), (dict(model="bilinear"), True)])
def test_nmf_in_memory_equals_the_store(monkeypatch, kw, sparse):
    X, _ = docs(n=90, k=3, d=24, seed=1)
    X[7] = 0   # an all-zero document: left out of the run and labelled -1 on both paths
    X = sp.csr_matrix(X) if sparse else X
    with pytest.warns(RuntimeWarning, match="all-zero"):
        mem, disk = _fit_both(monkeypatch, lambda: NMFClustering(3, random_state=2, n_init=2, max_iter=60, **kw), X)
    assert mem.labels_[7] == -1
    _assert_same(mem, disk)


@pytest.mark.parametrize("kw", [dict(), dict(regularizer="l2", n_neighbors=6), dict(regularizer="l1", pca=5)])
def test_subspace_in_memory_equals_the_store(monkeypatch, kw):
    X, _ = _subspaces()
    mem, disk = _fit_both(monkeypatch, lambda: SubspaceClustering(3, random_state=0, n_init=3, **kw), X)
    _assert_same(mem, disk)


def test_semi_supervised_subspace_in_memory_equals_the_store(monkeypatch):
    X, y = _subspaces(seed=4)
    part = np.full_like(y, -1)
    part[::5] = y[::5]
    mem, disk = _fit_both(monkeypatch, lambda: SubspaceClustering(3, random_state=0, n_neighbors=6), X, part)
    _assert_same(mem, disk)


def test_data_beyond_max_memory_keep_the_store():
    # 300 x 300 float64 K and G = 1.44 MB > 500 KB: the kernel is normalised out of core, which needs files
    X, _ = blobs(n=300, k=3, d=5, seed=2)
    kw = dict(n_clusters=3, gamma=2.0, normalization="bbs", solver="alternating", n_iter=40, random_state=0, n_init=3)
    mem = SpectralClustering(**kw).fit(X)
    ooc = SpectralClustering(max_memory="500KB", **kw).fit(X)
    assert ooc.normalization_info_["out_of_core"] and not mem.normalization_info_["out_of_core"]
    np.testing.assert_array_equal(mem.labels_, ooc.labels_)


def test_a_step_that_needs_files_runs_again_on_the_store(monkeypatch):
    # the memory check overruled: the out-of-core step meets the memory store, and the fit goes to disk
    X, _ = blobs(n=300, k=3, d=5, seed=2)
    kw = dict(n_clusters=3, gamma=2.0, normalization="bbs", solver="alternating", n_iter=40, random_state=0, n_init=3)
    monkeypatch.setattr(_base, "_in_memory", lambda *a: True)
    ooc = SpectralClustering(max_memory="500KB", **kw).fit(X)
    monkeypatch.setattr(_base, "IN_MEMORY", False)
    monkeypatch.setattr(_base, "_in_memory", lambda *a: False)
    ref = SpectralClustering(max_memory="500KB", **kw).fit(X)
    assert ooc.normalization_info_["out_of_core"]
    np.testing.assert_array_equal(ooc.labels_, ref.labels_)


def test_a_fresh_process_fits_without_zarr_or_dask():
    code = ("import sys, numpy as np, bigclust\n"
            "rng = np.random.default_rng(0)\n"
            "X = np.abs(np.vstack([rng.normal(c, 0.3, size=(30, 4)) for c in (0.0, 3.0, 6.0)]))\n"
            "bigclust.NMFClustering(3, random_state=0, max_iter=20, n_init=1).fit(X)\n"
            "bigclust.SpectralClustering(3, random_state=0, n_init=2).fit(X)\n"
            "bigclust.SubspaceClustering(3, random_state=0, n_init=2, n_neighbors=5).fit(X)\n"
            "print(sorted(m for m in ('dask', 'zarr', 'distributed') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
