"""The labels file's rows written by the Numba pass equal the row-by-row Python formula, byte for byte."""
import numpy as np
import pytest

from bigclust.report.labels import Pick, _csv_cell, labels_csv


def _reference(pk):
    """The formula: one f-string per row."""
    if pk.y is None:
        return "index,label\n" + "".join(f"{i},{c}\n" for i, c in enumerate(pk.labels.tolist()))
    names = pk.class_names
    cls = [names[c] if 0 <= c < len(names) else c for c in pk.y.tolist()] if names else pk.y.tolist()
    return "index,label,class\n" + "".join(f"{i},{c},{_csv_cell(k)}\n"
                                           for i, (c, k) in enumerate(zip(pk.labels.tolist(), cls)))


def _pick(labels, y=None, names=()):
    return Pick("m", "kmeans", {}, "cluster", "key", np.asarray(labels), 0, 1, 0.0,
                y=None if y is None else np.asarray(y), class_names=list(names))


@pytest.mark.parametrize("n", [0, 1, 9, 10, 11, 1001])
def test_rows_equal_the_formula_without_and_with_classes(n):
    rng = np.random.default_rng(n)
    labels = rng.integers(-1, 12, n)            # -1: a point k-means left out (any int is written as is)
    y = rng.integers(0, 5, n)
    assert labels_csv(_pick(labels)) == _reference(_pick(labels))
    assert labels_csv(_pick(labels, y)) == _reference(_pick(labels, y))
    names = ["zero", 'a "quoted", name', "two\nlines", "ünïcode", ""]
    assert labels_csv(_pick(labels, y, names)) == _reference(_pick(labels, y, names))


def test_large_values_and_classes_outside_the_names():
    labels = np.array([0, 2**40, -(2**40), 7, 10**17])
    y = np.array([3, -2, 10**12, 0, 1])
    for names in ((), ("a", "b")):
        assert labels_csv(_pick(labels, y, names)) == _reference(_pick(labels, y, names))
