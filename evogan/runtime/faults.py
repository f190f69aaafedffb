"""Fault injection for the recovery tests: a worker kills, stops or freezes itself on cue."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass

from evogan.errors import UserError
from evogan.hookspecs import hookimpl

FAULT_ENV = "EVOGAN_FAULT"


@dataclass(frozen=True)
class Fault:
    """``EVOGAN_FAULT="cell:generation:kill|stop|freeze[:seconds]"``: the owner of ``cell`` SIGKILLs
    itself, SIGSTOPs itself for ``seconds``, or freezes (SIGSTOP, never continued) right after that cell's
    generation ends, in the first incarnation only. Generation 0 fires after the endpoint exchange,
    before the subscription barrier."""

    cell: int
    generation: int
    action: str
    seconds: float = 5.0

    @classmethod
    def parse(cls, text: str) -> Fault:
        parts = text.split(":")
        try:
            if len(parts) not in (3, 4) or parts[2] not in ("kill", "stop", "freeze"):
                raise ValueError
            return cls(int(parts[0]), int(parts[1]), parts[2], float(parts[3]) if len(parts) == 4 else 5.0)
        except ValueError:
            raise UserError(f"{FAULT_ENV}={text!r}: expected cell:generation:kill|stop|freeze[:seconds]") from None

    def fire(self) -> None:
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.action == "freeze":
            os.kill(os.getpid(), signal.SIGSTOP)  # until the watchdog kills us
            return
        # A stopped process cannot wake itself: a helper sends SIGCONT.
        helper = subprocess.Popen(
            ["sh", "-c", f"sleep {self.seconds}; kill -CONT {os.getpid()}"], start_new_session=True
        )
        os.kill(os.getpid(), signal.SIGSTOP)
        helper.wait()


class FaultPlugin:
    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    @hookimpl
    def evogan_generation_end(self, cell: int, generation: int) -> None:
        if (cell, generation) == (self.fault.cell, self.fault.generation):
            self.fault.fire()


__all__ = ["FAULT_ENV", "Fault", "FaultPlugin"]
