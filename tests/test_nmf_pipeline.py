"""The NMF family in the pipeline and as an estimator: same labels as the library, the subset protocol, RC."""
import csv
import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
from sklearn.utils.estimator_checks import parametrize_with_checks

from bigclust import nmf
from bigclust.estimators import NMFClustering
from bigclust.algo.metrics import accuracy
from bigclust.normalize import rc
from bigclust.pipeline.runner import run
from bigclust.pipeline.store import Store, read_matrix

from conftest import blobs, docs as _docs

NEGATIVE = "check_clustering feeds standardised blobs with negative entries although the positive_only tag is set"
EXPECTED = {
    "linear": {"check_clustering": NEGATIVE + "; linear NMF needs X >= 0 and says so in one line"},
    "bilinear": {"check_clustering": "concept factorisation with the linear kernel does not separate centred "
                                     "2-D blobs (ARI < 0.4): its concepts are non-negative mixtures of documents"},
}


@parametrize_with_checks([NMFClustering(n_init=2, max_iter=50), NMFClustering(model="bilinear", n_init=2, max_iter=50)],
                         expected_failed_checks=lambda est: EXPECTED[est.model], xfail_strict=True)
def test_sklearn_api(estimator, check):
    check(estimator)


def test_rc_is_the_smallest_laplacian_eigenvectors():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    A = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))
    L = np.diag(A.sum(1)) - A
    P = rc(A)
    np.testing.assert_allclose(P, A - np.diag(A.sum(1)), rtol=0, atol=1e-15)
    np.testing.assert_allclose(rc(sp.csr_matrix(A)).toarray(), P, atol=1e-15)
    _, small = scipy.linalg.eigh(L, subset_by_index=[0, 3])
    _, top = scipy.linalg.eigh(P, subset_by_index=[36, 39])
    # the same invariant subspace: principal angles ~ 0
    s = scipy.linalg.svdvals(small.T @ top)
    np.testing.assert_allclose(s, 1.0, atol=1e-8)


def _final(store, stage):
    s = Store(store)
    (key,) = s.stage_keys(stage)
    g = s.open(stage, key)
    return read_matrix(g, "labels"), g


@pytest.mark.parametrize("method, section, kind", [
    ("nmf", "[nmf]\nn_init = 3\nncw = true\n", "linear"),
    ("nmf", '[nmf]\nn_init = 2\nsolver = "hals"\n', "linear"),
    ("binmf", "[binmf]\nn_init = 2\nmax_iter = 200\n", "linear"),
    ("binmf", "[binmf]\nn_init = 2\nmax_iter = 200\nncw = true\n", "cosine2"),
    ("kkmeans", "[kkmeans]\nncw = true\n", "cosine2"),
    ("kmeans", "[kmeans]\nncw = true\n", "linear"),
])
def test_pipeline_equals_library_and_estimator(tmp_path, make_config, method, section, kind):
    X, y = _docs()
    p = tmp_path / "docs.npz"
    np.savez(p, X=X, y=y)
    cfg = make_config(p, section)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', f'names = ["{method}"]')
                   .replace("gamma = 1.0", f'kind = "{kind}"').replace("n_init = 5", "n_init = 4\nseed = 7")
                   .replace("l2_normalize = true", "l2_normalize = false"))
    (rec,) = run(cfg)
    labels, g = _final(tmp_path / "store.zarr", "assign")
    X32 = X.astype(np.float32).astype(np.float64)  # the pipeline stores data as float32
    if method == "nmf":
        ref, *_ = nmf.linear_nmf(X32, 3, n_init=g.attrs["params"]["method_params"]["n_init"],
                                 solver=g.attrs["params"]["method_params"]["solver"], random_state=7,
                                 ncw="ncw = true" in section)
        est = NMFClustering(3, solver=g.attrs["params"]["method_params"]["solver"], ncw="ncw = true" in section,
                            n_init=g.attrs["params"]["method_params"]["n_init"], random_state=7).fit(X)
        np.testing.assert_array_equal(est.labels_, labels[0])
    elif method == "binmf" and kind == "linear":
        ref, *_ = nmf.bilinear_nmf(X32, 3, n_init=2, max_iter=200, random_state=7)
        est = NMFClustering(3, model="bilinear", n_init=2, max_iter=200, random_state=7).fit(X)
        np.testing.assert_array_equal(est.labels_, labels[0])
    elif method == "kmeans":
        from bigclust.algo.kmeans import kmeans
        ref = kmeans(nmf.ncw_vectors(X32), 3, n_init=4, max_iter=1000, random_state=7).labels
    else:
        from bigclust.algo.affinity import dense_kernel
        K = dense_kernel(X32, "cosine2").compute()
        if method == "binmf":
            ref, *_ = nmf.bilinear_nmf(K, 3, kernel="precomputed", n_init=2, max_iter=200, random_state=7, ncw=True)
        else:
            w = K.sum(axis=1) ** -0.5                   # NCW (DESIGN section 4): d_i^(-1/2), d = K1
            _, _, info = nmf.kernel_kmeans(w[:, None] * K * w[None, :], 3, n_init=4, max_iter=1000, random_state=7,
                                           return_info=True)
            ref = info.extra["labels_all"]
    np.testing.assert_array_equal(np.atleast_2d(ref), labels)
    assert rec["acc_best_inertia"] > 0.9


def _subset_config(tmp_path, make_config, extra=""):
    X, y = blobs(n=300, k=6, d=8, seed=1, sep=4.0)
    p = tmp_path / "six.npz"
    np.savez(p, X=X, y=y)
    cfg = make_config(p, '[evaluate]\nprotocol = "subsets"\nsubset_sizes = [2, 4]\nsubset_trials = 3\n'
                         'nmi_norm = "max"\n' + extra)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["kmeans", "ncut", "nmf"]')
                   .replace("[cluster]", "[nmf]\nn_init = 2\n\n[cluster]"))
    return cfg


def _trials(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_subset_protocol_is_deterministic_and_averaged(tmp_path, make_config):
    cfg = _subset_config(tmp_path, make_config)
    a = run(cfg)
    trials = _trials(tmp_path / "out" / "trials.csv")
    assert len(trials) == 3 * 2 * 3  # methods x sizes x trials
    b = run(cfg, out=str(tmp_path / "again"), store=str(tmp_path / "fresh.zarr"))
    for ra, rb in zip(a, b):
        assert ra["nmi_by_k"] == rb["nmi_by_k"] and ra["acc_by_k"] == rb["acc_by_k"]
    again = _trials(tmp_path / "again" / "trials.csv")
    assert [r["classes"] for r in again] == [r["classes"] for r in trials]
    for rec in a:  # each record averages its trials
        for k in (2, 4):
            mine = [float(r["nmi_best_inertia"]) for r in trials if r["method"] == rec["method"]
                    and r["subset_size"] == str(k)]
            assert len(mine) == 3 and rec["nmi_by_k"][k] == pytest.approx(np.mean(mine))
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| method | 2 | 4 | avg. |" in md and "max(H(classes), H(clusters))" in md   # which NMI, named
    other = _subset_config(tmp_path, make_config, "subset_seed = 5\n")
    c = run(other, out=str(tmp_path / "seed5"), store=str(tmp_path / "s5.zarr"))
    assert {r["classes"] for r in _trials(tmp_path / "seed5" / "trials.csv")} != {r["classes"] for r in trials}
    assert len(c) == len(a)


def test_subset_protocol_keep_results_drops_each_subset_after_its_methods(tmp_path, make_config, monkeypatch):
    """keep = "results": subsets outer, methods inner, a subset's kernels dropped before the next subset runs;
    the trials are those of the method-by-method order, bit for bit."""
    from bigclust.pipeline import runner as pipeline
    from bigclust.pipeline import usage
    cfg = _subset_config(tmp_path, make_config)
    run(cfg, out=str(tmp_path / "all"), store=str(tmp_path / "all.zarr"))
    cfg.write_text(cfg.read_text().replace('path = "store.zarr"', 'path = "store.zarr"\nkeep = "results"'))
    live, real = [], usage.drop_intermediates

    def watched(store, done, droppable):   # kernels present in the store each time a drop starts
        live.append(sum(store.has("affinity", k) for k in store.stage_keys("affinity")))
        return real(store, done, droppable)
    monkeypatch.setattr(usage, "drop_intermediates", watched)
    run(cfg)
    assert len(live) == 2 * 3 + 1 and max(live) == 1   # one kernel (ncut's) per subset, never two subsets'
    s = Store(tmp_path / "store.zarr")
    assert s.stage_keys("affinity") and all(s.dropped("affinity", k) for k in s.stage_keys("affinity"))
    assert all(s.dropped("subset", k) for k in s.stage_keys("subset"))
    cols = ("method", "subset_size", "trial", "classes", "n", "acc_best_inertia", "nmi_best_inertia", "params")
    ref, ours = _trials(tmp_path / "all" / "trials.csv"), _trials(tmp_path / "out" / "trials.csv")
    assert [[r[c] for c in cols] for r in ours] == [[r[c] for c in cols] for r in ref]
    assert pipeline.DROPPABLE == {"affinity": ("K",), "subset": ("X",)}


def test_subset_keys_without_the_protocol_and_plots_under_it_are_said(tmp_path, make_config, capsys):
    X, y = blobs(n=90, k=3, d=6, seed=2)
    p = tmp_path / "b.npz"
    np.savez(p, X=X, y=y)
    cfg = make_config(p, "[evaluate]\nsubset_trials = 3\n")
    with pytest.warns(UserWarning, match=r"\[evaluate\] subset_trials not used: they belong to protocol"):
        run(cfg)
    cfg = _subset_config(tmp_path, make_config)
    cfg.write_text(cfg.read_text().replace("plots = false", "plots = true"))
    run(cfg, out=str(tmp_path / "plots"), store=str(tmp_path / "six.zarr"))
    assert "the subset protocol writes no figures and no label files" in capsys.readouterr().err


def test_subset_protocol_errors(tmp_path, make_config):
    from bigclust._util.errors import ConfigError, UserError
    cfg = _subset_config(tmp_path, make_config)
    cfg.write_text(cfg.read_text().replace("subset_sizes = [2, 4]", "subset_sizes = [2, 7]"))
    with pytest.raises(UserError, match=r"subset_sizes \[7\] exceed the 6 classes"):
        run(cfg)
    cfg.write_text(cfg.read_text().replace("subset_sizes = [2, 7]", "subset_sizes = [2]")
                   .replace("n_init = 5", "n_init = 5\nn_clusters = 3"))
    with pytest.raises(ConfigError, match="leave n_clusters unset"):
        run(cfg)
    # a registered data set's classes are known before any work: `pipeline validate` refuses too
    from pathlib import Path
    from bigclust.pipeline.runner import validate
    reg = tmp_path / "reg.toml"
    reg.write_text(f'[data]\nname = "optdigits"\nroot = "{Path(__file__).parents[1] / "data"}"\n\n'
                   '[method]\nnames = ["kmeans"]\n\n[evaluate]\nprotocol = "subsets"\nsubset_sizes = [2, 11]\n')
    with pytest.raises(UserError, match=r"subset_sizes \[11\] exceed the 10 classes of optdigits"):
        validate(reg)


def test_negative_data_for_linear_nmf_is_one_line(tmp_path, make_config):
    X, y = blobs()
    X[3, 1] = -0.5
    p = tmp_path / "neg.npz"
    np.savez(p, X=X, y=y)
    cfg = make_config(p)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["nmf"]')
                   .replace("l2_normalize = true", "l2_normalize = false"))
    r = subprocess.run([sys.executable, "-m", "bigclust.cli", "pipeline", "run", str(cfg)], capture_output=True,
                       text=True)
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(errs) == 1
    assert "negative entries" in errs[0] and "bilinear" in errs[0]
    assert not (tmp_path / "out").exists()


def test_bilinear_linear_kernel_beyond_max_memory_is_refused_not_misread(tmp_path, make_config):
    """Streamed bilinear NMF reads a stored kernel's rows; X's rows are not K's (K = X X^T is never formed).
    A square symmetric X once passed as K and gave another factorisation; other shapes crashed."""
    rng = np.random.RandomState(0)
    R = rng.rand(80, 80)
    square = np.kron(np.eye(4), np.ones((20, 20))) + 0.3 * (R + R.T) / 2
    for X in (square, rng.rand(200, 60)):
        with pytest.raises(ValueError, match="linear kernel .* needs X in memory"):
            NMFClustering(4, model="bilinear", n_init=2, random_state=0, max_memory="40KB").fit(X)
    p = tmp_path / "sq.npz"
    np.savez(p, X=square, y=np.repeat(np.arange(4), 20))
    cfg = make_config(p)
    cfg.write_text(cfg.read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["binmf"]')
                   .replace("[affinity]", '[affinity]\nkind = "linear"').replace("gamma = ", "# gamma = ")
                   .replace('path = "store.zarr"', 'path = "store.zarr"\nmax_memory = "40KB"')
                   .replace("[method]", "[binmf]\nn_init = 2\n\n[method]"))
    r = subprocess.run([sys.executable, "-m", "bigclust.cli", "pipeline", "run", str(cfg)], capture_output=True,
                       text=True)
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(errs) == 1, r.stderr
    assert "needs X in memory" in errs[0]
    assert not (tmp_path / "out").exists()


def test_estimator_labels_all_zero_documents_minus_one():
    X, y = _docs(n=90)
    X[[5, 17]] = 0.0
    with pytest.warns(RuntimeWarning, match="2 all-zero document"):
        est = NMFClustering(3, n_init=2, random_state=0).fit(sp.csr_matrix(X))
    assert est.labels_[5] == est.labels_[17] == -1 and (est.labels_ >= 0).sum() == 88
    keep = np.ones(90, bool)
    keep[[5, 17]] = False
    assert accuracy(y[keep], est.labels_[keep]) > 0.9


def test_streamed_nmf_equals_in_memory_and_distributed(tmp_path, make_config):
    import distributed
    X, y = _docs(n=300, d=30)
    p = tmp_path / "docs.npz"
    np.savez(p, X=sp.csr_matrix(X).toarray(), y=y)
    from sklearn.datasets import dump_svmlight_file
    svm = tmp_path / "docs.svm"
    dump_svmlight_file(sp.csr_matrix(X), y, str(svm))   # ingested as CSR, as text is
    body = lambda c: c.write_text(c.read_text()  # noqa: E731
                                  .replace('names = ["kmeans", "ra", "ncut"]', 'names = ["nmf"]')
                                  .replace("[cluster]", "[nmf]\nn_init = 2\nmax_iter = 60\n\n[cluster]")
                                  .replace("l2_normalize = true", "l2_normalize = false\ntfidf = false"))
    mem = make_config(svm)
    body(mem)
    run(mem)
    ooc = make_config(svm, name="ooc.toml")
    body(ooc)
    # X (~40 KB as CSR) and the factors do not fit 60 KB: 5 row blocks streamed from the store
    ooc.write_text(ooc.read_text().replace('path = "store.zarr"', 'path = "ooc.zarr"\nmax_memory = "60KB"'))
    run(ooc, out=str(tmp_path / "o_ooc"))
    a, _ = _final(tmp_path / "store.zarr", "assign")
    b, g = _final(tmp_path / "ooc.zarr", "assign")
    assert g.attrs["streamed_blocks"] > 1 and len(g.attrs["params"]["stream"]) > 2
    np.testing.assert_array_equal(a, b)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        run(ooc, scheduler=cluster.scheduler_address, out=str(tmp_path / "o_dist"), store=str(tmp_path / "d.zarr"))
    c, g2 = _final(tmp_path / "d.zarr", "assign")
    np.testing.assert_array_equal(a, c)
    np.testing.assert_allclose(read_matrix(g2, "V"), read_matrix(g, "V"), rtol=1e-9, atol=1e-12)


def test_bilinear_nmf_on_a_stored_kernel_streams_and_equals_memory(tmp_path, make_config):
    X, y = _docs(n=200, d=24)
    p = tmp_path / "docs.npz"
    np.savez(p, X=X, y=y)
    body = lambda c: c.write_text(c.read_text()  # noqa: E731
                                  .replace('names = ["kmeans", "ra", "ncut"]', 'names = ["binmf"]')
                                  .replace("gamma = 1.0", 'kind = "cosine2"')
                                  .replace("[cluster]", "[binmf]\nn_init = 2\nmax_iter = 80\nncw = true\n\n[cluster]"))
    mem = make_config(p)
    body(mem)
    run(mem)
    ooc = make_config(p, name="ooc.toml")
    body(ooc)
    # K: 200 x 200 float64 = 320 KB; two copies do not fit 400 KB: K's row blocks are streamed per product
    ooc.write_text(ooc.read_text().replace('path = "store.zarr"', 'path = "ooc.zarr"\nmax_memory = "400KB"'))
    run(ooc, out=str(tmp_path / "o_ooc"))
    a, ga = _final(tmp_path / "store.zarr", "assign")
    b, gb = _final(tmp_path / "ooc.zarr", "assign")
    assert gb.attrs["streamed_blocks"] > 1 and "streamed_blocks" not in ga.attrs
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(read_matrix(ga, "V"), read_matrix(gb, "V"), rtol=1e-12, atol=1e-14)


def test_kernel_kmeans_on_a_stored_kernel_streams_equals_memory_and_distributed(tmp_path, make_config):
    import distributed
    X, y = _docs(n=200, d=24)
    p = tmp_path / "docs.npz"
    np.savez(p, X=X, y=y)
    cfg = {}
    for name, extra in (("mem", ""), ("ooc", '\nmax_memory = "400KB"')):   # K: 320 KB; two copies do not fit
        cfg[name] = make_config(p, name=f"{name}.toml")
        cfg[name].write_text(cfg[name].read_text().replace('names = ["kmeans", "ra", "ncut"]', 'names = ["kkmeans"]')
                             .replace("gamma = 1.0", 'kind = "cosine2"')
                             .replace("[cluster]", "[kkmeans]\nncw = true\n\n[cluster]")
                             .replace('path = "store.zarr"', f'path = "{name}.zarr"{extra}'))
    run(cfg["mem"], out=str(tmp_path / "o_mem"))
    run(cfg["ooc"], out=str(tmp_path / "o_ooc"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        run(cfg["ooc"], scheduler=cluster.scheduler_address, out=str(tmp_path / "o_dist"),
            store=str(tmp_path / "dist.zarr"))
    a, ga = _final(tmp_path / "mem.zarr", "assign")
    assert "streamed_blocks" not in ga.attrs and a.shape[0] > 1         # every restart's labels are kept
    for store in ("ooc.zarr", "dist.zarr"):
        b, gb = _final(tmp_path / store, "assign")
        assert gb.attrs["streamed_blocks"] > 1
        np.testing.assert_array_equal(a, b)
        assert gb.attrs["best"] == ga.attrs["best"]
        np.testing.assert_allclose(read_matrix(gb, "inertia"), read_matrix(ga, "inertia"), rtol=1e-12, atol=0)
