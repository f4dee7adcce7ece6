"""The per-component eigensolver reads its blocks from P's own arrays: the eigenpairs of the copies it replaced, bit for bit."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import subspace_angles

from bigclust.algo import spectral
from bigclust.algo.affinity import knn_kernel
from bigclust.algo.spectral import components, local_order, top_eigenvectors


def _old_by_component(P, k, random_state):
    """The former implementation (a float64 copy of P, renumbered by component, block slices): the reference."""
    P = sp.csr_matrix(P, dtype=np.float64)
    _, lab = components(P)
    order = np.argsort(lab, kind="stable")
    off = np.concatenate([[0], np.cumsum(np.bincount(lab))])
    Pp = P[order][:, order].tocsr()
    cand_val, cand_comp, cand_rank, cand_vec = [], [], [], []
    single = np.flatnonzero(np.diff(off) == 1)
    if single.size:
        rows = off[single]
        cand_val.append(Pp.diagonal()[rows])
        cand_comp.append(single)
        cand_rank.append(np.zeros(single.size, dtype=np.int64))
        cand_vec.extend((order[r:r + 1], np.ones(1)) for r in rows)
    for c in np.flatnonzero(np.diff(off) > 1):
        a, b = off[c], off[c + 1]
        m, B = b - a, Pp[a:b, a:b]
        kk = min(k, m)
        if m <= max(spectral.EIGH_MAX_N, k + 1):
            w, U = np.linalg.eigh(B.toarray())
            w, U = w[::-1][:kk], U[:, ::-1][:, :kk]
        else:
            w, U = spectral._iterative(B, kk, "eigsh", random_state)
            o = np.argsort(w)[::-1]
            w, U = w[o], U[:, o]
        cand_val.append(w)
        cand_comp.append(np.full(kk, c))
        cand_rank.append(np.arange(kk))
        cand_vec.extend((order[a:b], U[:, j]) for j in range(kk))
    val, comp, rank = (np.concatenate(x) for x in (cand_val, cand_comp, cand_rank))
    pick = np.lexsort((rank, comp, -val))[:k]
    vecs = np.zeros((P.shape[0], k))
    for j, i in enumerate(pick):
        rows, v = cand_vec[i]
        vecs[rows, j] = v
    return val[pick], vecs


def _knn(n, seed):
    rng = np.random.default_rng(seed)
    X = np.vstack([c + rng.normal(size=(n // 3, 4)) for c in rng.normal(size=(3, 4)) * 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        K = knn_kernel(X, 6, 2.0)
    d = np.asarray(K.sum(axis=1)).ravel() ** -0.5
    return sp.csr_matrix(sp.diags(d) @ K @ sp.diags(d))


def _split(dtype, seed=0, big=2400):
    """Blocks (two ARPACK-sized, small ones, single points with and without a diagonal, a stored zero),
    rows shuffled and each row's entries in a shuffled stored order."""
    rng = np.random.default_rng(seed)
    blocks = [_knn(big, seed), sp.csr_matrix([[0.7]]), _knn(30, seed + 1), sp.csr_matrix((1, 1)),
              _knn(big + 300, seed + 2), sp.csr_matrix([[0.2, 0.3], [0.3, 0.1]])]
    P = sp.block_diag(blocks).tocsr()
    perm = rng.permutation(P.shape[0])
    P = sp.csr_matrix(P[perm][:, perm], dtype=dtype)
    P.data[5] = 0.0   # a stored zero: not an edge
    for i in range(P.shape[0]):   # shuffle each row's stored order: the products must keep it
        a, b = P.indptr[i], P.indptr[i + 1]
        s = a + rng.permutation(b - a)
        P.indices[a:b], P.data[a:b] = P.indices[s].copy(), P.data[s].copy()
    P.has_sorted_indices = False
    return P


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nocopy", [False, True])
def test_blocks_from_p_give_the_old_eigenpairs_bit_for_bit(dtype, nocopy, monkeypatch):
    P = _split(dtype)
    assert components(P)[0] == 6   # the stored zero sits inside a kNN block, which stays connected
    v_old, V_old = _old_by_component(P.copy(), 8, 0)
    if nocopy:   # every ARPACK block through the no-copy product
        monkeypatch.setattr(spectral, "FLOAT32_OPERATOR_NNZ", 0)
    v, V = spectral._by_component(P, 8, 0)
    assert np.array_equal(v, v_old) and np.array_equal(V, V_old)


@pytest.mark.parametrize("nocopy", [False, True])
def test_renumbered_p_gives_the_data_orders_eigenpairs(nocopy, monkeypatch):
    P = _split(np.float32, seed=3)
    v_old, V_old = top_eigenvectors(P, 7, solver="components")
    A, order = local_order(P)   # the embed stage's renumbering: rows keep their stored order
    if nocopy:
        monkeypatch.setattr(spectral, "FLOAT32_OPERATOR_NNZ", 0)
    monkeypatch.setattr(spectral, "permute", lambda *a, **kw: pytest.fail("P was copied back to its numbering"))
    v, V = top_eigenvectors(A, 7, solver="auto", order=order)
    if not nocopy:   # blocks copied in the data's order: the same products, bit for bit
        assert np.array_equal(v, v_old) and np.array_equal(V, V_old)
    else:   # ARPACK on the blocks in P's (renumbered) order: its sums in another order, the same pairs
        np.testing.assert_allclose(v, v_old, rtol=1e-10)
        assert np.abs(subspace_angles(V, V_old)).max() < 1e-7
        assert not np.array_equal(V, V_old)   # the renumbered path ran


def test_no_copy_block_without_convergence_falls_back_to_lobpcg(monkeypatch):
    import scipy.sparse.linalg as sla
    P = _split(np.float32, seed=7)
    A, order = local_order(P)
    monkeypatch.setattr(spectral, "FLOAT32_OPERATOR_NNZ", 0)

    def fail(*a, **kw):
        raise sla.ArpackNoConvergence("no", np.empty(0), np.empty((0, 0)))
    monkeypatch.setattr(sla, "eigsh", fail)
    with pytest.warns(RuntimeWarning, match="falling back to lobpcg"):
        v_ref, V_ref = top_eigenvectors(P, 4, solver="components")   # the blocks in the data's order
    with pytest.warns(RuntimeWarning, match="falling back to lobpcg"):
        v, V = top_eigenvectors(A, 4, order=order)   # in P's: the same start block, rows renumbered
    np.testing.assert_allclose(v, v_ref, rtol=1e-8)
    assert np.abs(subspace_angles(V, V_ref)).max() < 1e-5


def test_components_only_labels_numbered_as_in_the_data():
    P = _split(np.float64, seed=5)
    A, order = local_order(P)
    v_old, V_old = _old_by_component(P, 5, 1)
    v, V = spectral._by_component(A, 5, 1, order)
    assert np.array_equal(v, v_old) and np.array_equal(V, V_old)


def test_a_block_holds_no_stored_zero_from_another_component():
    """The exact BBS keeps clipped entries as stored zeros; one joining two components named a column of the
    other block in the copy (out of range: ARPACK read past its vector, a flaky failure when that memory was NaN)."""
    rng = np.random.default_rng(3)
    sizes = (30, 70, 50)
    blocks = [sp.random(m, m, density=0.2, random_state=rng) for m in sizes]
    A = sp.block_diag([b + b.T + sp.identity(b.shape[0]) for b in blocks]).tocsr()
    perm = rng.permutation(A.shape[0])
    A = sp.csr_matrix(A[perm][:, perm])
    cross = sp.random(*A.shape, density=0.05, random_state=rng, format="coo")
    cross = ((cross + cross.T) != 0).tocoo()
    Z = sp.csr_matrix((np.concatenate([A.tocoo().data, np.zeros(cross.nnz)]),
                       (np.concatenate([A.tocoo().row, cross.row]), np.concatenate([A.tocoo().col, cross.col]))),
                      shape=A.shape)   # duplicates summed: every cross entry is stored, zero where A has none
    Z.sum_duplicates()
    assert Z.nnz > A.nnz and components(Z)[0] == 3
    ncomp, lab = components(Z)
    byc = np.argsort(lab, kind="stable")
    off = np.concatenate([[0], np.cumsum(np.bincount(lab))])
    pos = np.empty(Z.shape[0], dtype=Z.indices.dtype)
    pos[byc] = np.arange(Z.shape[0]) - off[lab[byc]]
    dense = Z.toarray()
    for c in range(ncomp):
        rows = byc[off[c]:off[c + 1]]
        B = spectral._take_block(Z, rows, pos, np.float64)
        assert B.indices.max() < rows.size and np.all(B.data != 0)
        np.testing.assert_array_equal(B.toarray(), dense[np.ix_(rows, rows)])
    w, U = np.linalg.eigh(dense)
    v, V = top_eigenvectors(Z, 6, solver="components")
    np.testing.assert_allclose(v, w[::-1][:6], atol=1e-9)
    assert np.max(subspace_angles(V, U[:, -6:])) < 1e-6
