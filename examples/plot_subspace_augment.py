"""
Augmented copies and the atoms a column picks
=============================================

Ak-SSC writes every image as a sparse combination of a few *atoms*: its nearest neighbours in a
dictionary that holds the images and augmented copies of them -- never the image itself nor its own
copies.  This example augments scikit-learn's 8x8 digits with a description of the copies (small
rotations, zooms and one-pixel shifts: ``augment`` takes the same table as ``[aksc] augment`` in a
config), shows a few digits with their copies, then opens one column of the coefficient matrix C:
which atoms the digit picked, whose copies they are, and with what weight.
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

from bigclust import metrics, subspace

X, y = load_digits(return_X_y=True)
X, y = X[:600].astype(np.float64), y[:600]
copies = {"rotate": {"count": 2, "max_degrees": 12}, "scale": {"count": 2, "range": [0.9, 1.1]},
          "shift": {"count": 2, "pixels": 1}}

# %%
# The copies of three digits: rotations by -12 and 12 degrees, zooms by 0.9 and 1.1, a shift of one
# pixel right and one left (``origin`` names the image each copy comes from).
shown = [0, 1, 2]
X_aug, origin = subspace.augment(X[shown], copies, image_shape=(8, 8), random_state=0)
per = X_aug.shape[0] // len(shown)
names = ["original", "rotate -12", "rotate +12", "zoom 0.9", "zoom 1.1", "shift right", "shift left"]
fig, axes = plt.subplots(len(shown), per + 1, figsize=(1.3 * (per + 1), 1.4 * len(shown)))
for r, i in enumerate(shown):
    row = [X[i]] + list(X_aug[origin == r])
    for c, img in enumerate(row):
        axes[r, c].imshow(img.reshape(8, 8), cmap="gray_r")
        axes[r, c].set_xticks([])
        axes[r, c].set_yticks([])
        if r == 0:
            axes[r, c].set_title(names[c], fontsize=8)
fig.suptitle("augmented copies (one table of transforms)")
fig.tight_layout()

# %%
# Ak-SSC's affinity on 600 digits: the dictionary holds the 600 images and their 3600 copies; every
# column of C has at most ``n_neighbors`` = 10 non-zero coefficients, on atoms of other images.
labels, W, info = subspace.subspace_clustering(X, 10, n_neighbors=10, augment=copies, image_shape=(8, 8),
                                               random_state=0, n_init=10, return_info=True)
print(f"Ak-SSC on {X.shape[0]} digits: accuracy {metrics.accuracy(y, labels):.3f}")
print("seconds per step:", {step: round(v[0], 2) for step, v in info["steps"].items()})

# %%
# One column: digit ``i`` and the atoms with a non-zero coefficient, largest weight first.  An atom
# ``a < n`` is another image; ``a >= n`` is a copy of image ``owner`` (the dictionary's ownership map).
# Most of a column's weight lies on digits of its own class -- that is what makes W a good graph; the
# column shown is the first that uses a copy and stays within its class.
D, C = info["dictionary"], info["C"].tocsc()
n = X.shape[0]


def column(i):
    """Atoms of column i by decreasing |weight|, their weights, and the image each atom is or copies."""
    col = C[:, i]
    order = np.argsort(-np.abs(col.data))
    atoms = col.indices[order]
    return atoms, col.data[order], D.own_idx[D.own_ptr[atoms]]


def own_share(i):
    """The share of column i's total |weight| that lies on atoms of digit i's own class."""
    _, w, owner = column(i)
    return np.abs(w[y[owner] == y[i]]).sum() / max(np.abs(w).sum(), 1e-300)


def shows_well(i):
    atoms, _, owner = column(i)
    return len(atoms) >= 4 and (atoms >= n).any() and (y[owner] == y[i]).all()


print(f"share of a column's |weight| on its own class, averaged: {np.mean([own_share(j) for j in range(n)]):.2f}")
i = next((j for j in range(n) if shows_well(j)), 0)
atoms, weights, owner = column(i)
all_rows = np.vstack([X, subspace.augment(X, copies, image_shape=(8, 8), random_state=0)[0]])
fig, axes = plt.subplots(1, len(atoms) + 1, figsize=(1.4 * (len(atoms) + 1), 1.9))
axes[0].imshow(X[i].reshape(8, 8), cmap="gray_r")
axes[0].set_title(f"digit {i}\nclass {y[i]}", fontsize=8)
for ax, a, w, o in zip(axes[1:], atoms, weights, owner):
    ax.imshow(all_rows[a].reshape(8, 8), cmap="gray_r")
    kind = "image" if a < n else "copy of"
    ax.set_title(f"{w:+.2f}\n{kind} {o} ({y[o]})", fontsize=8)
for ax in axes:
    ax.set_xticks([])
    ax.set_yticks([])
fig.suptitle(f"the atoms column {i} of C picked, with their coefficients")
fig.tight_layout()
plt.show()
