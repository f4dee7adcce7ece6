"""Cleaning a store: ``bigclust store clean`` (what it holds on disk is :mod:`bigclust.pipeline.usage`).

Cleaning removes whole stage
instances (``stages/<stage>/<key>``): every derived instance that a given
config does not use (found by planning the config's chains against the store,
:class:`bigclust.pipeline.runner.Runner` with ``dry``), or all derived ones without
a config; the ingested data only with ``all_``; or exactly the instances named
(``--stage STAGE/KEY``, e.g. one whose metadata is damaged).  What a killed writer left
(``tmp/``) goes too.  An instance is renamed aside before it is deleted, so a failure (a read-only
file system) leaves it whole, and the report counts only what is gone.
"""
from __future__ import annotations

import json
from pathlib import Path

from bigclust._util.errors import StoreError
from bigclust._util.plan import format_bytes
from bigclust.pipeline.config import load
from bigclust.pipeline.locks import describe, try_lock
from bigclust.pipeline.methods import get as get_method
from bigclust.pipeline.runner import Missing, Runner, instances, owner
from bigclust.pipeline.units import run_units
from bigclust.pipeline.store import Store, disk_bytes
from bigclust.pipeline.subsets import subset_draws
from bigclust.pipeline.usage import describe as describe_instances
from bigclust.pipeline.usage import shown_path


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


def clean(store_path, config=None, *, all_=False, dry_run=False, stages=()) -> dict:
    """Remove the stage instances of a store that ``config`` does not use (all derived ones without a config).

    ``config``: a path, or a list of the paths of every config that shares the store (what any of them uses
    is kept).  ``stages``: remove exactly these instances (``"stage/key"`` each, e.g. a damaged one), and
    nothing else.

    The ingested data (``stages/ingest``) are removed only with ``all_`` (or when named in ``stages``).
    Returns ``{"removed": ["stage/key", ...], "bytes": freed, "kept": n}`` with what was actually removed;
    ``dry_run`` removes nothing and reports what would go.  Refused while a run uses the store; an instance
    that cannot be removed (a read-only file system) is a :class:`StoreError` saying what was removed before.
    """
    store = Store(store_path)
    if stages and (config or all_):
        raise StoreError("store clean: give either --stage or --config / --all, not both")
    held = None
    if not dry_run:
        try:
            held, holder = try_lock(store.path / "locks", "use", "clean", shared=False, what="store clean")
        except OSError as e:   # not even the lock can be written (a read-only file system): nothing can go
            raise StoreError(f"store {store.path} cannot be written ({e.strerror or e}): removed nothing") from None
        if held is None:
            raise StoreError(f"store {store.path} is in use by a run ({describe(holder)}); clean it when the run "
                             "has finished")
    try:
        doomed, kept = _named(store, stages) if stages else _unused(store, config, all_)
        return _remove(store, doomed, kept, dry_run)
    finally:
        if held is not None:
            held.release()


def _named(store: Store, stages) -> tuple[list, int]:
    """The instances named by ``--stage STAGE/KEY`` (each must exist: a typo removes nothing)."""
    doomed = []
    for name in stages:
        stage, _, key = str(name).strip("/").partition("/")
        d = store.path / "stages" / stage / key
        if not stage or not key or "/" in key or stage.startswith(".") or key.startswith(".") or not d.is_dir():
            have = ", ".join(f"{st}/{k}" for st in store.stages() for k in store.stage_keys(st)[:3])
            raise StoreError(f"store {store.path} has no stage instance {name!r} (give STAGE/KEY as `bigclust store "
                             f"du` lists them{', e.g. ' + have if have else ''})")
        doomed.append((stage, key))
    return doomed, 0


def _unused(store: Store, config, all_) -> tuple[list, int]:
    """The instances no given config uses (every derived one without a config; ingested data only with all_)."""
    used = set()
    for path in ([] if config is None else [config] if isinstance(config, (str, Path)) else config):
        cfg = load(path)
        made_for = dict(store.root.attrs).get("owner")
        if made_for != json.loads(json.dumps(owner(cfg), default=str)):
            raise StoreError(f"store {store.path} was made for other data than {cfg.path}'s [data] "
                             f"(owner {made_for}); give the config that uses this store")
        used |= used_instances(cfg, store)
    doomed, kept = [], 0
    for stage in store.stages():
        if stage == "ingest" and not all_:
            kept += len(store.stage_keys(stage))
            continue
        for d in sorted(p for p in (store.path / "stages" / stage).iterdir() if p.is_dir() and ".old-" not in p.name):
            if (stage, d.name) in used:
                kept += 1
            elif store.written_here(stage, d.name):
                doomed.append((stage, d.name))
            else:   # not an instance bigclust wrote (or one whose metadata is damaged: --stage drops it)
                kept += 1
    return doomed, kept


def _remove(store: Store, doomed, kept, dry_run) -> dict:
    """Remove ``doomed``; what was removed is counted only once it is gone (a read-only disk removes nothing)."""
    removed, freed, failed = [], 0, []
    # what each instance is (method, kernel, gamma, k), read before anything goes: for the listing
    about = {f"{st}/{k}": v for st in dict.fromkeys(st for st, _ in doomed)
             for k, v in describe_instances(store.path, st, store.stage_keys(st)).items()}
    for stage, key in doomed:
        if dry_run:
            removed.append(f"{stage}/{key}")
            freed += disk_bytes(store.path / "stages" / stage / key)
            continue
        try:
            got, err = store.remove(stage, key)
        except OSError as e:
            failed.append((f"{stage}/{key}", e))
            continue
        removed.append(f"{stage}/{key}")
        freed += got
        if err is not None:
            failed.append((f"{stage}/{key} (renamed aside, not all of its files deleted)", err))
    res = {"path": str(store.path), "removed": removed, "bytes": freed, "kept": kept, "dry_run": dry_run,
           "about": {r: about[r] for r in removed if r in about}}
    if failed:
        what, e = failed[0]
        more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
        raise StoreError(f"store {store.path}: removed {len(removed)} of {len(doomed)} stage instance(s) "
                         f"({format_bytes(freed)}); could not remove {what}{more}: {e.strerror or e}")
    if (store.path / "tmp").exists() and not dry_run:
        store._clean_tmp()  # only what no live writer holds
    return res


def format_clean(res: dict) -> str:
    """``store clean`` as text: a head line, then each instance removed with what it was."""
    verb = "would remove" if res["dry_run"] else "removed"
    head = (f"{shown_path(res['path'])}: {verb} {len(res['removed'])} stage instance(s), "
            f"{format_bytes(res['bytes'])}; kept {res['kept']}")
    about = res.get("about", {})
    w = max((len(r) for r in res["removed"]), default=0)
    return "\n".join([head] + [f"  {r:<{w}}  {about.get(r, '')}".rstrip() for r in res["removed"]])

