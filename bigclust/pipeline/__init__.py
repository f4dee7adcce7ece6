"""The pipeline: config schema and parsing, the registry the families plug into, generic stages, the zarr
store, the runner, checks, store cleaning and ``report verify``.  Names no method and no family.

``bigclust.pipeline.run`` / ``validate`` (and the rest of what ``bigclust.pipeline`` offered when it was one
module) are re-exported lazily: importing the package does not import the runner.
"""
from importlib import import_module

#: public name -> the module that defines it
_LAZY = {
    "run": "runner", "validate": "runner", "execute": "units", "Runner": "runner", "instances": "runner",
    "run_units": "units", "log": "runner", "DROPPABLE": "usage", "PREPROCESS": "runner",
    "INGEST": "stages.data", "ingest_to_store": "stages.data", "store_info": "stages.data",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
