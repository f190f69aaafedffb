"""Deprecated (0.3.0): ``python -m evogan.start_worker``, whose name says what it does beside
:mod:`evogan.runtime.worker`, the worker's work. ``-m evogan.worker`` still starts a worker, with one warning.
"""

from __future__ import annotations

from evogan import deprecated

# Attributed to this module when run with -m (``__main__``: shown by default), else to the importing line.
deprecated.warn("evogan.worker", stacklevel=2 if __name__ == "__main__" else 3)

if __name__ == "__main__":
    from evogan.start_worker import start

    start()
