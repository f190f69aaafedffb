"""``torchrun ... -m evogan.worker RECIPE --run-dir DIR``: one worker of a distributed run.

A thin entry point; the work is in :mod:`evogan.runtime.worker`.
"""

from __future__ import annotations

import os
import sys

from evogan.runtime.worker import main

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Every output is already written and fsynced; interpreter teardown with torch loaded takes seconds.
    os._exit(code)
