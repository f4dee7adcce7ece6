"""The public API's docstrings are complete numpydoc docstrings, and their Examples run.

The public API is what ``docs/reference/api.rst`` lists (parsed here, so a name added to the reference is
checked without touching this file), plus the methods of those classes that bigclust defines (the estimators'
``fit``, ``Dictionary.owners_matrix``, ...).  Every object is validated with ``numpydoc.validate`` and must
report none of the error codes in ``CHECKED``: no docstring (GL08), a summary that is missing, not capitalised,
not ended by a period, indented or longer than one line (SS01-SS04, SS06), parameters not documented, unknown,
out of order, without a type or without a description (PR01-PR07, PR10), a missing or malformed Returns / Yields
section (RT01-RT03, YD01), sections out of order or badly closed (GL02, GL03, GL07).

Excluded: ES01 (an extended summary is not needed for a short
function), SA01 (See Also), EX01 for every object (the Examples are required, and run, only for the estimators
and the top-level functions in ``EXAMPLES`` below), SS05 (the "infinitive verb" heuristic misfires on
nouns such as "Lloyd's k-means"), PR08 / PR09 / RT04 / RT05 (capitalisation and final periods of descriptions:
a description may start with a parameter's lowercase name), GL01 (the docstrings start on the opening quotes'
line, the layout PEP 257 and this code base use).

The Examples of ``EXAMPLES`` are run as doctests (ELLIPSIS and NORMALIZE_WHITESPACE): tiny data, rounded values
or shapes only, so they hold for every BLAS; all of them take a few seconds.  ``bigclust.pipeline.run`` has
none: a runnable one (a data file and a config written to a temporary folder) does not fit in
``pipeline/runner.py`` under the 500-line limit; the Getting started page shows one, and
``tests/test_pipeline.py`` runs configs end to end.
"""
import doctest
import importlib
import inspect
import re
from pathlib import Path

import pytest

pytest.importorskip("numpydoc", reason="the docs extra is not installed (pip install -e '.[docs]')")
from numpydoc.docscrape import get_doc_object  # noqa: E402
from numpydoc.validate import validate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "reference" / "api.rst"

CHECKED = {"GL02", "GL03", "GL07", "GL08", "SS01", "SS02", "SS03", "SS04", "SS06",
           "PR01", "PR02", "PR03", "PR04", "PR05", "PR06", "PR07", "PR10", "RT01", "RT02", "RT03", "YD01"}

#: the objects whose Examples section must exist and run
EXAMPLES = ["bigclust.SpectralClustering", "bigclust.NMFClustering", "bigclust.SubspaceClustering",
            "bigclust.affinity.dense_kernel", "bigclust.affinity.knn_kernel",
            "bigclust.normalize.bbs", "bigclust.normalize.sinkhorn", "bigclust.normalize.ncut",
            "bigclust.metrics.accuracy", "bigclust.metrics.nmi", "bigclust.kmeans.kmeans",
            "bigclust.nmf.linear_nmf", "bigclust.subspace.subspace_clustering"]


def api_names():
    """The qualified names the API reference lists, in its order."""
    names, module, listing = [], None, False
    for line in API.read_text().splitlines():
        if m := re.match(r"\.\. currentmodule:: (\S+)", line):
            module = m.group(1)
        elif line.startswith(".. autosummary::"):
            listing = True
        elif listing and line.strip() and not line.startswith("   "):
            listing = False
        elif listing and line.strip() and not line.strip().startswith(":"):
            names.append(f"{module}.{line.strip()}")
    return names


def resolve(qualified):
    """The object a qualified name stands for (an attribute before a submodule of the same name)."""
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


def public_objects():
    """(name, object) for every API object and the public methods its class defines in bigclust."""
    out = []
    for name in api_names():
        obj = resolve(name)
        out.append((name, obj))
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, member in vars(obj).items():
                func = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if not attr.startswith("_") and inspect.isfunction(func):
                    out.append((f"{name}.{attr}", getattr(obj, attr)))
    return out


OBJECTS = public_objects()


def test_the_reference_lists_the_public_api():
    names = api_names()
    assert len(names) > 60 and len(set(names)) == len(names)
    assert set(EXAMPLES) <= set(names)


@pytest.mark.parametrize("name,obj", OBJECTS, ids=[n for n, _ in OBJECTS])
def test_numpydoc_validation(name, obj):
    errors = [f"{code} {msg}" for code, msg in validate(get_doc_object(obj))["errors"]
              if code in CHECKED]
    assert not errors, f"{name}:\n  " + "\n  ".join(errors)


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)       # an example that writes files writes them here
    obj = resolve(name)
    tests = [t for t in doctest.DocTestFinder(recurse=False).find(obj, name, globs={}) if t.examples]
    assert tests, f"{name} has no Examples section"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.failures == 0, f"{name}: {runner.failures} failing example(s), see the output above"
