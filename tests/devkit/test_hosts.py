"""Hosts apart: network namespaces on one switch, reachable from each other and from the
harness until one is cut off, and again once healed; a degraded link loses packets.
Needs root (skipped without it, saying why)."""

from __future__ import annotations

import errno
import shutil
import socket
import subprocess
import sys

import pytest

from kip.devkit.hosts import HostsUnavailable, Network

REACH = ("import socket, sys\n"
         "s = socket.socket(); s.settimeout(1.0)\n"
         "sys.exit(s.connect_ex((sys.argv[1], int(sys.argv[2]))))")


@pytest.fixture
def network():
    try:
        net = Network()
    except HostsUnavailable as why:
        pytest.skip(str(why))
    with net:
        yield net


def _listening(host) -> tuple[subprocess.Popen, int]:
    """A TCP server on ``host``, accepting until killed."""
    server = subprocess.Popen(
        [*host.prefix, sys.executable, "-c",
         "import socket\ns = socket.create_server(('0.0.0.0', 7000))\n"
         "print('up', flush=True)\nwhile True: s.accept()[0].close()"],
        stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "up"
    return server, 7000


def _reaches(host, address: str, port: int) -> bool:
    done = subprocess.run([*host.prefix, sys.executable, "-c", REACH, address, str(port)])
    return done.returncode == 0


def _harness_reaches(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((address, port)) == 0


def test_a_cut_host_is_out_of_reach_until_healed(network):
    a, b = network.host("a"), network.host("b")
    server, port = _listening(b)
    try:
        assert _reaches(a, b.address, port) and _harness_reaches(b.address, port)
        network.cut(b)
        assert not _reaches(a, b.address, port) and not _harness_reaches(b.address, port)
        assert server.poll() is None   # a partition, not a crash: it still runs
        network.heal(b)
        assert _reaches(a, b.address, port)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


def test_a_degraded_link_loses_packets_and_is_restored(network):
    if shutil.which("nft") is None:
        pytest.skip("a lossy link needs nftables' nft")
    a, b = network.host("a"), network.host("b")
    network.degrade(b, loss_percent=100, rate_kbit=1000)
    assert not _reaches(a, b.address, 9)   # every packet lost: not even a refusal
    network.restore(b)
    refused = subprocess.run([*a.prefix, sys.executable, "-c", REACH, b.address, "9"])
    assert refused.returncode == errno.ECONNREFUSED   # answered again, not dropped


def test_close_removes_every_namespace_and_the_switch(network):
    host = network.host("a")
    network.close()
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert host.namespace not in namespaces and network.bridge not in links
