#!/usr/bin/env bash
# One GPU session's checks in one call of the device tool (15 minutes of device
# time, start included), each stage under its own limit so that what finished
# comes back:
#
#   1. alone on the device: what `memscope run` costs beside python (wall time,
#      the process's peak_bytes_in_use, compiles in a first run and a run again
#      on memscope's cache): benchmarks/gpu_cost.py;
#   2. alone: `fit` at the device's own limit (its default budget) on the
#      transformer (under JAX's default allocator and with
#      XLA_PYTHON_CLIENT_PREALLOCATE=false) and on a Flax NNX step, each program
#      run at the answer and one size up: benchmarks/gpu_figures.py
#      fit_transformer fit_nnx;
#   3. side by side: the suite but the real-sized tests (GPU-marked ones too)
#      on 10 workers, each growing its GPU memory as needed up to 4% of it; and
#      `fit --target gpu:<this GPU>` on the CPU for the same two programs
#      (benchmarks/gpu_deviceless.py config fit).
#
#     bash benchmarks/gpu_session.sh      # on the device; results in $OUT
#
# Under the device image's own JAX and packages, memscope from this checkout.
# Set-up (libcst, which the image lacks, carried in .whl/): benchmarks/_gpu_setup.sh.
set -u
. benchmarks/_gpu_setup.sh
COST_S="${COST_S:-140}" FIT_S="${FIT_S:-200}" SUITE_S="${SUITE_S:-200}"

timeout "$COST_S" python3 -m benchmarks.gpu_cost "$OUT" >"$OUT/cost.log" 2>&1
echo "cost exit $?" >>"$OUT/cost.log"

mkdir -p /tmp/fig
timeout "$FIT_S" python3 -m benchmarks.gpu_figures /tmp/fig fit_transformer fit_nnx \
  >"$OUT/fit.log" 2>&1
echo "fit exit $?" >>"$OUT/fit.log"
cp /tmp/fig/figures.json "$OUT/fit.json" 2>/dev/null

( timeout "$SUITE_S" python3 -m benchmarks.gpu_deviceless /tmp/dl config fit \
    >"$OUT/deviceless.log" 2>&1; echo "deviceless exit $?" >>"$OUT/deviceless.log"
  cp /tmp/dl/deviceless.json "$OUT/" 2>/dev/null ) &
deviceless=$!

XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=0.04 \
  timeout -s INT -k 20 "$SUITE_S" python3 -m pytest -q -n 10 --dist loadfile \
  -p no:cacheprovider -p no:benchmark -m "not real_sized" --timeout 200 -rfEs \
  --junitxml="$OUT/suite.xml" >"$OUT/suite.log" 2>&1
echo "suite exit $?" >>"$OUT/suite.log"
wait "$deviceless"
