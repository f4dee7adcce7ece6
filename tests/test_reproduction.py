"""The committed paper reproductions come out the same to the last bit (`bigclust report verify`).

Bits depend on the BLAS kernel OpenBLAS picks for the CPU and on the BLAS and Numba thread counts
(``run.json`` records them): the re-run uses the recorded ones (in a fresh process, since both libraries read
them when loaded) where the CPU has the instructions the kernel needs.  That every committed results folder is
still its config's (its README command writes into it) is checked in ``test_store_compat.py``.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RESULTS = Path(__file__).parents[1] / "pipelines" / "bbs" / "results"

#: CPU flags (``/proc/cpuinfo``) an OpenBLAS kernel needs; a kernel not listed is not forced
NEEDS = {"Haswell": {"avx2", "fma"}, "Zen": {"avx2", "fma"},
         "SkylakeX": {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"},
         "Cooperlake": {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512_bf16"}}


def _cpu_flags():
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()}


@pytest.mark.realdata
@pytest.mark.slow
def test_vehicle_reproduction_is_bit_identical(data_root):
    made = json.loads((RESULTS / "vehicle" / "run.json").read_text())
    (kernel,) = made["blas"]
    arch = kernel.split()[-1]
    if not NEEDS.get(arch, {"?"}) <= _cpu_flags():
        pytest.skip(f"the vehicle results were made with OpenBLAS's {arch} kernel, which this CPU cannot run")
    code = ("import sys; from bigclust.pipeline.verify import verify; ok, text = verify(sys.argv[1]); print(text); "
            "sys.exit(0 if ok else 1)")
    # the thread counts the results were made with (a dask.distributed Nanny started earlier in this process
    # may have left OMP/MKL/OPENBLAS_NUM_THREADS=1 in os.environ: dask/distributed#6749)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(BIGCLUST_DATA=str(data_root), OPENBLAS_CORETYPE=arch, OPENBLAS_NUM_THREADS=str(made["blas_threads"]),
               NUMBA_NUM_THREADS=str(made["numba_threads"]))
    r = subprocess.run([sys.executable, "-c", code, str(RESULTS / "vehicle")], capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "45 of 45 records reproduced exactly" in r.stdout
