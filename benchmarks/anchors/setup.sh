#!/usr/bin/env bash
# The anchors' separate virtual environments (never project dependencies), under
# benchmarks/.venvs (git-ignored). Idempotent; takes a few minutes the first time.
#   bash benchmarks/anchors/setup.sh [opendp|tumult|mbi|all]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venvs="$here/.venvs"
python="${PYTHON:-python3.11}"
mkdir -p "$venvs"
make_venv() {  # name, packages...
  local name="$1"; shift
  if [ ! -x "$venvs/$name/bin/python" ] || ! "$venvs/$name/bin/python" -c "import sys; sys.exit(0)"; then
    "$python" -m venv "$venvs/$name"
  fi
  "$venvs/$name/bin/python" -m pip install -q --upgrade pip
  "$venvs/$name/bin/python" -m pip install -q "$@"
  "$venvs/$name/bin/python" -m pip freeze > "$venvs/$name.freeze.txt"
}
what="${1:-all}"
if [ "$what" = opendp ] || [ "$what" = all ]; then
  make_venv opendp "opendp>=0.16" "polars==1.36.1" "pyarrow" "numpy"  # the Polars that OpenDP 0.16 was built against
fi
if [ "$what" = tumult ] || [ "$what" = all ]; then
  make_venv tumult "tmlt.analytics" "pyarrow"
fi
if [ "$what" = mbi ] || [ "$what" = all ]; then
  make_venv mbi "mbi==2.0.0"  # Private-PGM (pulls jax): benchmarks/consistency.py pgm
fi
