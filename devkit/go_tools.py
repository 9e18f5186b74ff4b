"""Tools the tests run that are Go programs, built once from the Go module proxy into
kip's cache folder (``go install``): the S3 test server (devkit/s3_server.py) and
kustomize, which renders deploy/kubernetes for the manifest tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from kip.devkit.settings import DevSettings

KUSTOMIZE = ("sigs.k8s.io/kustomize/kustomize/v5", "v5.7.1")


class ToolUnavailable(RuntimeError):
    """A tool that cannot be built here (no Go toolchain, no module proxy)."""


def go_binary(module: str, version: str) -> Path:
    """The binary of ``module@version`` (named after the module's last element that is
    not a major version), built on first use."""
    name = next(p for p in reversed(module.split("/")) if not _major(p))
    bin_dir = DevSettings().cache_dir / f"{name}-{version}"
    binary = bin_dir / name
    if binary.exists():
        return binary
    go = shutil.which("go") or ("/usr/local/go/bin/go"
                                if os.path.exists("/usr/local/go/bin/go") else None)
    if go is None:
        raise ToolUnavailable(f"{name} is built with Go (`go` on PATH)")
    done = subprocess.run([go, "install", f"{module}@{version}"],
                          env=os.environ | {"GOBIN": str(bin_dir), "GOFLAGS": "-mod=mod"},
                          capture_output=True, text=True, timeout=900)
    if done.returncode or not binary.exists():
        raise ToolUnavailable(f"go install {module}@{version} failed: {done.stderr[-400:]}")
    return binary


def kustomize_binary() -> Path:
    return go_binary(*KUSTOMIZE)


def _major(part: str) -> bool:
    return part[:1] == "v" and part[1:].isdigit()
