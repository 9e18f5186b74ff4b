"""A real S3-compatible server on loopback for the model store's tests and benches.

It is the Versity S3 Gateway (versitygw, Apache-2.0): a production S3 protocol server
whose posix backend keeps each bucket as a folder and each object as a file. It builds
from the Go module proxy in about a minute (``go install``, cached in kip's cache
folder), runs as a process of its own, and speaks S3's REST API with SigV4
authentication, so the store's client (s3fs through botocore) meets what it meets in a
cloud. MinIO is AGPL-licensed, and moto or s3rver are fakes of S3, not servers of it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from kip.devkit.broker import free_port_run
from kip.devkit.stack import terminate
from kip.devkit.go_tools import ToolUnavailable, go_binary

VERSITYGW = "github.com/versity/versitygw/cmd/versitygw"
VERSITYGW_VERSION = "v1.8.0"
ACCESS_KEY, SECRET_KEY = "kip-store-test", "kip-store-test-secret"


S3Unavailable = ToolUnavailable   # the server cannot be built here


def versitygw_binary() -> Path:
    """The gateway's binary, built once into kip's cache folder."""
    return go_binary(VERSITYGW, VERSITYGW_VERSION)


class S3Server:
    """One gateway on a free loopback port, its objects under ``data_dir``."""

    def __init__(self, data_dir: Path, buckets: tuple[str, ...] = ("models",)) -> None:
        self.data_dir = Path(data_dir)
        self.buckets = buckets
        self.port = free_port_run(1)
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self) -> dict:
        """What an fsspec ``s3://`` store needs to reach this server."""
        return {"key": ACCESS_KEY, "secret": SECRET_KEY,
                "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"}}

    def start(self, timeout_s: float = 30.0) -> "S3Server":
        binary = versitygw_binary()
        for bucket in self.buckets:   # the posix backend's buckets are its top folders
            (self.data_dir / bucket).mkdir(parents=True, exist_ok=True)
        log = self.data_dir.parent / f"versitygw-{self.port}.log"
        with open(log, "ab") as out:   # the server keeps its own descriptor
            self.proc = subprocess.Popen(
                [str(binary), "--port", f"127.0.0.1:{self.port}", "posix",
                 str(self.data_dir)],
                env=os.environ | {"ROOT_ACCESS_KEY": ACCESS_KEY, "ROOT_SECRET_KEY": SECRET_KEY},
                stdout=out, stderr=subprocess.STDOUT)
        give_up = time.monotonic() + timeout_s
        while not _listening(self.port):
            if self.proc.poll() is not None or time.monotonic() > give_up:
                self.stop()
                raise S3Unavailable(f"versitygw did not listen on {self.port}; see {log}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            terminate([self.proc], 10.0)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
