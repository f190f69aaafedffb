"""Which node hosts the rendezvous store, and which address and interface this node shows the others.

torch's c10d backend guesses whether it hosts the store by matching the endpoint against the machine's
hostname and the addresses the hostname resolves to, so an endpoint on a second interface (a cluster's
fast network, a container's bridge) is never hosted and every node waits as a client. Here a node hosts
when the endpoint's address belongs to one of its own interfaces (binding a socket to it succeeds),
unless ``--rdzv-host yes|no`` says otherwise. The same address decides ``local_addr`` (what
becomes ``MASTER_ADDR`` when this node gets rank 0) and the interface gloo binds to
(``GLOO_SOCKET_IFNAME``): by default both come from the hostname, which on such a network names an
address the other nodes cannot reach.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evogan.errors import UserError
from evogan.transport.addresses import route_to

if TYPE_CHECKING:
    from rich.console import Console

GLOO_IFNAME_ENV = "GLOO_SOCKET_IFNAME"
_SIOCGIFADDR = 0x8915  # <linux/sockios.h>: an interface's IPv4 address


@dataclass(frozen=True)
class Role:
    """This node's part in the rendezvous.

    ``hosts``: ``True``/``False`` is passed to torch as ``is_host``; ``None`` leaves torch's own guess
    (loopback endpoints: agents on one machine, the first to bind hosts). ``reason`` says why, for the
    log and for a failure's line; ``address`` is this node's address towards the endpoint (``None`` on
    loopback) and ``interface`` the interface holding it.
    """

    endpoint: str
    host: str
    port: int
    hosts: bool | None
    reason: str
    address: str | None
    interface: str | None

    def describe(self) -> str:
        """One line for the console and logs/rendezvous.log."""
        me = f"{self.address} ({self.interface})" if self.address and self.interface else self.address or "this node"
        if self.hosts is None:
            return f"rendezvous {self.endpoint}: loopback, the first agent on this machine hosts the store"
        if self.hosts:
            return f"rendezvous {self.endpoint}: this node {me} hosts the store ({self.reason})"
        return f"rendezvous {self.endpoint}: this node {me} joins the store hosted by {self.host} ({self.reason})"

    def announce(self, log: Path, console: Console | None) -> None:
        """Say which node hosts: on the console, and one line per agent start in ``log`` (shared by the
        nodes of a run directory; one short O_APPEND write each)."""
        line = self.describe()
        if console is not None:
            console.print(line, markup=False, highlight=False)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with contextlib.suppress(OSError):
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{stamp} pid {os.getpid()} {line}\n".encode())
            finally:
                os.close(fd)

    def failure_hint(self, nodes: int, *, started: bool = False) -> str:
        """What a failed rendezvous means from this node's side: who was expected to host, and why not us.
        ``started``: every node had been heard from, so the store was lost mid-run, not never reached."""
        if started and not self.hosts:
            return (
                f"the store on the head node {self.host} went away mid-run; every node stops, and the same command "
                "on every node resumes from the checkpoints."
            )
        if self.hosts is None:
            if nodes > 1:
                return f"are all {nodes} agents running with --rdzv-endpoint {self.endpoint}, and the port free?"
            return "is the port open and free?"
        if self.hosts:
            return (
                f"this node hosts the store ({self.reason}); the other {nodes - 1} node(s) did not join: are they "
                f"running with --rdzv-endpoint {self.endpoint}, and can they reach {self.host}:{self.port}?"
            )
        return (
            f"the node with address {self.host} was expected to host the store, not this one ({self.reason}): "
            f"is its agent running, and port {self.port} open and reachable from {self.address or 'here'}?"
        )


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPv6]:PORT``; a one-line ``UserError`` naming --rdzv-endpoint otherwise."""
    host, sep, port = endpoint.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--rdzv-endpoint {endpoint!r}: expected HOST:PORT, e.g. 10.0.0.1:29400")
    return host, int(port)


def resolve(host: str) -> list[str]:
    """Every address ``host`` names (an address names itself)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise UserError(f"--rdzv-endpoint: cannot resolve {host!r} ({exc})") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_local(address: str) -> bool:
    """Whether ``address`` belongs to an interface of this machine (network namespace): binding a socket
    to it succeeds only then. Portable, and needs no list of interfaces."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError as exc:
            if exc.errno in (errno.EADDRNOTAVAIL, errno.EINVAL, errno.EAFNOSUPPORT):
                return False
            raise
    return True


def port_free(address: str, port: int) -> bool:
    """Whether a TCP listener could take ``port`` here (the store listens on every interface)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a listener in TIME_WAIT is gone
        try:
            probe.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
        except OSError:
            return False
    return True


def interface_of(address: str) -> str | None:
    """The name of the interface holding ``address``: SIOCGIFADDR per interface for IPv4,
    /proc/net/if_inet6 for IPv6 (Linux); ``None`` where neither works."""
    if ":" in address:
        wanted = ipaddress.IPv6Address(address).exploded.replace(":", "")
        with contextlib.suppress(OSError), open("/proc/net/if_inet6", encoding="ascii") as table:
            for line in table:
                fields = line.split()
                if len(fields) >= 6 and fields[0] == wanted:
                    return fields[5]
        return None
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                reply = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
            except OSError:  # no IPv4 address on it
                continue
            if socket.inet_ntoa(reply[20:24]) == address:
                return name
    return None


def decide(endpoint: str, hosts: bool | None = None) -> Role:
    """This node's role for ``endpoint``; ``hosts`` is the user's override (``--rdzv-host``)."""
    host, port = parse_endpoint(endpoint)
    addresses = resolve(host)
    if all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        if hosts is None:
            return Role(endpoint, host, port, None, "loopback endpoint", None, None)
        return Role(endpoint, host, port, hosts, f"--rdzv-host {'yes' if hosts else 'no'}", None, None)
    local = next((a for a in addresses if is_local(a)), None)
    if local is not None:
        address: str | None = local
        why = f"{local} is the address of {interface_of(local) or 'an interface'} here"
    else:
        address = route_to(addresses[0], port)
        why = f"no interface here has {' or '.join(addresses)}"
    if hosts is not None:
        why = f"--rdzv-host {'yes' if hosts else 'no'}; {why}"
    elif local is not None and not port_free(local, port):
        hosts, why = False, f"{why}, but port {port} is taken here: another agent on this node hosts it"
    else:
        hosts = local is not None
    return Role(endpoint, host, port, hosts, why, address, interface_of(address) if address else None)


__all__ = ["GLOO_IFNAME_ENV", "Role", "decide", "interface_of", "is_local", "parse_endpoint", "route_to"]
