"""One place for the Numba defaults of every kernel.

``BIGCLUST_NUMBA_CACHE=0`` turns the on-disk cache off (e.g. on read-only
installs); by default compiled kernels are cached beside the sources so that
the second process start does not pay compilation again.
"""
import os

from numba import njit as _njit

CACHE = os.environ.get("BIGCLUST_NUMBA_CACHE", "1") not in ("0", "false", "no")


def njit(*args, **kwargs):
    """``numba.njit`` with ``cache`` defaulting to the project switch.

    ``fastmath`` is never switched on here: kernels that only do pure
    arithmetic may ask for it explicitly (comparisons and guarded divisions need strict IEEE).
    """
    kwargs.setdefault("cache", CACHE)
    if args and callable(args[0]) and len(args) == 1 and not kwargs.get("_sig"):
        return _njit(**kwargs)(args[0])
    return _njit(*args, **kwargs)
