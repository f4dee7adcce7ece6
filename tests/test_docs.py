"""The documentation site builds with ``-W``, so it cannot rot.

One ``sphinx-build -W -b html docs ...`` as the README gives it: every page, the API reference generated from
the docstrings (a docstring numpydoc cannot parse is an error), the configuration reference walked from the
schema, the command-line reference from click, the benchmark and reproduction pages made from the committed
JSON files, and the gallery with only its fastest example executed (``BIGCLUST_DOCS_EXAMPLES``, read by
``docs/conf.py``; the others are rendered without running).  A broken reference or a failing example fails it.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

for _module in ("sphinx", "pydata_sphinx_theme", "numpydoc", "sphinx_gallery", "myst_parser", "sphinx_click"):
    pytest.importorskip(_module, reason="the docs extra is not installed (pip install -e '.[docs]')")

ROOT = Path(__file__).resolve().parents[1]
#: the gallery scripts executed here: the fastest (about 20 s on 2 loaded cores), on data bundled with
#: scikit-learn when $BIGCLUST_DATA has no optdigits
FAST_EXAMPLES = r"plot_mbbs_weights\.py"


def test_docs_build_with_warnings_as_errors(tmp_path):
    out = tmp_path / "html"
    env = {**os.environ, "BIGCLUST_DOCS_EXAMPLES": FAST_EXAMPLES, "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(tmp_path / "doctrees"), str(ROOT / "docs"), str(out)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"sphinx-build failed:\n{r.stderr[-6000:]}"
    for page in ("index", "getting_started", "user_guide/normalizations", "reference/config", "reference/cli",
                 "reference/api", "reference/generated/bigclust.SpectralClustering", "benchmarks/index",
                 "architecture", "auto_examples/index"):
        assert (out / f"{page}.html").is_file(), page
    config = (out / "reference/config.html").read_text()
    assert "max_memory" in config and "n_neighbors" in config     # generated from the schema, every section
    assert list((out / "_images").glob("sphx_glr_plot_mbbs_weights_*.png")), "the executed example left no figure"
