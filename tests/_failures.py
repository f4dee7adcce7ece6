"""Helpers of test_failures.py and test_failures_run.py: the CLI in a subprocess, its one ``error:`` line
and its ``warning:`` lines, a config edited in place, and a check that a refused run wrote nothing."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def _cli(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "bigclust.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout)


def _one_error_line(r, needle=None):
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    ok = r.returncode == 2 and "Traceback" not in r.stderr and len(errs) == 1
    return ok and (needle is None or needle in errs[0])


def _warnings(r):
    return [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]


def _with(path, old, new):
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))
    return path



def _nothing_written(tmp_path):
    """No output folder, no stage in the store (for a file, its shape is only known once it is opened,
    which is after the empty store is made and before the ingest)."""
    return not (tmp_path / "out").exists() and not (tmp_path / "store.zarr" / "stages").exists()
