import socket

import pytest

from kip.devkit.broker import BrokerError, LocalBroker, free_port, free_port_run, require_tool


def test_the_session_broker_accepts_connections_and_reports_status(broker):
    with socket.create_connection(("127.0.0.1", broker.port), timeout=2):
        pass
    assert "running" in broker.status() and broker.pid() is not None


def _jvm_flags(broker: LocalBroker) -> list[str]:
    with open(f"/proc/{broker.pid()}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a.startswith(b"-XX:")]


def test_a_plain_broker_runs_c1_alone_and_a_secured_one_keeps_c2(broker, secure_broker):
    """TLS's AES-GCM has JIT intrinsics in C2 only (devkit/broker.py's JVM_OPTIONS)."""
    assert "-XX:TieredStopAtLevel=1" in _jvm_flags(broker)
    secured = _jvm_flags(secure_broker)
    assert "-XX:+UseZGC" in secured and not any("TieredStopAtLevel" in a for a in secured)


def test_a_broker_made_for_steady_state_keeps_c2(tmp_path):
    """As a long-running broker has it: benchmarks warm it up and measure that."""
    assert "-XX:TieredStopAtLevel=1" in LocalBroker(tmp_path).jvm_options
    assert not any("TieredStopAtLevel" in a
                   for a in LocalBroker(tmp_path, steady_state=True).jvm_options)


def test_a_run_of_free_ports_lies_below_the_ephemeral_range_and_every_one_binds():
    base = free_port_run(4)
    assert 20_000 <= base and base + 4 <= 32_000
    for port in range(base, base + 4):
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_run_of_ports_that_cannot_be_had_is_refused():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        with pytest.raises(RuntimeError, match="consecutive free ports"):
            free_port_run(1, low=port, high=port + 2)


def test_a_second_start_is_a_no_op(broker):
    pid = broker.pid()
    lines = []
    broker.start(log=lines.append)
    assert broker.pid() == pid and "already running" in lines[0]


def test_a_stopped_broker_reports_not_running(tmp_path):
    b = LocalBroker(tmp_path, port=free_port())
    assert b.pid() is None and "not running" in b.status() and b.stop() is False


def test_missing_java_or_maven_gives_a_clear_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BrokerError, match="'mvn' is not on PATH.*Install it"):
        require_tool("mvn", "Maven fetches the Kafka broker jars")
