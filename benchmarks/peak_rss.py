"""Run a command and write its peak RSS (kB) to a file: ``python peak_rss.py OUT CMD...``.

A child's ``ru_maxrss`` on Linux starts from the resident size of the process it was exec'd
from; this small launcher forks the measured command itself, so that floor is its own few MB,
not the size of the benchmark suite that started it.
"""

import os
import subprocess
import sys

proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
