"""The method units of a run: every (method, sweep point) chain in config order, at once where a cluster has
the workers for it (:func:`unit_threads`), and paper 001's subset protocol around them."""
from __future__ import annotations

from bigclust.pipeline import usage
from bigclust.pipeline.methods import fmt_params, get as get_method
from bigclust.pipeline.subsets import _average_trials, _trial_progress, subset_draws
from bigclust.pipeline.usage import DROPPABLE


def execute(runner, points, grouped):
    """Every method instance of the sweep, in config order; returns (records, their final stages).

    Single-point methods run point by point; a method that combines a sweep runs once per group afterwards.
    An instance whose final stage another already reported (K-means on X does not depend on γ) is reported
    once.  Under ``[evaluate] protocol = "subsets"`` every instance runs on every drawn subset of classes and
    the records are averages per subset size (the per-subset records are in ``runner.trials``).
    """
    units = run_units(points, grouped)
    ev = points[0]["evaluate"]
    draws = subset_draws(runner, points[0]) if ev["protocol"] == "subsets" else [(None, None, None)]
    runner.trials = []
    if draws[0][2] is not None and runner.cfg.sections["store"]["keep"] == "results":
        per_unit = _subsets_outer(runner, units, draws)
    else:
        per_unit = []
        threads = unit_threads(runner) if draws[0][2] is None else 1
        for batch in _batches(units):
            method, group = batch[0]
            if method.combine is None:
                i = next(j for j, p in enumerate(points) if p is group[0])
                swept = {f"{s}.{k}": group[0][s][k] for s, k in runner.cfg.sweeps}
                runner.log(f"[{i + 1}/{len(points)}] " + (fmt_params(swept) or "(no sweep)"))
            if threads > 1 and len(batch) > 1:
                per_unit += _concurrently(runner, batch, threads)
                continue
            for method, group in batch:
                trials = []
                with _trial_progress(runner, method.name, len(draws)) as tick:
                    for k, trial, classes in draws:
                        trials.append(_trial(runner, method, group, k, trial, classes))
                        tick()
                per_unit.append(trials)
    records, finals = [], []
    for trials in per_unit:
        if draws[0][2] is None:
            rec, final = trials[0]
        else:
            rec, final = _average_trials([r for r, _ in trials]), tuple(f for _, f in trials)
        if final not in finals:
            records.append(rec)
            finals.append(final)
            runner.trials += [r for r, _ in trials] if draws[0][2] is not None else []
    return records, finals


def unit_threads(runner) -> int:
    """Method units run at once: one per worker of a distributed cluster (their stages are its tasks), else 1.

    The methods of one sweep point share its ingest, preprocess and affinity (computed once:
    :meth:`Runner._claim`) and then run on their own chains: SK's and BBS's eigenvectors on mnist-1m take
    about a minute each on one core, side by side on two workers.  Not under ``[store] keep = "results"``
    (its planning pass sets runner-wide flags).
    """
    if runner.client is None or runner._any_dropped:
        return 1
    return max(1, len(runner.client.scheduler_info()["workers"]))


def _batches(units):
    """``units`` cut into runs of single-point units on the same point; each combining unit alone."""
    out = []
    for method, group in units:
        if out and method.combine is None and out[-1][0][0].combine is None and out[-1][0][1][0] is group[0]:
            out[-1].append((method, group))
        else:
            out.append([(method, group)])
    return out


def _concurrently(runner, batch, threads):
    """``[[(record, final)], ...]`` of the units of ``batch`` (one sweep point), run in ``threads`` threads."""
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(min(threads, len(batch)), thread_name_prefix="bigclust-unit")
    try:
        futs = [pool.submit(_trial, runner, method, group, None, None, None) for method, group in batch]
        return [[f.result()] for f in futs]
    finally:   # an error or Ctrl-C: units not started are dropped, running ones end with the cluster
        pool.shutdown(wait=False, cancel_futures=True)


def _trial(runner, method, group, k, trial, classes):
    """(record, final stage) of one method instance on one subset of classes (``classes`` None: all data)."""
    rec, final = runner.run_instance(method, group, classes)
    if classes is not None:
        rec.update(subset_size=k, trial=trial, classes=list(classes))
    return rec, final


def _subsets_outer(runner, units, draws):
    """The subset protocol under ``[store] keep = "results"``: every method on one subset, then that subset's
    dense kernels and row copies are dropped (:data:`DROPPABLE`).  The store then holds one subset's kernels
    at a time instead of all of them (20 Newsgroups at 50 subsets per k: 34.5 GB of linear kernels).  Each
    instance depends only on its own parameters, so the results are those of the method-by-method order;
    an instance a later subset meets again (the same classes drawn twice) is finished with everything
    after it, so nothing reads a dropped array.  Returns the (record, final) pairs per unit, in draw order.
    """
    per_unit = [[] for _ in units]
    with _trial_progress(runner, f"{len(units)} method instance(s), each subset's kernels dropped after them",
                         len(draws)) as tick:
        for k, trial, classes in draws:
            before = len(runner.done)
            for trials, (method, group) in zip(per_unit, units):
                trials.append(_trial(runner, method, group, k, trial, classes))
            n, freed = usage.drop_intermediates(runner.store, list(runner.done)[before:], DROPPABLE)
            runner.dropped[0] += n
            runner.dropped[1] += freed
            tick()
    return per_unit


def run_units(points, grouped):
    """``(method, group of points)`` in run order: single-point methods point by point, then combining ones."""
    units = [(get_method(m), [p]) for p in points for m in grouped if get_method(m).combine is None]
    units += [(get_method(m), g) for m in grouped if get_method(m).combine is not None for g in grouped[m]]
    return units
