"""bench sparse's comparison with scikit-learn: like for like at the full n, a time-out only as a lower bound."""
import pytest

from bigclust.bench.sparse import speedups


def _ours():
    return {"ours_seconds_load": 1.0, "ours_sk_seconds_total": 6.0, "ours_bbs_dual_seconds_total": 11.0,
            "ours_sk_cpu_seconds_fit": 8.0, "ours_bbs_dual_cpu_seconds_fit": 16.0}


def test_finished_run_gives_ratios_without_the_loading():
    out = {**_ours(), "sklearn_timed_out_full": False,
           "_sklearn_full": {"seconds_fit": 100.0, "cpu_seconds_fit": 160.0}}
    speedups(out, 900.0)
    assert out["speedup_sk_vs_sklearn"] == pytest.approx(20.0)        # 100 / (6 - 1)
    assert out["speedup_bbs_dual_vs_sklearn"] == pytest.approx(10.0)
    assert out["cpu_speedup_sk_vs_sklearn"] == pytest.approx(20.0)
    assert "_sklearn_full" not in out and not any(key.endswith("_at_least") for key in out)


def test_time_out_is_a_lower_bound_never_the_subset_ratio():
    out = {**_ours(), "sklearn_timed_out_full": True, "_sklearn_full": {}}
    speedups(out, 900.0)
    assert out["speedup_sk_vs_sklearn_at_least"] == pytest.approx(180.0)
    assert not any(key.startswith("speedup_") and not key.endswith("_at_least") for key in out)


def _blobs(n=600, d=20, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((4, d)) * 3
    return (centres[rng.integers(0, 4, n)] + rng.standard_normal((n, d))).astype(np.float32)


def test_knn_affinity_is_knn_kernel_and_its_lists_recall():
    import numpy as np

    from bigclust.algo.affinity import knn_kernel
    from bigclust.bench.sparse import _knn_affinity, _knn_recall

    X = _blobs(2000)  # 8 cells of ivf-rows, 3 probed
    res = {}
    K, ind = _knn_affinity(X, 10, 2.0, "ivf-rows", 3, res)
    ref = knn_kernel(X, 10, 2.0, method="ivf-rows", n_probe=3)
    # the same graph; the width applied as a power of the gamma = 1 kernel, equal to rounding
    assert res["gamma"] == 2.0 and np.array_equal(K.indices, ref.indices) and np.array_equal(K.indptr, ref.indptr)
    np.testing.assert_allclose(K.data, ref.data, rtol=1e-12)
    assert ind.shape == (2000, 10) and np.array_equal(ind[:, 0], np.arange(2000))
    _knn_recall(X, ind, res)
    assert res["knn_recall_rows"] == 2000
    assert 0.9 <= res["knn_recall_others"] <= res["knn_recall"] <= 1.0
    res = {}
    _, exact = _knn_affinity(X, 10, "median", "exact", 0, res)
    _knn_recall(X, exact, res)
    assert res["knn_recall"] == 1.0 and res["knn_recall_others"] == 1.0 and res["gamma"] > 0
