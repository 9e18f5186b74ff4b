"""The CUDA provider can load on a GPU host after a plain install: every library it
links against comes with the install, except the driver's. Resolving libraries needs no
GPU, so this runs here."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from kip.workers import cuda

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64" or cuda.provider_library() is None,
    reason="onnxruntime-gpu (with its CUDA provider) is the Linux x86_64 build")


def test_the_cuda_provider_has_no_unresolved_library_but_the_drivers():
    missing = cuda.unresolved(cuda.provider_library())
    assert missing <= cuda.DRIVER_LIBRARIES, f"install onnxruntime-gpu[cuda,cudnn]: {missing}"


def test_preloading_puts_the_cuda_and_cudnn_libraries_in_the_process():
    probe = ("from workers import cuda; cuda.preload(); "
             "print(open('/proc/self/maps').read())")
    maps = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout
    needed = cuda.from_wheels(cuda.provider_library())
    assert {"libcudart", "libcublasLt", "libcublas", "libcurand"} <= {
        name.split(".so")[0] for name in needed}
    assert all(name in maps for name in needed), needed
    assert "libcudnn.so" in maps   # loaded by the provider at run time, not linked
