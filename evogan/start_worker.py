"""``torchrun ... -m evogan.start_worker RECIPE --run-dir DIR``: starts one worker process of a distributed run.

A thin entry point; the work is in :mod:`evogan.runtime.worker`.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def start() -> NoReturn:
    """Run the worker on this process's command line, then leave without interpreter teardown."""
    from evogan.runtime.worker import main

    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Every output is already written and fsynced; interpreter teardown with torch loaded takes seconds.
    os._exit(code)


if __name__ == "__main__":
    start()
