import pytest

from devkit.stack import DevStack


def test_a_service_that_died_is_named_with_the_end_of_its_log(tmp_path):
    stack = DevStack(home=tmp_path, bootstrap_servers="127.0.0.1:1")
    proc = stack.spawn(["no-such-command"], log=lambda *_: None)
    stack.procs.append(proc)
    proc.wait(timeout=60)
    with pytest.raises(RuntimeError, match=r"(?s)kip no-such-command exited with 2.*"
                                           r"invalid choice: 'no-such-command'"):
        stack.check_services()
