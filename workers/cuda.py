"""The CUDA libraries ONNX Runtime's CUDA provider links against, from the pip wheels
the install brings (``onnxruntime-gpu[cuda,cudnn]``: CUDA runtime, cuBLAS, cuRAND,
cuFFT, cuDNN). Nothing puts those wheels' folders on the loader's path, so a worker
loads them into the process before it creates a CUDA session (``preload``); the
provider's own ``dlopen`` then finds them already there. Only the driver's libcuda
must come from the host (the NVIDIA container toolkit mounts it).
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

log = logging.getLogger("kip.worker")
DRIVER_LIBRARIES = frozenset({"libcuda.so.1"})   # the host's, never a wheel's


def provider_library() -> Path | None:
    """ONNX Runtime's CUDA provider library, where this build has one."""
    import onnxruntime

    path = Path(onnxruntime.__file__).parent / "capi" / "libonnxruntime_providers_cuda.so"
    return path if path.exists() else None


def library_dirs() -> list[Path]:
    """Every folder of the nvidia wheels that holds shared libraries."""
    try:
        import nvidia
    except ImportError:
        return []
    roots = [Path(p) for p in nvidia.__path__]
    return sorted({so.parent for root in roots for so in root.glob("*/lib/*.so*")})


def resolved(library: Path) -> dict[str, str | None]:
    """What ``library`` links against, each with where the loader finds it on the system
    or in the wheels' folders (None: nowhere)."""
    search = os.pathsep.join(map(str, library_dirs()))
    env = os.environ | {"LD_LIBRARY_PATH": search}
    out = subprocess.run(["ldd", str(library)], capture_output=True, text=True, env=env,
                         check=True).stdout
    found: dict[str, str | None] = {}
    for line in out.splitlines():
        name, arrow, where = line.strip().partition(" => ")
        if arrow:
            found[name] = None if where.startswith("not found") else where.split(" (")[0]
    return found


def unresolved(library: Path) -> set[str]:
    """Libraries ``library`` needs that ``preload`` would leave missing."""
    return {name for name, where in resolved(library).items() if where is None}


def from_wheels(library: Path) -> set[str]:
    """The libraries ``library`` needs that come from the nvidia wheels."""
    dirs = tuple(str(d) for d in library_dirs())
    return {name for name, where in resolved(library).items()
            if where is not None and where.startswith(dirs)}


def preload() -> None:
    """Load the CUDA and cuDNN libraries of the wheels into this process (before the
    first CUDA session); says what is missing instead of failing in the provider."""
    import onnxruntime

    try:
        onnxruntime.preload_dlls(cuda=True, cudnn=True, msvc=False)
    except Exception as exc:   # the provider's own error would only name one library
        log.error("could not preload the CUDA libraries (%s); install "
                  "onnxruntime-gpu[cuda,cudnn]", exc)
