"""Cheap package imports (PEP 562): a package's public names are loaded from their modules on first access.

Each family's ``__init__`` declares ``{public name: submodule}`` and takes its module-level ``__getattr__``
and ``__dir__`` from :func:`lazy_names`, so that ``import bigclust`` (which imports every family's plug-in)
imports no algorithm module and compiles no kernel.
"""
from importlib import import_module


def lazy_names(namespace, where, listed=None):
    """``(__getattr__, __dir__)`` for the package whose globals are ``namespace``.

    where : ``{public name: submodule}``, the submodule relative to the package (``"_linear"``).
    listed : what ``dir(package)`` shows besides the package's globals; default the names of ``where``.
    A name, once loaded, is stored in ``namespace``: later lookups find it there and do not come back here.
    """
    package = namespace["__name__"]
    shown = set(where if listed is None else listed)

    def __getattr__(name):
        if name in where:
            value = getattr(import_module(f"{package}.{where[name]}"), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(namespace) | shown)

    return __getattr__, __dir__
