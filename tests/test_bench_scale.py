"""bench scale: slope fit and JSON on synthetic timings (no timing is measured or asserted), config agreement."""
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from bigclust.bench import scale as bs
from bigclust.pipeline.config import load

N = [10_000, 20_000, 35_000, 70_000, 140_000]


def test_fit_slopes_recovers_power_laws():
    n = np.array(N, dtype=float)
    rng = np.random.default_rng(0)
    seconds = {"linear": list(3e-4 * n), "quadratic": list(1e-9 * n ** 2),
               "nlogn": list(1e-5 * n * np.log(n)),
               "noisy": list(2e-4 * n ** 1.1 * np.exp(rng.normal(0, 0.02, n.size))),
               "gaps": [None, 0.5, float("nan"), 2.0, 0.0], "one": [1.0, None, None, None, None]}
    s = bs.fit_slopes(N, seconds)
    assert s["linear"] == pytest.approx(1.0, abs=1e-9)
    assert s["quadratic"] == pytest.approx(2.0, abs=1e-9)
    # n log n over this range: slope 1 + 1/ln(n) on average, about 1.09
    x = np.log(n)
    assert s["nlogn"] == pytest.approx(np.polyfit(x, np.log(n * np.log(n)), 1)[0], abs=1e-9)
    assert 1.05 < s["nlogn"] < 1.12
    assert s["noisy"] == pytest.approx(1.1, abs=0.05)
    # only the usable points (0.5 at 20k, 2.0 at 70k): slope log(4)/log(3.5)
    assert s["gaps"] == pytest.approx(np.log(4) / np.log(3.5), abs=1e-9)
    assert s["one"] is None


def test_scale_result_json_keys_and_plot(tmp_path):
    seconds = {st: [1e-4 * a * (i + 1) for a in N] for i, st in enumerate(bs.STAGES)}
    peak = {st: [int(1e6 * a ** 0.5) for a in N] for st in bs.STAGES}
    res = bs.scale_result(N, seconds, peak, extra={"cpu": "x"})
    back = json.loads(json.dumps(res))
    assert back["n"] == N and set(back["seconds"]) == set(bs.STAGES) == set(back["peak_rss_bytes"])
    assert all(len(v) == len(N) for v in back["seconds"].values())
    assert all(v == pytest.approx(1.0) for v in back["slopes"].values())
    assert back["total_seconds"][0] == pytest.approx(sum(seconds[s][0] for s in bs.STAGES))
    seconds["ingest"][1] = float("nan")                      # skipped by a resumed run
    assert bs.scale_result(N, seconds, peak)["total_seconds"][1] == pytest.approx(
        sum(seconds[s][1] for s in bs.STAGES if s != "ingest"))
    with pytest.raises(ValueError, match="has 2 values for 5 sizes"):
        bs.scale_result(N, {"knn": [1.0, 2.0]}, {})
    bs.plot(res, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000
    text = bs.format_report(res)
    assert "knn" in text and "1.00" in text


def test_pipeline_config_matches_bench_defaults():
    cfg = load(Path(__file__).parents[1] / "pipelines" / "scale" / "mnist-1m.toml")
    for sec, want in bs.DEFAULT_CONFIG.items():
        for key, v in want.items():
            assert cfg.sections[sec][key] == v, (sec, key)


def test_mnist_8m_config_matches_bench_defaults_and_sizes(tmp_path):
    cfg = load(Path(__file__).parents[1] / "pipelines" / "scale" / "mnist-8m.toml")
    for sec, want in bs.DEFAULT_CONFIG_8M.items():
        for key, v in want.items():
            assert cfg.sections[sec][key] == v, (sec, key)
    assert cfg.sections["preprocess"]["pca_solver"] == "covariance"
    ds, sizes, base = bs._settings("mnist-8m", None, None)
    assert (ds, sizes, base["data"]["name"]) == ("mnist-8m", [1_000_000, 2_000_000, 4_000_000, 8_100_000], "mnist-8m")
    ds, sizes, base = bs._settings(None, [70_000], Path(__file__).parents[1] / "pipelines" / "scale" / "mnist-8m.toml")
    assert ds == "mnist-8m" and sizes == [70_000] and base["preprocess"]["pca_solver"] == "covariance"
    # a size's config is the file's sections (not every method's defaults: [aksc] image_shape has no TOML value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = bs._config(base, tmp_path, tuple(bs.METHODS))
    assert cfg.sections["bbs"]["solver"] == "dual" and cfg.sections["affinity"]["knn"] == "ivf-rows"
    assert bs._settings(None, None, None)[1] == list(bs.SIZES)
    with pytest.raises(Exception, match="between 100 and 1000000"):
        bs._settings("mnist-1m", [2_000_000], None)


def test_the_report_names_each_method_s_largest_arpack_solve():
    solve = {"rows": 150000, "k": 10, "ncv": 21, "iterations": 12, "products": 800, "filter_degree": 8,
             "converged": True}
    res = bs.scale_result([150000], {"knn": [1.0]}, {"knn": [1]},
                          extra={"eigen_solves": {150000: {"sk": [solve], "bbs": [{**solve, "rows": 200},
                                                                                  {**solve, "iterations": 30}],
                                                           "none": []}}})
    assert "ARPACK n=150000: sk 12 iterations, 800 products, bbs 30 iterations, 800 products\n" in \
        bs.format_report(res) + "\n"
