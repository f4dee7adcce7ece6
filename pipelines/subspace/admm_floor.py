"""Where the per-column ADMM time goes (pipelines/subspace/README.md, "Benchmark"): the Gram matrix, the first
inverse (from a Cholesky factor), the iterations, against the plain NumPy loop of `bigclust bench subspace` on the
same problem and against the FLOP floor (the bench's FLOP model at the dgemm rate of the kernel's Gram shape on the
same threads).

    python pipelines/subspace/admm_floor.py
"""
import os, time, numpy as np
from bigclust.bench.subspace import dgemm_rate, flops_per_column, numpy_admm, subspace_data
from bigclust.subspace import build_dictionary, knn_dictionary, ssc_lambda
from bigclust.subspace.selfexpr import RELAX, RHO_L1, admm_knn
from bigclust.subspace import _numba as K
X, _ = subspace_data(5000, 100); D = build_dictionary(X); nb = knn_dictionary(D, 50); lam = ssc_lambda(None, D, nb)
Xs = D.atoms[:5000]; thr = np.full(nb.shape, lam)
admm_knn(Xs[:10], D.atoms, nb[:10], thr[:10], 0.0, RHO_L1, 1e-9, 1e-9, 100000, True, RELAX)
def tm(f, r=7):
    ts = []
    for _ in range(r):
        a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
    return np.median(ts)
n = 5000
print("load", os.getloadavg())
full = tm(lambda: admm_knn(Xs, D.atoms, nb, thr, 0.0, RHO_L1, 1e-9, 1e-9, 100000, True, RELAX))
one = tm(lambda: admm_knn(Xs, D.atoms, nb, thr, 0.0, RHO_L1, 1e-9, 1e-9, 1, True, RELAX))
G = np.empty((n, 50, 50)); b = np.empty((n, 50))
gr = tm(lambda: K.gram_columns(D.atoms, Xs, nb, G, b))
print("numba per column (wall, all threads): all %.1f us, gram %.1f, gram+inverse+1 iteration %.1f, rest %.1f" % (full/n*1e6, gr/n*1e6, one/n*1e6, (full-one)/n*1e6))
sub = range(0, n, 25)
def np_setup():
    for i in sub:
        A = D.atoms[nb[i]].T; G_ = A.T @ A; b_ = A.T @ Xs[i]; np.linalg.inv(G_ + RHO_L1 * np.eye(50))
ts = tm(np_setup, 3) / len(sub); tf = tm(lambda: [numpy_admm(D.atoms[nb[i]].T, Xs[i], lam, RHO_L1, 1e-9, 1e-9, 100000, RELAX) for i in sub], 3) / len(sub)
print("numpy per column: all %.1f us, setup (gather, gram, one inverse) %.1f us" % (tf*1e6, ts*1e6))
print("ratio now %.1f; ratio if numba's iterations were free %.1f" % (tf / (full/n), tf / (one/n)))
its = admm_knn(Xs, D.atoms, nb, thr, 0.0, RHO_L1, 1e-9, 1e-9, 100000, True, RELAX)[1]
fact = np.mean([numpy_admm(D.atoms[nb[i]].T, Xs[i], lam, RHO_L1, 1e-9, 1e-9, 100000, RELAX)[2] for i in sub])
gemm, gemm_flops = dgemm_rate(50, 100); flops = flops_per_column(50, 100, its.mean(), fact)[0]
floor = flops / (gemm_flops / tm(gemm))
print("floor per column %.1f us (%.2f MFLOP at the dgemm rate); floor_ratio (floor time / kernel time) %.2f"
      % (floor*1e6, flops/1e6, floor / (full/n)))
