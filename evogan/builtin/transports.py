"""Built-in transports."""

from __future__ import annotations

from evogan.hookspecs import Register, hookimpl
from evogan.transport.inproc import InProcessTransport
from evogan.transport.zmq import ZmqTransport


@hookimpl
def evogan_register_transports(register: Register) -> None:
    register(InProcessTransport)
    register(ZmqTransport)
