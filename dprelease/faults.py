"""Fault injection for the crash tests. Inert unless ``DPRELEASE_FAULT_AT`` is set.

At the named stage the run writes the stage name to ``$DPRELEASE_FAULT_FLAG`` (if set) and
then waits to be killed, so a test can SIGKILL it at a known point. Stages, in order:
``reserved``, ``load``, ``histogram`` (a batch counted), ``measure`` (before a table's noise),
``drawing`` (the ledger records that noise is being drawn; none drawn yet), ``noise`` (noise
drawn for the first table), ``staging`` (the first table file staged),
``publish`` (outputs staged, ledger not yet committed), ``commit`` (ledger committed, outputs
not yet moved into place). With ``$DPRELEASE_FAULT_RESUME`` set, the run waits only until that
file exists, then goes on (a paused run).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

def checkpoint(stage: str) -> None:
    if os.environ.get("DPRELEASE_FAULT_AT") != stage:
        return
    flag = os.environ.get("DPRELEASE_FAULT_FLAG")
    if flag:
        Path(flag).write_text(stage)
    resume = os.environ.get("DPRELEASE_FAULT_RESUME")
    while not (resume and Path(resume).exists()):  # until killed, or resumed
        time.sleep(0.2)
