"""Config parsing: defaults, sweeps, and one clear error per kind of mistake."""
import re
import subprocess
import sys
import warnings

import pytest

from bigclust.pipeline.config import from_dict, load, parse_bytes
from bigclust._util.errors import ConfigError

BASE = {"data": {"name": "optdigits"}, "store": {"path": "s.zarr"}, "output": {"dir": "o"}}


def cfg(**over):
    raw = {k: dict(v) for k, v in BASE.items()}
    for sec, kv in over.items():
        raw.setdefault(sec, {}).update(kv)
    return from_dict(raw, "x.toml")


def test_defaults_and_single_point():
    c = cfg()
    assert c.sections["affinity"]["gamma"] == "median"           # issue 26: defaults one's own data can take
    assert c.sections["preprocess"]["l2_normalize"] == "auto"
    assert c.sections["bbs"]["solver"] == "dual"
    assert c.sections["cluster"]["n_init"] == 10
    assert c.sections["cluster"]["max_iter"] == 300
    assert list(c.points()) == [c.sections]


def test_sweep_grid_is_cartesian_product():
    c = cfg(affinity={"gamma": [1024, 1, 0.25]}, bbs={"n_iter": [10, 20]})
    pts = list(c.points())
    assert len(pts) == 6
    assert {(p["affinity"]["gamma"], p["bbs"]["n_iter"]) for p in pts} == \
        {(g, it) for g in (1024.0, 1.0, 0.25) for it in (10, 20)}
    assert all(isinstance(p["affinity"]["gamma"], float) for p in pts)


def test_hash_depends_on_content_not_spelling():
    assert cfg(affinity={"gamma": 1}).hash == cfg(affinity={"gamma": 1.0}).hash
    assert cfg(affinity={"gamma": 2}).hash != cfg().hash


@pytest.mark.parametrize("over, needle", [
    ({"affinity": {"gamma": 0}}, "[affinity] gamma: expected > 0"),
    ({"affinity": {"gamma": -1.0}}, "[affinity] gamma: expected > 0"),
    ({"affinity": {"gamma": [1.0, 0.0]}}, "[affinity] gamma[1]: expected > 0"),
    ({"affinity": {"gama": 1.0}}, "unknown key [affinity] 'gama'"),
    ({"affinity": {"gamma": "big"}}, '[affinity] gamma: expected > 0 or "median", got \'big\''),
    ({"cluster": {"n_init": 2.5}}, "[cluster] n_init: expected an integer"),
    ({"cluster": {"n_init": True}}, "[cluster] n_init: expected an integer"),
    ({"cluster": {"n_clusters": 1}}, "[cluster] n_clusters: expected 0 (= number of classes) or >= 2"),
    ({"method": {"names": ["bbs", "spectral"]}}, "[method] names: unknown method 'spectral'; the methods are kmeans,"),
    ({"method": {"names": []}}, "[method] names: expected a non-empty list of method names, got []"),
    ({"bbs": {"solver": "newton"}}, "[bbs] solver: expected one of"),
    ({"method": {"names": ["bbs", "bbs"]}}, "lists a method twice"),
    ({"method": {"solver": "dual"}}, "[method] solver has moved to the method sections: [bbs] solver"),
    ({"method": {"ncut_iter": 3}}, "[method] ncut_iter has moved to the method sections: [ncut] n_iter"),
    ({"cluster": {"kmeans_n_init": 3}}, "[cluster] kmeans_n_init has moved to the method sections: [kmeans] n_init"),
    ({"sk": {"solver": "dual"}}, "unknown key [sk] 'solver'"),
    ({"mbbs": {"lam": 0}}, "[mbbs] lam: expected > 0"),
    ({"store": {"max_memory": "lots"}}, "[store] max_memory"),
    ({"store": {"path": ["a", "b"]}}, "[store] path: cannot be swept"),
    ({"data": {"name": "nosuchset"}}, "unknown data set"),
    ({"data": {"path": "x.npy"}}, "exactly one of 'name'"),
    ({"bogus": {"a": 1}}, "unknown section [bogus]"),
])
def test_errors_name_file_key_and_expectation(over, needle):
    with pytest.raises(ConfigError) as e:
        cfg(**over)
    msg = str(e.value)
    assert needle in msg
    assert msg.startswith("x.toml") and "\n" not in msg


@pytest.mark.parametrize("key, value, needle", [
    ("n_clusters", 3, "key 'n_clusters' is outside any section; every key belongs in one, e.g. [cluster]"),
    ("gamma", 1.0, "key 'gamma' is outside any section; every key belongs in one, e.g. [affinity] or [aksc]"),
    ("cluster", 3, "key 'cluster' is outside any section; every key belongs in one, e.g. [cluster]"),
    ("typo", 1, "key 'typo' is outside any section; every key belongs in one, e.g. the section it configures"),
])
def test_key_above_the_first_section_is_named_as_such(key, value, needle):
    # in TOML a key above the first [section] header is a top-level key, not an unknown section
    with pytest.raises(ConfigError) as e:
        from_dict({**BASE, key: value}, "x.toml")
    assert str(e.value) == f"x.toml: {needle}"


def test_store_and_output_default_beside_the_config(tmp_path):
    """[store] path and [output] dir are optional: <stem>.zarr and <stem>-results next to the config file."""
    c = from_dict({"data": {"name": "optdigits"}}, tmp_path / "wine.toml")
    assert c.resolve(c.sections["store"]["path"]) == tmp_path / "wine.zarr"
    assert c.resolve(c.sections["output"]["dir"]) == tmp_path / "wine-results"
    c = from_dict({"data": {"name": "optdigits"}, "store": {"path": "s.zarr"}}, tmp_path / "x.toml")
    assert c.resolve(c.sections["store"]["path"]) == tmp_path / "s.zarr"


def test_load_reports_bad_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load(tmp_path / "nope.toml")
    p = tmp_path / "bad.toml"
    p.write_text("[data\nname = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(p)


def test_parse_bytes():
    assert parse_bytes("1GB") == 10**9
    assert parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes(1000) == 1000
    for bad in ("", "GB", "-1GB", 0, "1XB"):
        with pytest.raises(ValueError, match=f"^{re.escape(str(bad))}$"):   # names the value (config adds the key)
            parse_bytes(bad)


def test_cli_validate_one_line_no_traceback(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[data]\nname = "optdigits"\n[affinity]\ngamma = 0\n[store]\npath="s"\n[output]\ndir="o"\n')
    r = subprocess.run([sys.executable, "-m", "bigclust.cli", "pipeline", "validate", str(p)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "gamma" in r.stderr and str(p) in r.stderr
    p.write_text('[data]\nname = "optdigits"\n[affinity]\ngamma = [1, 2]\n[store]\npath="s"\n[output]\ndir="o"\n')
    r = subprocess.run([sys.executable, "-m", "bigclust.cli", "pipeline", "validate", str(p)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "2 sweep point(s)" in r.stdout


def test_a_method_section_not_in_names_is_a_warning(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[data]\nname = "vehicle"\n[method]\nnames = ["sk"]\n[bbs]\nsolver = "dual"\n')
    with pytest.warns(UserWarning, match=r"section \[bbs\] is not used: 'bbs' is not in \[method\] names \(sk\)"):
        load(p)
    p.write_text('[data]\nname = "vehicle"\n[method]\nnames = ["sk", "bbs"]\n[bbs]\nsolver = "dual"\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(p)


def test_keep_decides_only_the_disk_so_it_is_not_in_the_hash(tmp_path):
    """[store] keep never changes a score: a finished run's folder stays its config's when keep changes."""
    from bigclust.pipeline.checks import same_settings
    from bigclust.pipeline.config import load
    base = '[data]\npath = "x.npz"\n\n[method]\nnames = ["kmeans"]\n'
    cfgs = {}
    for name, extra in (("a", ""), ("b", '\n[store]\nkeep = "results"\n'), ("c", '\n[store]\nmax_memory = "1GB"\n')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.toml").write_text(base + extra)
        cfgs[name] = load(tmp_path / name / "run.toml")
    ca, cb = cfgs["a"], cfgs["b"]
    assert ca.hash == cb.hash and same_settings(ca.sections, cb) and same_settings(cb.sections, ca)
    assert cfgs["c"].hash != ca.hash                     # other [store] keys still count
