#!/usr/bin/env bash
# Creates .venv in the project root, installs Hylo with its dev tools and compiles its numba
# kernels into their cache (idempotent).
# torch is pinned to 2.13.0; pip takes the CPU build from the machine's wheel folder when present.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for c in python3.11 python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PY="$c"; break
    fi
  done
fi
if [ -z "$PY" ]; then
  echo "bootstrap: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.hylo-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[dev,ray]'  # ray: hylo train/evaluate --ray, tests/distributed
  touch "$stamp"
fi
# numba's kernels compiled once here rather than by the first command or test that calls each
bash scripts/compile_kernels.sh
