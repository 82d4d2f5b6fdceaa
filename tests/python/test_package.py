"""The package itself: imports without torch, small helpers, the README example runs."""

import os
import pathlib
import subprocess
import sys

import flashcore

REPO = pathlib.Path(__file__).resolve().parents[2]


def _run_python(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)


def test_import_does_not_import_torch():
    result = _run_python("-c", "import sys, flashcore; print('torch' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_version_and_backends():
    assert flashcore.__version__ == flashcore.version()
    assert flashcore.__version__.count(".") == 2
    assert flashcore.backend_available("cpu")
    assert flashcore.backend_available("reference")
    assert flashcore.supported_head_dims("cpu") == []


def test_host_arrays_need_no_workspace():
    import numpy as np

    assert flashcore.attention_workspace_bytes(np.zeros((1, 4, 2, 8), np.float32)) == 0


def test_readme_example_runs():
    example = REPO / "examples" / "python" / "quickstart.py"
    result = _run_python(str(example))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "max error vs numpy" in result.stdout
    assert "error: heads_q=8 is not a multiple of heads_kv=3" in result.stdout
