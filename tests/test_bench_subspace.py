"""``bigclust bench subspace --json`` on a tiny problem: the keys the issue names, and the three solvers agree.

Speed is never asserted (DESIGN.md section 5); the solutions are: the NumPy loop is the kernel's algorithm
(agreement to rounding) and scikit-learn's Lasso is an independent solver (agreement to 1e-6 after alpha = lam / d).
"""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from bigclust.bench.subspace import flops_per_column, numpy_admm
from bigclust.cli import main


def test_bench_subspace_json_keys_and_agreement():
    r = CliRunner().invoke(main, ["bench", "subspace", "--n", "200", "--k", "8", "--d", "12", "--repeats", "1",
                                  "--n-ref", "20", "--coil20-repeats", "0", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output.strip().splitlines()[-1])
    for key in ("admm_speedup_vs_numpy", "admm_speedup_vs_sklearn_lasso", "coil20_seconds", "machine", "n",
                "repeats", "numba_seconds_median", "numpy_seconds_median", "sklearn_seconds_median",
                "columns_per_second", "flop_floor_columns_per_second", "floor_ratio", "flop_model", "dgemm_gflops"):
        assert key in res
    # the floor is the FLOP model at the measured dgemm rate, and the ratio is the kernel's speed against it
    flops, _ = flops_per_column(8, 12, res["numba_mean_iterations"], res["mean_factorisations"])
    assert res["flops_per_column"] == pytest.approx(flops) and res["dgemm_gflops"] > 0
    assert res["flop_floor_columns_per_second"] == pytest.approx(res["dgemm_gflops"] * 1e9 / flops)
    assert res["floor_ratio"] == pytest.approx(res["columns_per_second"] / res["flop_floor_columns_per_second"])
    assert 1 <= res["mean_factorisations"] <= 4
    assert res["coil20_seconds"] is None and res["n"] == 200 and res["numba_all_converged"]
    assert res["max_abs_diff_numpy"] < 1e-9 and res["max_abs_diff_sklearn"] < 1e-6
    assert res["admm_speedup_vs_numpy"] > 0 and "load_avg_1min" in res["machine"]
    # the one-thread ratio: the same FLOP model at the one-thread dgemm rate
    assert res["floor_ratio_one_thread"] == pytest.approx(
        res["columns_per_second_one_thread"] / (res["dgemm_gflops_one_thread"] * 1e9 / flops))


def test_flop_model_at_the_issue_size():
    """k = 50, d = 100, 76 iterations, one factorisation: about 0.9 MFLOP."""
    flops, terms = flops_per_column(50, 100, 76, 1)
    assert terms["gram"] == 2 * 50 * 50 * 100 + 2 * 50 * 100 and 0.8e6 < flops < 1.0e6


def test_numpy_reference_solves_the_lasso_and_relaxation_does_not_change_the_solution():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((15, 6))
    A /= np.linalg.norm(A, axis=0)
    x = rng.standard_normal(15)
    lam = 0.2
    z1, _, _ = numpy_admm(A, x, lam, 0.1, 1e-12, 1e-12, 100000, 1.0)
    z2, _, _ = numpy_admm(A, x, lam, 0.1, 1e-12, 1e-12, 100000, 1.8)
    np.testing.assert_allclose(z1, z2, atol=1e-8)
    g = A.T @ (x - A @ z2)                       # KKT of 1/2||x - Az||^2 + lam ||z||_1
    on = z2 != 0
    assert on.any() and np.allclose(g[on], lam * np.sign(z2[on]), atol=1e-7)
    assert np.all(np.abs(g[~on]) <= lam + 1e-7)
