"""The one scikit-learn estimator over the pipeline: the ``fit`` template every family's estimator shares.

``fit(X)`` checks X (:mod:`bigclust.estimators._data`) and the parameters against the config keys they
stand for (:mod:`bigclust.estimators._params`), builds the one config point the estimator stands for,
lets the method's own chain refuse what it refuses (its cross-parameter rules, said once, in its
plug-in), then runs exactly what ``bigclust pipeline run`` runs -- ingest, preprocess, the method's
stages -- so for the same data, parameters and seed its labels equal the pipeline's: on a memory store
(:mod:`bigclust.pipeline.memory`) when X is in memory and the run fits ``max_memory`` (:func:`_in_memory`),
else on a temporary zarr store deleted after the fit.  All-zero rows, which no method can place, are
left out of the run and labelled -1 (for the estimators that say so).

A family's estimator supplies only what differs: its parameters (:attr:`PipelineEstimator._parameters`),
its config sections (:meth:`~PipelineEstimator._sections`), the arrays it reads from the store
(:attr:`~PipelineEstimator._fetch`) and its fitted attributes (:meth:`~PipelineEstimator._set_fitted`,
:meth:`~PipelineEstimator._one_cluster`).  This module names no family and no method.
"""
from __future__ import annotations

import contextlib
import numbers
import shutil
import tempfile
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state

from bigclust._util.errors import DISK_ERRNOS, StoreError, UserError, disk_oserror
from bigclust.estimators import _params
from bigclust.estimators._data import (_check_X, _expand_rows, _expand_square, drop_zero_rows, array_source,
                                       in_estimator_words, warnings_at_caller)


def _seed(random_state) -> int:
    """The config's ``[cluster] seed`` for a scikit-learn ``random_state``."""
    if isinstance(random_state, numbers.Integral) and 0 <= random_state < 2**32:
        return int(random_state)
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


@dataclass
class FitResult:
    """What a fit reads from the temporary store before it is deleted, rows back in X's numbering.

    ``labels``: of the restart kept (lowest inertia / objective), -1 for a row left out; ``inertia``: its
    inertia (NaN when the final stage has none); ``attrs``, ``arrays``: the final stage's attributes and
    arrays (but labels and inertia); ``stages``: ``{stage: attributes}`` of every stage run; ``fetched``:
    ``{stage: {name: array}}`` of the arrays the estimator asked for (a dense one only when it fits
    ``max_memory``); ``record``: the pipeline's record.  :meth:`rows` and :meth:`square` put the rows
    left out back (zeros; empty rows and columns).
    """

    labels: np.ndarray
    inertia: float
    attrs: dict
    arrays: dict
    record: dict
    stages: dict = field(default_factory=dict)
    fetched: dict = field(default_factory=dict)
    keep: np.ndarray | None = None

    def rows(self, a):
        """A per-row array of the run back to every row of X: zeros for the rows left out."""
        return _expand_rows(self.keep, a)

    def square(self, K):
        """An n' x n' affinity of the run back to n x n: empty rows and columns for the rows left out."""
        return _expand_square(self.keep, K)

    def get(self, stage, name):
        """A fetched array, or None (the stage did not run, or the array did not fit ``max_memory``)."""
        return self.fetched.get(stage, {}).get(name)

    @property
    def gamma(self):
        """The kernel width the affinity used (what ``gamma="median"`` stood for), or None."""
        return self.record.get("gamma_used", self.record["params"].get("gamma"))


class PipelineEstimator(ClusterMixin, BaseEstimator):
    """What the estimators share: the ``fit`` template, ``fit_predict``, sparse input accepted (a family that
    needs dense data densifies only the n x d data, never n x n)."""

    def _keep(self, params: dict):
        """Store the ``__init__`` arguments unchanged under their own names (scikit-learn's rule for
        ``get_params`` / ``clone``); ``params`` is the ``__init__``'s ``locals()``."""
        for name, value in params.items():
            if name not in ("self", "__class__"):
                setattr(self, name, value)

    @classmethod
    def _parameters(cls) -> dict:
        """``{parameter: Key or NoneMeans}`` besides :data:`bigclust.estimators._params.COMMON` (a method, not
        a dict: the method keys come from the registry, filled when the plug-ins are imported)."""
        return {}

    #: ``{stage: (array, ...)}`` read from the store into :attr:`FitResult.fetched`
    _fetch: dict = {}
    #: attributes only some fits set: removed before each fit so that none of an earlier fit survives
    _fit_only: tuple = ()
    #: what a row is called in the all-zero-rows warning ("document"); None: all-zero rows are clustered
    _row_noun: str | None = None
    #: ``(config words, estimator words)`` replaced in a pipeline message (on top of ``[section] key`` ->
    #: ``key`` for the estimator's own parameters): config settings the estimator spells another way
    _config_words: tuple = ()

    def _sections(self, p: dict, y) -> dict:
        """The config sections of the method and the shared ones it sets (``[cluster]`` beyond ``n_clusters``
        and ``seed``) from the checked parameters ``p``; refuses combinations only the estimator has."""
        raise NotImplementedError

    def _check_y(self, y, n: int, p: dict):
        """``y`` of ``fit(X, y)``: None here (ignored, as clusterers do)."""
        return None

    def _check_data(self, X, p: dict):
        """Checks of X beyond the generic ones that hold for ``n_clusters=1`` as well."""

    def _kept_rows(self, X, k: int, y):
        """``(keep mask or None, X, y)`` of the rows the pipeline clusters."""
        if self._row_noun is None:
            return None, X, y
        keep, Xk = drop_zero_rows(X, k, type(self).__name__, self._row_noun)
        return keep, Xk, y

    def _one_cluster(self, X, y, p: dict, config: dict):
        """The fitted attributes for ``n_clusters=1``: every sample in one cluster, nothing computed."""
        raise NotImplementedError

    def _set_fitted(self, res: FitResult, y):
        """The fitted attributes from the run."""
        raise NotImplementedError

    #: whether ``fit`` sets ``top_terms_`` (the largest features of each cluster, when their names are known)
    _top_terms = False

    def _term_factor(self):
        """The fitted (features x clusters) factor whose largest entries name a cluster; None: the centroids."""
        return None

    def fit(self, X, y=None):
        """Cluster X.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix or dask.array of shape (n_samples, n_features)
            The samples (a DataFrame's columns count as feature names).
        y : array-like of shape (n_samples,) or None
            Ignored, except by estimators that take partial labels (their own docstring says how).

        Returns
        -------
        self
            The fitted estimator.
        """
        raw = X
        if self._top_terms and hasattr(X, "shape") and len(X.shape) == 2:
            from bigclust.report.terms import feature_names
            feature_names(self, X.shape[1])       # a wrong count is said before the fit, not after
        self._fit(_check_X(self, X), y)
        if self._top_terms:
            from bigclust.report.terms import fitted_top_terms
            self.top_terms_ = fitted_top_terms(self, raw, self.labels_, factor=self._term_factor())
        return self

    def _fit(self, X, y):
        """The template: parameters, y, the config point, the method's rules, the run, the fitted attributes."""
        for stale in self._fit_only:
            self.__dict__.pop(stale, None)
        specs = {**_params.COMMON, **self._parameters()}
        p = {name: _params.check(self, name, spec) for name, spec in specs.items()}
        n, k = X.shape[0], p["n_clusters"]
        if k > 1 and k >= n:
            raise UserError(f"{type(self).__name__}: n_clusters={k} must be below n_samples={n}")
        y = self._check_y(y, n, p)
        config = self._config(p, y)
        with _in_estimator_words(self):   # the method's own rules, before any data are written
            from bigclust.pipeline import methods
            method = methods.get(config["method"]["names"][0])
            method.stages(method.make(config.get(method.name)), config)
        self._check_data(X, p)
        if k == 1:   # one cluster holds every sample; there is nothing to compute
            self._one_cluster(X, y, p, config)
            return
        keep, Xk, yk = self._kept_rows(X, k, y)
        with _in_estimator_words(self):
            res = _run(config, Xk, p["scheduler"], yk, self._fetch)
        res.keep = keep
        res.labels = _expand_rows(keep, res.labels, -1, np.int64)
        self._set_fitted(res, y)

    def fit_predict(self, X, y=None):
        """Cluster X (``y`` as in :meth:`fit`) and return ``labels_``."""
        return self.fit(X, y).labels_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _config(self, p: dict, y) -> dict:
        """The pipeline config dict this estimator stands for (plain Python values)."""
        sections = self._sections(p, y)
        sections["cluster"] = {"n_clusters": p["n_clusters"], **sections.get("cluster", {}),
                               "seed": _seed(self.random_state)}
        return {"data": {"path": "<array>"}, **sections,
                "store": {"path": "<temporary>", "max_memory": p["max_memory"]},
                "output": {"dir": "<none>", "plots": False}}


@contextlib.contextmanager
def _in_estimator_words(est):
    """Re-raise a UserError of the block starting with the estimator's name and in its words (a config key
    that is one of its parameters named as that parameter, ``_config_words`` replaced); the block's
    warnings are issued once each, at the caller's line."""
    try:
        with warnings_at_caller():
            yield
    except UserError as e:
        msg = str(e)
        for config_words, own_words in est._config_words:
            msg = msg.replace(config_words, own_words)
        name, msg = type(est).__name__, in_estimator_words(msg, est.get_params(deep=False))
        raise type(e)(msg if msg.startswith(name) else f"{name}: {msg}") from None


#: whether a fit may run in-memory data on a memory store (:func:`_in_memory`); False: always a temporary
#: zarr store (the tests compare the two paths)
IN_MEMORY = True


def _run(raw_config: dict, X, scheduler, y, fetch: dict) -> FitResult:
    """Run the one method of a config dict on the array X (``y``: int64 labels stored with X, -1 = unlabelled):
    on a memory store when X is in memory and the run fits ``max_memory`` in memory (:func:`_in_memory`),
    else -- or when a step of the run needs files after all -- in a temporary zarr store."""
    from bigclust.pipeline.checks import check_allocations
    from bigclust.pipeline.config import from_dict
    from bigclust.pipeline.memory import NeedsDisk, memory_store
    from bigclust.pipeline.methods import get as get_method

    cfg = from_dict(raw_config, "<estimator>")
    (point,) = list(cfg.points())
    # sizes that would reach one huge allocation (n_init = 1e9): refused as the pipeline refuses them
    check_allocations(cfg, point, X.shape[0], X.shape[1], point["cluster"]["n_clusters"])
    method = get_method(cfg.methods[0])
    if method.check is not None:
        # the family's checks of what n and max_memory allow (a solver that cannot stream a kernel beyond
        # it), as check_sizes calls them before a run's ingest; X's width as unknown (-1): the estimator
        # checks it itself (_check_data), in its own words and alike for n_clusters=1
        method.check(method.make(point[method.name]), point, X.shape[0], -1)
    if _in_memory(cfg, point, method, X, scheduler):
        try:
            with memory_store() as store:
                return _run_on(store, cfg, point, method, X, None, y, fetch)
        except NeedsDisk:   # an out-of-core step after all: the run again, on disk
            pass
    return _run_on_disk(cfg, point, method, X, scheduler, y, fetch)


def _in_memory(cfg, point, method, X, scheduler) -> bool:
    """Whether the run can hold its arrays in memory: X in memory (not Dask), no cluster to share a store
    with, and ``max_memory`` holding two float32 copies of X (ingested, preprocessed) beside the user's and,
    when the chain builds a dense kernel, two float64 n x n arrays (the condition under which every
    consumer of a dense kernel works in memory, :mod:`bigclust._util.plan`)."""
    import scipy.sparse as sp

    from bigclust.algo.affinity import DENSE_KINDS
    from bigclust._util.plan import fits

    if not IN_MEMORY or hasattr(X, "dask") or scheduler not in (None, "", "synchronous"):
        return False
    n, budget = X.shape[0], cfg.max_memory
    x_bytes = X.data.size * 12 + (n + 1) * 8 if sp.issparse(X) else X.size * 4
    if 2 * x_bytes > budget:
        return False
    chain = method.stages(method.make(point[method.name]), point)
    return not ("affinity" in chain and point["affinity"]["kind"] in DENSE_KINDS) or fits(2, n, 8, budget)


def _run_on_disk(cfg, point, method, X, scheduler, y, fetch: dict) -> FitResult:
    """:func:`_run_on` a temporary zarr store, deleted afterwards; a full or read-only TMPDIR is one line."""
    from bigclust.pipeline.runner import dask_client
    from bigclust.pipeline.store import Store

    folder = None
    try:
        folder = tempfile.mkdtemp(prefix="bigclust-fit-")
        store = Store(f"{folder}/store.zarr", owner={"array": "estimator"})
        with dask_client(scheduler) as client:
            return _run_on(store, cfg, point, method, X, client, y, fetch)
    except UserError:
        raise
    except Exception as exc:   # a full or read-only TMPDIR: one line (in the estimator's name, by fit)
        err = _tmp_disk_error(exc, folder)
        if err is None:
            raise
        raise err from exc
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _run_on(store, cfg, point, method, X, client, y, fetch: dict) -> FitResult:
    """The run on ``store`` (zarr or memory) and what the fit reads of it."""
    from bigclust.pipeline.runner import Runner, instances
    from bigclust.pipeline.store import read_matrix

    runner = Runner(cfg, store, client, force=False, log=lambda msg: None)
    runner.source = array_source(X, point["data"]["chunk_rows"], y)
    rec, (stage, key) = runner.run_instance(method, instances(cfg, [point], method)[0])
    if getattr(store, "in_memory", False):
        store.thaw()   # what is read now is the caller's, writable as a zarr read's copy is
    g = store.open(stage, key)
    best = int(g.attrs.get("best", 0))
    labels = read_matrix(g, "labels")
    res = FitResult(labels=np.asarray(labels[best] if labels.ndim == 2 else labels, dtype=np.int64),
                    inertia=float(read_matrix(g, "inertia")[best]) if "inertia" in g else float("nan"),
                    attrs=dict(g.attrs), record=rec,
                    arrays={a: read_matrix(g, a) for a in g.array_keys() if a not in ("labels", "inertia")})
    for (st, k), attrs in runner.done.items():
        res.stages[st] = attrs
        if not fetch.get(st):
            continue   # opening a stage's group reads its metadata from disk: only for what is fetched
        gs = store.open(st, k)
        for name in fetch[st]:
            if name in gs and _fits_memory(gs[name], cfg.max_memory):
                res.fetched.setdefault(st, {})[name] = read_matrix(gs, name)
    return res


def _tmp_disk_error(exc, folder):
    """The one-line StoreError for a disk-full / read-only / over-quota error behind ``exc`` in the fit's
    temporary store (:func:`bigclust._util.errors.disk_oserror` finds it behind zarr's and Dask's wrappers),
    or None: the pipeline's advice (``store du``, ``[store] path``) means nothing to an estimator's user,
    whose way out is room in the temporary folder or another one (``TMPDIR``)."""
    import errno
    import os

    e = disk_oserror(exc)
    if e is None:
        return None
    where = os.path.dirname(folder) if folder else tempfile.gettempdir()
    todo = ("make it writable or set TMPDIR to a writable folder" if e.errno == errno.EROFS
            else "free space there or set TMPDIR to a folder with more room")
    what = DISK_ERRNOS.get(e.errno, os.strerror(e.errno))
    return StoreError(f"{what} writing the fit's temporary store in {where} (TMPDIR): {todo}")


def _fits_memory(node, max_memory: int) -> bool:
    """A CSR matrix always (as sparse as the store holds it); a dense array when it fits ``max_memory``."""
    if node.attrs.get("format") == "csr":
        return True
    return int(np.prod(node.shape)) * np.dtype(node.dtype).itemsize <= max_memory
