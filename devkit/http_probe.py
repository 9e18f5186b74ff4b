"""A process's probes read over HTTP, as an orchestrator reads them (runtime/probes.py)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request


def probe(port: int, path: str) -> tuple[int, bytes]:
    """The status and body of ``path`` on loopback ``port`` (0: nothing listens yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError as err:
        return 0, repr(err).encode()


def until_ready(port: int, timeout_s: float = 90.0) -> float:
    """When ``/readyz`` on ``port`` first answered 200 (monotonic time)."""
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        if probe(port, "/readyz")[0] == 200:
            return time.monotonic()
        time.sleep(0.05)
    raise TimeoutError(f"/readyz on :{port} did not answer 200 within {timeout_s} s")
