"""``bigclust report compare`` with a paper-002 CSV: trial records named as the paper's columns, mean ± std."""
import csv
import json

import numpy as np

from bigclust.report.compare import compare


def _rec(reg, k, aug, acc, nmi, dataset="coil20", **semi):
    return {"method": "aksc", "dataset": dataset, "acc_best_inertia": acc, "nmi_best_inertia": nmi,
            "params": {"regularizer": reg, "n_neighbors": k, "augment": aug, **semi}}


def test_compare_names_trials_and_averages(tmp_path):
    recs = [_rec("l1", 10, "coil20", 1.0, 1.0), _rec("l1", 10, "coil20", 0.99, 0.98),     # Ak-SSC, 2 trials
            _rec("l1", 0, "none", 0.75, 0.9),                                             # SSC (full)
            _rec("l2", 10, "none", 0.8, 0.85),                                            # kNN-LSR
            _rec("l1", 10, "coil20", 1.0, 1.0, semi_supervised=True, labelled_per_class=4),   # AkS-SSC
            _rec("l2", 10, "none", 0.9, 0.95, semi_supervised=True, labelled_per_class=4),    # LSR-LP
            _rec("l1", 10, "mnist", 0.9, 0.8, dataset="mnist-test-500-0-9"),             # Table 2 [0:9]
            {"method": "kmeans", "dataset": "coil20", "params": {}, "acc_best_inertia": 0.5, "nmi_best_inertia": 0.5}]
    res = tmp_path / "results.json"
    res.write_text(json.dumps(recs))
    paper = tmp_path / "paper.csv"
    paper.write_text("# comment\ntable,dataset,setting,method,metric,value,std,note\n"
                     "1,coil20,,Ak-SSC,err,0.31,0.23,\n1,coil20,,Ak-SSC,nmi,99.64,0.26,\n"
                     "1,coil20,,SSC,err,25.90,,\n1,coil20,,kNN-LSR,err,22.29,,\n1,coil20,,KSSC,err,14.93,,\n"
                     "3,coil20,labelled=4 aug=coil20,AkS-SSC,err,0,0,\n"
                     "4,coil20,labelled=4 aug=none,LSR-LP,nmi,92.19,0.72,garbled\n"
                     "2,mnist-test,digits=0:9,Ak-SSC,err,8.40,0.76,\n")
    out_csv = tmp_path / "cmp.csv"
    text = compare([res], paper, out_csv=out_csv)
    rows = {(r["table"], r["setting"], r["method"], r["metric"]): r for r in csv.DictReader(open(out_csv))}
    ak = rows[("1", "", "Ak-SSC", "err")]
    assert float(ak["ours"]) == 0.5 and np.isclose(float(ak["ours_std"]), 0.5) and ak["n_trials"] == "2"
    assert np.isclose(float(ak["diff"]), 0.5 - 0.31)
    assert np.isclose(float(rows[("1", "", "Ak-SSC", "nmi")]["ours"]), 99.0)
    assert np.isclose(float(rows[("1", "", "SSC", "err")]["ours"]), 25.0)
    assert np.isclose(float(rows[("1", "", "kNN-LSR", "err")]["ours"]), 20.0)
    assert rows[("1", "", "KSSC", "err")]["ours"] == ""                      # not run: paper only
    assert float(rows[("3", "labelled=4 aug=coil20", "AkS-SSC", "err")]["ours"]) == 0.0
    lp = rows[("4", "labelled=4 aug=none", "LSR-LP", "nmi")]
    assert np.isclose(float(lp["ours"]), 95.0) and lp["note"] == "garbled"
    assert np.isclose(float(rows[("2", "digits=0:9", "Ak-SSC", "err")]["ours"]), 10.0)
    assert "92.19 ± 0.72*" in text and "## Table 3" in text


def test_compare_sensitivity_tables_name_cells_by_k_and_augmentation(tmp_path):
    # supplement Tables 6-7 vary k: the same trial also counts under "k=K aug=A" (with the digits for MNIST),
    # while Table 1's cell (setting "") keeps only the records passed for it
    recs = [_rec("l1", 30, "coil20_flip", 0.8, 0.9), _rec("l1", 30, "coil20_flip", 0.9, 0.95),
            _rec("l1", 50, "coil20_flip", 0.5, 0.6),                                      # other k: not mixed in
            _rec("l2", 30, "none", 0.7, 0.8),                                             # kNN-LSR k=30
            _rec("l1", 0, "none", 0.1, 0.1),                                              # full SSC: no k cell
            _rec("l1", 100, "mnist", 0.9, 0.85, dataset="mnist-test-500-0-9"),
            _rec("l1", 100, "mnist", 0.9, 0.85, dataset="mnist-test-500-0-3")]             # other digits
    res = tmp_path / "results.json"
    res.write_text(json.dumps(recs))
    paper = tmp_path / "paper.csv"
    paper.write_text("table,dataset,setting,method,metric,value,std,note\n"
                     "6,coil20,k=30 aug=coil20_flip,Ak-SSC,err,16.32,,\n"
                     "6,coil20,k=30 aug=none,kNN-LSR,err,28.13,,\n"
                     "6,coil20,k=0 aug=none,SSC,err,1,,\n"
                     "7,mnist-test,digits=0:9 k=100 aug=mnist,Ak-SSC,err,9.20,0.63,\n")
    out_csv = tmp_path / "cmp.csv"
    compare([res], paper, out_csv=out_csv)
    rows = {(r["table"], r["setting"], r["method"]): r for r in csv.DictReader(open(out_csv)) if r["metric"] == "err"}
    flip = rows[("6", "k=30 aug=coil20_flip", "Ak-SSC")]
    assert np.isclose(float(flip["ours"]), 15.0) and np.isclose(float(flip["ours_std"]), 5.0)
    assert flip["n_trials"] == "2"
    assert np.isclose(float(rows[("6", "k=30 aug=none", "kNN-LSR")]["ours"]), 30.0)
    assert rows[("6", "k=0 aug=none", "SSC")]["ours"] == ""
    mn = rows[("7", "digits=0:9 k=100 aug=mnist", "Ak-SSC")]
    assert np.isclose(float(mn["ours"]), 10.0) and mn["n_trials"] == "1"


def test_compare_refuses_to_average_pixels_with_scattering(tmp_path):
    import pytest

    from bigclust._util.errors import UserError
    pix = _rec("l1", 10, "mnist", 0.7, 0.7, dataset="mnist-test-500-0-9")              # no key: pixels
    scat = _rec("l1", 10, "mnist", 0.9, 0.8, dataset="mnist-test-500-0-9", features="scattering")
    paper = tmp_path / "paper.csv"
    paper.write_text("table,dataset,setting,method,metric,value,std,note\n2,mnist-test,digits=0:9,Ak-SSC,err,8.40,,\n")
    for i, recs in enumerate(([pix], [scat])):
        (tmp_path / f"r{i}.json").write_text(json.dumps(recs))
    for files in ([tmp_path / "r0.json"], [tmp_path / "r1.json"]):
        compare(files, paper)                                        # each alone is fine
    with pytest.raises(UserError, match="features 'pixels' and 'scattering'"):
        compare([tmp_path / "r0.json", tmp_path / "r1.json"], paper)


def test_compare_leaves_out_a_table2_cell_that_mixes_k(tmp_path):
    import pytest

    k10 = _rec("l1", 10, "none", 0.6, 0.6, dataset="mnist-test-500-0-9")
    k50 = _rec("l1", 50, "none", 0.8, 0.7, dataset="mnist-test-500-0-9")
    paper = tmp_path / "paper.csv"
    paper.write_text("table,dataset,setting,method,metric,value,std,note\n"
                     "2,mnist-test,digits=0:9,kNN-SSC,err,20.36,,\n"
                     "7,mnist-test,digits=0:9 k=50 aug=none,kNN-SSC,err,21.00,,\n")
    (tmp_path / "r.json").write_text(json.dumps([k10, k50]))
    out_csv = tmp_path / "cmp.csv"
    with pytest.warns(RuntimeWarning, match=r"k = \[10, 50\]"):
        compare([tmp_path / "r.json"], paper, out_csv=out_csv)
    rows = {(r["table"], r["setting"]): r for r in csv.DictReader(open(out_csv)) if r["metric"] == "err"}
    assert rows[("2", "digits=0:9")]["ours"] == ""                       # not an average over k = 10 and 50
    assert np.isclose(float(rows[("7", "digits=0:9 k=50 aug=none")]["ours"]), 20.0)
