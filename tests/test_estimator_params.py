"""Estimator parameters and ``y`` the scikit-learn way: NumPy scalars from a parameter grid work, every bad
value is a one-line ValueError naming the estimator's parameter (not a config key), nothing is silently
ignored, no attribute of an earlier fit survives, Dask and NumPy input treat all-zero rows alike, and
stopping on an iteration budget is scikit-learn's ConvergenceWarning."""
import warnings

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import ParameterGrid

from bigclust.estimators import NMFClustering, SpectralClustering, SubspaceClustering

from conftest import blobs, docs


def _docs():
    return docs(n=90)


def _union(n_per=20, n_sub=3, dim=2, d=20, seed=1):
    rng = np.random.default_rng(seed)
    bases = [np.linalg.qr(rng.normal(size=(d, dim)))[0] for _ in range(n_sub)]
    X = np.vstack([rng.normal(size=(n_per, dim)) @ B.T for B in bases]) + 0.01 * rng.normal(size=(n_per * n_sub, d))
    perm = rng.permutation(n_per * n_sub)
    return X[perm], np.repeat(np.arange(n_sub), n_per)[perm]


def test_numpy_scalars_from_a_parameter_grid_are_plain_values():
    X, _ = _docs()
    ref = NMFClustering(3, n_init=2, max_iter=60, tol=1e-4, ncw=True, random_state=0).fit(X).labels_
    grid = ParameterGrid({"n_clusters": np.array([3]), "n_init": np.array([2]), "max_iter": np.array([60]),
                          "tol": np.array([1e-4]), "ncw": np.array([True]), "random_state": np.array([0])})
    (params,) = list(grid)
    assert isinstance(params["n_clusters"], np.integer) and isinstance(params["ncw"], np.bool_)
    np.testing.assert_array_equal(clone(NMFClustering()).set_params(**params).fit(X).labels_, ref)
    Xb, _ = blobs(n=60, k=3)
    a = SpectralClustering(3, n_init=3, n_neighbors=10, gamma="median", random_state=1).fit(Xb).labels_
    b = SpectralClustering(np.int64(3), n_init=np.int32(3), n_neighbors=np.int64(10), gamma="median",
                           n_iter=np.int64(1000), tol=np.float64(0.0), random_state=np.int64(1)).fit(Xb).labels_
    np.testing.assert_array_equal(a, b)
    Xs, _ = _union()
    a = SubspaceClustering(3, n_neighbors=6, n_init=3, random_state=2).fit(Xs).labels_
    b = SubspaceClustering(np.int64(3), n_neighbors=np.int64(6), n_init=np.int64(3), alpha=np.float64(20.0),
                           random_state=2).fit(Xs).labels_
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("est, match", [
    (NMFClustering(3, ncw="no"), r"^NMFClustering: ncw must be True or False, got 'no'$"),
    (NMFClustering(3, tol="x"), r"^NMFClustering: tol must be a finite number >= 0, got 'x'$"),
    (NMFClustering(3, tol=float("nan")), r"^NMFClustering: tol must be a finite number"),
    (NMFClustering(3, n_init=2.0), r"^NMFClustering: n_init must be an integer > 0, got 2\.0$"),
    (NMFClustering(3, max_iter=0), r"^NMFClustering: max_iter must be an integer > 0, got 0$"),
    (NMFClustering(3, solver="foo"), r"^NMFClustering: solver must be one of 'mu', 'hals', got 'foo'$"),
    (NMFClustering(3, model="bilinear", solver="hals"), r"^NMFClustering: solver='hals' is for model='linear'"),
    (NMFClustering(3, model="bilinear", init="nndsvd"), r"^NMFClustering: init='nndsvd' is for model='linear'"),
    (NMFClustering(3, kernel="cosine2"), r"^NMFClustering: kernel='cosine2' is for model='bilinear'"),
    (NMFClustering(90), r"^NMFClustering: n_clusters=90 must be below n_samples=90$"),
    (NMFClustering(3, max_memory="lots"), r"^NMFClustering: max_memory must be a size like"),
    (SpectralClustering(3, l2_normalize="yes"), r"^SpectralClustering: l2_normalize must be true, false or \"auto\""),
    (SpectralClustering(3, eigensolver="lanczos"), r"^SpectralClustering: eigensolver must be one of 'auto'"),
    (SpectralClustering(3, gamma="wide"), r'^SpectralClustering: gamma must be a number > 0 or "median"'),
    (SpectralClustering(True), r"^SpectralClustering: n_clusters must be an integer >= 1, got True$"),
    (SpectralClustering(3, scheduler=8786), r"^SpectralClustering: scheduler must be None or"),
    (SubspaceClustering(3, lam="x"), r"^SubspaceClustering: lam must be a finite number >= 0, got 'x'$"),
    (SubspaceClustering(3, alpha=0), r"^SubspaceClustering: alpha must be a finite number > 0, got 0$"),
    (SubspaceClustering(3, augment="none"), r"^SubspaceClustering: augment must be one of None, 'coil20'"),
    # the [aksc] chain's own rules, in the estimator's words
    (SubspaceClustering(3, features="scattering"), r'^SubspaceClustering: features = "scattering" needs the image '
                                                   r'layout: set image = "mnist" or "coil20"'),
    (SubspaceClustering(3, augment="interpolate"), r'^SubspaceClustering: augment = "interpolate" needs a partially '
                                                   r'labelled y \(AkS-SC\)$'),
    (SubspaceClustering(3, image="auto"), r"^SubspaceClustering: image must be one of None, 'mnist', 'coil20', "
                                          r"got 'auto'$"),
    (SubspaceClustering(3, max_iter=0), r"^SubspaceClustering: max_iter must be an integer >= 1 or None, got 0$"),
    (SubspaceClustering(3, n_interpolate=np.int64(0)), r"^SubspaceClustering: n_interpolate must be an integer > 0, "
                                                        r"got 0$"),
    (SpectralClustering(3, knn="annoy"), r"^SpectralClustering: knn must be one of 'auto', 'exact'"),
    (SpectralClustering(3, normalization="mbbs"), r"^SpectralClustering: normalization must be one of 'bbs', 'sk', "
                                                  r"'ncut', 'ra', 'rc', got 'mbbs'$"),
])
def test_bad_parameter_is_one_line_naming_it(est, match):
    X, _ = _docs()
    with pytest.raises(ValueError, match=match) as e:
        est.fit(X)
    assert "\n" not in str(e.value) and "[" not in str(e.value)   # no config section: the user wrote no config


def test_semi_supervised_y_is_checked_not_ignored():
    X, y = _union()
    est = SubspaceClustering(3, n_neighbors=6, n_init=2, random_state=0)
    semi = np.full(y.size, -1)
    semi[[np.flatnonzero(y == c)[0] for c in range(3)]] = np.arange(3)
    for bad, match in ((semi[:-1], r"y has 59 labels but X has 60 samples"),
                       (semi[:, None], r"y must be 1-D"),
                       (semi.astype(str), r"y must hold integer class labels .* got dtype <U"),
                       (np.where(semi < 0, np.nan, semi), r"y\[\d+\] = nan"),
                       (semi + 0.5, r"y\[0\] = 0?-?0?\.5")):
        with pytest.raises(ValueError, match=match) as e:
            clone(est).fit(X, bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"^SubspaceClustering: a partially labelled y \(AkS-SC\) needs kNN supports"):
        clone(est).set_params(n_neighbors=0).fit(X, semi)
    # -1.0 marks in a float y are the same semi-supervised fit as in an integer y
    a = clone(est).fit(X, semi)
    b = clone(est).fit(X, semi.astype(np.float64))
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.classes_, [0, 1, 2])
    # a later unsupervised fit of the same estimator leaves nothing of the semi-supervised one behind
    a.fit(X)
    assert not hasattr(a, "classes_") and not hasattr(a, "label_distributions_") and a.embedding_ is not None


def test_all_zero_rows_alike_for_numpy_and_dask():
    X, y = _docs()
    X[[5, 17]] = 0.0
    kw = dict(n_clusters=3, n_init=2, random_state=0)
    with pytest.warns(RuntimeWarning, match="2 all-zero document"):
        a = NMFClustering(**kw).fit(X)
    with pytest.warns(RuntimeWarning, match="2 all-zero document"):
        b = NMFClustering(**kw).fit(da.from_array(X, chunks=(25, 24)))
    np.testing.assert_array_equal(a.labels_, b.labels_)
    with pytest.warns(RuntimeWarning, match="2 all-zero document"):   # blocks that are scipy.sparse matrices
        c = NMFClustering(**kw).fit(da.from_array(X, chunks=(25, 24)).map_blocks(sp.csr_matrix))
    np.testing.assert_array_equal(a.labels_, c.labels_)
    assert a.labels_[5] == a.labels_[17] == -1 and (a.labels_ >= 0).sum() == 88
    Xs, _ = _union()
    Xs[7] = 0.0
    with pytest.warns(RuntimeWarning, match="1 all-zero sample"):
        s = SubspaceClustering(3, n_neighbors=6, n_init=2, random_state=0).fit(Xs)
    W = s.affinity_matrix_
    assert sp.issparse(W) and W.shape == (60, 60) and W[7].nnz == 0 and W[:, 7].nnz == 0
    assert s.labels_[7] == -1 and s.embedding_.shape == (60, 3)
    with pytest.warns(RuntimeWarning, match="1 all-zero sample"):
        t = SubspaceClustering(3, n_neighbors=6, n_init=2, random_state=0).fit(da.from_array(Xs, chunks=(16, 20)))
    np.testing.assert_array_equal(s.labels_, t.labels_)
    with pytest.warns(RuntimeWarning, match="1 all-zero sample"):
        u = SubspaceClustering(3, n_neighbors=6, n_init=2, random_state=0).fit(
            da.from_array(Xs, chunks=(16, 7)).map_blocks(sp.csr_matrix))
    np.testing.assert_array_equal(s.labels_, u.labels_)


def test_iteration_budget_is_sklearns_convergence_warning():
    from bigclust.nmf import NMFConvergenceWarning
    from bigclust.normalize import NormalizeConvergenceWarning
    from bigclust.subspace import ConvergenceWarning as SubspaceConvergenceWarning
    for w in (NMFConvergenceWarning, NormalizeConvergenceWarning, SubspaceConvergenceWarning):
        assert issubclass(w, ConvergenceWarning) and issubclass(w, RuntimeWarning)
    X, _ = _docs()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        NMFClustering(3, n_init=1, max_iter=3, random_state=0).fit(X)
    assert any(issubclass(r.category, ConvergenceWarning) and "max_iter=3" in str(r.message) for r in rec)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)     # what a grid search silencing it would do
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        NMFClustering(3, n_init=1, max_iter=3, random_state=0).fit(X)


@pytest.mark.parametrize("make", [lambda: NMFClustering(3, n_init=1, random_state=0),
                                  lambda: SubspaceClustering(3, n_neighbors=6, n_init=1, random_state=0),
                                  lambda: SpectralClustering(3, n_init=1, random_state=0)])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_in_a_dask_array_is_an_error_not_an_empty_row(make, bad):
    X, _ = _docs()
    X[7, 1] = bad
    with pytest.raises(ValueError, match=r"^\w+Clustering: X contains NaN or infinity \(first in row 7\)"):
        make().fit(da.from_array(X, chunks=(25, 24)))
    with pytest.raises(ValueError, match=r"X contains NaN or infinity \(first in row 7\)"):
        make().fit(da.from_array(X, chunks=(25, 24)).map_blocks(sp.csr_matrix))
    with pytest.raises(ValueError, match="NaN|infinity"):                  # NumPy: scikit-learn's own check
        make().fit(X)


def test_values_beyond_float32_and_empty_dask_arrays_are_named():
    X, _ = _docs()
    X[3, 2] = 1e39                                                          # finite in float64, inf in float32
    for Xin in (X, da.from_array(X, chunks=(25, 24))):
        with pytest.raises(ValueError, match=r"beyond the float32 range \(first in row 3"):
            SpectralClustering(3, n_init=1, random_state=0).fit(Xin)
    with pytest.raises(ValueError, match="Found array with 0 sample"):
        SpectralClustering(3).fit(da.zeros((0, 4), chunks=2))


@pytest.mark.parametrize("make", [lambda: SpectralClustering(3, gamma="median", n_init=2, random_state=0),
                                  lambda: SubspaceClustering(3, n_neighbors=4, n_init=2, random_state=0)])
def test_fewer_distinct_rows_than_clusters_is_refused_by_the_estimators(make):
    X, _ = _union()
    D = np.repeat(X[[0, 30]], 10, axis=0)                                   # 2 distinct rows, 3 clusters
    with pytest.raises(ValueError, match=r"^\w+: X: only 2 of the 20 rows are distinct, fewer than n_clusters=3"):
        make().fit(D)


def test_pipeline_warnings_point_at_the_caller_once():
    X, _ = _docs()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        NMFClustering(3, n_init=2, max_iter=3, random_state=0).fit_predict(X)
    conv = [r for r in rec if issubclass(r.category, ConvergenceWarning)]
    assert len(conv) == 1 and conv[0].filename == __file__


def test_errors_from_inside_the_pipeline_name_the_estimator():
    X, _ = _union()
    with pytest.raises(ValueError, match=r"^SubspaceClustering: PCA n_components=500"):
        SubspaceClustering(3, pca=500, n_init=1).fit(X)


def test_subspace_max_iter_reaches_the_admm_and_its_warning():
    X, _ = _union()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        tight = SubspaceClustering(3, n_neighbors=6, n_init=1, random_state=0, max_iter=2).fit(X)
    msgs = [str(r.message) for r in rec if issubclass(r.category, ConvergenceWarning)]
    assert len(msgs) == 1 and "max_iter=2 " in msgs[0], msgs
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)            # the default budget converges here
        default = SubspaceClustering(3, n_neighbors=6, n_init=1, random_state=0).fit(X)
        same = SubspaceClustering(3, n_neighbors=6, n_init=1, random_state=0, max_iter=5000).fit(X)
    np.testing.assert_array_equal(default.affinity_matrix_.toarray(), same.affinity_matrix_.toarray())
    assert abs(tight.affinity_matrix_ - default.affinity_matrix_).max() > 1e-3
    assert tight.n_iter_ == 2 and 2 < default.n_iter_ == same.n_iter_ <= 5000
    with warnings.catch_warnings(record=True) as rec:                  # AkS-SC's C-steps take it too
        warnings.simplefilter("always")
        y = np.full(X.shape[0], -1)
        y[:6] = _union()[1][:6]
        semi = SubspaceClustering(3, n_neighbors=6, random_state=0, max_iter=2).fit(X, y)
    assert 1 <= semi.n_iter_ <= 10                                     # AkS-SC: its outer iterations
    assert any("max_iter=2 " in str(r.message) for r in rec if issubclass(r.category, ConvergenceWarning))
    with pytest.raises(ValueError, match="SubspaceClustering: max_iter must be an integer >= 1"):
        SubspaceClustering(3, max_iter=0).fit(X)


def test_semi_supervised_all_zero_samples_keep_their_given_label():
    X, y_true = _union()
    X[[4, 9]] = 0.0
    y = np.full(X.shape[0], -1)
    for c in range(3):
        y[np.flatnonzero(y_true == c)[:3]] = c
    y[4], y[9] = y_true[4], -1                                         # one all-zero sample labelled, one not
    with pytest.warns(RuntimeWarning, match="2 all-zero sample.*unless y gives their label"):
        est = SubspaceClustering(3, n_neighbors=6, random_state=0).fit(X, y)
    assert est.labels_[4] == y_true[4] and est.labels_[9] == -1
    F = est.label_distributions_
    np.testing.assert_allclose(F.sum(axis=1), 1.0, atol=1e-9)
    assert F[4, y_true[4]] == 1.0 and np.allclose(F[9], 1 / 3)


def test_fits_in_threads_leave_the_warning_machinery_alone():
    import threading
    X, _ = _docs()
    before = list(warnings.filters)
    fits = [threading.Thread(target=lambda: SpectralClustering(3, n_init=1, random_state=0).fit(X))
            for _ in range(2)]
    for t in fits:
        t.start()
    for t in fits:
        t.join()
    assert warnings.filters == before
    with pytest.warns(UserWarning, match="after the fits"):
        warnings.warn("after the fits")


def test_warnings_under_a_sklearn_pipeline_point_at_the_caller():
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer
    X, _ = _docs()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        make_pipeline(FunctionTransformer(), NMFClustering(3, n_init=1, max_iter=3, random_state=0)).fit(X)
    conv = [r for r in rec if issubclass(r.category, ConvergenceWarning)]
    assert len(conv) == 1 and conv[0].filename == __file__


def test_dask_float32_range_names_the_row_of_X_with_all_zero_rows_before_it():
    X, _ = _docs()
    X[2] = 0.0
    X[3, 5] = 1e39
    with pytest.raises(ValueError, match=r"beyond the float32 range \(first in row 3;"):
        NMFClustering(3, n_init=1).fit(da.from_array(X, chunks=(25, 24)))


def test_a_class_labelled_only_on_all_zero_rows_is_named():
    X, y_true = _union()
    y = np.full(X.shape[0], -1)
    first = [int(np.flatnonzero(y_true == c)[0]) for c in range(3)]
    y[first] = [10, 20, 30]
    X[first[1]] = 0.0
    with pytest.raises(ValueError, match="every labelled sample of class 20 is an all-zero row"):
        SubspaceClustering(3, n_neighbors=6, random_state=0).fit(X, y)


def test_aks_lrr_warning_names_the_alm_budget():
    from bigclust.subspace import aks_sc
    X, y_true = _union()
    y = np.full(X.shape[0], -1)
    for c in range(3):
        y[np.flatnonzero(y_true == c)[:3]] = c
    with pytest.warns(ConvergenceWarning, match=r"max_iter=1000 "):
        aks_sc(X, y, regularizer="nuclear", n_neighbors=6, eta=1.0, rho_max=1e-3, max_outer=1)


def test_nmf_warns_only_when_the_kept_restart_stopped_on_max_iter():
    from bigclust.nmf import NMFConvergenceWarning
    from bigclust.nmf._common import warn_not_converged
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_not_converged("linear NMF", True, 4, 10, 500, 1e-5)      # restarts left behind do not matter
    with pytest.warns(NMFConvergenceWarning, match=r"restart kept .* max_iter=500 .*; 4 of 10 restarts did"):
        warn_not_converged("linear NMF", False, 4, 10, 500, 1e-5)
    X, _ = _docs()
    with pytest.warns(NMFConvergenceWarning, match="restart kept"):
        NMFClustering(3, n_init=3, max_iter=3, random_state=0).fit(X)


def test_n_clusters_1_still_checks_the_data_and_keeps_semi_supervised_attributes():
    X, _ = _docs()
    X[0, 0] = -1.0
    with pytest.raises(ValueError, match="Negative values"):
        NMFClustering(1).fit(X)
    Xs, _ = _union()
    y = np.full(Xs.shape[0], -1)
    y[:3] = 7
    s = SubspaceClustering(1, n_neighbors=6).fit(Xs, y)
    assert (s.labels_ == 7).all() and list(s.classes_) == [7] and s.label_distributions_.shape == (60, 1)
    for bad, match in ((dict(augment="coil20"), "1024 pixels but X has 20"), (dict(pca=30), "n_components=30")):
        with pytest.raises(ValueError, match=match):       # as with n_clusters >= 2
            SubspaceClustering(1, **bad).fit(Xs)
        with pytest.raises(ValueError, match=match):
            SubspaceClustering(2, n_neighbors=6, **bad).fit(Xs)


def test_pipeline_errors_name_the_estimators_parameter_not_the_config_key():
    X = np.random.default_rng(0).random((200, 60))
    with pytest.raises(ValueError, match=r"^NMFClustering: linear NMF streamed .* raise max_memory") as e:
        NMFClustering(4, ncw=True, n_init=2, max_memory="40KB").fit(X)
    assert "[store]" not in str(e.value)


def test_an_image_layout_nothing_uses_is_refused():
    X, _ = _union()
    with pytest.raises(ValueError, match=r"^SubspaceClustering: image='mnist' is the layout .* leave image=None"):
        SubspaceClustering(3, image="mnist", n_neighbors=6).fit(X)


def test_a_bad_scheduler_is_named_as_the_estimators_parameter():
    X = np.random.default_rng(0).random((30, 4))
    with pytest.raises(ValueError, match=r"^NMFClustering: scheduler 'foo' \(scheduler\) is not an address") as e:
        NMFClustering(2, scheduler="foo").fit(X)
    assert "[dask]" not in str(e.value) and "--scheduler" not in str(e.value)


def test_nmf_bilinear_kernel_and_its_width_are_attributes_as_in_spectral_clustering():
    X, _ = _docs()
    e = NMFClustering(3, model="bilinear", kernel="gaussian", gamma="median", n_init=2, random_state=0).fit(X)
    s = SpectralClustering(3, gamma="median", n_init=2, random_state=0).fit(X)
    assert e.gamma_ == s.gamma_ and e.gamma_ > 0
    np.testing.assert_array_equal(e.affinity_matrix_, s.affinity_matrix_)
    lin = NMFClustering(3, model="bilinear", n_init=2, random_state=0).fit(X)
    assert lin.affinity_matrix_ is None and lin.gamma_ is None            # the linear kernel is never formed


def test_parameter_checks_are_the_config_keys_declarations():
    """One source of ranges and messages: an estimator parameter that is a config key is checked by that key."""
    from bigclust.pipeline import methods
    assert NMFClustering._parameters()["max_iter"] is methods.get("nmf").schema()["max_iter"]
    assert SpectralClustering._parameters()["n_iter"] is methods.get("bbs").schema()["n_iter"]
    assert SubspaceClustering._parameters()["augment"].key is methods.get("aksc").schema()["augment"]
