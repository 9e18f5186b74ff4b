"""Hosts apart on one machine: each a Linux network namespace with an address of its own,
plugged into one switch, so that a harness can cut a host off, heal it, or make its link
lossy and slow, as a real network does (``kip faults --cluster``).

The switch is a bridge in the root namespace, which holds the subnet's last address: the
harness itself, in the root namespace, reaches every host through it. A host's link is a
veth pair, one end in the host as ``eth0``, the other a port of the bridge. Cutting a host
takes its bridge port down: nothing reaches it and nothing leaves it, its processes keep
running (a partition, not a crash). ``degrade`` makes a host's link lossy and narrow.
The subnet is private (10.213.x.0/24) and the bridge
has no other port: nothing leaves the machine.

Making namespaces needs root (CAP_NET_ADMIN) and iproute2; ``Network.check`` says which is
missing, and the tests skip where it does.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from dataclasses import dataclass


class HostsUnavailable(RuntimeError):
    """This machine cannot make hosts apart (no root, no iproute2)."""


@dataclass(frozen=True)
class Host:
    name: str           # what the harness calls it: broker1, worker2, ...
    namespace: str      # its network namespace
    address: str        # its own IPv4 address
    port: str           # its switch port (in the root namespace)

    @property
    def prefix(self) -> list[str]:
        """The command that runs a program on this host."""
        return ["ip", "netns", "exec", self.namespace]


class Network:
    """A switch and the hosts plugged into it; ``close`` removes them all."""

    def __init__(self) -> None:
        self.check()
        self.tag = f"{os.getpid() % 10_000:04d}{random.randrange(100):02d}"
        self.subnet = f"10.213.{random.randrange(1, 255)}"
        self.bridge = f"kipbr{self.tag}"
        self.hosts: list[Host] = []
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    @staticmethod
    def check() -> None:
        if os.geteuid() != 0:
            raise HostsUnavailable("hosts apart need root: network namespaces and veth "
                                   "pairs need CAP_NET_ADMIN (run as root, or without "
                                   "the network faults)")
        if shutil.which("ip") is None or shutil.which("tc") is None:
            raise HostsUnavailable("hosts apart need iproute2's ip and tc (apt-get install "
                                   "iproute2)")

    def host(self, name: str) -> Host:
        """A new host on the switch, with the next address."""
        n = len(self.hosts) + 1
        host = Host(name, f"kip{self.tag}-{name}", f"{self.subnet}.{n}", f"kipv{self.tag}{n}")
        _ip("netns", "add", host.namespace)
        _ip("link", "add", host.port, "type", "veth", "peer", "name", f"{host.port}h")
        _ip("link", "set", f"{host.port}h", "netns", host.namespace)
        _ip("link", "set", host.port, "master", self.bridge, "up")
        inside = ["-n", host.namespace]
        _ip(*inside, "link", "set", f"{host.port}h", "name", "eth0")
        _ip(*inside, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip(*inside, "link", "set", "eth0", "up")
        _ip(*inside, "link", "set", "lo", "up")
        self.hosts.append(host)
        return host

    def cut(self, host: Host) -> None:
        """Cut ``host`` off from every other host and from the harness."""
        _ip("link", "set", host.port, "down")

    def heal(self, host: Host) -> None:
        _ip("link", "set", host.port, "up")

    def degrade(self, host: Host, loss_percent: float, rate_kbit: int) -> None:
        """A bad link: ``loss_percent`` of the packets to and from ``host`` lost (an
        nftables rule in the host), and its bandwidth capped at ``rate_kbit`` each way
        (tbf on both ends), so that what it sends queues: added latency under load.
        (A fixed added delay needs tc netem, which not every kernel has: this machine's
        lacks it.)"""
        if shutil.which("nft") is None:
            raise HostsUnavailable("a lossy link needs nftables' nft (apt-get install "
                                   "nftables)")
        _nft(host, "add", "table", "inet", "kipdegrade")
        for chain, hook in (("in", "input"), ("out", "output")):
            _nft(host, "add", "chain", "inet", "kipdegrade", chain,
                 f"{{ type filter hook {hook} priority 0; }}")
            _nft(host, "add", "rule", "inet", "kipdegrade", chain, "meta", "iifname", "!=",
                 "lo", "meta", "oifname", "!=", "lo", *_share(loss_percent), "drop")
        tbf = ["tbf", "rate", f"{rate_kbit}kbit", "burst", "32kbit", "latency", "500ms"]
        _tc("qdisc", "replace", "dev", host.port, "root", *tbf)
        _tc("-n", host.namespace, "qdisc", "replace", "dev", "eth0", "root", *tbf)

    def restore(self, host: Host) -> None:
        """``host``'s link as it was before ``degrade``."""
        _nft(host, "delete", "table", "inet", "kipdegrade", check=False)
        _tc("qdisc", "del", "dev", host.port, "root", check=False)
        _tc("-n", host.namespace, "qdisc", "del", "dev", "eth0", "root", check=False)

    def close(self) -> None:
        """Remove every host and the switch (stop the hosts' processes first)."""
        for host in self.hosts:
            _ip("netns", "del", host.namespace, check=False)
        _ip("link", "del", self.bridge, check=False)
        self.hosts.clear()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _ip(*args: str, check: bool = True) -> None:
    _run(["ip", *args], check)


def _share(percent: float) -> list[str]:
    """An nftables match for ``percent`` of the packets, at random."""
    if percent >= 100:
        return []
    return ["numgen", "random", "mod", "1000", "<", str(round(percent * 10))]


def _nft(host: Host, *args: str, check: bool = True) -> None:
    _run([*host.prefix, "nft", *args], check)


def _tc(*args: str, check: bool = True) -> None:
    _run(["tc", *args], check)


def _run(cmd: list[str], check: bool) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise HostsUnavailable(f"{' '.join(cmd)}: {done.stderr.strip()}")
