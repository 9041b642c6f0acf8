#!/usr/bin/env bash
# Compiles Hylo's numba kernels into numba's on-disk cache (the __pycache__ folders beside them),
# once, by running small versions of the commands that use them.
#
# Why at install: numba compiles a kernel the first time a process calls it and caches it per
# source file. On a fresh checkout that first call costs minutes of CPU (a 1,500-job `hylo simulate`
# took 116 s cold against 4.5 s warm on 2 cores), paid by a user's first `hylo run` or `hylo
# simulate`, and twice over by the test suite's two workers when both reach a kernel before either
# has cached it. Run from bootstrap.sh; a stamp skips it until a kernel source changes.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.hylo-kernels
kernels=$(grep -rl --include='*.py' -e '@njit' -e '@numba.njit' shared services)
newer=""
if [ -f "$stamp" ]; then
  newer=$(find $kernels -newer "$stamp" | head -1)
fi
if [ -f "$stamp" ] && [ -z "$newer" ]; then
  exit 0
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "bootstrap: compiling Hylo's numba kernels into their cache (once; a few minutes on 2 cores)"
# the simulator's compiled core, placements and base policies; then the features, the model's fast
# path and PPO's fused update through a one-epoch training run
.venv/bin/hylo simulate --jobs 600 --windows 2 --window-size 200 \
  --policies fcfs,sjf,wfp3,unicep,f1,multifactor,small-first --no-plots --out "$out/simulate" >/dev/null
.venv/bin/hylo train --jobs 600 --epochs 1 --windows-per-epoch 2 --window-size 64 \
  --validation-windows 1 --test-windows 1 --out "$out/train" >/dev/null
touch "$stamp"
