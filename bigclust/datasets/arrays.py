"""Readers of the whole-file formats: .npy (memory-mapped), .npz, MATLAB .mat and svmlight / LibSVM.

Each returns its rows at once (svmlight, .npz and .mat parsers have no
incremental interface; .npy is a memory map read by row block later) with
the labels as keys (:func:`bigclust.datasets.readers.label_key`), and raises
`DataError` naming the file for anything wrong with it.
"""
from __future__ import annotations

import zlib

import numpy as np

from bigclust._util.errors import DataError
from bigclust.datasets.readers import _STREAM_ERRORS, label_key, open_binary


def read_svmlight(path, n_features=None):
    """Read an svmlight / LibSVM file (optionally gzipped): ``(CSR float32, label keys)``.

    Loaded whole: scikit-learn's C parser has no incremental interface and
    the format does not announce its row count.
    """
    from sklearn.datasets import load_svmlight_file

    with open_binary(path) as f:
        try:
            X, y = load_svmlight_file(f, n_features=n_features, dtype=np.float32)
        except _STREAM_ERRORS as exc:
            raise DataError(f"{path}: compressed data are truncated or corrupt ({exc})") from None
        except ValueError as exc:
            raise DataError(f"{path}: not a valid svmlight/LibSVM file ({exc})") from None
    return X.tocsr(), [label_key(repr(float(v))) for v in y]


def read_mat(path, xkey=None, ykey=None):
    """Read a MATLAB v5 file whole (scipy.io): ``(X float32, label keys)``.

    Without keys, the variables ``X``/``y`` are used if present, else
    ``fea``/``gnd`` (Deng Cai's naming, as in COIL20.mat).
    """
    import scipy.io
    import scipy.sparse as sp

    try:
        m = scipy.io.loadmat(path)
    except FileNotFoundError:
        raise DataError(f"{path} does not exist") from None
    except (ValueError, TypeError, OSError, NotImplementedError) as exc:
        raise DataError(f"{path}: not a readable MATLAB v5 file ({exc})") from None
    if xkey is None:
        xkey, ykey = ("X", "y") if "X" in m else ("fea", "gnd")
    missing = [k for k in (xkey, ykey) if k not in m]
    if missing:
        have = ", ".join(k for k in m if not k.startswith("__"))
        raise DataError(f"{path}: no variable {missing[0]!r} (it has: {have})")
    X, y = m[xkey], np.asarray(m[ykey]).ravel()
    X = X.tocsr().astype(np.float32) if sp.issparse(X) else np.asarray(X, np.float32)
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise DataError(f"{path}: {xkey!r} has shape {X.shape} but {ykey!r} has {y.shape[0]} labels")
    return X, [label_key(repr(float(v))) for v in y]


def _magic(path, n):
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}") from None


def _what_it_is(head: bytes) -> str:
    if not head:
        return "it is empty (0 bytes)"
    for magic, name in ((b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"%PDF", "a PDF"),
                        (b"\x1f\x8b", "gzip data"), (b"\x93NUMPY", "a .npy array"),
                        (b"\x89HDF", "an HDF5 file"), (b"PK", "a zip archive")):
        if head.startswith(magic):
            return f"it holds {name}"
    return f"it starts with bytes {head[:8].hex()}"


def read_npz(path):
    """Read arrays ``X`` and (optional) ``y`` of a .npz file, whole: ``(X float32, keys or None)``."""
    import zipfile

    head = _magic(path, 8)
    if not head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        raise DataError(f"{path}: not a valid .npz file (a zip archive of .npy arrays): {_what_it_is(head)}")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k in ("X", "y")}
            files = z.files
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        if "allow_pickle" in str(exc):
            raise DataError(f"{path}: 'X' or 'y' holds Python objects (dtype object), which are not loaded "
                            "(unpickling can run code): save them as numeric arrays") from None
        raise DataError(f"{path}: not a valid .npz file: truncated or corrupt ({exc})") from None
    if "X" not in arrays:
        raise DataError(f"{path}: no array 'X' (it has: {', '.join(files)})")
    X = _numeric(path, "X", arrays["X"])
    y = arrays["y"].ravel() if "y" in arrays else None
    if X.ndim != 2 or (y is not None and len(y) != X.shape[0]):
        raise DataError(f"{path}: 'X' must be 2-D with one 'y' label per row, got X {X.shape}"
                        f"{'' if y is None else f' and y {y.shape}'}")
    return X, None if y is None else [label_key(str(v)) for v in y]


def _numeric(path, name, a):
    """``a`` as float32, or one line saying why it is not numbers (complex values are not cast silently)."""
    if a.dtype.kind == "c":
        raise DataError(f"{path}: {name!r} is complex ({a.dtype}); clustering needs real numbers")
    try:
        return np.asarray(a, np.float32)
    except ValueError:
        raise DataError(f"{path}: {name!r} ({a.dtype}) holds values that are not numbers") from None


def open_npy(path, label_column):
    """A 2-D .npy file through a memory map: ``(n, d, classes, blocks(hint))``.

    The label column (None: unlabelled) is split off; rows are streamed.
    """
    head = _magic(path, 6)
    if head != b"\x93NUMPY":
        raise DataError(f"{path}: not a valid .npy file: {_what_it_is(head)}")
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        if "Python objects" in str(exc) or "allow_pickle" in str(exc):
            raise DataError(f"{path}: holds Python objects (dtype object), which are not loaded (unpickling can "
                            "run code): save a numeric array") from None
        raise DataError(f"{path}: not a readable .npy file ({exc})") from None
    if arr.dtype.kind in "cUSV":
        raise DataError(f"{path}: the array is {arr.dtype} ({'complex' if arr.dtype.kind == 'c' else 'not numbers'});"
                        " clustering needs a real numeric array")
    if arr.ndim != 2:
        raise DataError(f"{path}: expected a 2-D array, got shape {arr.shape}")
    n, d = arr.shape
    keep, classes, values = np.arange(d), None, None
    if label_column is not None:
        if not -d <= label_column < d:
            raise DataError(f"{path}: label column {label_column} does not exist (rows have {d} columns)")
        col = label_column % d
        keep = np.delete(keep, col)
        values = np.unique(np.asarray(arr[:, col], np.float64))   # sorted: class order
        classes = [label_key(repr(float(v))) for v in values]

    def blocks(hint):
        step = min(max(hint, 1024), 65536)
        for s in range(0, n, step):
            part = np.asarray(arr[s:s + step])
            y = (np.full(len(part), -1, np.int64) if values is None
                 else np.searchsorted(values, part[:, col].astype(np.float64)).astype(np.int64))
            yield part[:, keep].astype(np.float32), y

    return n, len(keep), classes, blocks
