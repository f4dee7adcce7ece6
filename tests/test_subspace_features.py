"""Scattering features (paper 002's MNIST features, optional extra kymatio): the feature map, chunking, the
missing-extra error, the [aksc] keys (and that adding them kept the config hashes and store keys)."""
import dataclasses
import sys

import numpy as np
import pytest

from bigclust.pipeline import methods
from bigclust._util.errors import DataError, UserError
from bigclust.subspace import features as feat


def _digits(n=6, seed=0):
    """28x28 'images': a bright stroke (bar at a random place and orientation) on a black background, as rows."""
    rng = np.random.default_rng(seed)
    imgs = np.zeros((n, 28, 28))
    for i in range(n):
        a = rng.integers(6, 22)
        if i % 2:
            imgs[i, 4:24, a - 1:a + 2] = 1.0
        else:
            imgs[i, a - 1:a + 2, 4:24] = 1.0
        imgs[i] += 0.05 * rng.random((28, 28))
    return imgs.reshape(n, 784), imgs


def _no_kymatio(monkeypatch):
    for name in [m for m in sys.modules if m == "kymatio" or m.startswith("kymatio.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "kymatio", None)     # `import kymatio...` now raises ImportError
    feat._transform.cache_clear()


def test_missing_kymatio_is_one_line_user_error(monkeypatch):
    """Runs without kymatio: the error names the extra to install, before any work."""
    _no_kymatio(monkeypatch)
    X, _ = _digits(2)
    for call in (lambda: feat.scattering_features(X, (28, 28)),
                 lambda: next(feat.scattering_chunks(X, (28, 28))),
                 lambda: feat.image_features(X, None, "scattering", image_shape=(28, 28), pca=0)):
        with pytest.raises(UserError, match=r"pip install 'bigclust\[scattering\]'") as e:
            call()
        assert "\n" not in str(e.value)
    feat._transform.cache_clear()


def test_feature_count_and_padding():
    assert feat.padded_shape((28, 28)) == (32, 32) and feat.padded_shape((32, 32)) == (32, 32)
    assert feat.n_scattering_features((28, 28)) == 217 * 4 * 4 == 3472
    assert feat.padded_shape((28, 30), J=2) == (28, 32)        # multiples of 2^J
    assert feat.n_scattering_features((28, 30), J=2, L=4) == (1 + 2 * 4 + 16) * 7 * 8


def test_bad_input_is_one_line():
    X, _ = _digits(2)
    with pytest.raises(DataError, match="784 features"):
        feat.scattering_features(X, (28, 27))
    with pytest.raises(DataError, match="image data"):
        feat.image_features(X, None, "scattering", image_shape=None)
    with pytest.raises(UserError, match="features="):
        feat.image_features(X, None, "wavelets")
    with pytest.raises(UserError, match="chunk_rows"):
        feat.scattering_features(X, (28, 28), chunk_rows=0)
    X[0, 5] = np.nan
    pytest.importorskip("kymatio.scattering2d.frontend.numpy_frontend")
    with pytest.raises(DataError, match="NaN"):
        feat.scattering_features(X, (28, 28))


def test_equals_direct_kymatio_call():
    """The paper's recipe written out: zero-pad 28x28 -> 32x32, Scattering2D(J=3, L=8), flatten."""
    kym = pytest.importorskip("kymatio.scattering2d.frontend.numpy_frontend")
    X, imgs = _digits(4)
    F = feat.scattering_features(X, (28, 28), normalize="none")
    S = kym.ScatteringNumPy2D(J=3, shape=(32, 32), L=8)
    raw = np.stack([S(np.pad(img, 2, mode="constant")) for img in imgs])        # (4, 217, 4, 4)
    ref = raw.reshape(4, -1)
    assert F.shape == ref.shape == (4, 3472)
    np.testing.assert_allclose(F, ref, rtol=1e-6, atol=1e-9)
    assert np.abs(ref).max() > 1e-2                      # not all zeros
    # the default: every channel's 4x4 map over its largest |value| ([50]'s practice)
    chan = (raw / np.abs(raw).max(axis=(2, 3), keepdims=True)).reshape(4, -1)
    np.testing.assert_allclose(feat.scattering_features(X, (28, 28)), chan, rtol=1e-6, atol=1e-9)
    # column-major rows (MATLAB, COIL-20's layout) describe the same images
    XF = np.stack([img.ravel(order="F") for img in imgs])
    np.testing.assert_allclose(feat.scattering_features(XF, (28, 28), order="F", normalize="none"), ref,
                               rtol=1e-6, atol=1e-9)
    # the features are translation-sensitive at the 4x4 grid: a different image gives different features
    assert np.abs(F[0] - F[2]).max() > 1e-3


class _CountingRows:
    """A row-indexable array that records the largest block read (streaming must read chunks only)."""

    def __init__(self, X):
        self.X, self.shape, self.largest = X, X.shape, 0

    def __getitem__(self, sl):
        block = self.X[sl]
        self.largest = max(self.largest, block.shape[0])
        return block


def test_chunked_equals_one_shot_and_streams():
    pytest.importorskip("kymatio.scattering2d.frontend.numpy_frontend")
    X, _ = _digits(7, seed=1)
    one = feat.scattering_features(X, (28, 28), chunk_rows=1000)
    for rows in (1, 3):
        np.testing.assert_array_equal(feat.scattering_features(X, (28, 28), chunk_rows=rows), one)
        src = _CountingRows(X)
        parts = list(feat.scattering_chunks(src, (28, 28), chunk_rows=rows))
        assert src.largest == rows and [s for s, _ in parts] == list(range(0, 7, rows))
        np.testing.assert_array_equal(np.vstack([f for _, f in parts]), one)
    f32 = feat.scattering_features(X, (28, 28), chunk_rows=3, dtype=np.float32)
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, one, rtol=1e-5, atol=1e-7)


def test_image_features_scattering_then_pca():
    """Augmented copies get their own features; the PCA is fitted on originals and copies together."""
    pytest.importorskip("kymatio.scattering2d.frontend.numpy_frontend")
    from bigclust.subspace import features_after_augmentation
    X, _ = _digits(6)
    X_aug, _ = _digits(12, seed=5)
    F, Fa = feat.image_features(X, X_aug, "scattering", image_shape=(28, 28), pca=5)
    S, Sa = feat.scattering_features(X, (28, 28)), feat.scattering_features(X_aug, (28, 28))
    # reference: the top right singular vectors of the stacked, NOT centred features (signs are arbitrary)
    Vt = np.linalg.svd(np.vstack([S, Sa]), full_matrices=False)[2][:5]
    R, Ra = S @ Vt.T, Sa @ Vt.T
    sign = np.sign(np.sum(np.vstack([F, Fa]) * np.vstack([R, Ra]), axis=0))
    assert F.shape == (6, 5) and Fa.shape == (12, 5)
    np.testing.assert_allclose(F * sign, R, rtol=1e-6, atol=1e-8 * np.abs(R).max())
    np.testing.assert_allclose(Fa * sign, Ra, rtol=1e-6, atol=1e-8 * np.abs(R).max())
    assert np.abs(features_after_augmentation(S, Sa, 5)[0] - R * sign).max() > 1e-3   # centring would differ
    P, Pa = feat.image_features(X, X_aug, "pixels")
    assert P is X and Pa is X_aug
    np.testing.assert_allclose(feat.image_features(X, X_aug, "pixels", pca=3)[0],
                               features_after_augmentation(X, X_aug, 3)[0])


@pytest.mark.parametrize("n_rows", [150, 700])   # fewer rows than features (SVD of the rows) and more (Gram)
def test_uncentred_pca_equals_svd(n_rows):
    rng = np.random.default_rng(n_rows)
    A = np.abs(rng.normal(size=(n_rows, 300))) @ np.diag(np.linspace(3, 0.1, 300))
    B = np.abs(rng.normal(size=(n_rows // 3, 300)))
    F, Fa = feat.uncentred_pca(A, B, 12, chunk_rows=64)
    Vt = np.linalg.svd(np.vstack([A, B]), full_matrices=False)[2][:12]
    sign = np.sign(np.sum(F * (A @ Vt.T), axis=0))
    np.testing.assert_allclose(F * sign, A @ Vt.T, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(Fa * sign, B @ Vt.T, rtol=1e-8, atol=1e-9)
    assert feat.uncentred_pca(A, None, 3)[1] is None
    with pytest.raises(UserError, match="pca="):
        feat.uncentred_pca(A, B, 301)


def test_new_keys_keep_hashes(tmp_path):
    """[aksc] features / image / max_iter / image_shape / order at their defaults change neither the config hash nor the stage keys."""
    from bigclust.pipeline.config import load
    from bigclust.pipeline.stages import stage_key
    from bigclust.subspace.plugin import SubspaceStageParams as SubspaceParams
    base = ('[data]\nname = "mnist-test-500-0-2"\n[method]\nnames = ["aksc"]\n[store]\npath = "s.zarr"\n'
            '[output]\ndir = "out"\n[aksc]\naugment = "mnist"\n')
    (tmp_path / "a.toml").write_text(base)
    (tmp_path / "b.toml").write_text(base + 'features = "pixels"\nimage = "auto"\n')
    (tmp_path / "c.toml").write_text(base + 'features = "scattering"\n')
    ha, hb, hc = (load(tmp_path / f"{n}.toml").hash for n in "abc")
    assert ha == hb != hc
    m = methods.get("aksc")
    p = m.make({"augment": "mnist"})
    before = {k: v for k, v in dataclasses.asdict(p).items() if k not in ("features", "image", "max_iter",
                                                                                 "image_shape", "order")}  # the old dict
    assert methods.params_dict(p) == before
    key = stage_key(SubspaceParams(input="i", src="preprocess", method="aksc", method_params=before, seed=0))
    assert stage_key(SubspaceParams(input="i", src="preprocess", method="aksc",
                                    method_params=methods.params_dict(p), seed=0)) == key
    ps = m.make({"augment": "mnist", "features": "scattering"})
    assert methods.params_dict(ps)["features"] == "scattering"
    assert m.make(methods.params_dict(ps)) == ps


def test_scattering_needs_image_layout_in_config():
    m = methods.get("aksc")
    with pytest.raises(UserError, match='image = "mnist"'):
        m.stages(m.make({"features": "scattering"}), {})
    assert m.stages(m.make({"features": "scattering", "image": "mnist"}), {}) == ("subspace", "embed", "cluster")
    assert m.stages(m.make({"features": "scattering", "augment": "mnist"}), {}) == ("subspace", "embed", "cluster")


def test_pipeline_and_estimator_equal_library(tmp_path, make_config):
    """features = "scattering" through the pipeline and SubspaceClustering: the library's W and labels."""
    pytest.importorskip("kymatio.scattering2d.frontend.numpy_frontend")
    from bigclust.estimators import SubspaceClustering
    from bigclust.pipeline.runner import run
    from bigclust.pipeline.store import Store, read_matrix
    from bigclust.subspace import subspace_clustering
    X, _ = _digits(24, seed=2)
    X = X.astype(np.float32).astype(np.float64)
    y = np.arange(24) % 2
    p = tmp_path / "digits.npz"
    np.savez(p, X=X, y=y)
    cfg = make_config(p, '[aksc]\nn_neighbors = 5\nfeatures = "scattering"\nimage = "mnist"\npca = 8\n')
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["aksc"]')
                   .replace("n_init = 5", "n_init = 5\nseed = 3").replace("gamma = 1.0", "")
                   .replace("l2_normalize = true", "l2_normalize = false"))
    run(cfg)
    s = Store(tmp_path / "store.zarr")
    (wkey,) = s.stage_keys("subspace")
    lib, W = subspace_clustering(X, 2, n_neighbors=5, features="scattering", image_shape=(28, 28), pca=8,
                                 n_init=5, random_state=3)
    np.testing.assert_allclose(read_matrix(s.open("subspace", wkey), "K").toarray(), W.toarray(), rtol=1e-10)
    (key,) = s.stage_keys("cluster")
    g = s.open("cluster", key)
    np.testing.assert_array_equal(read_matrix(g, "labels")[g.attrs["best"]], lib)
    est = SubspaceClustering(2, n_neighbors=5, features="scattering", image="mnist", pca=8, n_init=5,
                             random_state=3).fit(X)
    np.testing.assert_array_equal(est.labels_, lib)
    pix = subspace_clustering(X, 2, n_neighbors=5, pca=8, n_init=5, random_state=3)[1]
    assert abs(pix - W).max() > 1e-6                    # the features did change W
