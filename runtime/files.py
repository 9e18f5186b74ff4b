"""Files kip writes under $KIP_HOME: folders 0700, files 0600, whatever the umask.

State, keys, access files and logs may hold secrets or tenants' data; nobody but the
account that runs kip has a reason to read them.
"""

from __future__ import annotations

import os
from pathlib import Path


def private_dir(path: Path) -> Path:
    """``path`` and its missing parents, made 0700 (an existing folder is tightened only
    if kip made it: its parents are left as they are)."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)   # mkdir's mode is filtered by the umask
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by its owner only."""
    private_dir(Path(path).parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)   # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def open_private_log(path: Path):
    """``path`` opened for appending, 0600 (process logs hold request ids and errors)."""
    private_dir(Path(path).parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


class UnusableFile(ValueError):
    """A configuration file kip needs is missing or does not parse."""


def read_model(cls, path: Path, missing: str, what: str):
    """``cls`` read from the JSON file at ``path``. A missing file raises
    ``UnusableFile(missing)`` (say how to make one); one that does not validate names
    each bad field by its place, never its value (these files hold secrets)."""
    from pydantic import ValidationError

    from kip.schemas.codec import describe

    if not Path(path).exists():
        raise UnusableFile(missing)
    try:
        return cls.model_validate_json(Path(path).read_bytes())
    except ValidationError as exc:
        raise UnusableFile(f"the {what} at {path} is not usable: {describe(exc)}") from None
