"""The toy family's plug-in: what a family registers, and nothing else (cheap to import).

- the method ``toy`` (config section ``[toy]``: its parameter dataclass) chaining one stage of its own;
- the stage ``toyargmax``, whose parameter dataclass is its store key and whose ``toy_margin`` attribute
  goes into the run's record;
- the report column ``toy_margin``;
- the estimator ``ToyClustering`` (``bigclust.estimators.ToyClustering``, imported on first use).
"""
from __future__ import annotations

from dataclasses import dataclass

from bigclust.estimators import register_estimator
from bigclust.pipeline.methods import Method, StageDef, register, register_column, register_stage
from bigclust.pipeline.schema import param


@dataclass(frozen=True)
class ToyParams:
    """Label each row by its largest feature among the first k (after an additive shift)."""

    shift: float = param(0.0, float)


@dataclass(frozen=True)
class ToyStageParams:
    input: str
    src: str
    k: int
    shift: float


def _build(ctx, src, inputs):
    return [ToyStageParams(input=inputs[0], src=src, k=ctx.k, shift=ctx.params.shift)]


def toyargmax(store_path, key, attrs, p, **_):
    """The stage: labels (one restart) and their margin, from the preprocessed rows."""
    import numpy as np

    from bigclust.pipeline.store import Store, read_matrix, write_dense
    from toy_family import argmax_labels

    store = Store(store_path)
    labels, margin = argmax_labels(read_matrix(store.open(p.src, p.input), "X"), p.k, p.shift)
    with store.write("toyargmax", key, attrs) as g:
        write_dense(g, "labels", labels[None, :].astype(np.int32))
        g.attrs.update({"best": 0, "toy_margin": margin})


register_stage(StageDef("toyargmax", _build, toyargmax, "labels", report=("toy_margin",),
                        describe=lambda p: f"shift={p.shift}"))
register(Method("toy", ToyParams, ("toyargmax",), "argmax of the first k features", label="Toy"))
register_column("toy_margin")
register_estimator("ToyClustering", "toy_family.estimator")


def unregister_all():
    """Undo the registrations (the test's clean-up; a real family stays registered)."""
    from bigclust.estimators import ESTIMATORS
    from bigclust.pipeline import methods
    methods.unregister("toy")
    methods.unregister_stage("toyargmax")
    methods.COLUMNS.pop("toy_margin", None)
    ESTIMATORS.pop("ToyClustering", None)
