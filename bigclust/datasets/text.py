"""Text corpora as document-term count matrices: 20 Newsgroups and Reuters-21578.

Pipeline (lecture notes of paper 001, "document analysis basics"): lowercase,
tokenise, drop stop words, Porter-stem, count.  The vocabulary needs every
document, so a text `Source` builds its whole CSR matrix on first use (about
20k documents: tens of MB) and then hands out row chunks of it.
"""
from __future__ import annotations

import html
import re
import zlib
from functools import lru_cache
from importlib import resources

import numpy as np

from bigclust._util.errors import DataError
from bigclust.datasets.readers import DatasetInfo, Source, open_binary

# Alphabetic tokens of two letters or more: numbers (prices, dates, message
# ids, ...) are mostly unique to one document and say nothing about its topic,
# and single letters are initials, list markers and pieces of contractions.
# Non-ASCII letters split tokens; both corpora are almost pure ASCII.
_TOKEN = re.compile(r"[a-z]{2,}")


@lru_cache(maxsize=1)
def stop_words() -> frozenset[str]:
    """The English stop-word list shipped as ``stopwords.txt`` (SMART list).

    Apostrophes are removed, as the tokenizer removes them from the text
    (``don't`` -> ``dont``, which is then a stop word too).
    """
    text = resources.files(__package__).joinpath("stopwords.txt").read_text("ascii")
    return frozenset(w.strip().replace("'", "") for w in text.splitlines()
                     if w.strip() and not w.startswith("#"))


def tokenize(text: str) -> list[str]:
    """Lowercase alphabetic tokens of length >= 2 (apostrophes removed first)."""
    return _TOKEN.findall(text.lower().replace("'", ""))


def count_matrix(docs, *, min_df: int = 2):
    """Document-term count matrix of ``docs`` (stop words dropped, Porter stems).

    Parameters
    ----------
    docs : iterable of str
    min_df : int
        Keep only terms that occur in at least ``min_df`` documents.  The
        default 2 drops terms seen in one document only: they cannot make two
        documents similar, they only lengthen one vector (and they are about
        half of a raw vocabulary: typos, names, ids).

    Returns
    -------
    X : scipy.sparse.csr_matrix float32 (n_docs, n_terms)
        Term counts, documents in rows, sorted column indices.
    vocabulary : list of str
        The stem of each column, in alphabetical order.
    """
    import scipy.sparse as sp
    import snowballstemmer

    stop = stop_words()
    stem = snowballstemmer.stemmer("porter").stemWord
    column_of = {}          # token -> column in first-seen stem order, -1 for stop words
    stem_column = {}        # stem -> that column; stemming each distinct token once is the speed-up
    parts, lengths = [], []
    for doc in docs:
        tokens = tokenize(doc)
        for tok in set(tokens).difference(column_of):
            column_of[tok] = -1 if tok in stop else stem_column.setdefault(stem(tok), len(stem_column))
        ids = np.fromiter(map(column_of.__getitem__, tokens), np.int64, len(tokens))
        ids = ids[ids >= 0]
        parts.append(ids)
        lengths.append(ids.size)
    n_docs, n_stems = len(lengths), len(stem_column)
    cols = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    rows = np.repeat(np.arange(n_docs), lengths)
    X = sp.coo_matrix((np.ones(cols.size, np.float32), (rows, cols)), shape=(n_docs, n_stems)).tocsr()
    X.sum_duplicates()      # COO -> CSR adds the repeated (doc, term) ones up into counts
    df = np.bincount(X.indices, minlength=n_stems)
    stems = np.array(list(stem_column), dtype=object)
    kept = np.flatnonzero(df >= min_df)
    kept = kept[np.argsort(stems[kept].astype(str), kind="stable")]
    X = sp.csr_matrix(X[:, kept], dtype=np.float32)
    X.sort_indices()
    return X, [str(s) for s in stems[kept]]


class TextSource(Source):
    """A corpus read and vectorised on first use, then served in row chunks.

    ``load()`` returns ``(docs, labels, class_names)`` with labels already in
    ``0..len(class_names)-1``.
    """

    def __init__(self, info: DatasetInfo, load, *, min_df: int = 2):
        super().__init__(info, self._row_blocks)
        self._load, self._min_df, self._built = load, min_df, None

    def _build(self):
        if self._built is None:
            docs, y, classes = self._load()
            name, info = self.info.name, self.info
            X, vocabulary = count_matrix(docs, min_df=self._min_df)
            # Documents with no term left after stop words and min_df (20news has
            # messages with an empty body) have no direction: they cannot be
            # L2-normalised or clustered, so they are dropped here and the
            # registry's n_samples counts what remains.
            keep = np.diff(X.indptr) > 0
            X, y = X[keep], np.asarray(y, np.int64)[keep]
            if X.shape[0] != info.n_samples or len(classes) != info.n_classes:
                raise DataError(f"data set {name!r}: found {X.shape[0]} non-empty documents in {len(classes)} "
                                f"classes, expected {info.n_samples} in {info.n_classes} "
                                f"(files: {', '.join(info.files[:2])}{', ...' * (len(info.files) > 2)})")
            self._built = X, np.asarray(y, np.int64), vocabulary, list(classes)
        return self._built

    @property
    def feature_names(self):
        return self._build()[2]

    @property
    def class_names(self):
        return self._build()[3]

    def _row_blocks(self, hint):
        X, y, _, _ = self._build()
        yield X, y


# --------------------------------------------------------------------------- 20 Newsgroups

_BLANK_LINE = re.compile(r"\r?\n[ \t]*\r?\n")


def read_20news(path, splits=("train", "test")):
    """Read the ``20news-bydate`` tar.gz in streaming mode.

    Returns ``(docs, labels, groups)``: documents ordered by split (in the
    order given), then newsgroup name, then numeric message id; labels index
    the sorted newsgroup names.  Each message loses its header block
    (everything up to the first blank line: From, Subject, Organization,
    ...), which would otherwise let senders' addresses and signatures
    cluster the documents.
    """
    import tarfile

    found = []
    try:
        with open_binary(path) as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
            for member in tar:
                parts = member.name.split("/")
                if not member.isfile() or len(parts) != 3 or not parts[0].startswith("20news-bydate-"):
                    continue
                split = parts[0].removeprefix("20news-bydate-")
                if split not in splits:
                    continue
                text = tar.extractfile(member).read().decode("latin-1")
                body = _BLANK_LINE.split(text, maxsplit=1)
                key = int(parts[2]) if parts[2].isdigit() else parts[2]
                found.append(((splits.index(split), parts[1], str(type(key)), key),
                              body[1] if len(body) > 1 else ""))
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise DataError(f"{path}: cannot read the tar.gz archive ({exc})") from None
    if not found:
        raise DataError(f"{path}: no 20news-bydate-{'/'.join(splits)}/<group>/<id> messages found")
    found.sort(key=lambda item: item[0])
    groups = sorted({key[1] for key, _ in found})
    index = {g: i for i, g in enumerate(groups)}
    return [doc for _, doc in found], [index[key[1]] for key, _ in found], groups


# --------------------------------------------------------------------------- Reuters-21578

_DOC = re.compile(r"<REUTERS\b[^>]*>(.*?)</REUTERS>", re.S)
_TOPICS = re.compile(r"<TOPICS>(.*?)</TOPICS>", re.S)
_D = re.compile(r"<D>(.*?)</D>", re.S)
_TITLE = re.compile(r"<TITLE>(.*?)</TITLE>", re.S)
_BODY = re.compile(r"<BODY>(.*?)</BODY>", re.S)
_TEXT = re.compile(r"<TEXT\b[^>]*>(.*?)</TEXT>", re.S)
_TAG = re.compile(r"<[^>]*>")


def read_reuters(paths, *, min_docs: int = 5):
    """Single-topic Reuters-21578 documents in topics with at least ``min_docs`` of them.

    Keeps the documents with exactly one ``<D>`` inside ``<TOPICS>`` (paper
    001 drops the multi-label ones), then drops topics with fewer than
    ``min_docs`` documents.  Text is TITLE + BODY with SGML entities
    unescaped; the 48 ``TYPE="UNPROC"`` documents have neither, so their whole
    TEXT element (tags removed) is used.  Documents keep the order of the
    files and of ``NEWID`` within them; labels index the sorted topic names.

    Returns
    -------
    docs : list of str
    labels : list of int
    topics : list of str
    """
    docs, topics = [], []
    for path in paths:
        with open_binary(path) as f:
            try:
                sgml = f.read().decode("latin-1")
            except (EOFError, OSError, zlib.error) as exc:
                raise DataError(f"{path}: compressed data are truncated or corrupt ({exc})") from None
        elements = _DOC.findall(sgml)
        if not elements:
            raise DataError(f"{path}: no <REUTERS> documents found (is it a reut2-*.sgm file?)")
        for element in elements:
            block = _TOPICS.search(element)
            labels = _D.findall(block.group(1)) if block else []
            if len(labels) != 1:
                continue
            title, body = _TITLE.search(element), _BODY.search(element)
            if title or body:
                text = (title.group(1) if title else "") + "\n" + (body.group(1) if body else "")
            else:
                whole = _TEXT.search(element)
                text = _TAG.sub(" ", whole.group(1)) if whole else ""
            docs.append(html.unescape(text))
            topics.append(labels[0].strip())
    names, counts = np.unique(np.array(topics, dtype=object).astype(str), return_counts=True)
    kept = [str(t) for t, c in zip(names, counts) if c >= min_docs]
    index = {t: i for i, t in enumerate(kept)}
    keep = [i for i, t in enumerate(topics) if t in index]
    return [docs[i] for i in keep], [index[topics[i]] for i in keep], kept


def news20_source(info: DatasetInfo, path, splits) -> TextSource:
    """`TextSource` over the given splits of the 20news-bydate archive."""
    return TextSource(info, lambda: read_20news(path, tuple(splits)))


def reuters_source(info: DatasetInfo, paths, min_docs: int = 5) -> TextSource:
    """`TextSource` over the single-topic Reuters-21578 documents."""
    return TextSource(info, lambda: read_reuters(paths, min_docs=min_docs))
