"""A real S3-compatible server (versitygw, devkit/s3_server.py) for the model store's
tests; skipped where its binary cannot be built."""

from __future__ import annotations

import pytest

from kip.devkit.s3_server import S3Server, S3Unavailable


@pytest.fixture(scope="package")
def s3(tmp_path_factory):
    pytest.importorskip("s3fs")
    try:
        server = S3Server(tmp_path_factory.mktemp("s3") / "data").start()
    except S3Unavailable as err:
        pytest.skip(str(err))
    yield server
    server.stop()
