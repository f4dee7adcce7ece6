"""kill -9 in the middle of a resumable step: a config run in a subprocess, one step slowed, killed once enough
of its chunks have their markers (shared by the chunked subspace tests)."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from bigclust.pipeline import resumable

#: runs ``argv[1]`` (a config) with ``bigclust.subspace._chunked.<argv[2]>`` (a chunk's function) slowed by
#: half a second a call, or as it is when ``argv[2]`` is ``plain``
_SCRIPT = """
    import sys, time
    from bigclust.subspace import _chunked as scale
    if sys.argv[2] != "plain":
        fast = getattr(scale, sys.argv[2])
        def slow(*a):
            time.sleep(0.5)
            return fast(*a)
        setattr(scale, sys.argv[2], slow)
    from bigclust.pipeline.runner import run
    run(sys.argv[1])
"""


def _command(tmp_path, cfg, slowed):
    script = tmp_path / "slow.py"
    if not script.exists():
        script.write_text(textwrap.dedent(_SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(Path(resumable.__file__).parents[2])}
    return [sys.executable, str(script), str(cfg), slowed], env


def run_plain(tmp_path, cfg):
    """Run ``cfg`` uninterrupted in a subprocess like the killed one (the BLAS threads a process inherits from
    its environment may decide float sums' last bits)."""
    cmd, env = _command(tmp_path, cfg, "plain")
    subprocess.run(cmd, env=env, cwd=tmp_path, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill_mid_step(tmp_path, cfg, store, slowed, prefix, at_least=2, timeout=300):
    """Run ``cfg`` with ``slowed`` slowed, kill -9 it once ``at_least`` chunks with marker ``<prefix><i>`` are
    done in the store's scratch folder; returns that folder and the chunks done before the kill."""
    cmd, env = _command(tmp_path, cfg, slowed)
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work_root = tmp_path / store / "work"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        works = list(work_root.iterdir()) if work_root.exists() else []
        if works and len(resumable.chunks_done(works[0], prefix)) >= at_least:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    (work,) = work_root.iterdir()
    return work, resumable.chunks_done(work, prefix)
