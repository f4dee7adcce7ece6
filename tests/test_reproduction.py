"""The committed paper reproductions come out the same to the last bit (`bigclust report verify`)."""
from pathlib import Path

import pytest

from bigclust.report import verify

RESULTS = Path(__file__).parents[1] / "pipelines" / "bbs" / "results"


@pytest.mark.realdata
@pytest.mark.slow
def test_vehicle_reproduction_is_bit_identical(data_root, monkeypatch):
    monkeypatch.setenv("BIGCLUST_DATA", str(data_root))
    ok, text = verify(RESULTS / "vehicle")
    assert ok, text
    assert "45 of 45 records reproduced exactly" in text
