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
