"""Every top-level package ships: in the wheel's package list and in the Docker image."""

from __future__ import annotations

import re
import tomllib

from devkit.layers import RANK
from tests.conftest import repo_root


def test_every_package_is_in_the_wheel():
    pyproject = tomllib.loads((repo_root() / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {pattern.rstrip("*") for pattern in include} == set(RANK)


def test_every_package_is_copied_into_the_image():
    dockerfile = (repo_root() / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\w+) \./\1$", dockerfile, re.MULTILINE))
    assert copied == set(RANK)


def test_devkit_commands_are_registered_with_the_cli():
    pyproject = tomllib.loads((repo_root() / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["kip.commands"] == {
        "devkit": "devkit.commands:add_commands"}


def test_every_image_stage_ends_as_a_user_that_is_not_root():
    dockerfile = (repo_root() / "Dockerfile").read_text()
    for stage in dockerfile.split("\nFROM ")[1:]:
        users = re.findall(r"^USER (\S+)$", stage, re.MULTILINE)
        assert users and users[-1] not in ("root", "0"), stage.splitlines()[0]
