"""The README's Python examples run as written (issue 12): every ```python block, in order, in one namespace.

The README defines its own data (scikit-learn's wine table, in its first block), so nothing is injected
here; a block that names something undefined, or calls an API that does not exist, fails this test.  The
README is a front page with two Python examples (an estimator, the same estimator on a Dask cluster); the
library functions underneath are shown in the documentation's user guide.
"""
import re
from pathlib import Path

import numpy as np

README = Path(__file__).parents[1] / "README.md"


def python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_examples_run():
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 2
    ns = {"__name__": "readme"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md python block {i + 1}", "exec"), ns)
    # the examples compute what their comments say
    y, labels = ns["y"], ns["labels"]
    assert labels.shape == y.shape == (178,) and set(np.unique(labels)) == {0, 1, 2}
    assert ns["metrics"].accuracy(y, labels) > 0.8            # standardised wine: the three cultivars
    assert ns["est"].gamma_ > 0
    assert np.array_equal(ns["labels_dask"], labels)          # on the Dask cluster: the same labels
