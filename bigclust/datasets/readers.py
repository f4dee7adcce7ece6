"""Readers for the raw file formats, and the `Source` they feed.

Every reader yields row blocks ``(X, y)``: ``X`` is float32 (a dense ndarray,
or a CSR matrix for sparse formats), ``y`` int64 indices into a class list the
caller fixes.  `Source` turns any such stream into chunks of exactly
``chunk_rows`` rows and checks the row count it promised.

Formats that allow it are streamed (IDX from the gzip stream block by block,
delimited text line by line); the whole-file formats (.npy through a memory
map; svmlight, .npz and .mat loaded whole, their parsers having no
incremental interface) are in :mod:`bigclust.datasets.arrays`.
Everything the user can get wrong (missing or truncated file, bad magic
number, a row with the wrong number of fields, a non-number) raises
`DataError` naming the file and the line or byte offset.
"""
from __future__ import annotations

import gzip
import io
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from bigclust._util.errors import DataError
from bigclust.datasets._lzw import _LZWReader

# What gzip / zlib / tarfile raise on truncated or corrupt compressed data.
_STREAM_ERRORS = (EOFError, OSError, zlib.error)


@dataclass(frozen=True)
class DatasetInfo:
    """What is known about a data set before reading it.

    Parameters
    ----------
    name : str
        The data set's name.
    description : str
        One line on what it is.
    n_samples, n_features, n_classes : int
        Its size; ``n_features`` is -1 for text corpora, whose vocabulary is only known after reading.
    sparse : bool
        Whether its rows are read as scipy.sparse matrices.
    files : tuple of str
        Its files, relative to the data root (absolute for `open_file`).
    """

    name: str
    description: str
    n_samples: int
    n_features: int
    n_classes: int
    sparse: bool
    files: tuple[str, ...]


class Source:
    """A data set that can be read, any number of times, in row chunks.

    Parameters
    ----------
    info : DatasetInfo
        What is known about the data set.
    blocks : callable
        ``blocks(hint_rows)`` returns an iterator of ``(X, y)`` blocks of any
        size, in the data set's fixed row order; ``hint_rows`` is the chunk
        size asked for, so readers can size their reads to it.
    feature_names, class_names : list of str or None
        Names of the columns and of the classes, when known.
    """

    def __init__(self, info: DatasetInfo, blocks: Callable[[int], Iterator], *,
                 feature_names=None, class_names=None):
        self.info = info
        self._blocks = blocks
        self._feature_names = feature_names
        self._class_names = class_names

    @property
    def feature_names(self) -> list[str] | None:
        """Names of the columns (the vocabulary for text), or None."""
        return self._feature_names

    @property
    def class_names(self) -> list[str] | None:
        """Original label of each class index ``0..n_classes-1``, or None."""
        return self._class_names

    def __repr__(self):
        i = self.info
        return f"<Source {i.name!r}: {i.n_samples} x {i.n_features}, {i.n_classes} classes>"

    def iter_chunks(self, chunk_rows: int) -> Iterator[tuple]:
        """Yield ``(X, y)`` chunks of ``chunk_rows`` rows (the last may be shorter).

        Parameters
        ----------
        chunk_rows : int
            Rows per chunk, >= 1.

        Yields
        ------
        X : ndarray float32 (n, d) or scipy.sparse.csr_matrix float32
        y : ndarray int64 (n,), labels in ``0..n_classes-1``, or -1 for unlabelled rows

        Raises
        ------
        DataError
            If the files hold another number of rows or columns than the data
            set promises (``info``), or a reader finds a malformed file.
        """
        if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) \
                or chunk_rows < 1:
            raise DataError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
        chunk_rows = int(chunk_rows)
        info, seen = self.info, 0
        for X, y in rechunk(self._blocks(chunk_rows), chunk_rows):
            if info.n_features >= 0 and X.shape[1] != info.n_features:
                raise DataError(f"data set {info.name!r}: rows have {X.shape[1]} features, "
                                f"expected {info.n_features} (files: {', '.join(info.files)})")
            seen += X.shape[0]
            if seen > info.n_samples:
                break
            yield X, y
        if seen != info.n_samples:
            got = f"more than {info.n_samples}" if seen > info.n_samples else str(seen)
            raise DataError(f"data set {info.name!r}: read {got} rows, expected {info.n_samples} "
                            f"(files: {', '.join(info.files)})")


def rechunk(blocks, chunk_rows: int):
    """Regroup a stream of ``(X, y)`` blocks into chunks of exactly ``chunk_rows`` rows."""
    pieces, have = [], 0
    for X, y in blocks:
        start, n = 0, X.shape[0]
        while start < n:
            take = min(chunk_rows - have, n - start)
            pieces.append((X[start:start + take], y[start:start + take]))
            have += take
            start += take
            if have == chunk_rows:
                yield _concat(pieces)
                pieces, have = [], 0
    if have:
        yield _concat(pieces)


def _concat(pieces):
    import scipy.sparse as sp

    Xs = [p[0] for p in pieces]
    y = np.concatenate([p[1] for p in pieces]).astype(np.int64, copy=False)
    if sp.issparse(Xs[0]):
        X = Xs[0] if len(Xs) == 1 else sp.vstack(Xs, format="csr")
        return sp.csr_matrix(X, dtype=np.float32), y
    X = Xs[0] if len(Xs) == 1 else np.concatenate(Xs)
    return np.ascontiguousarray(X, dtype=np.float32), y


# --------------------------------------------------------------------------- files

def open_binary(path):
    """Open ``path`` for binary reading, decompressing ``.gz`` and ``.Z`` by extension.

    Raises
    ------
    DataError
        If the file does not exist or does not start with the magic number
        its extension promises.
    """
    path = Path(path)
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path} does not exist") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}") from None
    if path.suffix == ".Z":
        return io.BufferedReader(_LZWReader(raw, path), 1 << 16)
    if path.suffix == ".gz":
        magic = raw.read(2)
        raw.close()
        if magic != b"\x1f\x8b":
            raise DataError(f"{path}: not a gzip file (magic number {magic.hex() or 'missing'}, "
                            f"expected 1f8b)")
        return gzip.open(path, "rb")
    return raw


def _read(f, n, path):
    try:
        return f.read(n)
    except _STREAM_ERRORS as exc:
        raise DataError(f"{path}: compressed data are truncated or corrupt ({exc})") from None


#: a UTF-8 byte order mark (spreadsheets write one) as latin-1 decodes it
_BOM = "\xef\xbb\xbf"


def iter_lines(path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` of a (possibly compressed) latin-1 text file, a UTF-8 BOM dropped."""
    lineno = 0
    with open_binary(path) as f, io.TextIOWrapper(f, encoding="latin-1") as text:
        try:
            for lineno, line in enumerate(text, 1):
                yield lineno, (line[len(_BOM):] if lineno == 1 and line.startswith(_BOM) else line)
        except _STREAM_ERRORS as exc:
            raise DataError(f"{path}: compressed data are truncated or corrupt after line "
                            f"{lineno} ({exc})") from None


# --------------------------------------------------------------------------- IDX

_IDX_DTYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def iter_idx(path, ndim: int, block_rows: int, *, expect_rows: int | None = None):
    """Yield the items of an IDX file (MNIST format) as 2-D blocks, streaming.

    Parameters
    ----------
    path : path of an IDX file, optionally gzipped
    ndim : number of dimensions the file must have (1 for labels, 3 for images)
    block_rows : items per yielded block
    expect_rows : if given, the number of items the header must announce

    Yields
    ------
    ndarray (k, prod(shape[1:])) of the file's dtype.
    """
    with open_binary(path) as f:
        head = _read(f, 4, path)
        magic = int.from_bytes(head.rjust(4, b"\0"), "big")
        if len(head) < 4 or head[:2] != b"\0\0" or head[2] not in _IDX_DTYPES or head[3] != ndim:
            raise DataError(f"{path}: wrong magic number 0x{magic:08x} for a {ndim}-D IDX file "
                            f"(expected 0x000008{ndim:02x} for unsigned bytes)")
        dims_raw = _read(f, 4 * ndim, path)
        if len(dims_raw) < 4 * ndim:
            raise DataError(f"{path}: truncated IDX header ({4 + len(dims_raw)} of {4 + 4 * ndim} bytes)")
        dims = [int(d) for d in np.frombuffer(dims_raw, ">u4")]
        dtype = np.dtype(_IDX_DTYPES[head[2]])
        n, row = dims[0], int(np.prod(dims[1:], dtype=np.int64))
        if expect_rows is not None and n != expect_rows:
            raise DataError(f"{path}: the header announces {n} items, expected {expect_rows}")
        row_bytes = row * dtype.itemsize
        for start in range(0, n, block_rows):
            k = min(block_rows, n - start)
            buf = _read(f, k * row_bytes, path)
            if len(buf) < k * row_bytes:
                raise DataError(
                    f"{path}: truncated: the header promises {n} items of {row_bytes} bytes "
                    f"({n * row_bytes} data bytes) but the data end after "
                    f"{start * row_bytes + len(buf)} bytes (item {start + len(buf) // row_bytes})")
            yield np.frombuffer(buf, dtype).reshape(k, row)
        if _read(f, 1, path):
            raise DataError(f"{path}: longer than its header promises ({n} items of {row_bytes} bytes)")


def idx_blocks(images, labels, classes: dict, block_rows: int):
    """Yield ``(X float32, y)`` from an IDX image file and its IDX label file.

    Labels are read whole (one byte each); the images are streamed.  Pixel
    values are kept as stored (0..255), not rescaled.
    """
    parts = list(iter_idx(labels, 1, 1 << 20))
    raw = np.concatenate(parts).ravel() if parts else np.zeros(0, np.uint8)
    lut = {v: classes.get(label_key(str(v))) for v in np.unique(raw).tolist()}
    bad = [v for v, c in lut.items() if c is None]
    if bad:
        where = int(np.flatnonzero(raw == bad[0])[0])
        raise DataError(f"{labels}: label {bad[0]} at item {where} is not one of the classes "
                        f"{', '.join(classes)}")
    y = np.zeros(raw.shape, np.int64)
    for v, c in lut.items():
        y[raw == v] = c
    start = 0
    for block in iter_idx(images, 3, block_rows, expect_rows=len(y)):
        yield block.astype(np.float32), y[start:start + block.shape[0]]
        start += block.shape[0]


# --------------------------------------------------------------------------- delimited text

def label_key(token: str) -> str:
    """Canonical form of a label token: ``"1"``, ``"1.0"`` and ``" 1"`` are the same class."""
    token = token.strip()
    try:
        v = float(token)
    except ValueError:
        return token
    return str(int(v)) if v.is_integer() else repr(v)


def sorted_classes(keys) -> list[str]:
    """Class labels in index order: numerically if all are numbers, else as strings."""
    try:
        return sorted(keys, key=float)
    except ValueError:
        return sorted(keys)


def _split(line, sep, trailing=False):
    """The fields of a stripped line split on ``sep`` (None: runs of whitespace).

    A line with a double quote is split as the csv module reads it (``"a,b"`` is one field, quotes
    dropped); ``trailing``: the file ends every line with ``sep``, whose empty last field is dropped.
    """
    if trailing and sep and line.endswith(sep):
        line = line[:-len(sep)]
    if sep and '"' in line:
        import csv
        return next(csv.reader([line], delimiter=sep, skipinitialspace=True), [""])
    return line.split(sep) if sep else line.split()


def scan_table(path, sep, label_column, header=False, trailing=False):
    """First pass over a delimited file: ``(n_rows, n_fields, label keys)``.

    The keys are a dict ``{key: (rows with it, first line)}`` (iterating it
    gives the keys, as a set would).  ``header``: skip the first non-empty line;
    ``trailing``: see :func:`_split`.
    """
    n_rows, keys = 0, {}
    fields_of = _DataRows(path, sep, None, header, trailing)
    for lineno, fields in fields_of:
        if n_rows == 0 and label_column is not None and not -len(fields) <= label_column < len(fields):
            raise DataError(f"{path}: label column {label_column} does not exist (rows have {len(fields)} fields)")
        if label_column is not None:
            key = label_key(fields[label_column])
            count, first = keys.get(key, (0, lineno))
            keys[key] = (count + 1, first)
        n_rows += 1
    if n_rows == 0:
        raise DataError(f"{path}: no data rows" + (" (only a header line)" if fields_of.header_seen else ""))
    return n_rows, fields_of.n_fields, keys


class _DataRows:
    """``(line number, fields)`` of the data lines of a delimited file: blank lines and the header skipped,
    every row checked to have the first row's number of fields (or ``n_fields`` when given)."""

    def __init__(self, path, sep, n_fields, header, trailing):
        self.path, self.sep, self.n_fields, self.header, self.trailing = path, sep, n_fields, header, trailing
        self.header_seen = False

    def __iter__(self):
        for lineno, line in iter_lines(self.path):
            line = line.strip()
            if not line:
                continue
            if self.header and not self.header_seen:
                self.header_seen = True
                continue
            fields = _split(line, self.sep, self.trailing)
            if self.n_fields is None:
                self.n_fields = len(fields)
            if len(fields) != self.n_fields:
                raise DataError(f"{self.path}, line {lineno}: {len(fields)} fields, expected {self.n_fields}")
            yield lineno, fields


def is_number(key: str) -> bool:
    """Whether ``key`` parses as a float (a numeric label or field)."""
    try:
        float(key)
    except ValueError:
        return False
    return True


def warn_stray_labels(path, keys: dict):
    """Warn about a label that does not parse like the others and labels a single row.

    ``keys``: ``{key: (rows, first line)}`` from :func:`scan_table`.  With
    numeric labels, a lone ``"x"`` (or, with word labels, a lone ``"3"``)
    is most likely a typo or a stray line, and would silently become a class
    of its own.
    """
    import warnings

    numeric = {k for k in keys if is_number(k)}
    words = set(keys) - numeric
    major, minor, kind = (numeric, words, "numbers") if len(numeric) >= len(words) else (words, numeric, "words")
    if len(major) < 2:
        return
    for key in sorted(minor, key=lambda k: keys[k][1]):
        count, line = keys[key]
        if count == 1:
            examples = ", ".join(repr(k) for k in sorted_classes(major)[:3])
            warnings.warn(f"{path}, line {line}: label {key!r} is not like the other labels ({kind}: {examples}, "
                          f"...) and labels this row only; it becomes a class of its own ({len(keys)} classes in "
                          "all): a typo or a stray line?", RuntimeWarning, stacklevel=3)


def iter_table(path, *, sep, label_column, classes: dict | None, n_fields: int | None,
               block_rows: int, header: bool = False, trailing: bool = False):
    """Yield ``(X float32, y)`` blocks of a delimited text file, line by line.

    Parameters
    ----------
    sep : str or None
        Field separator; None splits on any whitespace (spaces, tabs, CRLF).
    label_column : int or None
        Index of the label field (negative counts from the end); None: no
        label, every row gets y = -1 (unlabelled).
    classes : dict
        Label key (see `label_key`) -> class index.
    n_fields : int or None
        Fields per row, label included; None: fixed by the first row.
    header : bool
        Skip the first non-empty line (column names).
    trailing : bool
        Every line ends with ``sep``: its empty last field is dropped.
    """
    rows, ys, linenos = [], [], []
    for lineno, fields in _DataRows(path, sep, n_fields, header, trailing):
        if label_column is None:
            ys.append(-1)                          # unlabelled
        else:
            token = fields.pop(label_column)
            cls = classes.get(label_key(token))
            if cls is None:
                raise DataError(f"{path}, line {lineno}: label {token.strip()!r} is not one of "
                                f"the classes {', '.join(classes)}")
            ys.append(cls)
        rows.append(fields)
        linenos.append(lineno)
        if len(rows) == block_rows:
            yield _parse_rows(rows, linenos, path), np.array(ys, np.int64)
            rows, ys, linenos = [], [], []
    if rows:
        yield _parse_rows(rows, linenos, path), np.array(ys, np.int64)


#: how tables mark a missing value (pandas' and R's NA, UCI's ?), lower case: a data row's, never a header's
MISSING = frozenset({"", "na", "n/a", "nan", "null", "none", "?", "-", "#n/a"})


def _parse_rows(rows, linenos, path):
    try:
        return np.array(rows, dtype=np.float32)   # numpy parses the strings itself (fast path)
    except ValueError:
        pass
    for fields, lineno in zip(rows, linenos):     # find the offending field for the message
        for j, field in enumerate(fields):
            try:
                float(field)
            except ValueError:
                if field.strip().lower() in MISSING:
                    what = "empty" if not field.strip() else repr(field.strip())
                    raise DataError(f"{path}, line {lineno}: field {j + 1} is {what}, a missing value; every value "
                                    "is needed (fill or drop such rows)") from None
                raise DataError(f"{path}, line {lineno}: {field.strip()!r} is not a number") from None
    raise DataError(f"{path}, lines {linenos[0]}-{linenos[-1]}: cannot parse the numbers")
