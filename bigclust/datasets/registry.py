"""The named data sets: the shared data folders and the papers' subsets.

One table line per data set.  Sample and class counts are hard-coded (checked
against the files by the real-data tests), so a run can be planned before
anything is read.  Labels are remapped to ``0..k-1`` in the sorted order of the
original labels, among the classes the set keeps.
"""
from __future__ import annotations

import os
import string
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bigclust._util.errors import DataError
from bigclust.datasets.arrays import open_npy, read_mat, read_npz, read_svmlight
from bigclust.datasets.readers import (DatasetInfo, Source, idx_blocks, iter_table, scan_table, sorted_classes,
                                       warn_stray_labels)

_MNIST_TRAIN = ("mnist/train-images-idx3-ubyte.gz", "mnist/train-labels-idx1-ubyte.gz")
_MNIST_TEST = ("mnist/t10k-images-idx3-ubyte.gz", "mnist/t10k-labels-idx1-ubyte.gz")
_LETTER = ("letter/letter-recognition.data.gz",)
_PEN = ("pendigits/pendigits.tra.gz", "pendigits/pendigits.tes.gz")
_OPT = ("optdigits/optdigits.tra.gz", "optdigits/optdigits.tes.gz")
_SAT = ("satimage/sat.trn.gz", "satimage/sat.tst.gz")
_SHUTTLE = ("shuttle/shuttle.trn.Z", "shuttle/shuttle.tst.gz")
_NEWS = ("20newsgroups/20news-bydate.tar.gz",)
_REUTERS = tuple(f"reuters21578/reut2-{i:03d}.sgm.gz" for i in range(22))

_DIGITS = tuple("0123456789")
_AZ = tuple(string.ascii_uppercase)
_SEED = 20100101        # the fixed seed of the MNIST 6000 sample (paper 000 year)


@dataclass(frozen=True)
class _Spec:
    info: DatasetInfo
    kind: str                             # idx | csv | ws | svmlight | mat | news20 | reuters
    classes: tuple[str, ...] = ()         # original labels of the files, in sorted order
    keep: tuple[str, ...] | None = None   # the classes this set keeps (None: all)
    sample: tuple[int, int] | None = None  # draw m of the files' n rows: (m, n), no replacement
    first_per_class: int | None = None    # keep the first rows of each class
    opts: dict = field(default_factory=dict)


def _s(name, n, d, k, kind, files, desc, **kw):
    opts = {o: kw.pop(o) for o in ("label_column", "n_fields", "splits", "min_docs", "scale_to", "store_dtype")
            if o in kw}
    if "keep" in kw:
        kw["keep"] = tuple(kw["keep"])
    return _Spec(DatasetInfo(name, desc, n, d, k, kind in ("news20", "reuters"), tuple(files)),
                 kind, opts=opts, **kw)


_LET = dict(classes=_AZ, label_column=0, n_fields=17)
_UCI = dict(label_column=-1)

_TABLE = [
    # name            n       d    k   kind       files                      description
    _s("mnist",       70000,  784, 10, "idx",     _MNIST_TRAIN + _MNIST_TEST, "MNIST digits, 60000 training then 10000 test images", classes=_DIGITS),
    _s("mnist-6000",  6000,   784, 10, "idx",     _MNIST_TRAIN,  "6000 MNIST training images drawn at random, seed 20100101 (paper 000)", classes=_DIGITS, sample=(6000, 60000)),
    _s("mnist-0-4",   30596,  784, 5,  "idx",     _MNIST_TRAIN,  "MNIST training images of digits 0-4", classes=_DIGITS, keep="01234"),
    _s("mnist-6000-0-4", 3064, 784, 5, "idx",     _MNIST_TRAIN,  "digits 0-4 of mnist-6000 (paper 000's MNIST (0-4), 3031 there)", classes=_DIGITS, sample=(6000, 60000), keep="01234"),
    _s("mnist-test",  10000,  784, 10, "idx",     _MNIST_TEST,   "the 10000 MNIST test images", classes=_DIGITS),
    _s("mnist-test-500", 500, 784, 10, "idx",     _MNIST_TEST,   "first 50 MNIST test images of each digit (paper 002, raw pixels)", classes=_DIGITS, first_per_class=50),
    _s("coil20",      1440,  1024, 20, "mat",     ("coil20/COIL20.mat",), "COIL-20 objects, 72 poses each, 32x32 (paper 002)", classes=tuple(map(str, range(1, 21)))),
    _s("letter",      20000,  16,  26, "csv",     _LETTER,       "UCI letter recognition, all 26 letters", **_LET),
    _s("letter-a-e",  3864,   16,  5,  "csv",     _LETTER,       "UCI letters A-E (paper 000)", keep="ABCDE", **_LET),
    _s("letter-f-j",  3784,   16,  5,  "csv",     _LETTER,       "UCI letters F-J (paper 000)", keep="FGHIJ", **_LET),
    _s("letter-k-o",  3828,   16,  5,  "csv",     _LETTER,       "UCI letters K-O (paper 000)", keep="KLMNO", **_LET),
    _s("letter-p-t",  3888,   16,  5,  "csv",     _LETTER,       "UCI letters P-T (paper 000)", keep="PQRST", **_LET),
    _s("letter-u-z",  4636,   16,  6,  "csv",     _LETTER,       "UCI letters U-Z (paper 000)", keep="UVWXYZ", **_LET),
    _s("optdigits",   5620,   64,  10, "csv",     _OPT,          "UCI optical digits, training then test (paper 000)", classes=_DIGITS, **_UCI),
    _s("pendigits",   7494,   16,  10, "csv",     _PEN[:1],      "UCI pen digits, training set (paper 000)", classes=_DIGITS, **_UCI),
    _s("pendigits-all", 10992, 16, 10, "csv",     _PEN,          "UCI pen digits, training then test", classes=_DIGITS, **_UCI),
    _s("satimage",    4435,   36,  6,  "ws",      _SAT[:1],      "UCI Statlog Landsat, training set (paper 000)", classes=tuple("123457"), **_UCI),
    _s("satimage-all", 6435,  36,  6,  "ws",      _SAT,          "UCI Statlog Landsat, training then test", classes=tuple("123457"), **_UCI),
    _s("shuttle",     14500,  9,   7,  "ws",      _SHUTTLE[1:],  "UCI Statlog shuttle, test set (paper 000)", classes=tuple("1234567"), **_UCI),
    _s("shuttle-all", 58000,  9,   7,  "ws",      _SHUTTLE,      "UCI Statlog shuttle, training then test", classes=tuple("1234567"), **_UCI),
    _s("shuttle-libsvm", 14500, 9, 7,  "ws",      _SHUTTLE,      "LibSVM shuttle.scale.t rebuilt: the test set, each attribute mapped onto [-1, 1] by the training set's range (paper 000)", classes=tuple("1234567"), scale_to=(-1.0, 1.0), **_UCI),
    _s("vehicle",     846,    18,  4,  "svmlight", ("vehicle/vehicle.scale.gz",), "Statlog vehicle silhouettes, LibSVM scaled (paper 000)", classes=tuple("1234")),
    _s("news20",      7515,   -1,  20, "news20",  _NEWS,         "20 Newsgroups bydate test split (7532 docs, 17 empty dropped), term counts; stands in for paper 000's LibSVM NEWS20", splits=("test",)),
    _s("news20-all",  18809,  -1,  20, "news20",  _NEWS,         "20 Newsgroups bydate, training then test (18846 docs, 37 empty dropped), term counts", splits=("train", "test")),
    _s("reuters",     9465,   -1,  51, "reuters", _REUTERS,      "Reuters-21578 single-topic documents, topics with >= 5 (paper 001)", min_docs=5),
    _s("mnist-1m",    1000000, 784, 10, "mnist1m", _MNIST_TRAIN + _MNIST_TEST, "MNIST then deterministic rotated/zoomed/shifted copies to 1,000,000 rows (label and origin of the source digit)", classes=_DIGITS),
    _s("mnist-8m",    8100000, 784, 10, "mnist1m", _MNIST_TRAIN + _MNIST_TEST, "mnist-1m's generator to 8,100,000 rows (MNIST8M's size; its first 1,000,000 rows are mnist-1m's), stored as uint8 (rounded)", classes=_DIGITS, store_dtype="uint8"),
]
# paper 002's Table 2: the first 50 test images of the digits 0..K, the subsets [0:K] (K = 9: mnist-test-500)
_TABLE += [_s(f"mnist-test-500-0-{K}", 50 * (K + 1), 784, K + 1, "idx", _MNIST_TEST,
              f"first 50 MNIST test images of each digit 0..{K} (paper 002, Table 2's [0:{K}])", classes=_DIGITS,
              first_per_class=50, keep=_DIGITS[:K + 1]) for K in range(1, 10)]
_BY_NAME = {spec.info.name: spec for spec in _TABLE}


def list_datasets() -> list[DatasetInfo]:
    """List the named data sets.

    Returns
    -------
    list of DatasetInfo
        One per named data set, in table order.
    """
    return [spec.info for spec in _TABLE]


def _spec(name) -> _Spec:
    spec = _BY_NAME.get(name)
    if spec is None:
        raise DataError(f"unknown data set {name!r}; known: {', '.join(_BY_NAME)}")
    return spec


def get_info(name: str) -> DatasetInfo:
    """Describe the named data set.

    Parameters
    ----------
    name : str
        A name of :func:`list_datasets` (``bigclust data list``).

    Returns
    -------
    DatasetInfo
        What is known about it before reading it.

    Raises
    ------
    DataError
        If the name is not in the registry (the message lists the known ones).
    """
    return _spec(name).info


def default_root() -> Path:
    """Return the data root: ``$BIGCLUST_DATA`` if set and not empty, else ``./data``.

    Returns
    -------
    Path
        The folder the named data sets' files are looked for in.
    """
    env = os.environ.get("BIGCLUST_DATA", "").strip()
    return Path(env).expanduser() if env else Path.cwd() / "data"


def open_dataset(name: str, root=None) -> Source:
    """Open a named data set under ``root`` (default: `default_root`).

    Nothing is read yet except the check that every file exists; a text
    corpus is read and vectorised on first use of its chunks, vocabulary or
    class names.

    Parameters
    ----------
    name : str
        A name of :func:`list_datasets`.
    root : str or Path, optional
        The folder holding the data set's files.

    Returns
    -------
    Source
        The data set, read in row chunks.

    Raises
    ------
    DataError
        For an unknown name or a missing file.
    """
    spec = _spec(name)
    root = Path(root).expanduser() if root is not None else default_root()
    paths = [root / f for f in spec.info.files]
    for p in paths:
        if not p.is_file():
            raise DataError(f"data set {name!r} needs {p}, which does not exist (give the folder that "
                            "holds it: [data] root in a config, bigclust data ingest --root, or BIGCLUST_DATA)")
    if spec.kind in ("news20", "reuters"):
        from bigclust.datasets import text

        if spec.kind == "news20":
            return text.news20_source(spec.info, paths[0], spec.opts["splits"])
        return text.reuters_source(spec.info, paths, spec.opts["min_docs"])
    if spec.kind == "mnist1m":  # generated chunk by chunk from the MNIST files (datasets/mnist1m.py)
        return open_mnist1m(spec.info.n_samples, root, name=name)
    kept = list(spec.keep) if spec.keep is not None else list(spec.classes)
    return Source(spec.info, lambda hint: _selected(spec, paths, hint), class_names=kept)


def open_mnist1m(n_rows: int | None = None, root=None, *, name: str = "mnist-1m") -> Source:
    """The first ``n_rows`` rows (default all) of ``mnist-1m`` (or ``mnist-8m``), generated from the MNIST files.

    The registry reads the source images (data set ``mnist``) and passes them
    to :func:`bigclust.datasets.mnist1m.source`, which knows nothing of the
    registry (the subsets of ``bench scale`` are such prefixes).  Both data
    sets are one generator: a prefix of ``mnist-8m`` up to 1,000,000 rows has
    ``mnist-1m``'s rows, rounded to ``uint8``.
    """
    from bigclust.datasets.mnist1m import source

    spec = _spec(name)
    if spec.kind != "mnist1m":
        raise DataError(f"{name!r} is not a generated MNIST set (mnist-1m, mnist-8m)")
    root = Path(root).expanduser() if root is not None else default_root()
    base = _BY_NAME["mnist"]
    paths = [root / f for f in spec.info.files]
    for p in paths:
        if not p.is_file():
            raise DataError(f"data set {name!r} needs {p}, which does not exist (set --root or BIGCLUST_DATA)")
    n_rows = spec.info.n_samples if n_rows is None else n_rows
    dtype = spec.opts.get("store_dtype")
    return source(lambda hint: _selected(base, paths, hint), n_base=base.info.n_samples,
                  n_total=spec.info.n_samples, n_rows=n_rows, files=spec.info.files, class_names=list(spec.classes),
                  name=name, store_dtype=np.dtype(dtype) if dtype else None)


def _raw_blocks(spec: _Spec, paths, hint):
    """``(X, y)`` blocks of every file in order, ``y`` indexing ``spec.classes``."""
    classes = {c: i for i, c in enumerate(spec.classes)}
    # Reads of about the chunk size, but never a huge block (a 60000-row
    # MNIST chunk is read as four blocks and reassembled).
    block_rows = min(max(hint, 1024), 16384)
    if spec.kind == "idx":
        for images, labels in zip(paths[::2], paths[1::2]):
            yield from idx_blocks(images, labels, classes, block_rows)
    elif spec.kind in ("csv", "ws"):
        def table(p):
            return iter_table(p, sep="," if spec.kind == "csv" else None,
                              label_column=spec.opts["label_column"], classes=classes,
                              n_fields=spec.opts["n_fields"] if "n_fields" in spec.opts
                              else spec.info.n_features + 1, block_rows=block_rows)
        if "scale_to" in spec.opts:
            yield from _svm_scaled(table(paths[0]), [table(p) for p in paths[1:]], *spec.opts["scale_to"])
        else:
            for p in paths:
                yield from table(p)
    else:
        if spec.kind == "svmlight":
            X, keys = read_svmlight(paths[0], n_features=spec.info.n_features)
            X = X.toarray()
        else:
            X, keys = read_mat(paths[0], "fea", "gnd")
        unknown = sorted(set(keys) - set(classes))
        if unknown:
            raise DataError(f"{paths[0]}: label {unknown[0]!r} is not one of the classes "
                            f"{', '.join(spec.classes)}")
        yield X, np.array([classes[k] for k in keys], np.int64)


def _svm_scaled(train_blocks, test_tables, lower, upper):
    """The test rows scaled as LibSVM's ``svm-scale -l lower -u upper -r <training ranges>``.

    Each attribute maps linearly from the training set's [min, max] onto
    [lower, upper] (test values outside that range go past it); constant
    attributes become 0; values are rounded to ``%g`` (6 significant
    digits), which is what svm-scale writes.
    """
    lo = hi = None
    for X, _ in train_blocks:
        bmin, bmax = X.min(axis=0).astype(np.float64), X.max(axis=0).astype(np.float64)
        lo, hi = (bmin, bmax) if lo is None else (np.minimum(lo, bmin), np.maximum(hi, bmax))
    span = np.where(hi > lo, hi - lo, 1.0)
    for blocks in test_tables:
        for X, y in blocks:
            Z = np.where(hi > lo, lower + (upper - lower) * (X.astype(np.float64) - lo) / span, 0.0)
            yield np.array([float(f"{v:g}") for v in Z.ravel()]).reshape(Z.shape).astype(np.float32), y


def _selected(spec: _Spec, paths, hint):
    """`_raw_blocks` after the subset rules, labels remapped to the kept classes."""
    kept = spec.keep if spec.keep is not None else spec.classes
    lut = np.full(len(spec.classes), -1, np.int64)
    lut[[spec.classes.index(c) for c in kept]] = np.arange(len(kept))
    chosen = None
    if spec.sample is not None:
        # The sample is a fixed sorted index set over all rows of the files,
        # so streaming keeps exactly the same rows whatever the chunk size.
        m, n = spec.sample
        chosen = np.sort(np.random.default_rng(_SEED).choice(n, m, replace=False))
    taken = np.zeros(len(spec.classes), np.int64)
    offset = 0
    for X, y in _raw_blocks(spec, paths, hint):
        keep = lut[y] >= 0
        if chosen is not None:
            lo, hi = np.searchsorted(chosen, [offset, offset + len(y)])
            picked = np.zeros(len(y), bool)
            picked[chosen[lo:hi] - offset] = True
            keep &= picked
        if spec.first_per_class is not None:
            for i in np.flatnonzero(keep):
                taken[y[i]] += 1
                keep[i] = taken[y[i]] <= spec.first_per_class
        offset += len(y)
        if keep.all():
            yield X, lut[y]
        elif keep.any():
            idx = np.flatnonzero(keep)
            yield X[idx], lut[y[idx]]


# --------------------------------------------------------------------------- single files

_EXTENSIONS = {
    ".npy": "npy", ".npz": "npz", ".mat": "mat", ".csv": "csv", ".txt": "csv", ".data": "csv",
    ".dat": "csv", ".svm": "svmlight", ".libsvm": "svmlight", ".svmlight": "svmlight",
}
FORMATS = ("npy", "npz", "csv", "svmlight", "mat")


def _guess_format(path: Path) -> str:
    name = path.name
    for z in (".gz", ".Z"):
        name = name.removesuffix(z)
    fmt = _EXTENSIONS.get(Path(name).suffix.lower())
    if fmt is None:
        raise DataError(f"cannot tell the format of {path} from its extension; pass fmt= one of "
                        f"{', '.join(FORMATS)}")
    return fmt


def _file_source(path, fmt, n, d, classes, blocks, sparse=False):
    info = DatasetInfo(path.name, f"{fmt} file {path}", n, d, len(classes) if classes else 0,
                       sparse, (str(path),))
    return Source(info, blocks, class_names=classes)


def _in_memory(path, fmt, X, keys):
    """A Source over a whole-file ``X`` with label keys (None: unlabelled)."""
    import scipy.sparse as sp

    classes, y = None, np.full(X.shape[0], -1, np.int64)     # unlabelled: y = -1
    if keys is not None:
        classes = sorted_classes(set(keys))
        index = {c: i for i, c in enumerate(classes)}
        y = np.fromiter((index[k] for k in keys), np.int64, len(keys))
    return _file_source(path, fmt, X.shape[0], X.shape[1], classes,
                        lambda hint: iter([(X, y)]), sp.issparse(X))


def open_file(path, fmt: str | None = None, label_column: int | str | None = -1, header="auto") -> Source:
    """Open one data file of a generic format as a `Source`.

    Parameters
    ----------
    path : str or Path
        The file.
    fmt : {"npy", "npz", "csv", "svmlight", "mat"} or None
        None: from the extension: ``.npy``; ``.npz``; ``.csv``, ``.txt``,
        ``.data``, ``.dat``; ``.svm``, ``.libsvm``, ``.svmlight``; ``.mat``.
        Text formats may be compressed (``.gz`` or ``.Z`` after it).
    label_column : int, str or None
        For csv and npy, the column holding the label (negative counts from
        the end), or for a csv with a header line the column's name; None: no
        labels, every row has y = -1 (svmlight too: its label fields are
        ignored, placeholders of unlabelled documents).  A .npz holds arrays ``X`` and
        (optionally) ``y``; a .mat holds ``X``/``y`` or ``fea``/``gnd``.
    header : bool or "auto"
        csv only: whether the first line holds column names.  ``"auto"``
        (default): it does when one of its fields (other than an integer
        label column) is not a number.

    Returns
    -------
    Source
        Labels are remapped to ``0..k-1`` in the sorted order of the original
        labels (numeric order when all are numbers).  The delimiter of a CSV file
        is detected from its first lines (comma, semicolon, whitespace, tab or
        bar: :func:`bigclust.datasets.tabular.sniff_delimiter`), quoted fields
        are read as the csv module reads them, and the file is read twice (once
        to count rows and collect labels).  svmlight rows are CSR unless at
        least half the entries are stored.  npy is streamed through a memory
        map and csv line by line; npz, svmlight and mat are loaded whole.
        A label column with implausibly many classes or non-integer numbers
        is a warning (:func:`bigclust.datasets.tabular.warn_implausible_labels`).

    Raises
    ------
    DataError
        Unknown format, missing or malformed file.
    """
    from bigclust.datasets.tabular import (detect_header, head_lines, label_index, sniff_delimiter,
                                           warn_implausible_labels)

    path = Path(path).expanduser()
    if path.is_dir():   # before the format: a folder has no extension to tell it by
        raise DataError(f"{path} is a folder, not a data file")
    fmt = _guess_format(path) if fmt is None else fmt
    if fmt not in FORMATS:
        raise DataError(f"unknown file format {fmt!r}; known: {', '.join(FORMATS)}")
    if not path.is_file():
        raise DataError(f"{path} does not exist")
    if isinstance(label_column, str) and fmt != "csv":
        raise DataError(f"{path}: label_column {label_column!r} is a column name; a {fmt} file has no header, "
                        "give the column's index")
    if fmt == "csv":
        lines = head_lines(path)
        sep, trailing = sniff_delimiter(path, lines)
        names = detect_header(path, lines[0] if lines else "", sep, label_column, header, trailing)
        label_column = label_index(path, label_column, names)
        n, n_fields, keys = scan_table(path, sep, label_column, header=names is not None, trailing=trailing)
        if n_fields - (label_column is not None) < 1:
            raise DataError(f"{path}: no feature columns: its rows have {n_fields} field(s), "
                            + ("all of them the label column (set [data] label_column = false if it is a feature)"
                               if label_column is not None else "and none") + "; or is the delimiter not one of "
                            "',' ';' tab '|' whitespace?")
        warn_stray_labels(path, keys)
        classes = sorted_classes(keys) if label_column is not None else None
        index = {c: i for i, c in enumerate(classes)} if classes else None
        src = _file_source(path, fmt, n, n_fields - (label_column is not None), classes,
                           lambda hint: iter_table(path, sep=sep, label_column=label_column,
                                                   classes=index, n_fields=n_fields,
                                                   block_rows=min(max(hint, 1024), 65536),
                                                   header=names is not None, trailing=trailing))
        if names is not None:
            src._feature_names = [c for i, c in enumerate(names)
                                  if label_column is None or i != label_column % len(names)]
    elif fmt == "npy":
        src = _file_source(path, fmt, *open_npy(path, label_column))
    elif fmt == "npz":
        src = _in_memory(path, fmt, *read_npz(path))
    elif fmt == "svmlight":
        X, keys = read_svmlight(path)
        if X.nnz >= 0.5 * X.shape[0] * X.shape[1]:
            X = X.toarray()
        # the format has a label field on every line, a placeholder in unlabelled documents: None drops it
        src = _in_memory(path, fmt, X, keys if label_column is not None else None)
    else:
        src = _in_memory(path, fmt, *read_mat(path))
    warn_implausible_labels(path, src.class_names, src.info.n_samples)
    return src
