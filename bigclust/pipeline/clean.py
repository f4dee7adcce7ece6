"""Cleaning a store: ``bigclust store clean`` (what it holds on disk is :mod:`bigclust.pipeline.usage`).

Cleaning removes whole stage
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
from bigclust.pipeline.config import load
from bigclust.pipeline.methods import get as get_method
from bigclust.pipeline.runner import Missing, Runner, instances, owner, run_units
from bigclust.pipeline.store import Store, disk_bytes
from bigclust.pipeline.subsets import subset_draws


def used_instances(cfg, store: Store) -> set:
    """``(stage, key)`` of every instance in ``store`` that a run of ``cfg`` would use (nothing is run)."""
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
                except Missing:
                    continue
    except Missing:  # not even the data are in the store
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
    store = Store(store_path)
    used = set()
    for path in ([] if config is None else [config] if isinstance(config, (str, Path)) else config):
        cfg = load(path)
        made_for = dict(store.root.attrs).get("owner")
        if made_for != json.loads(json.dumps(owner(cfg), default=str)):
            raise StoreError(f"store {store.path} was made for other data than {cfg.path}'s [data] "
                             f"(owner {made_for}); give the config that uses this store")
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

