"""The warm runner with a fault hook installed, for the warm runner's tests:
``python -m tests.faulty_runner SOCKET`` instead of ``python -m dprelease.cli.warm.loop SOCKET``
(:func:`dprelease.cli.warm.start`'s ``module``).

The hook is inherited by every forked run and reads, in the run's own environment (the
client's), the variables of :mod:`tests.faulty_cli`: at ``$DPRELEASE_FAULT_AT`` the run writes
its PID to ``$DPRELEASE_FAULT_FLAG`` and waits until ``$DPRELEASE_FAULT_RESUME`` exists (or until
it is signalled). Only tests read these variables; dprelease never does.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from dprelease import faults


def hook(reached: str) -> None:
    if reached != os.environ.get("DPRELEASE_FAULT_AT"):
        return
    flag, resume = os.environ.get("DPRELEASE_FAULT_FLAG"), os.environ.get("DPRELEASE_FAULT_RESUME")
    if flag:
        Path(flag).write_text(str(os.getpid()))
    deadline = time.monotonic() + 300  # a test that failed leaves no run paused for ever
    while not (resume and Path(resume).exists()):
        if time.monotonic() > deadline:
            os._exit(99)
        time.sleep(0.05)


if __name__ == "__main__":
    faults.install(hook)
    from dprelease.cli.warm.loop import main

    sys.exit(main(sys.argv[1:]))
