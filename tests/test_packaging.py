"""Every top-level package ships: in the wheel's package list and in the Docker image."""

from __future__ import annotations

import re
import tomllib

from kip.devkit.layers import RANK
from tests.conftest import repo_root


def test_every_package_is_in_the_wheel_under_kip():
    """Each folder installs as ``kip.<folder>``, each of its subpackages too."""
    setuptools = tomllib.loads((repo_root() / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {
        "kip" if layer == "kip" else f"kip.{layer}": layer for layer in RANK}
    folders = {init.parent.relative_to(repo_root()) for layer in RANK
               for init in (repo_root() / layer).rglob("__init__.py")}
    assert set(setuptools["packages"]) == {
        ".".join(["kip", *f.parts[1:]] if f.parts[0] == "kip" else ["kip", *f.parts])
        for f in folders}


def test_the_wheel_puts_nothing_beside_kip(tmp_path):
    import shutil
    import subprocess
    import sys
    import zipfile
    source = tmp_path / "source"   # a copy: a checkout's stale build/ would go in too
    for layer in RANK:
        shutil.copytree(repo_root() / layer, source / layer,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo_root() / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(source)], check=True, capture_output=True)
    [wheel] = tmp_path.glob("kip-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"kip"}
    assert "kip/transport/aiokafka_adapter.py" in zipfile.ZipFile(wheel).namelist()


def test_every_package_is_copied_into_the_image():
    dockerfile = (repo_root() / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\w+) \./\1$", dockerfile, re.MULTILINE))
    assert copied == set(RANK)


def test_devkit_commands_are_registered_with_the_cli():
    pyproject = tomllib.loads((repo_root() / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["kip.commands"] == {
        "devkit": "kip.devkit.commands:add_commands"}


def test_every_image_stage_ends_as_a_user_that_is_not_root():
    dockerfile = (repo_root() / "Dockerfile").read_text()
    for stage in dockerfile.split("\nFROM ")[1:]:
        users = re.findall(r"^USER (\S+)$", stage, re.MULTILINE)
        assert users and users[-1] not in ("root", "0"), stage.splitlines()[0]


STAGE_PACKAGES = {"faust-streaming", "onnxruntime", "onnxruntime-gpu", "tokenizers", "torch",
                  "prometheus-client"}
# Run as a script: the packages only the stages need cannot be imported, as on a host
# with the client's install; then kip's client and its commands.
_CLIENT_HOST = """
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {"faust", "mode", "onnxruntime", "tokenizers", "torch",
                                  "prometheus_client"}:
            raise ImportError(f"{name} is not installed on a client host")
sys.meta_path.insert(0, Absent())
import kip.client
from kip.cli import main
sys.argv = ["kip", *sys.argv[1:]]
try:
    main()
except SystemExit as done:   # argparse's --help
    sys.exit(done.code)
"""


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def test_the_client_install_brings_no_stage_package():
    """``pip install kip`` is the client's; the pipeline and the workers come as extras."""
    project = tomllib.loads((repo_root() / "pyproject.toml").read_text())["project"]
    assert not {_requirement_name(r) for r in project["dependencies"]} & STAGE_PACKAGES
    extras = project["optional-dependencies"]
    assert "faust-streaming" in {_requirement_name(r) for r in extras["pipeline"]}
    assert {"tokenizers", "onnxruntime-gpu"} <= {_requirement_name(r) for r in extras["worker"]}


def test_the_client_and_its_commands_run_without_the_stages_packages():
    import subprocess
    import sys
    for command in (["--help"], ["audit", "verify", "--help"], ["batch", "run", "--help"],
                    ["deadletter", "--help"], ["acls", "--help"]):
        done = subprocess.run([sys.executable, "-c", _CLIENT_HOST, *command],
                              capture_output=True, text=True, cwd=repo_root())
        assert done.returncode == 0, (command, done.stderr[-2000:])
        assert "usage: kip" in done.stdout
