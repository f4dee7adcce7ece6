"""The named data sets: the registry, the text corpora (20 Newsgroups, Reuters), then the real data.

The real-data part (``@pytest.mark.realdata``) reads ``$BIGCLUST_DATA`` and checks
every named data set against the counts in the data README; it is skipped when
the variable is unset.  The file readers on synthetic files are in test_datasets.py.
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

from bigclust.datasets import DatasetInfo, get_info, list_datasets, open_dataset
from bigclust.datasets import readers, registry, text
from bigclust._util.errors import DataError

from conftest import collect


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
