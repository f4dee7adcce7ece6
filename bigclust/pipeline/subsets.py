"""Paper 001's subset protocol: every method on random subsets of the classes, averaged per subset size."""
from __future__ import annotations

import contextlib

from bigclust._util.errors import UserError


@contextlib.contextmanager
def _trial_progress(runner, name, n):
    """Under the subset protocol: one progress bar (of ``name``: a method, or every method) instead of a line
    per stage."""
    if n == 1:
        yield lambda: None
        return
    from bigclust._util.progress import bar as progress_bar
    log = runner.log
    runner.log = lambda msg: None
    try:
        with progress_bar(n, f"{name} on subsets", "subset") as bar:
            yield lambda: bar.update(1)
    finally:
        runner.log = log
    log(f"  {name}: {n} subsets done")


def check_subset_sizes(path, sizes, n_classes, dataset):
    """Every subset size at most the data's number of classes (a UserError naming the config otherwise)."""
    too_big = [k for k in sizes if k > n_classes]
    if too_big:
        raise UserError(f"{path}: [evaluate] subset_sizes {too_big} exceed the {n_classes} classes of {dataset}")


def subset_draws(runner, point):
    """``(k, trial, classes)`` for every subset size k and trial, drawn with ``[evaluate] subset_seed``.

    A :class:`Draws` sequence: each subset is drawn when it is reached, so a long protocol holds no list of
    them (``[evaluate] subset_trials`` is bounded against ``max_memory`` by its records: checks.check_allocations).
    """
    _, ia, y = runner.data(point)
    if y is None:
        raise UserError(f"{runner.cfg.path}: [evaluate] protocol = \"subsets\" needs labelled data")
    ev = point["evaluate"]
    n_classes = int(ia["n_classes"])
    check_subset_sizes(runner.cfg.path, ev["subset_sizes"], n_classes, ia["dataset"])
    return Draws(tuple(ev["subset_sizes"]), int(ev["subset_trials"]), int(ev["subset_seed"]), n_classes)


class Draws:
    """The subsets of the protocol in order (every trial of the first size, then of the next), drawn on demand.

    One stream per (seed, k, trial): fewer trials draw a prefix of more, so stages are shared.
    """

    def __init__(self, sizes, trials, seed, n_classes):
        self.sizes, self.trials, self.seed, self.n_classes = sizes, trials, seed, n_classes

    def __len__(self):
        return len(self.sizes) * self.trials

    def __getitem__(self, i):
        import numpy as np

        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        k, t = self.sizes[i // self.trials], i % self.trials
        rng = np.random.default_rng([self.seed, k, t])
        return k, t, tuple(int(c) for c in np.sort(rng.choice(self.n_classes, size=k, replace=False)))

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def _average_trials(trials):
    """One record per method and subset size list: means (and standard deviations) over the trials."""
    import numpy as np

    first = trials[0]
    rec = {k: first[k] for k in ("method", "params", "dataset") if k in first}
    by_k = {}
    for r in trials:
        by_k.setdefault(r["subset_size"], []).append(r)
    rec["protocol"] = "subsets"
    rec["n_trials"] = len(by_k[next(iter(by_k))])
    for score in ("acc", "nmi"):
        key = f"{score}_best_inertia"
        if key in first:
            per_k = {k: float(np.mean([r[key] for r in rs])) for k, rs in by_k.items()}
            rec[f"{score}_by_k"] = per_k
            rec[f"{score}_std_by_k"] = {k: float(np.std([r[key] for r in rs])) for k, rs in by_k.items()}
            rec[f"{score}_avg"] = float(np.mean(list(per_k.values())))
    rec["seconds"] = float(sum(r["seconds"] for r in trials))
    used = [r["gamma_used"] for r in trials if isinstance(r.get("gamma_used"), (int, float))]
    if used:   # gamma = "median": each subset has its own median width; the table shows their range
        rec["gamma_used_range"] = [float(min(used)), float(max(used))]
    return rec
