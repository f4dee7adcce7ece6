"""The one measurement harness of ``bigclust bench`` (bigclust/bench/_measure.py): what is and is not timed,
interleaving, peak RSS per stage, the printed report.  No speed is asserted (DESIGN.md section 5)."""
import mmap
import time

import numpy as np

from bigclust.bench import format_report
from bigclust.bench._measure import PeakRSS, machine, timed


def test_timed_leaves_warmup_setup_and_keep_out_and_keeps_the_last_result():
    calls = []
    seeds = iter(range(3))

    def slow():
        time.sleep(0.1)

    run = timed(lambda seed: calls.append(("run", seed)) or seed * 10, 3,
                setup=lambda: (slow(), next(seeds))[1], warmup=lambda: (slow(), calls.append("warm")),
                keep=lambda res: (slow(), res + 1)[1])
    assert calls == ["warm", ("run", 0), ("run", 1), ("run", 2)]
    assert run.result == 20 and run.kept == [1, 11, 21]
    assert len(run.times) == len(run.cpu_times) == 3 and max(run.times) < 0.09   # the sleeps were not timed
    assert run.fastest <= run.median


def test_timed_interleaves_a_dict_and_gives_each_its_setup():
    order = []
    runs = timed({"a": lambda x: order.append(("a", x)), "b": lambda: order.append("b")}, 2, setup={"a": lambda: 7})
    assert order == [("a", 7), "b", ("a", 7), "b"]
    assert set(runs) == {"a", "b"} and all(len(r.times) == 2 for r in runs.values())


def test_peak_rss_sees_an_allocation_and_attributes_it_to_its_stage():
    with PeakRSS(0.01, children=True) as mem:
        mem.stage("small")
        mem.stage("big")
        a = mmap.mmap(-1, 40_000_000)   # 40 MB of new pages (a heap allocation may reuse resident memory freed
        np.frombuffer(a, dtype=np.uint8)[:] = 1   # by earlier tests in this process), touched
        deadline = time.monotonic() + 10   # until the sampler has run in this stage (a loaded machine delays it)
        while mem.stage_peak.get("big", 0) < mem.start + 30_000_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        mem.stage(None)
        a.close()
    assert mem.peak >= mem.start + 30_000_000
    assert mem.stage_peak["big"] >= mem.stage_peak["small"] + 30_000_000
    assert mem.peak_sum >= mem.peak and "driver" in mem.per_process
    assert PeakRSS.process_max() >= mem.peak - 4096 * 1024   # the kernel's record (kB granularity)


def test_report_prints_numbers_and_nested_machine():
    text = format_report({"machine": machine(), "n": 5, "seconds": 0.123456, "peak_rss_bytes": 2_000_000_000})
    assert "cpu: " in text and "0.1235" in text and "(2.000 GB)" in text
