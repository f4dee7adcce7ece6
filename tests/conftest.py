"""Shared fixtures: small synthetic data, config writing, the real-data root, reading a Source whole."""
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp


@pytest.fixture(scope="session")
def data_root():
    """``$BIGCLUST_DATA`` (the shared real data sets), or skip."""
    root = os.environ.get("BIGCLUST_DATA")
    if not root or not Path(root).is_dir():
        pytest.skip("real data not available: set BIGCLUST_DATA to the shared data folder")
    return Path(root).resolve()   # absolute: a config in a temporary folder resolves a relative root against itself


@pytest.fixture(autouse=True)
def _environ_unchanged():
    """Each test leaves ``os.environ`` as it found it: a LocalCluster a test starts sets OMP/MKL/OPENBLAS_NUM_THREADS
    = 1 in this process (dask/distributed#6749), which later tests' subprocesses would inherit."""
    from bigclust.pipeline.scheduler import keep_environ
    with keep_environ():
        yield


def blobs(n=150, k=3, d=5, seed=0, sep=6.0):
    """Well separated Gaussian blobs with positive coordinates (L2-normalisable)."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(0, sep, (k, d)) + sep * np.eye(k, d)
    y = np.arange(n) % k
    X = centers[y] + rng.normal(0, 0.3, (n, d))
    return np.abs(X).astype(np.float32) + 0.01, y


def docs(n=180, k=3, d=24, seed=0):
    """Non-negative 'documents': each class uses its own block of terms, plus sparse noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % k
    X = rng.random((n, d)) * (rng.random((n, d)) < 0.15)
    for c in range(k):
        X[y == c, c * (d // k):(c + 1) * (d // k)] += rng.random(((y == c).sum(), d // k)) * 2
    return X, y


def collect(src, chunk_rows):
    """Concatenate all chunks, checking every chunk but the last is full."""
    chunks = list(src.iter_chunks(chunk_rows))
    assert all(X.shape[0] == chunk_rows for X, _ in chunks[:-1])
    assert 0 < chunks[-1][0].shape[0] <= chunk_rows
    for X, y in chunks:
        assert X.dtype == np.float32 and y.dtype == np.int64
    Xs = [X for X, _ in chunks]
    X = sp.vstack(Xs, format="csr") if sp.issparse(Xs[0]) else np.concatenate(Xs)
    return X, np.concatenate([y for _, y in chunks])


@pytest.fixture
def blob_file(tmp_path):
    X, y = blobs()
    p = tmp_path / "blobs.npz"
    np.savez(p, X=X, y=y)
    return p


@pytest.fixture
def small(tmp_path):
    """A 60-row, 3-class blob file (fast end to end)."""
    X, y = blobs(n=60)
    p = tmp_path / "small.npz"
    np.savez(p, X=X, y=y)
    return p


def write_config(folder: Path, data_path, extra: str = "", name="run.toml", **sections):
    """A minimal valid config over ``data_path`` in ``folder``; ``extra`` TOML is appended."""
    body = f"""
    [data]
    path = "{data_path}"

    [affinity]
    gamma = 1.0

    [method]
    names = ["kmeans", "ra", "ncut"]

    [cluster]
    n_init = 5

    [store]
    path = "store.zarr"

    [output]
    dir = "out"
    plots = false
    """
    extra = textwrap.dedent(extra)
    # the tests were written for unit rows (the default before issue 26): stated, in extra's [preprocess] if any
    if "\n[preprocess]\n" in "\n" + extra:
        extra = ("\n" + extra).replace("\n[preprocess]\n", "\n[preprocess]\nl2_normalize = true\n", 1) \
            if "l2_normalize" not in extra else extra
    else:
        extra = "\n[preprocess]\nl2_normalize = true\n" + extra
    text = textwrap.dedent(body) + extra
    p = folder / name
    p.write_text(text)
    return p


@pytest.fixture
def make_config(tmp_path):
    def _make(data_path, extra="", name="run.toml"):
        return write_config(tmp_path, data_path, extra, name)
    return _make
