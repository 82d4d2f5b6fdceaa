"""pytest setup: the `gpu` marker (registered in pyproject.toml) skips, with the reason, when
PyTorch with CUDA or a GPU is missing; a clear stop when the flashcore module is not importable."""

import functools
import importlib.util

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gpu: needs a CUDA GPU and PyTorch built with CUDA (run with -m gpu)")
    if importlib.util.find_spec("flashcore") is None:
        raise pytest.UsageError(
            "flashcore is not importable: build it in-tree (cmake -DFLASHCORE_BUILD_PYTHON=ON, "
            "then PYTHONPATH=<build>/python) or `pip install .`")


@functools.lru_cache(maxsize=None)
def _gpu_missing_reason():
    """Why GPU tests cannot run here, or None. Imports torch only when a GPU test is selected."""
    if importlib.util.find_spec("torch") is None:
        return "GPU test: PyTorch is not installed"
    import torch

    if not torch.cuda.is_available():
        return f"GPU test: torch {torch.__version__} sees no CUDA device"
    import flashcore

    if not (flashcore.backend_available("sm80") or flashcore.backend_available("sm90")):
        return ("GPU test: flashcore was built without a CUDA backend for this GPU "
                "(FLASHCORE_ENABLE_CUDA=OFF or no nvcc)")
    return None


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None:
        reason = _gpu_missing_reason()
        if reason:
            pytest.skip(reason)
