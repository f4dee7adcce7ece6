"""Readers, the registry and the text corpora: synthetic files, then the real data.

The real-data part (``@pytest.mark.realdata``) reads ``$BIGCLUST_DATA`` and checks
every named data set against the counts in the data README; it is skipped when
the variable is unset.
"""
import gzip
import io
import shutil
import subprocess
import tarfile
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.datasets import DatasetInfo, Source, get_info, list_datasets, open_dataset, open_file
from bigclust.datasets import readers, registry, text
from bigclust._util.errors import DataError


def collect(src, chunk_rows):
    """Concatenate all chunks, checking every chunk but the last is full."""
    chunks = list(src.iter_chunks(chunk_rows))
    assert all(X.shape[0] == chunk_rows for X, _ in chunks[:-1])
    assert 0 < chunks[-1][0].shape[0] <= chunk_rows
    for X, y in chunks:
        assert X.dtype == np.float32 and y.dtype == np.int64
    Xs = [X for X, _ in chunks]
    X = sp.vstack(Xs, format="csr") if sp.issparse(Xs[0]) else np.concatenate(Xs)
    return X, np.concatenate([y for _, y in chunks])


def write_idx(path, arr, magic=None):
    arr = np.asarray(arr, np.uint8)
    head = (magic if magic is not None else 0x800 + arr.ndim).to_bytes(4, "big")
    head += b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    data = head + arr.tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(data)
    return data


def lzw_compress(data: bytes, maxbits=16, block_mode=True) -> bytes:
    """Minimal Unix ``compress`` writer, to test the reader against.

    In block mode the table is cleared (code 256) when it is full; without it
    (old compress 2 files) code 256 is an ordinary code, so the width changes
    fall in the middle of a group of eight codes and the padding matters.
    """
    out = bytearray(b"\x1f\x9d" + bytes([0x80 * block_mode | maxbits]))
    maxmaxcode = 1 << maxbits
    state = {"group": [], "n_bits": 9, "maxcode": 511, "free": 257 if block_mode else 256}
    table = {bytes([i]): i for i in range(256)}

    def flush():                       # a group is always written as n_bits bytes
        group, n_bits = state["group"], state["n_bits"]
        if group:
            value = sum(c << (i * n_bits) for i, c in enumerate(group))
            out.extend(value.to_bytes(n_bits, "little"))
            state["group"] = []

    def emit(code):
        state["group"].append(code)
        if len(state["group"]) == 8:
            flush()
        if code == 256 and block_mode:
            flush()
            state.update(n_bits=9, maxcode=511)
        elif state["free"] > state["maxcode"]:
            flush()
            state["n_bits"] += 1
            state["maxcode"] = maxmaxcode if state["n_bits"] == maxbits else (1 << state["n_bits"]) - 1

    w = b""
    for ch in data:
        wc = w + bytes([ch])
        if wc in table:
            w = wc
            continue
        emit(table[w])
        if state["free"] < maxmaxcode:
            table[wc] = state["free"]
            state["free"] += 1
        elif block_mode:
            emit(256)
            table = {bytes([i]): i for i in range(256)}
            state["free"] = 257
        w = bytes([ch])
    if w:
        emit(table[w])
    group, n_bits = state["group"], state["n_bits"]
    if group:                          # the last group only as long as its bits
        value = sum(c << (i * n_bits) for i, c in enumerate(group))
        out.extend(value.to_bytes((len(group) * n_bits + 7) // 8, "little"))
    return bytes(out)


# --------------------------------------------------------------------------- IDX

@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_roundtrip_and_chunking(tmp_path, suffix):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (25, 4, 3))
    labels = rng.integers(0, 3, 25)
    write_idx(tmp_path / f"img{suffix}", images)
    write_idx(tmp_path / f"lab{suffix}", labels)
    classes = {"0": 0, "1": 1, "2": 2}
    for block_rows in (1, 7, 100):
        blocks = list(readers.idx_blocks(tmp_path / f"img{suffix}", tmp_path / f"lab{suffix}",
                                         classes, block_rows))
        X = np.concatenate([b[0] for b in blocks])
        np.testing.assert_array_equal(X, images.reshape(25, 12))
        np.testing.assert_array_equal(np.concatenate([b[1] for b in blocks]), labels)
        assert X.dtype == np.float32


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_truncated_payload(tmp_path, suffix):
    data = write_idx(tmp_path / "img", np.zeros((10, 4, 4)))
    path = tmp_path / f"cut{suffix}"
    (gzip.open if suffix else open)(path, "wb").write(data[:-20])
    with pytest.raises(DataError, match=r"truncated.*promises 10 items of 16 bytes") as exc:
        list(readers.iter_idx(path, 3, 4))
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_idx_truncated_gzip_stream(tmp_path):
    write_idx(tmp_path / "img.gz", np.random.default_rng(1).integers(0, 256, (50, 8, 8)))
    raw = (tmp_path / "img.gz").read_bytes()
    (tmp_path / "cut.gz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError, match="truncated or corrupt"):
        list(readers.iter_idx(tmp_path / "cut.gz", 3, 7))


def test_idx_wrong_magic_and_extra_bytes(tmp_path):
    write_idx(tmp_path / "bad", np.zeros((3, 2, 2)), magic=0x0803 | 0x01000000)
    with pytest.raises(DataError, match="wrong magic number 0x01000803"):
        list(readers.iter_idx(tmp_path / "bad", 3, 2))
    write_idx(tmp_path / "labels", np.zeros(3))
    with pytest.raises(DataError, match="magic number"):        # a label file where images belong
        list(readers.iter_idx(tmp_path / "labels", 3, 2))
    data = write_idx(tmp_path / "ok", np.zeros((3, 2, 2)))
    (tmp_path / "long").write_bytes(data + b"\0")
    with pytest.raises(DataError, match="longer than its header"):
        list(readers.iter_idx(tmp_path / "long", 3, 2))
    (tmp_path / "nogz.gz").write_bytes(data)
    with pytest.raises(DataError, match="not a gzip file"):
        list(readers.iter_idx(tmp_path / "nogz.gz", 3, 2))


def test_idx_label_count_and_values(tmp_path):
    write_idx(tmp_path / "img", np.zeros((4, 2, 2)))
    write_idx(tmp_path / "lab", [0, 1, 0])
    with pytest.raises(DataError, match="announces 4 items, expected 3"):
        list(readers.idx_blocks(tmp_path / "img", tmp_path / "lab", {"0": 0, "1": 1}, 2))
    write_idx(tmp_path / "lab", [0, 1, 0, 9])
    with pytest.raises(DataError, match="label 9 at item 3"):
        list(readers.idx_blocks(tmp_path / "img", tmp_path / "lab", {"0": 0, "1": 1}, 2))


# --------------------------------------------------------------------------- .Z (LZW)

@pytest.mark.parametrize("maxbits, size, block_mode", [(12, 60000, True), (16, 120000, True),
                                                      (12, 30000, False)])
def test_lzw_roundtrip(tmp_path, maxbits, size, block_mode):
    rng = np.random.default_rng(maxbits)
    # Repetitive text with noise: codes grow to the full width, the table
    # fills (and, at 12 bits, is cleared and refilled several times).
    words = [b"alpha ", b"beta ", b"gamma ", b"42 ", b"\n", b"7.5 ", b"zz"]
    data = b"".join(words[i] for i in rng.integers(0, len(words), size // 4))[:size]
    data += bytes(rng.integers(0, 256, 3000, dtype=np.uint8))
    (tmp_path / "x.Z").write_bytes(lzw_compress(data, maxbits, block_mode))
    with readers.open_binary(tmp_path / "x.Z") as f:
        assert f.read() == data


def test_lzw_bad_magic_and_corrupt_code(tmp_path):
    (tmp_path / "a.Z").write_bytes(b"\x1f\x8b\x08rest")
    with pytest.raises(DataError, match="not a Unix compress"):
        readers.open_binary(tmp_path / "a.Z")
    # First code 300 refers to a table entry that cannot exist yet.
    (tmp_path / "b.Z").write_bytes(b"\x1f\x9d\x90" + (300).to_bytes(9, "little"))
    with pytest.raises(DataError, match="corrupt .Z data: code 300"):
        readers.open_binary(tmp_path / "b.Z").read()


def test_table_through_Z_equals_plain(tmp_path):
    rows = "\n".join(" ".join(str(v) for v in r) for r in
                     np.random.default_rng(3).integers(-50, 100, (300, 10))) + "\n"
    (tmp_path / "t.data").write_text(rows)
    (tmp_path / "t.data.Z").write_bytes(lzw_compress(rows.encode()))
    Xa, ya = collect(open_file(tmp_path / "t.data"), 64)
    Xb, yb = collect(open_file(tmp_path / "t.data.Z"), 64)
    np.testing.assert_array_equal(Xa, Xb)
    np.testing.assert_array_equal(ya, yb)


# --------------------------------------------------------------------------- delimited text

def test_csv_labels_remapped_sorted_and_chunking(tmp_path):
    rng = np.random.default_rng(4)
    X = rng.integers(0, 16, (53, 4))
    lab = rng.choice([10, 2, 7], 53)           # numeric order 2 < 7 < 10, not string order
    lines = [",".join(map(str, [*r, c])) for r, c in zip(X, lab)]
    with gzip.open(tmp_path / "d.csv.gz", "wt") as f:
        f.write("\n".join(lines) + "\n\n")
    src = open_file(tmp_path / "d.csv.gz")
    assert (src.info.n_samples, src.info.n_features, src.info.n_classes) == (53, 4, 3)
    assert src.class_names == ["2", "7", "10"]
    X7, y7 = collect(src, 7)
    Xb, yb = collect(src, 1000)
    np.testing.assert_array_equal(X7, X)
    np.testing.assert_array_equal(X7, Xb)
    np.testing.assert_array_equal(y7, yb)
    np.testing.assert_array_equal(y7, np.searchsorted([2, 7, 10], lab))


def test_csv_letter_labels_first_column_and_unlabelled(tmp_path):
    (tmp_path / "l.csv").write_text("T,1,2\nA,3,4\nT,5,6\n")
    src = open_file(tmp_path / "l.csv", label_column=0)
    X, y = collect(src, 2)
    assert src.class_names == ["A", "T"]
    np.testing.assert_array_equal(y, [1, 0, 1])
    np.testing.assert_array_equal(X, [[1, 2], [3, 4], [5, 6]])
    (tmp_path / "u.txt").write_text("1 2\r\n3\t4\r\n")
    src = open_file(tmp_path / "u.txt", label_column=None)
    X, y = collect(src, 5)
    assert src.info.n_classes == 0 and src.info.n_features == 2   # unlabelled: no classes, y = -1
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(y, [-1, -1])


def test_csv_bad_rows(tmp_path):
    (tmp_path / "short.csv").write_text("1,2,0\n3,4,1\n5,1\n")
    with pytest.raises(DataError, match=r"short.csv, line 3: 2 fields, expected 3"):
        open_file(tmp_path / "short.csv")
    (tmp_path / "nan.csv").write_text("1,2,0\n3,x4,1\n")
    src = open_file(tmp_path / "nan.csv")
    with pytest.raises(DataError, match=r"nan.csv, line 2: 'x4' is not a number"):
        list(src.iter_chunks(10))
    iterator = readers.iter_table(tmp_path / "nan.csv", sep=",", label_column=-1,
                                  classes={"0": 0}, n_fields=3, block_rows=10)
    with pytest.raises(DataError, match=r"line 2: label '1' is not one of the classes 0"):
        list(iterator)
    with pytest.raises(DataError, match="label column 5 does not exist"):
        open_file(tmp_path / "nan.csv", label_column=5)


# --------------------------------------------------------------------------- other formats

def test_svmlight_dense_and_sparse(tmp_path):
    (tmp_path / "v.svm").write_text("4 1:0.5 2:-1\n1 1:1 3:2\n4 2:3 3:1\n")
    src = open_file(tmp_path / "v.svm")
    X, y = collect(src, 2)
    assert isinstance(X, np.ndarray) and not src.info.sparse   # 6 of 9 entries stored
    np.testing.assert_array_equal(X, [[0.5, -1, 0], [1, 0, 2], [0, 3, 1]])
    np.testing.assert_array_equal(y, [1, 0, 1])
    assert src.class_names == ["1", "4"]
    with gzip.open(tmp_path / "s.libsvm.gz", "wt") as f:
        f.write("1 1:1\n2 7:2\n3 3:1\n")
    src = open_file(tmp_path / "s.libsvm.gz")
    X, y = collect(src, 2)
    assert sp.issparse(X) and src.info.sparse and X.shape == (3, 7)
    (tmp_path / "bad.svm").write_text("1 1:1\n2 x:y\n")
    with pytest.raises(DataError, match="not a valid svmlight"):
        open_file(tmp_path / "bad.svm")


def test_npy_npz_mat(tmp_path):
    rng = np.random.default_rng(5)
    A = np.column_stack([rng.random((40, 3)), rng.choice([3.0, -1.0], 40)])
    np.save(tmp_path / "a.npy", A)
    src = open_file(tmp_path / "a.npy")
    X, y = collect(src, 9)
    np.testing.assert_allclose(X, A[:, :3].astype(np.float32))
    np.testing.assert_array_equal(y, (A[:, 3] == 3.0).astype(int))
    assert src.class_names == ["-1", "3"]
    np.savez(tmp_path / "b.npz", X=A[:, :3], y=A[:, 3].astype(int))
    Xz, yz = collect(open_file(tmp_path / "b.npz"), 9)
    np.testing.assert_array_equal(Xz, X)
    np.testing.assert_array_equal(yz, y)
    np.savez(tmp_path / "c.npz", Z=A)
    with pytest.raises(DataError, match="no array 'X'"):
        open_file(tmp_path / "c.npz")
    import scipy.io

    scipy.io.savemat(tmp_path / "d.mat", {"fea": A[:, :3], "gnd": (A[:, 3:] > 0) + 1})
    Xm, ym = collect(open_file(tmp_path / "d.mat"), 100)
    np.testing.assert_array_equal(Xm, X)
    np.testing.assert_array_equal(ym, y)
    with pytest.raises(DataError, match="cannot tell the format"):
        open_file(tmp_path / "d.xyz")
    with pytest.raises(DataError, match="does not exist"):
        open_file(tmp_path / "missing.csv")


def test_source_checks_promised_rows_and_chunk_size():
    info = DatasetInfo("toy", "toy", 5, 2, 1, False, ("toy.csv",))
    rows = lambda hint: iter([(np.ones((4, 2), np.float32), np.zeros(4, np.int64))])  # noqa: E731
    with pytest.raises(DataError, match="read 4 rows, expected 5"):
        list(Source(info, rows).iter_chunks(3))
    with pytest.raises(DataError, match="chunk_rows must be a positive integer"):
        list(Source(info, rows).iter_chunks(0))


# --------------------------------------------------------------------------- registry

REQUIRED = ["mnist", "mnist-6000", "mnist-0-4", "coil20", "letter", "letter-a-e", "letter-f-j",
            "letter-k-o", "letter-p-t", "letter-u-z", "optdigits", "pendigits", "pendigits-all",
            "satimage", "satimage-all", "shuttle", "shuttle-all", "vehicle", "news20", "news20-all",
            "reuters"]


def test_registry_names_and_errors(tmp_path, monkeypatch):
    names = [i.name for i in list_datasets()]
    assert set(REQUIRED) <= set(names) and len(names) == len(set(names))
    assert get_info("news20").n_features == -1 and get_info("news20").sparse
    assert get_info("letter").files == ("letter/letter-recognition.data.gz",)
    with pytest.raises(DataError, match=r"unknown data set 'x'; known: mnist, "):
        get_info("x")
    with pytest.raises(DataError) as exc:
        open_dataset("letter", tmp_path)
    assert str(exc.value) == (f"data set 'letter' needs {tmp_path}/letter/letter-recognition.data.gz, "
                              f"which does not exist (give the folder that holds it: [data] root in a config, "
                              "bigclust data ingest --root, or BIGCLUST_DATA)")
    monkeypatch.setenv("BIGCLUST_DATA", str(tmp_path))
    assert registry.default_root() == tmp_path
    monkeypatch.delenv("BIGCLUST_DATA")
    assert registry.default_root() == registry.Path.cwd() / "data"


def test_subset_rules_sample_classes_first_per_class(tmp_path):
    rng = np.random.default_rng(6)
    lab = rng.integers(0, 4, 200)
    X = np.arange(200 * 2).reshape(200, 2)
    (tmp_path / "t.csv").write_text("".join(f"{a},{b},{c}\n" for (a, b), c in zip(X, lab)))
    files = ("t.csv",)
    cls = ("0", "1", "2", "3")
    sampled = registry._s("s", 0, 2, 2, "csv", files, "", classes=cls, keep="13",
                          sample=(50, 200), label_column=-1)
    chosen = np.sort(np.random.default_rng(registry._SEED).choice(200, 50, replace=False))
    want = chosen[np.isin(lab[chosen], [1, 3])]
    for hint in (1, 7, 1000):
        got = list(registry._selected(sampled, [tmp_path / "t.csv"], hint))
        np.testing.assert_array_equal(np.concatenate([g[0] for g in got]), X[want])
        np.testing.assert_array_equal(np.concatenate([g[1] for g in got]), (lab[want] == 3).astype(int))
    first = registry._s("f", 0, 2, 4, "csv", files, "", classes=cls, first_per_class=3, label_column=-1)
    got = np.concatenate([g[1] for g in registry._selected(first, [tmp_path / "t.csv"], 5)])
    np.testing.assert_array_equal(np.bincount(got), [3, 3, 3, 3])


# --------------------------------------------------------------------------- text

def test_count_matrix_stopwords_stems_min_df():
    docs = ["The cats are running and running.", "A cat runs; dogs don't run 42 x!", "Unique zebra"]
    X, vocab = text.count_matrix(docs)
    assert vocab == ["cat", "run"]
    np.testing.assert_array_equal(X.toarray(), [[1, 2], [1, 2], [0, 0]])
    X1, vocab1 = text.count_matrix(docs, min_df=1)
    assert vocab1 == ["cat", "dog", "run", "uniqu", "zebra"]      # sorted; no "dont", "42", "x"
    assert X1.dtype == np.float32 and sp.isspmatrix_csr(X1) and X1.has_sorted_indices
    np.testing.assert_array_equal(X1.toarray(), [[1, 0, 2, 0, 0], [1, 1, 2, 0, 0], [0, 0, 0, 1, 1]])


def _tar_20news(path, messages):
    with tarfile.open(path, "w:gz") as tar:
        for name, body in messages.items():
            data = body.encode("latin-1")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_read_20news_order_headers_labels(tmp_path):
    msg = "From: someone@cats.org\nSubject: hockey\n\n{}\n"
    _tar_20news(tmp_path / "n.tar.gz", {
        "20news-bydate-test/rec.b/7": msg.format("test one"),
        "20news-bydate-train/rec.b/10": msg.format("ten"),
        "20news-bydate-train/rec.b/9": msg.format("nine"),
        "20news-bydate-train/alt.a/3": msg.format("three"),
        "20news-bydate-train/alt.a/only-headers": "From: x\nSubject: y\n",
    })
    docs, y, groups = text.read_20news(tmp_path / "n.tar.gz", ("train", "test"))
    assert groups == ["alt.a", "rec.b"]
    assert [d.strip() for d in docs] == ["three", "", "nine", "ten", "test one"]
    assert y == [0, 0, 1, 1, 1]
    docs, y, groups = text.read_20news(tmp_path / "n.tar.gz", ("test",))
    assert (len(docs), groups) == (1, ["rec.b"])
    (tmp_path / "bad.tar.gz").write_bytes((tmp_path / "n.tar.gz").read_bytes()[:100])
    with pytest.raises(DataError, match="bad.tar.gz"):
        text.read_20news(tmp_path / "bad.tar.gz")


def test_read_reuters_single_topic_and_min_docs(tmp_path):
    def doc(topics, title, body):
        ds = "".join(f"<D>{t}</D>" for t in topics)
        return (f'<REUTERS TOPICS="YES" NEWID="1">\n<TOPICS>{ds}</TOPICS>\n<TEXT>&#2;\n'
                f"<TITLE>{title}</TITLE><BODY>{body}</BODY></TEXT>\n</REUTERS>\n")
    part1 = doc(["earn"], "A &lt;B&gt;", "profit") + doc(["earn", "acq"], "two", "labels") + doc([], "none", "x")
    part2 = doc(["acq"], "buy", "out") + doc(["earn"], "more", "profit") + doc(["grain"], "wheat", "x")
    part2 += '<REUTERS NEWID="9"><TOPICS><D>acq</D></TOPICS><TEXT TYPE="UNPROC">&#2; raw text</TEXT></REUTERS>'
    for i, part in enumerate([part1, part2]):
        with gzip.open(tmp_path / f"r{i}.sgm.gz", "wt", encoding="latin-1") as f:
            f.write(part)
    paths = [tmp_path / "r0.sgm.gz", tmp_path / "r1.sgm.gz"]
    docs, y, topics = text.read_reuters(paths, min_docs=2)
    assert topics == ["acq", "earn"]                      # grain (1 doc) dropped
    assert y == [1, 0, 1, 0]
    assert docs[0] == "A <B>\nprofit" and "raw text" in docs[3]
    (tmp_path / "empty.sgm.gz").write_bytes(gzip.compress(b"nothing"))
    with pytest.raises(DataError, match="no <REUTERS> documents"):
        text.read_reuters([tmp_path / "empty.sgm.gz"])


def test_text_source_chunks_and_lazy_vocabulary():
    docs = [f"apple banana {w} cherry" for w in ("kiwi", "lemon", "kiwi", "mango", "lemon")]
    info = DatasetInfo("toy", "toy", 5, -1, 2, True, ())
    src = text.TextSource(info, lambda: (docs, [0, 1, 0, 1, 1], ["a", "b"]))
    assert src.feature_names == ["appl", "banana", "cherri", "kiwi", "lemon"]
    X2, y2 = collect(src, 2)
    Xa, ya = collect(src, 1000)
    assert sp.isspmatrix_csr(X2) and (X2 != Xa).nnz == 0
    np.testing.assert_array_equal(y2, [0, 1, 0, 1, 1])
    # a document with no term left is dropped (with its label), so n_samples counts the rest
    info4 = DatasetInfo("toy", "toy", 4, -1, 2, True, ())
    src = text.TextSource(info4, lambda: (docs[:1] + ["the"] + docs[2:], [0, 1, 0, 1, 1], ["a", "b"]))
    X4, y4 = collect(src, 3)
    assert X4.shape[0] == 4 and np.all(np.diff(X4.indptr) > 0)
    np.testing.assert_array_equal(y4, [0, 0, 1, 1])
    bad = text.TextSource(DatasetInfo("toy", "toy", 6, -1, 2, True, ()), lambda: (docs, [0] * 5, ["a", "b"]))
    with pytest.raises(DataError, match="found 5 non-empty documents in 2 classes, expected 6"):
        list(bad.iter_chunks(2))


# --------------------------------------------------------------------------- real data

@pytest.fixture(scope="module")
def root(data_root):                  # data_root (conftest.py) skips without $BIGCLUST_DATA
    return data_root


@pytest.fixture(scope="module")
def loaded(root):
    cache = {}

    def load(name):
        if name not in cache:
            src = open_dataset(name, root)
            n, counts, d, empty = 0, np.zeros(src.info.n_classes, int), None, 0
            with warnings.catch_warnings():       # news20's empty messages, checked below
                warnings.simplefilter("ignore", RuntimeWarning)
                chunks = list(src.iter_chunks(8192)) if src.info.sparse else src.iter_chunks(8192)
            for X, y in chunks:
                n, d = n + X.shape[0], X.shape[1]
                counts += np.bincount(y, minlength=src.info.n_classes)
                if src.info.sparse:
                    assert sp.isspmatrix_csr(X) and np.all(X.data == np.round(X.data))
                    empty += int(np.sum(np.diff(X.indptr) == 0))
            cache[name] = src, n, d, counts, empty
        return cache[name]
    return load


MNIST_TRAIN = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
OPT = np.add([376, 389, 380, 389, 387, 376, 377, 387, 380, 382], [178, 182, 177, 183, 181, 182, 181, 179, 174, 180])
PEN_TRAIN = [780, 779, 780, 719, 780, 720, 720, 778, 719, 719]
PEN_TEST = [363, 364, 364, 336, 364, 335, 336, 364, 336, 336]
SAT_TRAIN, SAT_TEST = [1072, 479, 961, 415, 470, 1038], [461, 224, 397, 211, 237, 470]
SHU_TRAIN, SHU_TEST = [34108, 37, 132, 6748, 2458, 6, 11], [11478, 13, 39, 2155, 809, 4, 2]
LETTERS = [789, 766, 736, 805, 768, 775, 773, 734, 755, 747, 739, 761, 792, 783, 753, 803, 783,
           758, 748, 796, 813, 764, 752, 787, 786, 734]
NEWS_TRAIN = [480, 584, 591, 590, 578, 593, 585, 594, 598, 597, 600, 595, 591, 594, 593, 599, 546, 564, 465, 377]
NEWS_TEST = [319, 389, 394, 392, 385, 395, 390, 396, 398, 397, 399, 396, 393, 396, 394, 398, 364, 376, 310, 251]

# name: (n_samples, n_features, class counts); counts from the data README or the UCI docs.
EXPECTED = {
    "mnist": (70000, 784, np.add(MNIST_TRAIN, MNIST_TEST)),
    "mnist-0-4": (30596, 784, MNIST_TRAIN[:5]),
    "mnist-test-500": (500, 784, [50] * 10),
    **{f"mnist-test-500-0-{K}": (50 * (K + 1), 784, [50] * (K + 1)) for K in range(1, 10)},
    "coil20": (1440, 1024, [72] * 20),
    "letter": (20000, 16, LETTERS),
    "letter-a-e": (3864, 16, LETTERS[0:5]),      # the five sizes are paper 000's Table I
    "letter-f-j": (3784, 16, LETTERS[5:10]),
    "letter-k-o": (3828, 16, LETTERS[10:15]),
    "letter-p-t": (3888, 16, LETTERS[15:20]),
    "letter-u-z": (4636, 16, LETTERS[20:26]),
    "optdigits": (5620, 64, OPT),
    "pendigits": (7494, 16, PEN_TRAIN),
    "pendigits-all": (10992, 16, np.add(PEN_TRAIN, PEN_TEST)),
    "satimage": (4435, 36, SAT_TRAIN),
    "satimage-all": (6435, 36, np.add(SAT_TRAIN, SAT_TEST)),
    "shuttle": (14500, 9, SHU_TEST),
    "shuttle-all": (58000, 9, np.add(SHU_TRAIN, SHU_TEST)),
    "vehicle": (846, 18, [212, 217, 218, 199]),
    # 17 (37) messages with no term left after stop words and min_df are dropped
    "news20": (7515, None, np.array(NEWS_TEST)),
    "news20-all": (18809, None, np.add(NEWS_TRAIN, NEWS_TEST)),
}


@pytest.mark.realdata
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_counts(loaded, name):
    src, n, d, counts, empty = loaded(name)
    n_want, d_want, counts_want = EXPECTED[name]
    info = get_info(name)
    assert n == info.n_samples == n_want
    assert info.n_classes == len(counts_want) == len(src.class_names)
    if d_want is None:
        assert empty == 0 and np.all(counts <= counts_want) and counts_want.sum() - n == \
            {"news20": 17, "news20-all": 37}[name]
        assert info.n_features == -1 and d == len(src.feature_names)
        assert src.feature_names == sorted(src.feature_names)
    else:
        np.testing.assert_array_equal(counts, counts_want)
        assert d == info.n_features == d_want


@pytest.mark.realdata
def test_real_mnist_samples(loaded):
    src, n, _, counts, _ = loaded("mnist-6000")
    assert n == 6000 and counts.sum() == 6000 and np.all(counts > 500)
    _, n04, _, counts04, _ = loaded("mnist-6000-0-4")
    np.testing.assert_array_equal(counts04, counts[:5])
    assert n04 == get_info("mnist-6000-0-4").n_samples


@pytest.mark.realdata
def test_real_reuters(loaded):
    src, n, d, counts, empty = loaded("reuters")
    # paper 001's table: 51 topics, largest 3945 (earn), smallest 5, median 30
    assert (n, len(counts), empty) == (9465, 51, 0)
    assert (counts.max(), counts.min(), np.median(counts)) == (3945, 5, 30)
    assert src.class_names[int(np.argmax(counts))] == "earn"
    assert d == len(src.feature_names) > 5000


@pytest.mark.realdata
def test_real_chunking_invariance(root):
    src = open_dataset("shuttle-all", root)                  # also decodes shuttle.trn.Z
    Xa, ya = collect(src, 7)
    Xb, yb = collect(src, 10000)
    np.testing.assert_array_equal(Xa, Xb)
    np.testing.assert_array_equal(ya, yb)
    np.testing.assert_array_equal(Xa[0], [50, 21, 77, 0, 28, 0, 27, 48, 22])   # first line of the .Z


@pytest.mark.realdata
@pytest.mark.skipif(shutil.which("gzip") is None, reason="no gzip binary to decode .Z with")
def test_real_Z_matches_gzip(root):
    path = root / "shuttle" / "shuttle.trn.Z"
    want = subprocess.run(["gzip", "-dc", path], capture_output=True, check=True).stdout
    with readers.open_binary(path) as f:
        assert f.read() == want


@pytest.mark.realdata
def test_real_shuttle_libsvm_is_svm_scale_of_the_test_set(root):
    # reference: svm-scale -l -1 -u 1 with the training set's ranges, written with %g
    import gzip

    train = np.loadtxt(subprocess.run(["gzip", "-dc", root / "shuttle" / "shuttle.trn.Z"], capture_output=True,
                                      check=True).stdout.decode().splitlines())[:, :9]
    test = np.loadtxt(gzip.open(root / "shuttle" / "shuttle.tst.gz"))
    lo, hi = train.min(axis=0), train.max(axis=0)
    want = np.vectorize(lambda v: float(f"{v:g}"))(-1 + 2 * (test[:, :9] - lo) / (hi - lo))
    X, y = collect(open_dataset("shuttle-libsvm", root), 4000)
    np.testing.assert_array_equal(X, want.astype(np.float32))
    np.testing.assert_array_equal(y, test[:, 9].astype(int) - 1)
    np.testing.assert_array_equal(np.bincount(y), [11478, 13, 39, 2155, 809, 4, 2])  # LibSVM's counts
