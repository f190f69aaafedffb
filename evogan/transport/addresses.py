"""Where a worker's publishers bind and which address it gives its peers.

One machine: loopback, reachable by every local worker and nobody else. Several machines (torch elastic's
``WORLD_SIZE`` above ``LOCAL_WORLD_SIZE``): every interface, advertising this node's address towards the
rendezvous host: ``EVOGAN_NODE_ADDRESS`` when set (``evogan run --nnodes N`` sets it to the address the
rendezvous chose, the one gloo uses too), else the source address of the route to ``MASTER_ADDR``. The
transport's ``bind``/``advertise`` options, when set, take precedence over both.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

NODE_ADDRESS_ENV = "EVOGAN_NODE_ADDRESS"
WILDCARDS = ("*", "0.0.0.0", "::")
LOOPBACK = "127.0.0.1"


def spans_machines(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this worker's run has workers on other machines (torch elastic's environment)."""
    try:
        return int(environ.get("WORLD_SIZE", "1")) > int(environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return False


def route_to(address: str, port: int = 9) -> str | None:
    """The local address the kernel would use to reach ``address`` (a UDP connect sends nothing)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((address, port))
        except OSError:
            return None
        return str(probe.getsockname()[0])


def node_address(environ: Mapping[str, str] = os.environ) -> str:
    """This node's address as the other nodes reach it: ``EVOGAN_NODE_ADDRESS``, else the route's source
    address towards ``MASTER_ADDR`` (the rendezvous' rank-0 host), else loopback."""
    chosen = environ.get(NODE_ADDRESS_ENV, "").strip()
    if chosen:
        return chosen
    return route_to(environ.get("MASTER_ADDR", LOOPBACK)) or LOOPBACK


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass(frozen=True)
class Addresses:
    """What the publishers bind to and what peers are told; ``why`` is a few words for the log."""

    bind: str
    advertise: str
    why: str


def choose(bind: str, advertise: str, environ: Mapping[str, str] = os.environ) -> Addresses:
    """The transport options' ``bind`` and ``advertise`` (empty: decide) made concrete for this worker."""
    if not bind:
        if not spans_machines(environ):
            return Addresses(LOOPBACK, advertise or LOOPBACK, "every worker on this machine: loopback")
        address = advertise or node_address(environ)
        where = "::" if ":" in address else "0.0.0.0"
        source = "exchange.options.advertise" if advertise else _source(environ)
        return Addresses(where, address, f"workers on several machines: every interface, advertising {source}")
    if bind in WILDCARDS:
        return Addresses(bind, advertise or node_address(environ), f"exchange.options.bind {bind}")
    return Addresses(bind, advertise or bind, f"exchange.options.bind {bind}")


def _source(environ: Mapping[str, str]) -> str:
    if environ.get(NODE_ADDRESS_ENV, "").strip():
        return NODE_ADDRESS_ENV
    return f"the route to MASTER_ADDR {environ.get('MASTER_ADDR', LOOPBACK)}"


def barrier_hint(chosen: Addresses, missing: Iterable[str], environ: Mapping[str, str] = os.environ) -> str:
    """The likely cause of a failed startup barrier, and the key to set. ``missing`` are the endpoints of
    the peers not heard from (or not subscribed)."""
    hosts = sorted({_host(endpoint) for endpoint in missing if endpoint})
    if is_loopback(chosen.bind) and spans_machines(environ):
        return (
            f"this worker's publishers bind to loopback {chosen.bind}, which other machines cannot reach: "
            'leave exchange.options.bind out (every interface), or set it, e.g. "0.0.0.0"'
        )
    looping = [h for h in hosts if is_loopback(h)]
    if looping and not is_loopback(chosen.advertise):
        return (
            f"peers advertise loopback {', '.join(looping)}: on their nodes, leave exchange.options.bind out or set it "
            'to "0.0.0.0", or set EVOGAN_NODE_ADDRESS to that node\'s address'
        )
    if not spans_machines(environ):
        return "their workers, on this machine, did not come up in time (see logs/worker-*.out)"
    if not hosts:
        return f"this worker advertises {chosen.advertise} ({chosen.why})"
    return (
        f"this worker advertises {chosen.advertise} ({chosen.why}) and waits for {', '.join(hosts)}: if that is not "
        f"an address the other nodes reach, set {NODE_ADDRESS_ENV} or exchange.options.advertise (and "
        "exchange.options.bind); a firewall must let the ports through"
    )


def _host(endpoint: str) -> str:
    """``tcp://HOST:PORT`` or ``tcp://[V6]:PORT`` -> HOST; other schemes (ipc) as they are."""
    if not endpoint.startswith("tcp://"):
        return endpoint
    return endpoint[len("tcp://") :].rsplit(":", 1)[0].strip("[]")


__all__ = [
    "NODE_ADDRESS_ENV",
    "WILDCARDS",
    "Addresses",
    "barrier_hint",
    "choose",
    "is_loopback",
    "node_address",
    "route_to",
    "spans_machines",
]
