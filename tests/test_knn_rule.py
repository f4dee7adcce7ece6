"""The IVF probe rule a stored kNN graph was searched under is recorded, and a graph of another rule is not reused.

``ivf_probe = 0`` ("the default rule") is left out of the affinity stage's key, so that committed configs keep
their hashes; the resolved rule is kept in the instance's attributes instead and compared on reuse.
"""
import numpy as np
import pytest

from bigclust._util.errors import UserError
from bigclust.algo.knn import ivf, ivf_rows
from bigclust.pipeline.runner import run

from bigclust.pipeline.store import Store

from test_knn_resume import _affinity, _config, _data, CHUNK

pytestmark = pytest.mark.filterwarnings("ignore:kNN graph")


def _attrs(store_path):
    s = Store(store_path)
    (key,) = s.stage_keys("affinity")
    return dict(s.open("affinity", key).attrs)


def _default_rule_config(make_config, p, knn, chunk, store):
    cfg = _config(make_config, p, store=store, chunk=chunk, out=f"out-{store}")
    cfg.write_text(cfg.read_text().replace(f"knn_chunk_rows = {chunk}",
                                           f'knn_chunk_rows = {chunk}\nknn = "{knn}"\nivf_cells = 16'))
    return cfg


@pytest.mark.parametrize("knn,chunk", [("ivf-rows", CHUNK), ("ivf-rows", 0), ("ivf", CHUNK)])
def test_a_graph_of_another_default_rule_is_refused(tmp_path, make_config, monkeypatch, knn, chunk):
    p, X = _data(tmp_path)
    cfg = _default_rule_config(make_config, p, knn, chunk, "s.zarr")
    run(cfg)
    attrs = _attrs(tmp_path / "s.zarr")
    rule = attrs["knn_rule"]
    assert rule["search"] == knn and rule["n"] == X.shape[0] and rule["cells"] == 16 and "ivf_probe" not in \
        attrs["params"]
    run(cfg)                                           # the same rule: reused
    assert _attrs(tmp_path / "s.zarr")["started"] == attrs["started"]
    # the default rule changes (as ivf_rows.DEFAULT_PROBE did, 16 -> 24): the key stays, the graph is refused
    if knn == "ivf-rows":
        monkeypatch.setattr(ivf_rows, "DEFAULT_PROBE", rule["probe"] - 1)
    else:
        monkeypatch.setattr(ivf, "DEFAULT_PROBE", rule["probe"] - 1)
    with pytest.raises(UserError, match=r"probe=.* now .*bigclust store clean --stage affinity"):
        run(cfg)


def test_a_graph_stored_before_rules_were_recorded_is_reused_with_a_warning(tmp_path, make_config):
    import zarr

    p, _ = _data(tmp_path)
    cfg = _default_rule_config(make_config, p, "ivf-rows", CHUNK, "old.zarr")
    run(cfg)
    (key,) = Store(tmp_path / "old.zarr").stage_keys("affinity")
    g = zarr.open_group(str(tmp_path / "old.zarr" / "stages" / "affinity" / key), mode="r+")
    del g.attrs["knn_rule"]                           # as the stores made before this record
    with pytest.warns(RuntimeWarning, match="predates recorded IVF rules"):
        run(cfg)
    np.testing.assert_array_equal(_affinity(tmp_path / "old.zarr")[1], g["neighbors"][...])
