"""tf-idf weighting (paper 001's 4 local x 2 global x 2 normalisation schemes) vs dense NumPy."""
import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust._util.errors import DataError
from bigclust.algo.preprocess import tfidf


def counts(seed=0, n=14, d=9):
    rng = np.random.default_rng(seed)
    C = rng.poisson(0.9, (n, d)) * rng.integers(1, 4, (n, d))
    C[3] = 0            # an empty document
    C[:, 5] = 0         # a term in no document
    C[0, :3] = [7, 1, 2]
    return C.astype(float)


def reference(C, local, global_, normalize):
    """The paper's formulas written out densely, term by term."""
    present = C > 0
    L = {
        "tf": C,
        "binary": present * 1.0,
        "augmented": np.where(present, 0.5 + 0.5 * C / np.maximum(C.max(axis=1, keepdims=True), 1), 0),
        "log": np.log(1 + C),
    }[local]
    n, df = C.shape[0], present.sum(axis=0)
    G = np.ones(C.shape[1]) if global_ == "none" else np.array(
        [np.log(n / k) if k else 0.0 for k in df])
    A = L * G
    if normalize:
        norm = np.linalg.norm(A, axis=1, keepdims=True)
        A = np.divide(A, norm, out=np.zeros_like(A), where=norm > 0)
    return A, G


CASES = list(itertools.product(["tf", "binary", "augmented", "log"], ["none", "idf"], [False, True]))


@pytest.mark.parametrize("local, global_, normalize", CASES)
def test_against_dense_reference(local, global_, normalize):
    C = counts()
    want, G = reference(C, local, global_, normalize)
    Xw, idf = tfidf(sp.csr_matrix(C), local=local, global_=global_, normalize=normalize)
    assert sp.isspmatrix_csr(Xw) and Xw.dtype == np.float32 and idf.dtype == np.float64
    np.testing.assert_allclose(Xw.toarray(), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(idf, G, rtol=1e-12)
    Xd, _ = tfidf(C, local=local, global_=global_, normalize=normalize)   # dense in, dense out
    assert isinstance(Xd, np.ndarray)
    np.testing.assert_allclose(Xd, want, rtol=1e-6, atol=1e-7)


def test_paper_forms_on_known_values():
    C = np.array([[1.0, 4.0, 0.0], [2.0, 0.0, 0.0]])
    np.testing.assert_allclose(tfidf(C, "log", "none", False)[0], [[np.log(2), np.log(5), 0], [np.log(3), 0, 0]],
                               rtol=1e-6)
    np.testing.assert_allclose(tfidf(C, "augmented", "none", False)[0], [[0.625, 1, 0], [1, 0, 0]])
    np.testing.assert_allclose(tfidf(C, "tf", "idf", False)[1], [0.0, np.log(2), 0.0])


def test_idf_reuse_on_chunks_equals_whole():
    C = sp.csr_matrix(counts(seed=1, n=30, d=12))
    for local in ("tf", "augmented", "log"):
        whole, idf = tfidf(C, local=local)
        first, idf1 = tfidf(C[:11], local=local, idf=idf)
        second, _ = tfidf(C[11:], local=local, idf=idf)
        np.testing.assert_array_equal(idf1, idf)
        np.testing.assert_allclose(sp.vstack([first, second]).toarray(), whole.toarray(), rtol=1e-6)
        own, _ = tfidf(C[11:], local=local)          # without idf: the chunk's own, different
        assert not np.allclose(own.toarray(), whole[11:].toarray())


def test_stored_zeros_are_absent_and_input_untouched():
    X = sp.csr_matrix((np.array([0.0, 2.0]), np.array([0, 1]), np.array([0, 2, 2])), shape=(2, 3))
    before = X.copy()
    Xw, idf = tfidf(X, local="binary", global_="idf", normalize=False)
    np.testing.assert_allclose(Xw.toarray(), [[0, np.log(2), 0], [0, 0, 0]], rtol=1e-6)
    assert (X != before).nnz == 0 and X.nnz == 2


def test_validation():
    C = sp.csr_matrix(counts())
    with pytest.raises(DataError, match="local weight 'idf'; allowed: tf, binary, augmented, log"):
        tfidf(C, local="idf")
    with pytest.raises(DataError, match="global weight 'entropy'; allowed: none, idf"):
        tfidf(C, global_="entropy")
    with pytest.raises(DataError, match=r"idf has shape \(3,\), expected \(9,\)"):
        tfidf(C, idf=np.ones(3))
    with pytest.raises(DataError, match="non-negative term counts"):
        tfidf(-C)
