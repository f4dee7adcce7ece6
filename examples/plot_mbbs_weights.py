"""
MBBS: learning the weights of several kernels
=============================================

Multiple BBS (MBBS) takes several Gaussian kernels of different widths and learns one bi-stochastic
matrix together with a weight per kernel; this example shows the weights it picks on 500 digits as its
regularisation λ grows, and the accuracy of each choice beside every single kernel.
When you do not know which γ to use, MBBS chooses among candidate widths for you, and λ says how
much it may concentrate on one of them.
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

from bigclust import DataError, affinity, kmeans, metrics, normalize, spectral
from bigclust.datasets import open_dataset


def optdigits(n, seed=0):
    """n digits drawn from optdigits under $BIGCLUST_DATA, else from scikit-learn's bundled copy."""
    try:
        src = open_dataset("optdigits")          # reads $BIGCLUST_DATA
        X, y = next(iter(src.iter_chunks(src.info.n_samples)))
        name = "optdigits"
    except DataError:                            # not there: the same digits, bundled with scikit-learn
        X, y = load_digits(return_X_y=True)
        name = "digits (scikit-learn's copy: optdigits not under $BIGCLUST_DATA)"
    rows = np.random.default_rng(seed).choice(len(X), n, replace=False)
    return X[rows].astype(np.float64), y[rows], name


X, y, name = optdigits(500)
X /= np.linalg.norm(X, axis=1, keepdims=True)
k = 10
print(f"{name}: {X.shape[0]} x {X.shape[1]}, unit-length rows")


def accuracy(P):
    """Accuracy of spectral clustering on a normalised kernel (best of 10 k-means restarts)."""
    E = spectral.embed(P, k, random_state=0)
    km = kmeans.kmeans(E, k, n_init=10, random_state=0)
    return metrics.accuracy(y, km.labels[km.best])


# %%
# Four candidate widths, from too narrow to too wide, and BBS on each alone.
gammas = [0.05, 0.2, 0.8, 3.2]
Ks = [affinity.dense_kernel(X, "gaussian", gamma=g).compute() for g in gammas]
single = [accuracy(normalize.bbs(K, solver="dual")) for K in Ks]
for g, a in zip(gammas, single):
    print(f"BBS, gamma {g:4.2f} alone: acc {a:.3f}")

# %%
# MBBS for a range of λ.  Its objective is ``sum_i alpha_i ||G - K_i||^2 / 2 + λ ||alpha||^2``: a small
# λ puts all the weight on the kernel nearest G, a large one keeps the weights near uniform.  The
# distances scale like n to n² times the squared kernel values, so λ is chosen on that scale.
lams = [1e2, 1e3, 1e4, 1e5, 1e6]
alphas, accs = [], []
for lam in lams:
    G, info = normalize.mbbs(Ks, lam=lam, return_info=True)
    alphas.append(info.alpha)
    accs.append(accuracy(G))
    print(f"MBBS lam {lam:8.0e}: weights {np.round(info.alpha, 3)}  acc {accs[-1]:.3f}")

# %%
# Left: the weights as stacked bars, one bar per λ.  Right: the accuracy of MBBS against λ, with
# each kernel alone as a horizontal line.
alphas = np.array(alphas)
colors = plt.cm.viridis(np.linspace(0.1, 0.9, len(gammas)))
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
pos = np.arange(len(lams))
bottom = np.zeros(len(lams))
for j, g in enumerate(gammas):
    ax1.bar(pos, alphas[:, j], bottom=bottom, color=colors[j], label=f"γ = {g}")
    bottom += alphas[:, j]
ax1.set_xticks(pos, [f"{lam:.0e}" for lam in lams])
ax1.set_xlabel("λ")
ax1.set_ylabel("kernel weight α")
ax1.set_title("MBBS kernel weights")
ax1.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
ax2.plot(pos, accs, "ko-", label="MBBS")
for j, g in enumerate(gammas):
    ax2.axhline(single[j], color=colors[j], ls="--", label=f"BBS, γ = {g} alone")
ax2.set_xticks(pos, [f"{lam:.0e}" for lam in lams])
ax2.set_xlabel("λ")
ax2.set_ylabel("accuracy")
ax2.set_ylim(0, 1)
ax2.set_title("accuracy")
ax2.legend(loc="lower right", fontsize=8)
fig.suptitle(f"MBBS on {name.split(' ')[0]}: which widths it weights, and what that gives")
plt.show()

# %%
# With a small λ MBBS puts all the weight on the kernel nearest a bi-stochastic matrix, which is the
# narrowest one (nearly the identity) and not the best one.  A λ on the scale of the distances mixes
# the widths and does about as well as the best single kernel, without your having to know which
# width that is; a very large λ averages all kernels, the too-wide ones included.
