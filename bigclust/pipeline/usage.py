"""What a store holds on disk: ``bigclust store du``, the size line at the end of a run, and ``[store] keep``'s drops.

Sizes are bytes allocated on disk (:func:`bigclust.pipeline.store.disk_bytes`), per
stage and per array of each stage instance.
"""
from __future__ import annotations

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
