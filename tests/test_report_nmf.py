"""``bigclust report compare`` on paper 001's subset tables: the average is over the same k on both sides,
and a run whose NMI is not normalised as the paper's (max) is refused, not labelled as if it were."""
import json

import pytest

from bigclust._util.errors import UserError
from bigclust.report.compare import compare

PAPER = {2: 0.40, 3: 0.50, 4: 0.60, 5: 0.60, 6: 0.60, 7: 0.60, 8: 0.60, 9: 0.60, 10: 0.60}


def _paper(tmp_path):
    p = tmp_path / "paper.csv"
    rows = ["table,dataset,kernel,method,k,value"]
    rows += [f"3.4,reuters,none,KM,{k},{v}" for k, v in PAPER.items()]
    rows.append("3.4,reuters,none,KM,avg,0.578")    # the paper's own average over k = 2..10
    p.write_text("\n".join(rows) + "\n")
    return p


def _run(tmp_path, name, ks, norm="max"):
    d = tmp_path / name
    d.mkdir()
    by_k = {str(k): 0.5 for k in ks}
    (d / "results.json").write_text(json.dumps([{"method": "kmeans", "params": {"ncw": False}, "dataset": "reuters",
                                                 "nmi_by_k": by_k, "nmi_avg": 0.5}]))
    (d / "run.json").write_text(json.dumps({"config": {"evaluate": {"nmi_norm": norm}}}))
    return d / "results.json"


def test_average_is_over_our_k_only(tmp_path):
    text = compare([_run(tmp_path, "few", [2, 3])], _paper(tmp_path))
    assert "avg over k = 2, 3" in text
    assert "0.500 / 0.450 / +0.050" in text          # the paper's k = 2, 3 cells, not its 0.578
    full = compare([_run(tmp_path, "all", PAPER)], _paper(tmp_path))
    assert "| avg |" in full and "0.500 / 0.578 / -0.078" in full


def test_another_nmi_normalisation_is_refused(tmp_path):
    with pytest.raises(UserError, match="'sqrt' normalisation and paper 001's tables the 'max' one"):
        compare([_run(tmp_path, "sqrt", [2, 3], norm="sqrt")], _paper(tmp_path))
