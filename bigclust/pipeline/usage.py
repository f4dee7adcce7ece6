"""What a store holds on disk: ``bigclust store du``, the size line at the end of a run, and ``[store] keep``'s drops.

Sizes are bytes allocated on disk (:func:`bigclust.pipeline.store.disk_bytes`), per
stage and per array of each stage instance.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from bigclust._util.plan import format_bytes
from bigclust._util.text import short
from bigclust.pipeline.store import Store, disk_bytes

#: what ``[store] keep = "results"`` deletes at the end of a run: stage -> arrays (dense kernels; the
#: subset protocol's copies of the rows).  Their instances keep their attributes (see Store.drop).
DROPPABLE = {"affinity": ("K",), "subset": ("X",)}

#: stage parameters that only wire an instance to its inputs or budget: never what tells two instances apart
#: for a reader (a difference there shows as ``input=<key>`` only when nothing else differs)
_PLUMBING = {"input", "inputs", "src", "labels", "labels_src", "chunk_rows", "max_memory", "in_memory"}
#: longest description of an instance in ``store du`` / ``store clean`` (the rest is cut with "...")
_WIDTH = 100


def shown_path(p) -> str:
    """A path as a user reads it: ``pipelines/../runs/x`` as ``runs/x`` (relative to the current folder when
    that is shorter, else absolute).  Symbolic links are followed first, so the path shown is the one opened."""
    a = str(Path(p).expanduser().resolve())
    try:
        r = os.path.relpath(a)
    except ValueError:   # another drive (Windows)
        return a
    return r if len(r) < len(a) else a


def usage(store_path) -> dict:
    """Bytes on disk of a store: total, per stage (with its number of instances) and per array.

    Returns ``{"path", "bytes", "other_bytes", "unfinished", "about", "stages": {stage: {"bytes", "instances",
    "dropped", "arrays": {"<key>/<array>": bytes}}}}``; ``other_bytes`` is what lies outside ``stages/`` (the
    root metadata, unfinished writes), ``unfinished`` lists those writes (``{"path", "bytes", "what"}``) and
    ``about`` says what each instance is (``{"<stage>/<key>": "kind=gaussian gamma=4"}``, :func:`describe`).
    """
    store = Store(store_path)
    out = {"path": str(store.path), "bytes": disk_bytes(store.path), "stages": {}, "about": {}}
    inside = 0
    for stage in store.stages():
        keys = store.stage_keys(stage)
        arrays, total = {}, 0
        for key in keys:
            d = store.path / "stages" / stage / key
            for part in sorted(d.iterdir()):
                if part.is_dir():
                    arrays[f"{key}/{part.name}"] = disk_bytes(part)
            total += disk_bytes(d)
        total += sum(disk_bytes(p) for p in (store.path / "stages" / stage).iterdir() if p.name not in keys)
        out["stages"][stage] = {"bytes": total, "instances": len(keys),
                                "dropped": sum(store.dropped(stage, k) for k in keys), "arrays": arrays}
        out["about"].update({f"{stage}/{k}": v for k, v in describe(store.path, stage, keys).items()})
        inside += total
    out["other_bytes"] = out["bytes"] - inside
    out["unfinished"] = unfinished(store.path)
    return out


def unfinished(store_path) -> list[dict]:
    """Writes a store holds that are not finished stage instances: ``{"path", "bytes", "what"}`` each.

    ``tmp/<stage>-<key>-<pid>-<id>``: an instance being written by a live run (opening the store removed
    those of dead ones); ``work/<stage>-<key>``: a chunked stage stopped part-way, which a re-run resumes.
    The root metadata (a few ``zarr.json``) is not one: it is why ``other_bytes`` is never 0.
    """
    store_path = Path(store_path)
    out = []
    for folder, what in (("tmp", "being written by a running bigclust"),
                         ("work", "a chunked stage stopped part-way; a re-run resumes it")):
        d = store_path / folder
        for p in sorted(d.iterdir()) if d.is_dir() else ():
            out.append({"path": f"{folder}/{p.name}", "bytes": disk_bytes(p), "what": what})
    return out


def _attrs(store_path, stage, key) -> dict:
    """An instance's recorded attributes, read from its ``zarr.json`` (``{}`` when unreadable)."""
    try:
        f = Path(store_path) / "stages" / stage / key / "zarr.json"
        return json.loads(f.read_text()).get("attributes", {}) or {}
    except (OSError, ValueError, AttributeError):
        return {}


def _short(v) -> str:
    return short(v, ".4g", paths=True)


def _flat(attrs) -> dict:
    """An instance's hashed parameters, nested dicts flattened (a method's own parameters, the data's
    identity), ``None`` values left out, with ``gamma_used`` beside a ``"median"`` width."""
    flat = {}
    for k, v in (attrs.get("params") or {}).items():
        for k2, v2 in (v.items() if isinstance(v, dict) else [(k, v)]):
            if v2 is not None and k2 not in flat:
                flat[k2] = v2
    if flat.get("gamma") == "median" and isinstance(attrs.get("gamma_used"), (int, float)):
        flat["gamma"] = f"median({attrs['gamma_used']:.4g})"
    if "file" in flat:   # [absolute path, size, mtime] of the data file named by "path"
        flat.pop("file")
    return flat


def _with_input_method(store_path, flat) -> dict:
    """``method=`` of the instance an instance reads (a k-means of an embedding: the embedding's method)."""
    if "method" not in flat and isinstance(flat.get("src"), str) and isinstance(flat.get("input"), str):
        m = ((_attrs(store_path, flat["src"], flat["input"]).get("params") or {}).get("method"))
        if isinstance(m, str):
            return {"method": m, **flat}
    return flat


def _inputs(flat) -> list:
    inp = flat.get("input", flat.get("inputs"))
    return [inp] if isinstance(inp, str) else list(inp or [])


#: what an instance inherits from the instances it reads that tells it from its siblings: the kernel's
#: kind and width(s), the subset of classes
_INHERITED = ("kind", "gamma", "n_neighbors", "classes")


def _upstream(store_path, flat, depth=4) -> dict:
    """:data:`_INHERITED` parameters of the instances up an instance's chain (several inputs: joined)."""
    found = {}
    level = [flat]
    for _ in range(depth):
        nxt = [_flat(_attrs(store_path, f["src"], i)) for f in level if isinstance(f.get("src"), str)
               for i in _inputs(f)]
        for n in _INHERITED:
            vals = [f[n] for f in nxt if n in f]
            if vals and n not in found:
                found[n] = vals[0] if len(vals) == 1 else vals
        level = nxt
    return found


#: shown whenever an instance has them: what a reader looks for first
_FIRST = ("method", "kind", "k")


def describe(store_path, stage, keys) -> dict:
    """``{key: "kind=gaussian gamma=4"}``: what each instance of ``stage`` is, from its recorded parameters.

    Shown: the method (of the instance, or of the one it reads), the kernel's kind and k when the instance
    has them, then the parameters whose values differ between the stage's instances (what tells them
    apart); a stage with one instance shows all its parameters.  Plumbing (input keys, row-block sizes)
    shows only as ``on=<stage>/<key>`` when nothing else differs.  Cut at about 100 characters.
    """
    flats = {k: _with_input_method(store_path, _flat(_attrs(store_path, stage, k))) for k in keys}
    names = list(dict.fromkeys(n for f in flats.values() for n in f))
    differ = [n for n in names if len({_short(f.get(n)) for f in flats.values()}) > 1]
    own = [n for n in differ if n not in _PLUMBING]
    shown = ([n for n in _FIRST if n in names] + own) if len(keys) > 1 else [n for n in names if n not in _PLUMBING]
    shown = list(dict.fromkeys(shown))
    texts = {k: " ".join(f"{n}={_short(f[n])}" for n in shown if n in f) for k, f in flats.items()}
    out = {}
    for k, f in flats.items():
        text = texts[k]
        if list(texts.values()).count(text) > 1:   # same settings on other inputs: what the inputs were
            up = _upstream(store_path, f)
            text += " " + (" ".join(f"{n}={_short(v)}" for n, v in up.items() if n not in shown)
                           or "on=" + ",".join(f"{f.get('src', '')}/{str(i)[:8]}" for i in _inputs(f)))
        out[k] = text if len(text) <= _WIDTH else text[:_WIDTH - 3] + "..."
    return out


def format_usage(u: dict, top: int = 10) -> str:
    """``store du`` as text: a line per stage, unfinished writes (when there are), then the ``top`` largest
    arrays, each with what its instance is."""
    lines = [f"{shown_path(u['path'])}: {format_bytes(u['bytes'])} on disk"]
    stages = sorted(u["stages"].items(), key=lambda kv: -kv[1]["bytes"])
    for stage, s in stages:
        dropped = f", {s['dropped']} dropped" if s["dropped"] else ""
        lines.append(f"  {stage:<11} {format_bytes(s['bytes']):>10}  {s['instances']} instance(s){dropped}")
    for w in u.get("unfinished", []):
        lines.append(f"  {'(unfinished)':<11} {format_bytes(w['bytes']):>10}  {w['path']}: {w['what']}")
    about = u.get("about", {})
    arrays = sorted(((f"{st}/{name}", b) for st, s in u["stages"].items() for name, b in s["arrays"].items()),
                    key=lambda kv: -kv[1])[:top]
    if arrays:
        lines.append("largest arrays (stages/<stage>/<key>/<array>, and what the instance is):")
        w = max(len(name) for name, _ in arrays)
        lines += [f"  {format_bytes(b):>10}  {name:<{w}}  {about.get(name.rsplit('/', 1)[0], '')}".rstrip()
                  for name, b in arrays]
    return "\n".join(lines)


def summary_line(store: Store) -> str:
    """One line for the end of a run: the store, its size on disk and its three largest stages."""
    u = usage(store.path)
    big = sorted(u["stages"].items(), key=lambda kv: -kv[1]["bytes"])[:3]
    parts = ", ".join(f"{st} {format_bytes(s['bytes'])}" for st, s in big)
    return (f"store {shown_path(store.path)}: {format_bytes(u['bytes'])} on disk" + (f" ({parts})" if parts else "")
            + "; bigclust store du / store clean to inspect or free it")


def drop_intermediates(store: Store, done, droppable) -> tuple[int, int]:
    """``[store] keep = "results"``: drop the large arrays of the instances a run used; (count, bytes freed).

    Only dense arrays are dropped (a kNN kernel is small and sparse).
    """
    n, freed = 0, 0
    for stage, key in list(done):
        if stage not in droppable or not store.has(stage, key):
            continue
        g = store.open(stage, key)
        names = [a for a in droppable[stage] if a in g and g[a].attrs.get("format") != "csr"]
        if names:
            freed += store.drop(stage, key, names)
            n += 1
    return n, freed
