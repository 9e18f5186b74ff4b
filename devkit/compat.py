"""The compatibility run: the tests that pin what kip relies on in aiokafka, faust and mode,
and the end-to-end request path, against the newest releases the package index serves.

    scripts/compat                     # the newest of each, whatever pyproject's pins say
    scripts/compat aiokafka==0.14.0    # or the releases named

The releases go into a folder of their own (``--no-deps``) put first on the tests'
``PYTHONPATH``, over the project's venv, so the run changes nothing installed. It prints
the release each library ran, whether pyproject's pin admits it, and each failed test:
every test named in ``ASSUMPTIONS`` states one assumption in its name, so the failure
says which broke. Exit 0 when everything passed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

from packaging.requirements import Requirement

from kip.devkit.layers import repo_root

LIBRARIES = ("aiokafka", "faust-streaming", "mode-streaming")
# The adapters' own pins, the tests of the modules whose behaviour rests on them (each on
# the real broker), and the request path end to end.
ASSUMPTIONS = [
    "tests/transport/test_aiokafka_adapter.py",
    "tests/pipeline/test_faust_adapter.py",
    "tests/pipeline/test_one_loop.py",
    "tests/transport/test_transactions.py",
    "tests/transport/test_producing.py",
    "tests/transport/test_fetch_waits.py",
    "tests/transport/test_inflation.py",
    "tests/transport/test_reading.py",
    "tests/transport/test_acl_admin.py",
    "tests/transport/test_quota_admin.py",
    "tests/pipeline/test_rounds.py",
    "tests/pipeline/test_app.py",
    "tests/e2e/test_request_path.py",
]


def install(requirements: list[str], target: Path) -> dict[str, str]:
    """``requirements`` into ``target`` alone; the version each got."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--disable-pip-version-check", "--upgrade", "--target", str(target),
                    *requirements], check=True)
    versions = {}
    for info in target.glob("*.dist-info"):
        name, version = info.name.removesuffix(".dist-info").rsplit("-", 1)
        versions[name.lower().replace("_", "-")] = version
    return versions


def pins() -> dict[str, Requirement]:
    """pyproject's requirements of each library (the base, then the extras)."""
    project = tomllib.loads((repo_root() / "pyproject.toml").read_text())["project"]
    found = {}
    for line in [*project["dependencies"],
                 *(r for extra in project["optional-dependencies"].values() for r in extra)]:
        requirement = Requirement(line)
        if requirement.name in LIBRARIES:
            found.setdefault(requirement.name, requirement)
    return found


def run_tests(target: Path, report: Path, extra: list[str]) -> tuple[int, list[str]]:
    """pytest's exit code and its output's lines (also printed as they come)."""
    env_path = f"{target}:{repo_root()}"
    lines = []
    with subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--junitxml={report}", *ASSUMPTIONS, *extra],
                          cwd=repo_root(), env=_env(env_path), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as tests:
        for line in tests.stdout:
            print(line, end="", flush=True)
            lines.append(line.rstrip("\n"))
    return tests.returncode, lines


def _env(python_path: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": python_path}


def failures(report: Path, output: list[str]) -> list[tuple[str, str]]:
    """(test, first line of its error) of each failed or erroring test. Without a report
    the tests did not start (kip failed to import against the release): the error
    lines of pytest's output say why."""
    if not report.exists():
        return [("the tests' collection", line.removeprefix("E").strip())
                for line in output if line.startswith("E ")][:5] or [
                    ("the tests' collection", "pytest wrote no report")]
    found = []
    for case in ET.parse(report).iter("testcase"):
        for problem in (*case.iter("failure"), *case.iter("error")):
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            found.append((f"{case.get('classname')}::{case.get('name')}",
                          message[0][:160] if message else ""))
    return found


def ran_versions(target: Path) -> dict[str, str]:
    """What the tests imported: the folder's release, checked from a fresh interpreter."""
    script = ("import importlib.metadata as m;"
              + ";".join(f"print('{name}', m.version('{name}'))" for name in LIBRARIES))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=_env(str(target)), check=True).stdout
    return dict(line.split() for line in out.splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/compat", description=__doc__.split("\n")[0])
    parser.add_argument("releases", nargs="*", help="e.g. aiokafka==0.14.0 (default: newest)")
    parser.add_argument("--pytest", nargs=argparse.REMAINDER, default=[],
                        help="further pytest arguments")
    args = parser.parse_args(argv)
    named = {re.split(r"[=<>!~]", r)[0].lower(): r for r in args.releases}
    requirements = [named.get(name, name) for name in LIBRARIES]
    with tempfile.TemporaryDirectory(prefix="kip-compat-") as folder:
        target = Path(folder) / "site"
        install(requirements, target)
        versions = ran_versions(target)
        admitted = pins()
        for name in LIBRARIES:
            pin = admitted.get(name)
            verdict = ("no pin" if pin is None else
                       f"pinned {pin.specifier}: " + ("admitted" if pin.specifier.contains(
                           versions[name], prereleases=True) else "NOT admitted"))
            print(f"compat: {name} {versions[name]} ({verdict})")
        code, output = run_tests(target, Path(folder) / "report.xml", args.pytest)
        broke = failures(Path(folder) / "report.xml", output)
    for test, why in broke:
        print(f"compat: BROKE {test}: {why}")
    print("compat: " + ("every assumption holds" if code == 0 and not broke else
                        f"{len(broke)} tests failed (pytest exit {code})"))
    return 0 if code == 0 and not broke else 1


if __name__ == "__main__":
    sys.exit(main())
