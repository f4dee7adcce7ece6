"""Tests of bigclust.algo.metrics against brute-force references and scikit-learn."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import normalized_mutual_info_score

from bigclust._util.errors import UserError
from bigclust.algo.metrics import accuracy, batch_scores, contingency, error_rate, nmi

SK_METHOD = {"sqrt": "geometric", "max": "max", "arithmetic": "arithmetic"}


def brute_accuracy(y_true, y_pred):
    """Best fraction correct over every one-to-one map of clusters to classes."""
    classes = sorted(set(y_true.tolist()))
    clusters = sorted(set(y_pred.tolist()))
    m = max(len(classes), len(clusters))
    # Pad with values that never occur so that unequal counts are handled.
    classes = classes + [("missing-class", i) for i in range(m - len(classes))]
    clusters = clusters + [("missing-cluster", i) for i in range(m - len(clusters))]
    best = 0
    for perm in itertools.permutations(range(m)):
        mapping = {clusters[j]: classes[perm[j]] for j in range(m)}
        correct = sum(1 for t, p in zip(y_true.tolist(), y_pred.tolist()) if mapping[p] == t)
        best = max(best, correct)
    return best / len(y_true)


def loop_nmi(y_true, y_pred, norm):
    """NMI from its definition, with explicit loops over class/cluster pairs."""
    n = len(y_true)
    classes = sorted(set(y_true.tolist()))
    clusters = sorted(set(y_pred.tolist()))
    n_c = {c: int(np.sum(y_true == c)) for c in classes}
    n_k = {k: int(np.sum(y_pred == k)) for k in clusters}
    mi = 0.0
    for c in classes:
        for k in clusters:
            n_ck = int(np.sum((y_true == c) & (y_pred == k)))
            if n_ck > 0:
                mi += n_ck / n * math.log(n * n_ck / (n_c[c] * n_k[k]))
    h_c = -sum(v / n * math.log(v / n) for v in n_c.values())
    h_k = -sum(v / n * math.log(v / n) for v in n_k.values())
    if h_c == 0 and h_k == 0:
        return 1.0
    den = {"sqrt": math.sqrt(h_c * h_k), "max": max(h_c, h_k), "arithmetic": (h_c + h_k) / 2}[norm]
    return 0.0 if den == 0 else mi / den


def random_pair(rng, n, kc, kk, noise=0.4):
    """Correlated random labelings with kc classes and up to kk clusters."""
    y = rng.integers(0, kc, n)
    p = (y + rng.integers(0, 2, n) * (rng.random(n) < noise)) % kk
    return y, p


@pytest.mark.parametrize("seed", range(12))
def test_accuracy_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    kc, kk = rng.integers(2, 6, size=2)
    y, p = random_pair(rng, 60, kc, kk)
    # arbitrary label values on both sides
    y = y * 7 - 3
    p = p + 100
    assert accuracy(y, p) == pytest.approx(brute_accuracy(y, p), abs=1e-15)
    assert error_rate(y, p) == pytest.approx(1 - brute_accuracy(y, p), abs=1e-15)


def test_accuracy_more_clusters_than_classes_and_strings():
    y = np.array(["a", "a", "b", "b", "b", "c"])
    p = np.array([5, 5, 1, 1, 2, 9])
    # a<-5, b<-1, c<-9; the fourth cluster (2) stays unmatched
    assert accuracy(y, p) == pytest.approx(5 / 6)
    assert accuracy(p, y) == pytest.approx(5 / 6)
    assert accuracy(y, p) == pytest.approx(brute_accuracy(y, p))


@pytest.mark.parametrize("norm", ["sqrt", "max", "arithmetic"])
@pytest.mark.parametrize("seed", range(8))
def test_nmi_matches_definition_and_sklearn(norm, seed):
    rng = np.random.default_rng(100 + seed)
    kc, kk = rng.integers(2, 7, size=2)
    y, p = random_pair(rng, 300, kc, kk, noise=0.6)
    got = nmi(y, p, norm)
    assert got == pytest.approx(loop_nmi(y, p, norm), rel=1e-12, abs=1e-14)
    sk = normalized_mutual_info_score(y, p, average_method=SK_METHOD[norm])
    assert got == pytest.approx(sk, rel=1e-10, abs=1e-14)


def test_nmi_norms_differ_and_are_ordered():
    rng = np.random.default_rng(3)
    y, p = random_pair(rng, 500, 3, 5, noise=0.5)
    # sqrt(ab) <= (a+b)/2 <= max(a,b) so the scores come in the reverse order
    assert nmi(y, p, "max") < nmi(y, p, "arithmetic") < nmi(y, p, "sqrt")


def test_nmi_degenerate_cases():
    one = np.zeros(10, dtype=int)
    other = np.full(10, 4)
    mixed = np.arange(10) % 2
    for norm in ("sqrt", "max", "arithmetic"):
        assert nmi(one, other, norm) == 1.0  # both single-cluster: identical partitions
        assert nmi(one, mixed, norm) == 0.0  # one single-cluster: no information
        assert nmi(mixed, one, norm) == 0.0
        for a, b in [(one, other), (one, mixed), (mixed, one)]:
            sk = normalized_mutual_info_score(a, b, average_method=SK_METHOD[norm])
            assert nmi(a, b, norm) == pytest.approx(sk)


def test_independent_labelings_give_zero_nmi():
    y = np.repeat([0, 1], 50)
    p = np.tile([0, 1], 50)
    assert nmi(y, p) == pytest.approx(0.0, abs=1e-15)
    assert accuracy(y, p) == 0.5


def test_permutation_invariance():
    rng = np.random.default_rng(7)
    y, p = random_pair(rng, 400, 5, 6, noise=0.7)
    perm_y = rng.permutation(5)
    perm_p = rng.permutation(6) * 3 + 11
    for norm in ("sqrt", "max", "arithmetic"):
        assert nmi(perm_y[y], perm_p[p], norm) == pytest.approx(nmi(y, p, norm), rel=1e-13)
    assert accuracy(perm_y[y], perm_p[p]) == accuracy(y, p)


def test_contingency():
    y = np.array([2, 2, 0, 0, 0, 5])
    p = np.array(["x", "y", "y", "y", "x", "x"])
    expected = np.array([[1, 2], [1, 1], [1, 0]])
    np.testing.assert_array_equal(contingency(y, p), expected)
    assert contingency(y, p).dtype == np.int64


@pytest.mark.parametrize("norm", ["sqrt", "max", "arithmetic"])
def test_batch_scores_equal_single_scores(norm):
    rng = np.random.default_rng(11)
    y = rng.integers(0, 4, 250)
    rows = []
    for r in range(9):
        _, p = random_pair(rng, 250, 4, 5, noise=0.1 * r)
        rows.append(p)
    rows[3][:] = 2                      # a single-cluster restart
    rows[4] = np.where(rows[4] == 1, 0, rows[4])  # a restart with an unused label
    labels = np.array(rows, dtype=np.int32)
    for lab in (labels, labels.astype(np.int64) * 1000 - 7):  # fast path, then np.unique path
        acc, nm = batch_scores(y, lab, norm)
        assert acc.shape == nm.shape == (9,)
        for r in range(9):
            assert acc[r] == pytest.approx(accuracy(y, lab[r]), abs=1e-15)
            assert nm[r] == pytest.approx(nmi(y, lab[r], norm), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    "args,message",
    [(([1, 2, 3], [1, 2]), "y_true has 3 labels but y_pred has 2"), (([], []), "empty labelling"),
     (([[1, 2]], [[1, 2]]), "labels must be 1-D"), (([1, 2], [[1, 2]]), "labels must be 1-D")],
)
def test_validation(args, message):
    with pytest.raises(UserError, match=message):
        accuracy(*args)
    with pytest.raises(UserError, match=message):
        nmi(*args)


def test_validation_norm_and_batch_shape():
    with pytest.raises(UserError, match="norm"):
        nmi([0, 1], [0, 1], norm="geometric")
    with pytest.raises(UserError, match="2-D"):
        batch_scores([0, 1], [0, 1])
    with pytest.raises(UserError, match="y_true has 3 labels but y_pred has 2"):
        batch_scores([0, 1, 1], [[0, 1]])


labelings = st.integers(1, 40).flatmap(
    lambda n: st.tuples(st.lists(st.integers(-3, 3), min_size=n, max_size=n),
                        st.lists(st.integers(0, 4), min_size=n, max_size=n)))


@pytest.mark.parametrize("pair", [([0] * 6, [0, 0, 0, 1, 1, 2]), ([0] * 6, [0, 0, 0, 0, 1, 2])])
def test_one_group_against_several_scores_exactly_zero(pair):
    """Found by Hypothesis: rounded marginals gave the single group an entropy of 1e-16 and NMI 1e-8."""
    for norm in ("sqrt", "max", "arithmetic"):
        assert nmi(*pair, norm) == 0.0 and nmi(*pair[::-1], norm) == 0.0


@settings(max_examples=60, deadline=None)
@given(labelings)
def test_properties(pair):
    y, p = (np.array(v) for v in pair)
    acc = accuracy(y, p)
    assert 0 < acc <= 1
    assert accuracy(y, y) == 1.0
    # the largest cell of the table is always achievable
    assert acc >= contingency(y, p).max() / len(y) - 1e-15
    for norm in ("sqrt", "max", "arithmetic"):
        v = nmi(y, p, norm)
        assert 0.0 <= v <= 1.0
        assert v == pytest.approx(nmi(p, y, norm), abs=1e-12)
        assert nmi(y, y, norm) == pytest.approx(1.0)
        assert v == pytest.approx(loop_nmi(y, p, norm), abs=1e-12)
