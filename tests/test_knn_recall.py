"""recall@k on sampled rows (bigclust.algo.knn.sample_recall) against a plain NumPy brute force."""
import re

import numpy as np
import pytest

from bigclust._util.errors import UserError
from bigclust.algo.knn import exact_sample, knn_recall, sample_rows
from bigclust.algo.knn.sample_recall import others_recall


def _rows(n=1237, d=6, seed=0):
    X = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    X[11] = X[min(400, n - 1)]          # an exact duplicate: a tie at every distance from it
    return X


def _brute(X, s, k, self_included):
    """Each sampled row's k nearest (the row itself counted or not), by (float64 squared distance, index)."""
    X64 = X.astype(np.float64)
    D = ((X64[s][:, None, :] - X64[None]) ** 2).sum(-1)
    if not self_included:
        D[np.arange(len(s)), s] = np.inf
    idx = np.lexsort((np.broadcast_to(np.arange(len(X)), D.shape), D), axis=1)[:, :k]
    return idx, np.take_along_axis(D, idx, 1)


@pytest.mark.parametrize("self_included", [True, False])
def test_exact_lists_have_recall_one(self_included):
    X = _rows()
    s = sample_rows(len(X), 200, seed=3)
    ref, d2 = _brute(X, s, 10, self_included)
    ind, got = exact_sample(X, s, 10, self_included=self_included)
    assert (ind == ref).all() and np.allclose(got, d2, rtol=1e-12, atol=0)
    assert knn_recall(X, ref, s) == 1.0                        # the convention detected from the lists
    assert knn_recall(X, ref, s, self_included=self_included) == 1.0
    from bigclust.algo.knn import recall        # the id-based recall of bench knn: not hidden by the module
    assert callable(recall) and recall(ref, ref) == 1.0


def test_planted_errors_give_the_planted_rate():
    X = _rows()
    n, k = len(X), 8
    s = sample_rows(n, 150, seed=1)
    ref, d2 = _brute(X, s, k, False)
    A = ref.copy()
    rng = np.random.default_rng(2)
    far = np.argsort(((X.astype(np.float64)[s][:, None] - X[None]) ** 2).sum(-1), axis=1)[:, -40:]
    cells = rng.choice(A.size, 97, replace=False)        # 97 wrong entries: rows far beyond the k-th distance
    r, c = np.unravel_index(cells, A.shape)
    A[r, c] = far[r, rng.integers(0, 40, r.size)]
    planted = sum(len(set(A[i]) & set(far[i])) for i in range(len(s)))
    A[0, 1:3] = -1                                       # no neighbour: misses
    A[1, 1] = A[1, 0]                                    # a repeated id counts once
    A[2, 0] = s[2]                                       # the row itself among its "others": a miss
    wrong = np.zeros(A.shape, bool)
    wrong[r, c] = True
    wrong[0, 1:3] = wrong[1, 1] = wrong[2, 0] = True
    assert wrong.sum() >= planted
    want = 1 - wrong.sum() / A.size
    assert knn_recall(X, A, s, self_included=False) == pytest.approx(want, abs=1e-15)


def test_ties_at_the_kth_distance_are_not_misses():
    X = _rows().astype(np.float64)                       # float64 rows: distances exact to 1e-16
    s = np.array([400, 5])
    ref, _ = _brute(X, s, 5, False)
    assert ref[0, 0] == 11                               # 400's nearest other: its duplicate, distance 0
    q, kth = X[5], ref[1, 4]
    n = len(X)
    # beyond the exact 5th of row 5: a copy of it, one 1e-7 farther (a near-tie), one 1e-5 farther
    Y = np.vstack([X, X[kth], q + (X[kth] - q) * (1 + 1e-7), q + (X[kth] - q) * (1 + 1e-5)])
    A = ref.copy()
    assert (exact_sample(Y, s, 5)[0] == ref).all()       # the ties go to the smaller index
    A[0, 0] = 400                                        # the row itself: a miss of its 5 nearest others
    for new, want in ((n, 1.0), (n + 1, 1.0), (n + 2, 1 - 1 / 10)):
        A[0, 0] = 11
        A[1, 4] = new
        assert knn_recall(Y, A, s, self_included=False) == pytest.approx(want, abs=1e-15), new
    A[0, 0] = 400
    assert knn_recall(Y, A, s, self_included=False) == pytest.approx(1 - 2 / 10, abs=1e-15)


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 500, 1237, 5000])
def test_streamed_chunks_give_the_in_memory_answer(chunk):
    X = _rows(n=1237)                                   # 1237 is no multiple of any chunk here
    s = sample_rows(len(X), 90, seed=4)
    k = 9                                               # k > chunk for the small chunks
    ref, d2 = _brute(X, s, k, True)
    ind, got = exact_sample(X, s, k, self_included=True, chunk_rows=chunk)
    assert (ind == ref).all() and (got == exact_sample(X, s, k, self_included=True)[1]).all()
    blocks = [X[a:a + chunk] for a in range(0, len(X), chunk)]          # an iterable of row chunks
    assert (exact_sample(blocks, s, k, self_included=True)[0] == ref).all()
    A = ref.copy()
    A[:, -1] = A[::-1, -1]                                               # some misses
    want = knn_recall(X, A, s, chunk_rows=10**6)
    assert knn_recall(X, A, s, chunk_rows=chunk) == want
    assert knn_recall(blocks, A, s) == want


def test_uint8_rows_with_many_ties():
    X = np.random.default_rng(6).integers(0, 3, size=(700, 4)).astype(np.uint8)    # 81 distinct rows
    s = sample_rows(len(X), 60, seed=0)
    ref, d2 = _brute(X, s, 7, False)
    for chunk in (5, 64, 700):
        ind, got = exact_sample(X, s, 7, chunk_rows=chunk)
        assert (ind == ref).all() and (got == d2).all()
    rng = np.random.default_rng(1)      # any 7 rows at distance <= the 7th: all correct, though not the same ids
    A = np.array([rng.choice(np.flatnonzero((((X - X[q].astype(float)) ** 2).sum(1) <= d[-1])
                                            & (np.arange(len(X)) != q)), 7, replace=False) for q, d in zip(s, d2)])
    assert not (np.sort(A, 1) == np.sort(ref, 1)).all() and knn_recall(X, A, s) == 1.0


def test_all_rows_sampled_and_store_arrays():
    zarr = pytest.importorskip("zarr")
    X = _rows(n=301, d=4)
    s = sample_rows(len(X), len(X), seed=0)                              # m = n
    assert (s == np.arange(len(X))).all()
    ref, _ = _brute(X, s, 12, False)
    Z = zarr.create_array(store={}, shape=X.shape, chunks=(64, 4), dtype="f4")
    Z[...] = X
    assert (exact_sample(Z, s[::-1], 12, chunk_rows=100)[0] == ref[::-1]).all()   # any sample order
    A = ref.copy()
    A[::3, 5] = -1
    assert knn_recall(Z, A, s, chunk_rows=100) == knn_recall(X, A, s) == pytest.approx(1 - 101 / A.size)
    da = pytest.importorskip("dask.array")
    assert knn_recall(da.from_array(X, chunks=(50, 4)), A, s) == knn_recall(X, A, s)


def test_others_recall_from_lists_with_the_row_first():
    X = _rows()
    s = sample_rows(len(X), 120, seed=5)
    others, _ = _brute(X, s, 9, False)
    A = np.hstack([s[:, None], others])          # the graph's convention: the row first, then 9 others
    A[:40, 7] = -1
    r = knn_recall(X, A, s)
    assert r == pytest.approx(1 - 40 / A.size)
    assert others_recall(r, 10) == pytest.approx(knn_recall(X, A[:, 1:], s, self_included=False))


@pytest.mark.parametrize("call, match", [
    (lambda X: sample_rows(len(X), len(X) + 1), "m=51 of n=50"),
    (lambda X: knn_recall(X, np.zeros((51, 3), int), np.arange(51)), "m=51 of n=50"),
    (lambda X: knn_recall(X, np.zeros((4, 3), int), np.arange(4), k=5), "k=5 but"),
    (lambda X: knn_recall(X, np.zeros((4, 3), int), np.arange(5)), "approx must be"),
    (lambda X: knn_recall(X, np.zeros(4, int), np.arange(4)), "approx must be"),
    (lambda X: knn_recall(X, np.zeros((4, 3)), np.arange(4)), "integer"),
    (lambda X: knn_recall(X, np.full((4, 3), 50), np.arange(4)), "< n=50"),
    (lambda X: knn_recall(X, np.full((4, 3), -2), np.arange(4)), ">= 0"),
    (lambda X: knn_recall(X, np.zeros((2, 3), int), np.array([3, 3])), "distinct"),
    (lambda X: knn_recall(X, np.zeros((2, 3), int), np.array([0, 50])), r"\[0, 50\)"),
    (lambda X: knn_recall(X[:, :, None], np.zeros((2, 3), int), np.arange(2)), "2-D array"),
    (lambda X: knn_recall(iter([X]), np.zeros((2, 3), int), np.arange(2)), "iterated again"),
    (lambda X: knn_recall([X, X[:, :2]], np.zeros((2, 3), int), np.arange(2)), "expected \\(rows, 3\\)"),
    (lambda X: knn_recall([X], np.zeros((2, 3), int), np.array([0, 60])), r"\[0, 50\)"),
    (lambda X: exact_sample(X, np.arange(3), 50), "k=50 must be between 1 and 49"),
    (lambda X: exact_sample(X, np.arange(3), 2, chunk_rows=0), "chunk_rows"),
    (lambda X: exact_sample(np.where(np.arange(50)[:, None] == 7, np.nan, X), np.arange(3), 2), "row 7 has NaN"),
    (lambda X: exact_sample(np.where(np.arange(50)[:, None] == 1, np.inf, X), np.arange(3), 2), "row 1 has NaN"),
])
def test_bad_input_is_one_line(call, match):
    X = _rows(n=50, d=3)
    with pytest.raises(UserError, match=match) as e:
        call(X)
    assert "\n" not in str(e.value)


def test_bench_scale_records_the_stored_graphs_recall():
    zarr = pytest.importorskip("zarr")
    from bigclust.bench import scale as bs

    X = _rows(n=2500, d=5)
    others, _ = _brute(X, np.arange(len(X)), 5, False)
    lists = np.hstack([np.arange(len(X))[:, None], others])     # the graph's convention: each row first
    lists[:500, 5] = -1                                 # 500 misses
    root = zarr.open_group(store={}, mode="w")
    pre = root.create_group("preprocess/p1")
    pre.create_array("X", shape=X.shape, chunks=(512, 5), dtype="f4")[...] = X
    aff = root.create_group("affinity/a1")
    aff.attrs["params"] = {"src": "preprocess", "input": "p1", "n_neighbors": 6}
    aff.create_array("neighbors", shape=lists.shape, chunks=(512, 6), dtype="i8")[...] = lists

    class Store:
        def open(self, stage, key):
            return root[f"{stage}/{key}"]

    done = {("preprocess", "p1"): {}, ("affinity", "a1"): {}}
    rec = bs.graph_recall(Store(), done)
    s = sample_rows(len(X), 2000, 0)
    assert rec["k"] == 6 and rec["sample"] == 2000 and rec["cpu_seconds"] >= 0
    assert rec["recall"] == pytest.approx(1 - (s < 500).sum() / (2000 * 6), abs=1e-15)
    assert bs.graph_recall(Store(), {("preprocess", "p1"): {}}) == {}          # no kNN graph in the run
    res = bs.scale_result([2500], {"knn": [1.0]}, {"knn": [1]},
                          extra={"knn_recall_at_10": [rec["recall"]], "knn_recall_sample": [2000],
                                 "knn_recall_k": [6], "knn_recall_cpu_seconds": [rec["cpu_seconds"]]})
    assert re.search(rf"recall@6 \(2000 rows\) +{rec['recall']:.4f}\n", bs.format_report(res))
    assert "recall" not in bs.format_report(bs.scale_result([2500], {"knn": [1.0]}, {"knn": [1]}))
