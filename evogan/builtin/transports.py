"""Built-in transports."""

from __future__ import annotations

from evogan.hookspecs import hookimpl
from evogan.transport.inproc import InProcessTransport
from evogan.transport.zmq import ZmqTransport


@hookimpl
def evogan_register_transports(register):  # type: ignore[no-untyped-def]
    register(InProcessTransport)
    register(ZmqTransport)
