"""Issue 26's store and output folder (:mod:`test_trust_store`): races two runs of one config meet, each with
a stand-in for the other run."""
from bigclust.pipeline.store import Store


def test_probe_replace_twice_within_one_second(tmp_path):
    # two --replace runs finishing within one second: each previous result gets its own replaced-* folder
    from bigclust.pipeline.checks import _archive_out_dir
    out = tmp_path / "out"
    out.mkdir()
    for i in range(3):
        (out / "run.json").write_text(str(i))
        (out / "results.json").write_text(str(i))
        _archive_out_dir(out)
    got = sorted((d / "run.json").read_text() for d in out.glob("replaced-*"))
    assert got == ["0", "1", "2"] and not (out / "run.json").exists()


def test_2_a_store_created_by_another_run_between_look_and_open_is_opened(tmp_path, monkeypatch):
    """Two runs of one config start together: both find no store, one creates it first (the race behind
    ``test_2_one_config_started_twice_together``'s rare traceback); the other opens it."""
    import zarr

    real, calls = zarr.open_group, []

    def other_run_first(path, mode="a", **kw):
        calls.append(mode)
        if len(calls) == 1:
            real(path, mode="a").attrs.update({})          # the other run's group appears now
            raise zarr.errors.ContainsGroupError("A group exists in store")
        return real(path, mode=mode, **kw)

    monkeypatch.setattr(zarr, "open_group", other_run_first)
    s = Store(tmp_path / "store.zarr", owner={"data": "x"})
    assert calls == ["a", "r+"] and s.root.attrs["owner"] == {"data": "x"}
