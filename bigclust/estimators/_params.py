"""Estimator parameters checked against the config keys' own declarations (scikit-learn's ``_parameter_constraints``).

An estimator declares, per parameter, the :class:`~bigclust.pipeline.schema.Key` it is checked against:
the key of the config schema or of a method's section it stands for (:func:`config_key`), so that the type,
the range and the words of the message are the config's, declared once; or a key of its own for what only
the estimator has (``n_clusters`` of 1, ``max_memory``, ``scheduler``, a choice between methods).  A key
whose value an estimator spells ``None`` (``augment=None`` is ``[aksc] augment = "none"``) is declared
with :class:`NoneMeans`.

Every message names the estimator and its parameter (never a config key): ``NMFClustering: max_iter must
be an integer > 0, got 0``.  NumPy scalars (``np.int64(3)`` from a parameter grid) are accepted and every
value is returned as a plain Python value, which is what the pipeline's config validation expects.
Raised as :class:`bigclust._util.errors.UserError`, a ValueError, as scikit-learn's estimator checks want.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from bigclust._util.errors import UserError
from bigclust.pipeline.schema import SCHEMA, Key   # the estimators' one import of the config schema

#: what a value of the key's type is, before the key's own ``expect`` ("an integer" "> 0"); a key that
#: takes strings says everything in its ``expect`` ("one of 'mu', 'hals'")
_WORDS = {bool: "True or False", int: "an integer", float: "a finite number", (float, str): "a number"}


def config_key(section: str, name: str) -> Key:
    """The declaration of ``[section] name``: a shared section's key, or a registered method's parameter."""
    if section in SCHEMA:
        return SCHEMA[section][name]
    from bigclust.pipeline import methods
    fields = {f.name: f for f in dataclasses.fields(methods.get(section).params)}
    return fields[name].metadata["key"]


def own_key(type_, check=None, expect: str = "") -> Key:
    """A parameter only the estimator has (the config has no key for it, or one with another range)."""
    return Key(type_, None, check, expect)


@dataclass(frozen=True)
class NoneMeans:
    """A parameter whose ``None`` stands for the config key's ``value`` (which it does not take itself).

    ``expect``: the message's text; by default the key's, with ``value`` shown as ``None``.
    """

    key: Key
    value: Any
    expect: str | None = None

    def as_key(self) -> Key:
        key = self.key
        types = key.type if isinstance(key.type, tuple) else (key.type,)
        return Key(types + (type(None),), None,
                   lambda v: v is None or (v != self.value and (key.check is None or key.check(v))),
                   self.expect or key.expect.replace(repr(self.value), "None"))


def _fits(v, types) -> bool:
    if isinstance(v, bool):
        return bool in types
    if isinstance(v, numbers.Integral):
        return int in types or float in types
    if isinstance(v, numbers.Real):
        return float in types and math.isfinite(v)
    if isinstance(v, str):
        return str in types
    if v is None:
        return type(None) in types
    # an object type among the types (random_state's numpy.random.RandomState)
    return any(isinstance(v, t) for t in types if t not in (bool, int, float, str, type(None)))


def check(est, name: str, spec: Key | NoneMeans):
    """``getattr(est, name)`` checked against ``spec``, as the plain config value (``None``: what it means)."""
    key = spec.as_key() if isinstance(spec, NoneMeans) else spec
    v = getattr(est, name)
    if isinstance(v, np.generic):
        v = v.item()                       # 2.0, not np.float64(2.0), in the value and in the message
    types = key.type if isinstance(key.type, tuple) else (key.type,)
    try:
        bad = not _fits(v, types) or (key.check is not None and not key.check(v))
    except UserError as e:   # a check that says what is wrong (a table of augmentations: which transform)
        raise UserError(f"{type(est).__name__}: {name}: {e}") from None
    if bad:
        what = f"{_WORDS.get(key.type, '')} {key.expect}".strip()
        raise UserError(f"{type(est).__name__}: {name} must be {what}, got {v!r}")
    if v is None and isinstance(spec, NoneMeans):
        return spec.value
    if float in types and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    return v


def _size(v) -> bool:
    from bigclust._util.plan import parse_bytes
    try:
        return parse_bytes(v) > 0
    except ValueError:
        return False


def _seed_range(v) -> bool:
    return not isinstance(v, numbers.Integral) or 0 <= v < 2**32


#: the parameters every estimator has
COMMON = {
    # 1 puts every sample in one cluster; the config's n_clusters = 1 would mean a 1-cluster k-means run
    "n_clusters": own_key(int, lambda v: v >= 1, ">= 1"),
    "max_memory": own_key((str, int), _size, 'a size like "4GB" or "512MiB", or a number of bytes > 0'),
    "scheduler": own_key((str, type(None)), None, 'None or a dask.distributed address like "tcp://host:8786"'),
    # what scikit-learn's check_random_state takes, checked here so that the message names the estimator
    # (NumPy's own is "Seed must be between 0 and 2**32 - 1")
    "random_state": own_key((int, type(None), np.random.RandomState), _seed_range,
                            "None, an integer in [0, 2**32 - 1] or a numpy.random.RandomState"),
}
