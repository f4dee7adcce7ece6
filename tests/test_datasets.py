"""The file readers on synthetic files: IDX, Unix compress (.Z), delimited text, svmlight, .npy/.npz/.mat,
and the checks every Source makes on what a reader yields.

The registry of named data sets, the text corpora and the real data are in
test_datasets_registry.py.
"""
import gzip

import numpy as np
import pytest
import scipy.sparse as sp

from bigclust.datasets import DatasetInfo, Source, open_file
from bigclust.datasets import readers
from bigclust._util.errors import DataError

from conftest import collect


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
