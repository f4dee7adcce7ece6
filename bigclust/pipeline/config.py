"""TOML pipeline configs: parse, validate, expand sweeps.

A config describes one pipeline in sections (``[data]`` ... ``[output]``, the sections of the families'
methods; the schema is :mod:`bigclust.pipeline.schema`).
Every scalar parameter may be given as a list, which sweeps it; the grid is
the Cartesian product of all swept parameters.  Everything is checked before
any work starts and every error names the file, the key and what was expected
(:class:`bigclust._util.errors.ConfigError`).

Conventions: ``[affinity] gamma`` is the width of the Gaussian kernel
``exp(-||x_i - x_j||^2 / gamma)``, a squared distance (the inverse of
scikit-learn's rbf ``gamma``), or ``"median"``: the median squared distance
over the kernel's pairs, resolved by the affinity stage (recorded as
``gamma_used``).  ``[store] path`` and ``[output] dir`` default to
``<config stem>.zarr`` and ``<config stem>-results`` beside the config file;
``[method] names`` to the methods registered as defaults.  ``[data] label_column =
false`` (or ``"none"``) declares unlabelled data and then needs
``[cluster] n_clusters``.
"""
from __future__ import annotations

import itertools
import math
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from bigclust._util.errors import ConfigError, UserError
from bigclust._util.hashing import stable_hash
from bigclust._util.plan import parse_bytes
from bigclust.pipeline import methods
from bigclust.pipeline.schema import AFFINITIES, SCHEMA, Key  # noqa: F401  (their home before schema.py)


@dataclass(frozen=True)
class Config:
    """A validated config: defaults filled in, sweeps kept as lists.

    Attributes
    ----------
    path : Path
        The TOML file (relative paths inside it are resolved against its folder).
    sections : dict
        ``{section: {key: value or list of values}}`` with every key present.
    sweeps : dict
        ``{(section, key): [values...]}`` for the swept keys.
    """

    path: Path
    sections: dict
    sweeps: dict = field(default_factory=dict)

    def points(self):
        """Yield one ``{section: {key: scalar}}`` dict per point of the sweep grid."""
        keys = list(self.sweeps)
        for combo in itertools.product(*(self.sweeps[k] for k in keys)):
            point = {s: dict(v) for s, v in self.sections.items()}
            for (sec, key), val in zip(keys, combo):
                point[sec][key] = val
            yield point

    def resolve(self, p: str | None) -> Path | None:
        """A path from the config, relative to the config file's folder."""
        if p is None:
            return None
        p = Path(p).expanduser()
        return p if p.is_absolute() else (self.path.parent / p)

    @property
    def hash(self) -> str:
        """Hash of the validated content (not of the file's spelling).

        Keys added to the schema later (``Key.added``) count only when they
        differ from their default, so the output folder of a run made before
        they existed is still recognised as this config's.
        """
        full = schema()
        kept = {sec: {k: v for k, v in keys.items()
                      if not (sec in full and k in full[sec] and (full[sec][k].scoreless or
                                                                  (full[sec][k].added and v == full[sec][k].default)))}
                for sec, keys in self.sections.items()}
        # a method this config does not run is hashed with the defaults it had before they changed (Key.was):
        # its settings decide nothing, and the config keeps the hash of its results folder
        for sec in set(methods.names()) - set(self.methods):
            if not methods.get(sec).hashed_unused:
                kept.pop(sec, None)
                continue
            kept[sec] = {k: full[sec][k].was if full[sec][k].was is not None and v == full[sec][k].default else v
                         for k, v in kept[sec].items()}
        # a section whose keys were all added later (e.g. [subspace]) is left out while at its defaults
        return stable_hash({sec: keys for sec, keys in kept.items()
                            if keys or not (sec in full and all(k.added for k in full[sec].values()))})

    @property
    def max_memory(self) -> int:
        return parse_bytes(self.sections["store"]["max_memory"])

    @property
    def methods(self) -> list[str]:
        return list(self.sections["method"]["names"])


def _type_name(t):
    if isinstance(t, tuple):
        return " or ".join(_type_name(x) for x in t)
    return {str: "a string", int: "an integer", float: "a number", bool: "true/false",
            list: "a list"}.get(t, t.__name__)


def _check_value(where, spec: Key, value):
    """Coerce int→float where a number is wanted and check type and range."""
    t = spec.type
    wants_float = t is float or (isinstance(t, tuple) and float in t)
    if wants_float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    ok = isinstance(value, t) and not (isinstance(value, bool) and t in (int, float, (str, int)))
    if not ok:
        raise ConfigError(f"{where}: expected {_type_name(t)}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    try:
        ok = spec.check is None or spec.check(value)
    except UserError as e:   # a check that says what is wrong (a table of augmentations: which transform)
        raise ConfigError(f"{where}: {e}") from None
    if not ok:
        raise ConfigError(f"{where}: expected {spec.expect}, got {value!r}")
    return value


def load(path) -> Config:
    """Read and validate a pipeline config.

    Parameters
    ----------
    path : str or Path
        The TOML file.

    Returns
    -------
    Config

    Raises
    ------
    ConfigError
        One line naming the file, the key and what was expected.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    return from_dict(raw, path)


def schema() -> dict[str, dict[str, Key]]:
    """The shared sections (those the families add among them), then one section per registered method.

    ``[method] names`` defaults to the methods registered with ``default=True``
    (:mod:`bigclust.pipeline.methods`).
    """
    full = {}
    for sec, keys in SCHEMA.items():
        full[sec] = keys if sec != "method" else {"names": Key(list, methods.default_names(), sweep=False)}
        full.update({name: s["keys"] for name, s in methods.SECTIONS.items() if s["after"] == sec})
    full.update({name: s["keys"] for name, s in methods.SECTIONS.items() if s["after"] not in SCHEMA})
    return {**full, **{name: methods.get(name).schema() for name in methods.names()}}


def moved() -> dict[tuple[str, str], str]:
    """Keys of the old flat ``[method]`` section (and ``[cluster] kmeans_n_init``) and where they live now."""
    out = {}
    for m in methods.REGISTRY.values():
        for old, key in m.moved.items():
            out[old] = (out[old] + ", " if old in out else "") + f"[{m.name}] {key}"
    return out


def _section_of(full, key) -> str:
    """Where ``key`` lives (``[cluster]``), for an error about a key given outside any section."""
    homes = [f"[{sec}]" for sec, keys in full.items() if key in keys]
    return " or ".join(homes) if homes else "the section it configures"


def _check_sections(raw: dict, path: Path, full: dict):
    """Every top-level entry is a known section; no key of the old flat sections is left."""
    was = moved()
    for sec in raw:
        if not isinstance(raw[sec], dict):
            # a key above the first [section] (or a section name used as a key)
            raise ConfigError(f"{path}: key {sec!r} is outside any section; every key belongs in one, e.g. "
                              + ("[" + sec + "]" if sec in full else _section_of(full, sec)))
        if sec not in full:
            raise ConfigError(f"{path}: unknown section [{sec}]; expected one of "
                              + ", ".join(f"[{s}]" for s in full))
        for key in raw[sec]:
            if (sec, key) in was:
                raise ConfigError(f"{path}: [{sec}] {key} has moved to the method sections: {was[(sec, key)]} "
                                  "(README, 'Configs')")


def from_dict(raw: dict, path: Path | str = "<config>") -> Config:
    """Validate an already parsed config dict (see :func:`load`)."""
    path = Path(path)
    full = schema()
    _check_sections(raw, path, full)
    names = raw.get("method", {}).get("names", full["method"]["names"].default)
    if not methods.check_names(names):
        bad = [v for v in names if not (isinstance(v, str) and v in methods.names())] if isinstance(names, list) else []
        what = f"unknown method {bad[0]!r}" if bad else f"expected a non-empty list of method names, got {names!r}"
        raise ConfigError(f"{path}: [method] names: {what}; the methods are {', '.join(methods.names())}")
    for sec in raw:
        if sec in methods.names() and sec not in names:     # a typo in names, or a method left out on purpose
            warnings.warn(f"{path}: section [{sec}] is not used: {sec!r} is not in [method] names "
                          f"({', '.join(names)})", UserWarning, stacklevel=2)
    sections, sweeps = {}, {}
    for sec, keys in full.items():
        given = raw.get(sec, {})
        for key in given:
            if key not in keys:
                raise ConfigError(f"{path}: unknown key [{sec}] {key!r}; expected one of " + ", ".join(keys))
        out = {}
        for key, spec in keys.items():
            where = f"{path}: [{sec}] {key}"
            if key not in given:
                if spec.required:
                    raise ConfigError(f"{where}: missing required key")
                out[key] = spec.default
                continue
            value = given[key]
            if isinstance(value, list) and spec.type is not list:
                if not spec.sweep:
                    raise ConfigError(f"{where}: cannot be swept; expected {_type_name(spec.type)}")
                if not value:
                    raise ConfigError(f"{where}: an empty list sweeps nothing")
                value = [_check_value(f"{where}[{i}]", spec, v) for i, v in enumerate(value)]
                # a table (an augmentation's description) is compared by its content
                if len({stable_hash(v) if isinstance(v, dict) else v for v in value}) != len(value):
                    raise ConfigError(f"{where}: repeated values in sweep {value!r}")
                sweeps[(sec, key)] = value
            else:
                value = _check_value(where, spec, value)
            out[key] = value
        sections[sec] = out
    data = sections["data"]
    if data["label_column"] is False or data["label_column"] == "none":
        data["label_column"] = None                  # no labels
    if data["label_column"] is None and not sections["cluster"]["n_clusters"]:
        raise ConfigError(f"{path}: [data] label_column = false (no labels): set [cluster] n_clusters, "
                          "the number of clusters cannot be taken from the labels")
    if sections["store"]["path"] is None:
        sections["store"]["path"] = f"{path.stem}.zarr"
    if sections["output"]["dir"] is None:
        sections["output"]["dir"] = f"{path.stem}-results"
    if (data["name"] is None) == (data["path"] is None):
        raise ConfigError(f"{path}: [data] needs exactly one of 'name' (a registered data set) or 'path' (a file)")
    if data["name"] is not None:
        from bigclust.datasets import get_info
        try:
            get_info(data["name"])
        except Exception as e:  # DataError: unknown name
            raise ConfigError(f"{path}: [data] name: {e}") from None
    ev = sections["evaluate"]
    if ev["protocol"] == "subsets" and sections["cluster"]["n_clusters"]:
        raise ConfigError(f"{path}: [cluster] n_clusters: the subset protocol clusters each subset into as many "
                          "clusters as it has classes; leave n_clusters unset")
    idle = [k for k in ("subset_sizes", "subset_trials", "subset_seed") if k in raw.get("evaluate", {})]
    if ev["protocol"] != "subsets" and idle:
        warnings.warn(f"{path}: [evaluate] {', '.join(idle)} not used: they belong to protocol = \"subsets\" "
                      f"(protocol is {ev['protocol']!r})", UserWarning, stacklevel=2)
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: [method] names: {names!r} lists a method twice")
    try:
        parse_bytes(sections["store"]["max_memory"])
    except ValueError:
        raise ConfigError(f"{path}: [store] max_memory: expected a size like \"4GB\" or \"512MiB\", "
                          f"got {sections['store']['max_memory']!r}") from None
    return Config(path=path, sections=sections, sweeps=sweeps)
