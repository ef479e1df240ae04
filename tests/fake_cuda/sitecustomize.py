"""Pretend CUDA is present, for checking that the tests pin the device they mean.

Put this folder first on PYTHONPATH (`PYTHONPATH=tests/fake_cuda pytest tests`): every Python
process then sees one CUDA device, as on a GPU runner (availability, count, index, name and
capability), while any real CUDA work still fails as on a CPU build, and nvidia-ml-py finds no
driver (on a GPU machine too: a test of an unfit fake GPU must not read the real one's health). A
test that silently depends on the default device (CUDA when present) fails under it; the first
H100 run found such failures the hard way. PERFGATE_FAKE_CUDA=0 switches it off;
PERFGATE_FAKE_CUDA_COUNT=N fakes N devices (one GPU per xdist worker: tests/dist/test_parallel.py).

Its limit: the torch profiler's CUDA activity cannot be faked (test_profiling's trace test fails
under it, and the failing profiler then slows every later op), so run the device-dependent tests:
`PYTHONPATH=tests/fake_cuda pytest tests/plugin/test_plugin.py tests/ci/test_workflows.py tests/plugin/test_session.py
tests/measure/test_fingerprint.py tests/cases/test_tiers.py tests/measure/test_device.py tests/history/test_history.py`.
"""

import os
from types import SimpleNamespace

if os.environ.get("PERFGATE_FAKE_CUDA", "1") == "1":
    import torch

    props = SimpleNamespace(
        name="Fake GPU (tests/fake_cuda)", major=9, minor=0, total_memory=80 * 2**30, multi_processor_count=132
    )
    torch.cuda.is_available = lambda: True
    count = int(os.environ.get("PERFGATE_FAKE_CUDA_COUNT", "1"))
    torch.cuda.device_count = lambda: count
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_properties = lambda device=None: props
    torch.cuda.get_device_capability = lambda device=None: (props.major, props.minor)
    torch.cuda.get_device_name = lambda device=None: props.name

    try:
        import pynvml
    except ImportError:  # no nvidia-ml-py: no driver to hide
        pass
    else:

        def _no_driver(name, *args, **kwargs):
            raise OSError(f"{name}: cannot open shared object file (hidden by tests/fake_cuda)")

        # nvidia-ml-py's loader calls its module's CDLL; failing it is what a machine without the
        # driver does (nvmlInit raises NVML_ERROR_LIBRARY_NOT_FOUND).
        pynvml.nvmlLib = None
        pynvml.CDLL = _no_driver
