"""One's own tables: CSV header lines, the label column by index or name, and labels that look wrong.

:func:`bigclust.datasets.open_file` calls these for every generic file (the
registered data sets have known layouts and do not need them).
"""
from __future__ import annotations

import warnings

from bigclust._util.errors import DataError
from bigclust.datasets.readers import _split, iter_lines

#: more distinct labels than this is implausible for a clustering data set, whatever n
MAX_CLASSES = 1000


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def first_line(path) -> str:
    """The first non-empty line of a (possibly compressed) text file, stripped ("" if none)."""
    lines = iter_lines(path)
    try:
        return next((line.strip() for _, line in lines if line.strip()), "")
    finally:
        lines.close()  # the file is closed now, not whenever the generator is collected


def detect_header(path, first: str, sep, label_column, header="auto") -> list[str] | None:
    """The column names of a delimited file's header line, or None when it has none.

    Parameters
    ----------
    first : str
        The file's first non-empty line.
    label_column : int, str or None
        An integer label column is left out of the test (word labels such as
        ``setosa`` are not a header); a column name means there is a header.
    header : bool or "auto"
        True / False: declared.  ``"auto"``: the first line is a header when
        one of its fields (other than an integer label column) is not a number.
    """
    fields = [f.strip().strip('"').strip("'") for f in _split(first, sep)]
    if header == "auto":
        if isinstance(label_column, str):
            header = True
        else:
            skip = None
            if isinstance(label_column, int) and -len(fields) <= label_column < len(fields):
                skip = label_column % len(fields)
            header = any(not _is_number(f) for i, f in enumerate(fields) if i != skip)
    elif header is not True and header is not False:
        raise DataError(f"header must be true, false or \"auto\", got {header!r}")
    return fields if header else None


def label_index(path, label_column, names: list[str] | None):
    """An integer label column (or None) from an index or a header column name."""
    if not isinstance(label_column, str):
        return label_column
    if names is None:
        raise DataError(f"{path}: label_column {label_column!r} is a column name, but the file has no header line")
    if label_column not in names:
        raise DataError(f"{path}: no column {label_column!r} in the header (columns: {', '.join(names[:20])}"
                        + (", ..." if len(names) > 20 else "") + ")")
    return names.index(label_column)


def warn_implausible_labels(path, class_names, n_rows: int):
    """Warn when a label column does not look like labels: too many classes, or non-integer numbers.

    The rule: more than :data:`MAX_CLASSES` classes, or (with at least 20
    rows) more classes than half the rows -- clusters of fewer than two
    points on average -- is implausible; so are numeric labels that are not
    whole numbers (``1.5``).  Both usually mean the label column is a
    feature (by default the last column is taken as the label): the warning
    says how to declare unlabelled data.
    """
    if not class_names:
        return
    k = len(class_names)
    hint = ("if the file has no labels, set [data] label_column = false (and [cluster] n_clusters), "
            "else point label_column at the label column")
    fractional = [c for c in class_names if _is_number(c) and not float(c).is_integer()]
    if k > MAX_CLASSES or (n_rows >= 20 and k > n_rows / 2):
        warnings.warn(f"{path}: the label column has {k} distinct values for {n_rows} rows, implausibly many "
                      f"classes (more than {'n/2' if k <= MAX_CLASSES else MAX_CLASSES}): {hint}",
                      RuntimeWarning, stacklevel=3)
    elif fractional:
        warnings.warn(f"{path}: the label column holds non-integer numbers ({', '.join(fractional[:3])}"
                      f"{', ...' if len(fractional) > 3 else ''}), unusual for class labels: {hint}",
                      RuntimeWarning, stacklevel=3)
