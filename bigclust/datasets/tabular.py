"""One's own tables: CSV header lines, the label column by index or name, and labels that look wrong.

:func:`bigclust.datasets.open_file` calls these for every generic file (the
registered data sets have known layouts and do not need them).
"""
from __future__ import annotations

import re
import warnings

from bigclust._util.errors import DataError
from bigclust.datasets.readers import MISSING, _split, is_number as _is_number, iter_lines

#: more distinct labels than this is implausible for a clustering data set, whatever n
MAX_CLASSES = 1000


def head_lines(path, k: int = 50) -> list[str]:
    """The first ``k`` non-empty lines of a (possibly compressed) text file, stripped."""
    out, lines = [], iter_lines(path)
    try:
        for _, line in lines:
            if line.strip():
                out.append(line.strip())
                if len(out) == k:
                    break
    finally:
        lines.close()  # the file is closed now, not whenever the generator is collected
    return out


def first_line(path) -> str:
    """The first non-empty line of a (possibly compressed) text file, stripped ("" if none)."""
    return next(iter(head_lines(path, 1)), "")


#: the delimiters :func:`sniff_delimiter` tries, preferred in this order on a tie (None: runs of whitespace,
#: before the tab so that a file that splits alike either way reads as it always did)
DELIMITERS = (",", ";", None, "\t", "|")
_DECIMAL_COMMA = re.compile(r"^[+-]?\d+,\d+$")


def sniff_delimiter(path, lines: list[str]) -> tuple[str | None, bool]:
    """``(delimiter, trailing)`` of a delimited file from its first non-empty ``lines`` (csv.Sniffer's idea).

    A delimiter qualifies when it splits every line (a header line too) into the same number (>= 2) of
    fields; among those the one whose data fields are most often numbers wins
    (:data:`DELIMITERS` breaks ties).  ``trailing``: every line ends with the delimiter (one empty field
    too many).  No delimiter qualifying (one column): ``","`` or whitespace as before, and the file's rows
    are what they are.  Decimal commas (``1,5;2,3``) are refused in one line: they would read as fields.
    """
    if any("\x00" in line for line in lines):
        raise DataError(f"{path}: not a text table: it holds NUL bytes (UTF-16 text? save it as UTF-8 or ASCII)")
    data = lines[1:] if len(lines) > 1 else lines
    best, best_score = None, -1.0
    for sep in DELIMITERS:
        trailing = sep is not None and all(line.endswith(sep) for line in lines)
        rows = [_split(line, sep, trailing) for line in data]
        widths = {len(r) for r in rows}
        if len(widths) != 1 or min(widths) < 2:
            continue
        if len(_split(lines[0], sep, trailing)) != min(widths):
            continue   # a header line of another width: not this delimiter
        fields = [f.strip().strip('"') for r in rows for f in r]
        if sep == ";" and sum(bool(_DECIMAL_COMMA.match(f)) for f in fields) * 2 >= len(fields):
            raise DataError(f"{path}: the fields are separated by ';' and numbers written with a decimal comma "
                            f"(like {next(f for f in fields if _DECIMAL_COMMA.match(f))!r}): write decimal points")
        score = sum(map(_is_number, fields)) / len(fields)
        if score > best_score:
            best, best_score = (sep, trailing), score
    if best is None:
        return ("," if lines and "," in lines[0] else None), False
    return best


def detect_header(path, first: str, sep, label_column, header="auto", trailing=False) -> list[str] | None:
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
    fields = [f.strip().strip('"').strip("'") for f in _split(first, sep, trailing)]
    if header == "auto":
        if isinstance(label_column, str):
            header = True
        else:
            skip = None
            if isinstance(label_column, int) and -len(fields) <= label_column < len(fields):
                skip = label_column % len(fields)
            # a missing-value mark (NA, ?, an empty field) is a data row's, not a column name
            header = any(not _is_number(f) and f.lower() not in MISSING for i, f in enumerate(fields) if i != skip)
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


def label_doubt(class_names, n_rows: int) -> str | None:
    """Why a label column does not look like labels (``"has 535 distinct values ..."``), or None.

    The rule: more than :data:`MAX_CLASSES` classes, or (with at least 20
    rows) more classes than half the rows -- clusters of fewer than two
    points on average -- is implausible; so are numeric labels that are not
    whole numbers (``1.5``).  Both usually mean the label column is a
    feature (by default the last column is taken as the label).
    """
    if not class_names:
        return None
    k = len(class_names)
    fractional = [c for c in class_names if _is_number(c) and not float(c).is_integer()]
    if k > MAX_CLASSES or (n_rows >= 20 and k > n_rows / 2):
        return (f"has {k} distinct values for {n_rows} rows, implausibly many classes "
                f"(more than {'n/2' if k <= MAX_CLASSES else MAX_CLASSES})")
    if fractional:
        return (f"holds non-integer numbers ({', '.join(fractional[:3])}{', ...' if len(fractional) > 3 else ''}), "
                "unusual for class labels")
    return None


def warn_implausible_labels(path, class_names, n_rows: int):
    """Warn when a label column does not look like labels (:func:`label_doubt`), saying how to declare
    unlabelled data.  A config that leaves ``label_column`` unset is refused instead, before any work
    (:func:`bigclust.pipeline.checks.check_label_column`); one that names the column gets this warning."""
    doubt = label_doubt(class_names, n_rows)
    if doubt:
        warnings.warn(f"{path}: the label column {doubt}: if the file has no labels, set [data] label_column = "
                      "false (and [cluster] n_clusters), else point label_column at the label column",
                      RuntimeWarning, stacklevel=3)
