"""``bigclust bench nmf --json`` on a small synthetic matrix: the keys the issue names, and ours and
scikit-learn's MU agree iterate for iterate (speed is never asserted: DESIGN.md section 5)."""
import json

from click.testing import CliRunner

from bigclust.cli import main


def test_bench_nmf_json_keys_and_agreement():
    r = CliRunner().invoke(main, ["bench", "nmf", "--k", "4", "--iters", "5", "--repeats", "2",
                                  "--data", "synthetic:300x400x6000", "--max-memory", "64MB",
                                  "--dense-data", "synthetic:200x300x6000", "--dense-k", "4", "--dense-iters", "5",
                                  "--dense-repeats", "1", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output.strip().splitlines()[-1])
    for key in ("mu_speedup_vs_sklearn", "hals_speedup_vs_sklearn_cd", "bilinear_over_linear_per_iter",
                "ooc_peak_rss_bytes", "load_avg_1min", "repeats", "load_avg_after", "dense_mu_speedup_vs_sklearn",
                "dense_hals_speedup_vs_sklearn_cd", "dense_protocol", "dense_load_avg_before", "dense_load_avg_after"):
        assert key in res, key
    assert (res["n"], res["m"], res["k"], res["repeats"]) == (300, 400, 4, 2)
    # the same initial factors and update order: the objectives after 5 iterations agree to rounding
    assert res["mu_objective_rel_diff"] < 1e-9
    assert res["ooc_peak_rss_bytes"] >= res["ooc_rss_before_bytes"] > 0
    # the dense case: a dense X (10 % nonzero, so multiplied as CSR) and the same start as scikit-learn's
    assert (res["dense_n"], res["dense_m"], res["dense_k"], res["dense_products"]) == (200, 300, 4, "CSR kernels")
    assert res["dense_mu_objective_rel_diff"] < 1e-9 and res["dense_hals1_objective_rel_diff"] < 1e-6
    # X fits 64MB whole, yet the streamed run is timed over several blocks read from zarr
    assert res["ooc_planned_in_memory"] and res["ooc_blocks"] >= 8


def test_bench_nmf_bad_synthetic_shape_is_one_line():
    r = CliRunner().invoke(main, ["bench", "nmf", "--data", "synthetic:300x400"])
    assert r.exit_code == 2
    assert "synthetic:NxMxNNZ" in r.output and "Traceback" not in r.output
