"""Short text of a parameter value, for label-file names and listings."""
from __future__ import annotations

import os


def short(v, float_format: str = "g", paths: bool = False) -> str:
    """``v`` in a few characters: booleans lower case, floats by ``float_format``, sequences comma-joined;
    ``paths``: a string holding a path separator (a data file) by its base name."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return format(v, float_format)
    if isinstance(v, (list, tuple)):
        return ",".join(short(x, float_format, paths) for x in v)
    if paths and isinstance(v, str) and os.sep in v:
        return os.path.basename(v)
    return str(v)
