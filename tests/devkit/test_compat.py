"""The compatibility run's reading of what broke (devkit/compat.py); the run itself is CI's
step after the suite."""

from __future__ import annotations

from kip.devkit.compat import ASSUMPTIONS, LIBRARIES, failures, pins
from tests.conftest import repo_root

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite>
<testcase classname="tests.transport.test_aiokafka_adapter" name="test_crc32c_and_varints_are_kafkas"/>
<testcase classname="tests.pipeline.test_faust_adapter" name="test_a_stream_drains_in_the_background">
<failure message="AttributeError: type object 'Stream' has no attribute '_enable_passive'">
traceback</failure></testcase></testsuite></testsuites>"""


def test_a_failed_test_is_named_with_the_first_line_of_its_error(tmp_path):
    (tmp_path / "report.xml").write_text(JUNIT)
    assert failures(tmp_path / "report.xml", []) == [
        ("tests.pipeline.test_faust_adapter::test_a_stream_drains_in_the_background",
         "AttributeError: type object 'Stream' has no attribute '_enable_passive'")]


def test_tests_that_could_not_start_are_reported_by_their_error_lines(tmp_path):
    output = ["ImportError while loading conftest", "E   ImportError: cannot import name "
              "'RequestStruct' from 'aiokafka.protocol.api'", "short test summary"]
    assert failures(tmp_path / "missing.xml", output) == [
        ("the tests' collection",
         "ImportError: cannot import name 'RequestStruct' from 'aiokafka.protocol.api'")]


def test_every_library_is_pinned_and_every_listed_test_file_exists():
    assert set(pins()) == {"aiokafka", "faust-streaming"} < set(LIBRARIES)
    assert all((repo_root() / path).is_file() for path in ASSUMPTIONS)
