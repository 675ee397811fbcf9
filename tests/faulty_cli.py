"""The dprelease CLI with a fault hook installed, for the crash tests' child processes:
``python -m tests.faulty_cli ARGS...`` instead of ``python -m dprelease ARGS...``.

At the stage named by ``$DPRELEASE_FAULT_AT`` (see :mod:`dprelease.faults`) the run writes the
stage's name to ``$DPRELEASE_FAULT_FLAG`` (if set) and then waits to be killed, so a test can
SIGKILL it at a known point; with ``$DPRELEASE_FAULT_RESUME`` set it waits only until that file
exists, then goes on (a paused run). Only tests read these variables; dprelease never does.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

from dprelease import faults


def pause_at(stage: str, flag: str | None, resume: str | None) -> Callable[[str], None]:
    """A hook that stops the run at ``stage``: until killed, or until ``resume`` exists."""

    def hook(reached: str) -> None:
        if reached != stage:
            return
        if flag:
            Path(flag).write_text(stage)
        while not (resume and Path(resume).exists()):
            time.sleep(0.2)

    return hook


if __name__ == "__main__":
    faults.install(pause_at(os.environ["DPRELEASE_FAULT_AT"], os.environ.get("DPRELEASE_FAULT_FLAG"),
                            os.environ.get("DPRELEASE_FAULT_RESUME")))
    from dprelease.cli import main

    sys.argv[0] = "dprelease"
    main()
