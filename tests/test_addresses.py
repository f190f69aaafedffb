"""Where a worker's publishers bind and what it advertises: loopback on one machine, every interface and
this node's address across machines; the barrier's hint."""

from __future__ import annotations

from evogan.transport.addresses import Addresses, barrier_hint, choose, node_address, route_to, spans_machines

ONE = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
TWO = {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}


def test_spans_machines_reads_elastics_sizes() -> None:
    assert not spans_machines({}) and not spans_machines(ONE) and spans_machines(TWO)
    assert not spans_machines({"WORLD_SIZE": "x"})


def test_node_address_prefers_the_setting_then_the_route_to_the_master() -> None:
    assert node_address({**TWO, "EVOGAN_NODE_ADDRESS": " 10.1.2.3 "}) == "10.1.2.3"
    assert node_address(TWO) == "127.0.0.1"  # the route to a loopback master leaves from loopback
    assert route_to("127.0.0.1") == "127.0.0.1"


def test_unset_bind_is_loopback_on_one_machine_and_every_interface_across_machines() -> None:
    assert choose("", "", ONE) == Addresses("127.0.0.1", "127.0.0.1", "every worker on this machine: loopback")
    across = choose("", "", {**TWO, "EVOGAN_NODE_ADDRESS": "10.0.0.7"})
    assert (across.bind, across.advertise) == ("0.0.0.0", "10.0.0.7")
    assert "EVOGAN_NODE_ADDRESS" in across.why
    assert choose("", "", {**TWO, "EVOGAN_NODE_ADDRESS": "fd00::7"}).bind == "::"
    assert choose("", "192.168.1.5", TWO).advertise == "192.168.1.5"


def test_a_set_bind_wins() -> None:
    assert (choose("10.0.0.2", "", TWO).bind, choose("10.0.0.2", "", TWO).advertise) == ("10.0.0.2", "10.0.0.2")
    wild = choose("0.0.0.0", "", {**ONE, "EVOGAN_NODE_ADDRESS": "10.0.0.9"})
    assert (wild.bind, wild.advertise) == ("0.0.0.0", "10.0.0.9")
    assert choose("127.0.0.1", "", TWO).bind == "127.0.0.1"  # the user's word, even across machines


def test_barrier_hint_names_the_cause_and_the_key() -> None:
    loopback = barrier_hint(choose("127.0.0.1", "", TWO), ["tcp://10.0.0.2:4000"], TWO)
    assert "loopback 127.0.0.1" in loopback and "exchange.options.bind" in loopback
    theirs = barrier_hint(Addresses("0.0.0.0", "10.0.0.1", "x"), ["tcp://127.0.0.1:4000"], TWO)
    assert "peers advertise loopback 127.0.0.1" in theirs and "EVOGAN_NODE_ADDRESS" in theirs
    unreachable = barrier_hint(Addresses("0.0.0.0", "10.0.0.1", "x"), ["tcp://10.0.0.2:4000", "tcp://[fd00::2]:5"], TWO)
    assert "waits for 10.0.0.2, fd00::2" in unreachable and "EVOGAN_NODE_ADDRESS" in unreachable
    alone = barrier_hint(choose("", "", ONE), ["tcp://127.0.0.1:4000"], ONE)
    assert alone == "their workers, on this machine, did not come up in time (see logs/worker-*.out)"
