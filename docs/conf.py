"""Sphinx configuration of the bigclust documentation.

Build: ``pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html``.  ``-W`` turns every
warning (a broken reference, a docstring numpydoc cannot parse, a failing gallery example) into an error.

``BIGCLUST_DOCS_EXAMPLES`` (a regular expression on the example's path, sphinx-gallery's ``filename_pattern``)
limits which gallery scripts are executed; the others are rendered without running.  The test suite
(``tests/test_docs.py``) sets it to the fastest examples.
"""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(ROOT))

import bigclust  # noqa: E402

project = "bigclust"
author = "the bigclust developers"
copyright = "the bigclust developers"
release = bigclust.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_click",
    "sphinx_gallery.gen_gallery",
    "matplotlib.sphinxext.plot_directive",
    "config_reference",      # docs/_ext: the configuration reference, from the schema and the registry
    "benchmarks",            # docs/_ext: the benchmark tables and plots, from the committed measurements
    "reproductions",         # docs/_ext: one page per paper, from the committed results.json files
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_templates", "Thumbs.db", ".DS_Store", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.md5", "auto_examples/*.codeobj.json"]
templates_path = ["_templates"]

# -- Markdown pages ---------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3

# -- API reference ----------------------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": False, "inherited-members": False}
autodoc_typehints = "none"             # numpydoc's Parameters sections carry the types
numpydoc_show_class_members = False    # the class pages list their methods through the template
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
add_module_names = False

# -- gallery ----------------------------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": os.environ.get("BIGCLUST_DOCS_EXAMPLES", r"/plot_"),
    "ignore_pattern": r"(__init__|_helpers?|conftest)\.py",
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "only_warn_on_example_error": False,   # an example that raises fails the build
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "min_reported_time": 1,
    "show_memory": False,
    "reference_url": {"bigclust": None},
}

# -- figures made while the pages build (plot directive) ---------------------------------------------------
plot_include_source = False
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 110)]
plot_rcparams = {"figure.figsize": (7.0, 3.2), "font.size": 9}

# -- HTML ---------------------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"bigclust {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_show_sourcelink = False
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "header_links_before_dropdown": 7,
    "navbar_persistent": ["search-button"],
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# pages without sub-pages: no empty navigation column
html_sidebars = {"index": [], "getting_started": [], "benchmarks/index": [], "architecture": []}
html_context = {"default_mode": "light"}
