"""Files an orchestrator's probes look at (deploy/kubernetes): ``ready`` once a process
serves, removed when it stops; ``alive`` touched by its event loop, so a loop that
hangs goes stale while a metrics thread would still answer. Both live in ``KIP_HOME``."""

from __future__ import annotations

from pathlib import Path

READY, ALIVE = "ready", "alive"


def mark(home: Path, name: str) -> None:
    """Create ``name`` or bring its modification time to now."""
    home.mkdir(parents=True, exist_ok=True)
    (home / name).touch()


def clear(home: Path, name: str) -> None:
    (home / name).unlink(missing_ok=True)
