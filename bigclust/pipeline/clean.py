"""What a store holds on disk, and cleaning it: ``bigclust store du`` / ``store clean``, ``[store] keep``.

Sizes are bytes allocated on disk (:func:`bigclust.pipeline.store.disk_bytes`), per
stage and per array of each stage instance.  Cleaning removes whole stage
instances (``stages/<stage>/<key>``): every derived instance that a given
config does not use (found by planning the config's chains against the store,
:class:`bigclust.pipeline.runner.Runner` with ``dry``), or all derived ones without
a config; the ingested data only with ``all_``.  What a killed writer left
(``tmp/``) goes too.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from bigclust._util.errors import StoreError
from bigclust._util.plan import format_bytes
from bigclust.pipeline.store import Store, disk_bytes


def usage(store_path) -> dict:
    """Bytes on disk of a store: total, per stage (with its number of instances) and per array.

    Returns ``{"path", "bytes", "other_bytes", "stages": {stage: {"bytes", "instances", "dropped",
    "arrays": {"<key>/<array>": bytes}}}}``; ``other_bytes`` is what lies outside ``stages/``
    (the root metadata, a killed writer's ``tmp/``).
    """
    store = Store(store_path)
    out = {"path": str(store.path), "bytes": disk_bytes(store.path), "stages": {}}
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
        inside += total
    out["other_bytes"] = out["bytes"] - inside
    return out


def format_usage(u: dict, top: int = 10) -> str:
    """``store du`` as text: a line per stage, then the ``top`` largest arrays."""
    lines = [f"{u['path']}: {format_bytes(u['bytes'])} on disk"]
    stages = sorted(u["stages"].items(), key=lambda kv: -kv[1]["bytes"])
    for stage, s in stages:
        dropped = f", {s['dropped']} dropped" if s["dropped"] else ""
        lines.append(f"  {stage:<11} {format_bytes(s['bytes']):>10}  {s['instances']} instance(s){dropped}")
    if u["other_bytes"]:
        lines.append(f"  {'(other)':<11} {format_bytes(u['other_bytes']):>10}  root metadata, unfinished writes")
    arrays = sorted(((f"{st}/{name}", b) for st, s in u["stages"].items() for name, b in s["arrays"].items()),
                    key=lambda kv: -kv[1])[:top]
    if arrays:
        lines.append("largest arrays (stages/<stage>/<key>/<array>):")
        lines += [f"  {format_bytes(b):>10}  {name}" for name, b in arrays]
    return "\n".join(lines)


def summary_line(store: Store) -> str:
    """One line for the end of a run: the store, its size on disk and its three largest stages."""
    u = usage(store.path)
    big = sorted(u["stages"].items(), key=lambda kv: -kv[1]["bytes"])[:3]
    parts = ", ".join(f"{st} {format_bytes(s['bytes'])}" for st, s in big)
    return (f"store {store.path}: {format_bytes(u['bytes'])} on disk" + (f" ({parts})" if parts else "")
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


def used_instances(cfg, store: Store) -> set:
    """``(stage, key)`` of every instance in ``store`` that a run of ``cfg`` would use (nothing is run)."""
    from bigclust.pipeline.methods import get as get_method
    from bigclust.pipeline.runner import Runner, _Missing, instances, run_units
    from bigclust.pipeline.subsets import subset_draws

    runner = Runner(cfg, store, None, False, log=lambda msg: None)
    runner.dry = True
    points = list(cfg.points())
    grouped = {m: instances(cfg, points, get_method(m)) for m in cfg.methods}
    draws = [(None, None, None)]
    try:
        if points[0]["evaluate"]["protocol"] == "subsets":
            draws = subset_draws(runner, points[0])
        for method, group in run_units(points, grouped):
            for _, _, classes in draws:
                try:
                    runner.run_instance(method, group, classes)
                except _Missing:
                    continue
    except _Missing:  # not even the data are in the store
        pass
    return set(runner.done) | set(runner.planned)


def clean(store_path, config=None, *, all_=False, dry_run=False) -> dict:
    """Remove the stage instances of a store that ``config`` does not use (all derived ones without a config).

    ``config``: a path, or a list of the paths of every config that shares the store (what any of them uses
    is kept).

    The ingested data (``stages/ingest``) are removed only with ``all_``.
    Returns ``{"removed": ["stage/key", ...], "bytes": freed, "kept": n}``;
    ``dry_run`` removes nothing and reports what would go.
    """
    from bigclust.pipeline.config import load
    from bigclust.pipeline.runner import _owner

    store = Store(store_path)
    used = set()
    for path in ([] if config is None else [config] if isinstance(config, (str, Path)) else config):
        cfg = load(path)
        owner = dict(store.root.attrs).get("owner")
        if owner != json.loads(json.dumps(_owner(cfg), default=str)):
            raise StoreError(f"store {store.path} was made for other data than {cfg.path}'s [data] "
                             f"(owner {owner}); give the config that uses this store")
        used |= used_instances(cfg, store)
    removed, freed, kept = [], 0, 0
    for stage in store.stages():
        if stage == "ingest" and not all_:
            kept += len(store.stage_keys(stage))
            continue
        for d in sorted(p for p in (store.path / "stages" / stage).iterdir() if p.is_dir()):
            if (stage, d.name) in used:
                kept += 1
                continue
            removed.append(f"{stage}/{d.name}")
            freed += disk_bytes(d)
            if not dry_run:
                shutil.rmtree(d, ignore_errors=True)
    tmp = store.path / "tmp"
    if tmp.exists() and not dry_run:
        store._clean_tmp()  # only what no live writer holds
    return {"path": str(store.path), "removed": removed, "bytes": freed, "kept": kept, "dry_run": dry_run}


def format_clean(res: dict) -> str:
    verb = "would remove" if res["dry_run"] else "removed"
    head = (f"{res['path']}: {verb} {len(res['removed'])} stage instance(s), {format_bytes(res['bytes'])}; "
            f"kept {res['kept']}")
    return "\n".join([head] + [f"  {r}" for r in res["removed"]])

